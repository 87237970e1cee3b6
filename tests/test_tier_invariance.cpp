// Invariant 1 through the tiers, end to end: `strata replay` logit dumps are byte-identical
// whatever RAM_GB (every expert in RAM, about half, the minimum: almost every expert streamed),
// THREADS, URING, DIRECT, QD, REPACK and ISA, for every fixture model the engine loads and a
// `strata synth --preset tiny` model — and identical to the reference path (experts read through
// the mapping, no tiers). The PROF JSON has the documented keys, SSD bytes > 0 at the minimum and 0
// with all in RAM. In the decode shape (one token per pass), PREFETCH 1 and 2 and REPIN on/off
// (with and without a bigger cache) give the same bytes too, also through the zstd sidecar;
// prefetch issues reads that get used, REPIN moves experts without the hit rate collapsing. A
// model split in gguf-split shards gives the whole file's bits through every tier.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/expert_source.h"
#include "engine/forward.h"
#include "engine/gpu_lane.h"
#include "engine/logit_dump.h"
#include "engine/model.h"
#include "gguf_split_util.h"
#include "io/check.h"
#include "io/gguf.h"
#include "kernels/gemv.h"
#include "placement/plan.h"
#include "placement/usage_stats.h"
#include "tier_test_util.h"

namespace strata::tier_test {
namespace {

using engine::Model;

constexpr uint32_t kUbatch = 16;  // several chunks per stream; each chunk routes to many experts
const std::vector<int> kLengths = {40, 23};

struct Streams {
  std::vector<std::vector<int32_t>> ids;
};

Streams make_streams(const fs::path& path, uint32_t n_vocab) {
  write_streams(path, n_vocab, kLengths);
  Streams s;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::vector<int32_t> ids;
    for (int32_t id; words >> id;) ids.push_back(id);
    s.ids.push_back(ids);
  }
  return s;
}

// The reference: every stream through a Forward without tiers (experts from the mapping).
std::vector<std::vector<float>> reference_logits(const Model& model, const Streams& s) {
  engine::ForwardOptions fo;
  fo.n_ctx = 64;
  fo.n_ubatch = kUbatch;
  fo.n_threads = 2;
  engine::Forward fwd(model, fo);
  std::vector<std::vector<float>> out;
  for (const auto& ids : s.ids) {
    fwd.reset();
    out.emplace_back(ids.size() * model.config().n_vocab);
    fwd.prefill(ids, out.back().data());
  }
  return out;
}

class TierInvariance : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
  }

  // Replays the streams with `flags`, expects success, returns the parsed PROF JSON; the dumps
  // land in dir/<tag>/.
  nlohmann::json replay(const fs::path& model, const std::string& tag, const std::string& flags,
                        const std::string& env = "", uint32_t ubatch = kUbatch) {
    const fs::path out = dir_ / tag;
    const fs::path prof = dir_ / (tag + ".json");
    const Result r = run_strata(
        dir_.path(),
        fmt::format(
            "replay -m '{}' --tokens '{}' --ubatch {} --dump-logits '{}' --prof-json '{}' {}",
            model.string(), (dir_ / "streams.txt").string(), ubatch, out.string(), prof.string(),
            flags),
        env);
    EXPECT_EQ(r.rc, 0) << model << " " << flags << ": " << r.err;
    if (r.rc != 0) return {};
    EXPECT_NE(r.err.find("strata: plan: "), std::string::npos) << r.err;
    return nlohmann::json::parse(slurp(prof));
  }

  // Every stream's dump of run `tag` equals the reference logits byte for byte.
  void expect_identical(const std::string& tag, const std::vector<std::vector<float>>& ref,
                        const std::string& what) {
    for (size_t s = 0; s < ref.size(); ++s) {
      const fs::path p = dir_ / tag / fmt::format("stream{}.logits.bin", s);
      ASSERT_TRUE(fs::exists(p)) << what << ": no dump " << p;
      const engine::LogitDump d = engine::read_logit_dump(p.string());
      ASSERT_EQ(d.logits.size(), ref[s].size()) << what;
      size_t first = ref[s].size();
      for (size_t i = 0; i < ref[s].size() && first == ref[s].size(); ++i)
        if (std::memcmp(&d.logits[i], &ref[s][i], sizeof(float)) != 0) first = i;
      EXPECT_EQ(first, ref[s].size())
          << what << " stream " << s << ": first differing logit at " << first << ": "
          << d.logits[first] << " vs " << ref[s][first];
    }
  }

  // The three budgets for one model; returns false when the engine does not load it.
  bool check_model(const fs::path& path, bool variants, bool expect_repin_moves = false) {
    std::optional<Model> model;
    try {
      model.emplace(Model::load(path.string()));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kUnsupported) throw;
      std::fprintf(stderr, "skipping %s: %s\n", path.filename().c_str(), e.what());
      return false;
    }
    SCOPED_TRACE(path.filename().string());
    const placement::ExpertSizes sizes = engine::expert_sizes(*model);
    const uint64_t min = placement::min_ram_bytes(sizes);
    const uint64_t all = placement::all_ram_bytes(sizes);
    const uint64_t half = std::max(all / 2, min + (all > min ? (all - min) / 3 : 0));
    const Streams streams = make_streams(dir_ / "streams.txt", model->config().n_vocab);
    const auto ref = reference_logits(*model, streams);

    const std::pair<const char*, uint64_t> budgets[] = {{"all", all}, {"half", half}, {"min", min}};
    for (const auto& [tag, bytes] : budgets) {
      const nlohmann::json j = replay(path, tag, fmt::format("-t 2 --ram-gb {}", ram_gb(bytes)));
      if (j.is_null()) return true;
      expect_identical(tag, ref, fmt::format("{} RAM_GB={}", path.filename().string(), tag));
      for (const char* key : {"decode_tokens", "decode_seconds", "prefill_tokens",
                              "prefill_seconds", "tiers", "cache", "io"})
        EXPECT_TRUE(j.contains(key)) << key;
      for (const char* tier : {"ram", "ssd", "vram"})
        for (const char* key : {"expert_loads", "bytes", "seconds"})
          EXPECT_TRUE(j["tiers"][tier].contains(key)) << tier << "." << key;
      for (const char* key : {"hits", "misses", "hit_rate"}) EXPECT_TRUE(j["cache"].contains(key));
      for (const char* key : {"wait_seconds", "service_seconds"})
        EXPECT_TRUE(j["io"].contains(key));
      for (const char* key : {"issued", "used", "precision", "recall", "wait_saved_seconds"})
        EXPECT_TRUE(j["prefetch"].contains(key)) << key;
      for (const char* key : {"passes", "moves"}) EXPECT_TRUE(j["repin"].contains(key)) << key;
      EXPECT_EQ(j["prefetch"]["issued"].get<uint64_t>(), 0u);  // PREFETCH off, and prefill
      EXPECT_EQ(j["prefill_tokens"].get<uint64_t>(), uint64_t{40 + 23});
      const uint64_t ssd_bytes = j["tiers"]["ssd"]["bytes"].get<uint64_t>();
      const int64_t n_ram = j["plan"]["experts_ram"].get<int64_t>();
      const int64_t n_ssd = j["plan"]["experts_ssd"].get<int64_t>();
      if (std::string(tag) == "all") {
        EXPECT_EQ(ssd_bytes, 0u);
        EXPECT_EQ(n_ssd, 0);
      } else if (std::string(tag) == "min") {
        EXPECT_GT(ssd_bytes, 0u);
        EXPECT_EQ(n_ram, 0);
      } else {
        EXPECT_GT(n_ram, 0) << "half is not a mixed plan";
        EXPECT_GT(n_ssd, 0) << "half is not a mixed plan";
        EXPECT_GT(ssd_bytes, 0u);
      }
    }
    if (!variants) return true;
    // At the minimum budget, where every expert streams: threads, reader and page cache modes,
    // and one token per forward pass (the decode shape) must not change a bit either.
    const std::string min_gb = ram_gb(min);
    const std::pair<const char*, std::string> runs[] = {
        {"t1", "-t 1 --ram-gb " + min_gb},
        {"uring0", "-t 2 --uring 0 --ram-gb " + min_gb},
        {"direct0", "-t 2 --direct 0 --ram-gb " + min_gb},
        {"numa_off", "-t 2 --numa off --ram-gb " + min_gb},
        {"cache", "-t 2 --ram-gb " + ram_gb(half) + " --cache-gb " + ram_gb(half / 2)},
        // Every expert in RAM, repacked for the capped ISA (ISA knob): AVX2's layouts and
        // kernels on an AVX-512 host (with AVX-VNNI where the CPU has it, and without), and the
        // scalar reference kernels (no REPACK).
        {"isa_avx2", "-t 2 --isa avx2 --ram-gb " + ram_gb(all)},
        {"isa_avx2_plain", "-t 2 --isa avx2-plain --ram-gb " + ram_gb(all)},
        {"isa_ref", "-t 2 --isa ref --ram-gb " + ram_gb(all)},
    };
    for (const auto& [tag, flags] : runs) {
      const nlohmann::json j = replay(path, tag, flags);
      if (j.is_null()) continue;
      expect_identical(tag, ref, fmt::format("{} {}", path.filename().string(), tag));
      if (std::string(tag) == "uring0") {
        EXPECT_FALSE(j["io"]["uring"].get<bool>());
      }
      if (std::string(tag) == "direct0") {
        EXPECT_FALSE(j["io"]["direct"].get<bool>());
      }
      if (std::string(tag) == "cache") {
        EXPECT_GE(j["plan"]["cache_bytes"].get<uint64_t>(), half / 2);
      }
      if (std::string(tag) == "isa_avx2" && kernels::isa_supported(kernels::Isa::kAvx2)) {
        EXPECT_EQ(j["cpu_kernels"].get<std::string>(), "avx2");
      }
      if (std::string(tag) == "isa_ref") {
        EXPECT_EQ(j["cpu_kernels"].get<std::string>(), "ref");
      }
    }
    // One token per forward pass (the decode shape) with every expert in the LRU cache, where
    // tokens reuse cached experts, against the same shape with every expert in RAM.
    const nlohmann::json u1 = replay(
        path, "u1_cache", "-t 2 --ram-gb " + ram_gb(half) + " --cache-gb " + ram_gb(half), "", 1);
    const nlohmann::json u1_all = replay(path, "u1_all", "-t 2 --ram-gb " + ram_gb(all), "", 1);
    if (!u1.is_null() && !u1_all.is_null()) {
      EXPECT_EQ(u1["plan"]["experts_ram"].get<int64_t>(), 0);
      EXPECT_GT(u1["cache"]["hits"].get<uint64_t>(), 0u);
      EXPECT_GT(u1["cache"]["evictions"].get<uint64_t>(), 0u);
      for (size_t s = 0; s < streams.ids.size(); ++s) {
        const std::string name = fmt::format("stream{}.logits.bin", s);
        EXPECT_EQ(slurp(dir_ / "u1_cache" / name), slurp(dir_ / "u1_all" / name))
            << path.filename() << " ubatch 1 stream " << s;
      }
    }
    // PREFETCH and REPIN in the decode shape, against the all-RAM run (byte for byte): prefetch
    // at the minimum (everything streams) and at the mixed budget, REPIN at the mixed budget with
    // the minimum cache and with a bigger one, both together.
    const std::string half_gb = ram_gb(half);
    const std::string repin = " --repin 2 --repin-moves 3 --repin-half-life 16";
    const std::pair<const char*, std::string> decode_runs[] = {
        {"u1_half", "-t 2 --ram-gb " + half_gb},
        {"u1_pf1", "-t 2 --prefetch 1 --qd 1 --ram-gb " + min_gb},  // reads queue in the reader
        {"u1_pf2", "-t 2 --prefetch 2 --ram-gb " + half_gb},
        {"u1_repin", "-t 2 --ram-gb " + half_gb + repin},
        {"u1_repin_cache", "-t 2 --ram-gb " + half_gb + " --cache-gb " + ram_gb(half / 3) + repin},
        {"u1_both", "-t 1 --prefetch 1 --ram-gb " + half_gb + repin},
    };
    std::map<std::string, nlohmann::json> dj;
    for (const auto& [tag, flags] : decode_runs) {
      // Fixture families get two of them (the test's time), the synth model all.
      const std::string t = tag;
      if (!expect_repin_moves && t != "u1_pf1" && t != "u1_both") continue;
      dj[tag] = replay(path, tag, flags, "", 1);
      if (dj[tag].is_null() || u1_all.is_null()) continue;
      for (size_t s = 0; s < streams.ids.size(); ++s) {
        const std::string name = fmt::format("stream{}.logits.bin", s);
        EXPECT_EQ(slurp(dir_ / tag / name), slurp(dir_ / "u1_all" / name))
            << path.filename() << " " << tag << " stream " << s;
      }
    }
    if (!dj["u1_pf1"].is_null()) {
      const nlohmann::json& p = dj["u1_pf1"]["prefetch"];
      EXPECT_GT(p["issued"].get<uint64_t>(), 0u);
      EXPECT_GT(p["used"].get<uint64_t>(), 0u);
      EXPECT_GT(p["precision"].get<double>(), 0.0);
      EXPECT_GT(p["recall"].get<double>(), 0.0);
      EXPECT_LE(p["used"].get<uint64_t>(), p["issued"].get<uint64_t>());
      EXPECT_LE(p["used"].get<uint64_t>(), p["needed"].get<uint64_t>());
    }
    if (!dj["u1_pf2"].is_null()) {
      EXPECT_GT(dj["u1_pf2"]["prefetch"]["issued"].get<uint64_t>(), 0u);
    }
    if (!dj["u1_repin"].is_null() && !dj["u1_half"].is_null()) {
      EXPECT_GT(dj["u1_repin"]["repin"]["passes"].get<uint64_t>(), 0u);
      EXPECT_EQ(dj["u1_half"]["repin"]["moves"].get<uint64_t>(), 0u);
      // Moves are a one-for-one swap: the plan's counts stay; the fast share must not collapse.
      const double base = dj["u1_half"]["hit_rates"]["fast"].get<double>();
      for (const char* tag : {"u1_repin", "u1_repin_cache"})
        EXPECT_GE(dj[tag]["hit_rates"]["fast"].get<double>(), 0.8 * base) << tag;
      if (expect_repin_moves) {
        EXPECT_GT(dj["u1_repin_cache"]["repin"]["moves"].get<uint64_t>(), 0u);
      }
    }
    // The knobs also come from the environment. Every other run here keeps RAM homes and dense
    // matrices interleaved (REPACK=1, the default); this one the file's layout.
    const nlohmann::json j =
        replay(path, "env", "", "THREADS=1 URING=0 QD=2 REPACK=0 DENSE_ARENA=0 RAM_GB=" + min_gb);
    if (!j.is_null()) {
      expect_identical("env", ref, fmt::format("{} env knobs", path.filename().string()));
      EXPECT_FALSE(j["io"]["uring"].get<bool>());
      EXPECT_EQ(j["plan"]["experts_ram"].get<int64_t>(), 0);
    }
    return true;
  }

  ScratchDir dir_{"tier_invariance"};
};

TEST_F(TierInvariance, FixtureModelsAreBitIdenticalAcrossHomesAndKnobs) {
  const auto models = fixture_models();
  if (models.empty()) GTEST_SKIP() << "fixtures not found at " << kFixtures;
  int checked = 0;
  for (const fs::path& m : models) {
    // The knob variants once per architecture family (its first quantized file).
    const bool variants = m.filename().string().find("Q4_0") != std::string::npos;
    checked += check_model(m, variants);
  }
  // qwen3moe (4 variants) and mixtral (2) at least.
  EXPECT_GE(checked, 6);
}

// PROF's roofline counts what a decode token reads from RAM, checked against the GGUF's own
// tensor list: every tensor but the routed experts and the token embedding (one row of it), top-k
// experts of every layer, and KV bytes growing with the position.
TEST_F(TierInvariance, RooflineCountsTheBytesADecodeTokenReads) {
  const fs::path model = fs::path(kFixtures) / "tiny-qwen3moe" / "tiny-qwen3moe-Q4_0.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << "no fixture " << model;
  const io::GgufFile file = io::GgufFile::open(model.string());
  const Model m = Model::load(model.string());
  uint64_t dense = 0, experts = 0;
  for (const io::GgufTensorInfo& t : file.tensors()) {
    if (t.name.find("_exps") != std::string::npos)
      experts += t.n_bytes;
    else if (t.name.rfind("token_embd", 0) == 0)
      dense += t.row_bytes();
    else
      dense += t.n_bytes;
  }
  const uint64_t per_token_experts = experts / m.config().n_expert * m.config().n_expert_used;
  const fs::path prof = dir_ / "roofline.json";
  // Six tokens with PROF, the report's JSON in `prof`.
  const auto run = [&](const std::string& env) {
    return run_strata(dir_.path(),
                      fmt::format("run -m '{}' -p 'Hello there' -n 6 --temp 0 --ignore-eos -t 1 "
                                  "--prof-json '{}'",
                                  model.string(), prof.string()),
                      env);
  };
  const Result r = run("PROF=1");
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(prof))["roofline"];
  ASSERT_TRUE(j.is_object()) << slurp(prof);
  EXPECT_NEAR(j["dense_gb"].get<double>() * 1e9, double(dense), 0.5);
  EXPECT_NEAR(j["experts_gb"].get<double>() * 1e9, double(per_token_experts), 0.5);
  EXPECT_GT(j["kv_gb"].get<double>(), 0.0);
  EXPECT_NEAR(
      j["gb_per_token"].get<double>(),
      j["dense_gb"].get<double>() + j["experts_gb"].get<double>() + j["kv_gb"].get<double>(),
      1e-12);
  EXPECT_NE(r.err.find("prof: roofline: decode read"), std::string::npos) << r.err;

  // PROF_PROBE: RAM read measured as the run starts (real threads over a real buffer) is the
  // ceiling the roofline and the RAM tier are held against.
  const Result now = run("PROF=1 PROF_PROBE=64");
  ASSERT_EQ(now.rc, 0) << now.err;
  const nlohmann::json jn = nlohmann::json::parse(slurp(prof));
  EXPECT_TRUE(jn["ceilings_gb_s"]["ram_now"].get<bool>()) << slurp(prof);
  EXPECT_GT(jn["ceilings_gb_s"]["ram"].get<double>(), 0.0);
  EXPECT_EQ(jn["roofline"]["probe_gb_s"].get<double>(), jn["ceilings_gb_s"]["ram"].get<double>());
  EXPECT_NE(now.err.find("as the run started -> roofline"), std::string::npos) << now.err;
  EXPECT_TRUE(jn["run_probe"].is_null());

  // PROF_PROBE_EVERY=2 over 5 decode tokens: passes after the prompt and after tokens 2 and 4.
  const Result every = run("PROF=1 PROF_PROBE=64 PROF_PROBE_EVERY=2");
  ASSERT_EQ(every.rc, 0) << every.err;
  const nlohmann::json je = nlohmann::json::parse(slurp(prof))["run_probe"];
  ASSERT_TRUE(je.is_object()) << slurp(prof);
  EXPECT_EQ(je["passes"].get<int>(), 3);
  EXPECT_EQ(je["windows"].get<int>(), 2);
  EXPECT_GT(je["roofline_fraction"]["p50"].get<double>(), 0.0);
  EXPECT_GT(je["experts_fraction"]["p50"].get<double>(), 0.0);
  EXPECT_NE(every.err.find("prof: in-run probe: 3 passes of 64 MiB at 1 thread"), std::string::npos)
      << every.err;
  const Result bare = run("PROF=1 PROF_PROBE_EVERY=2");  // no buffer size: a clear error
  EXPECT_NE(bare.rc, 0);
  EXPECT_NE(bare.err.find("PROF_PROBE_EVERY=2 needs PROF_PROBE"), std::string::npos) << bare.err;

  // CUDA_DENSE (emulated GPU 0): the matrices it holds are read from VRAM, not RAM, so they leave
  // the RAM roofline and are reported beside it; experts with VRAM homes leave it too.
  const uint64_t on_gpu = engine::gpu_dense_bytes(m);
  ASSERT_GT(on_gpu, 0u);
  ASSERT_LT(on_gpu, dense);
  const Result g = run("PROF=1 CUDA_DENSE=1 VRAM_EMULATE=1 VRAM_GB=64");
  ASSERT_EQ(g.rc, 0) << g.err;
  const nlohmann::json jg = nlohmann::json::parse(slurp(prof))["roofline"];
  ASSERT_TRUE(jg.is_object()) << slurp(prof);
  EXPECT_NEAR(jg["dense_gb"].get<double>() * 1e9, double(dense - on_gpu), 0.5);
  EXPECT_NEAR(jg["vram_dense_gb"].get<double>() * 1e9, double(on_gpu), 0.5);
  EXPECT_EQ(jg["experts_gb"].get<double>(), 0.0);  // VRAM_GB=64: every expert on the GPU
  EXPECT_EQ(j["vram_dense_gb"].get<double>(), 0.0);
  EXPECT_NE(g.err.find("dense weights read on GPU 0"), std::string::npos) << g.err;
}

// PROF's split of the CPU experts' and attention's time by stage: the rows, multiply-adds and
// weight bytes each stage counted are the model's shapes times the tokens run, and the stage
// times fit inside the totals they split.
TEST_F(TierInvariance, ProfSplitsExpertAndAttentionTimeByStage) {
  const fs::path model = fs::path(kFixtures) / "tiny-qwen3moe" / "tiny-qwen3moe-Q4_0.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << "no fixture " << model;
  const io::GgufFile file = io::GgufFile::open(model.string());
  const Model m = Model::load(model.string());
  const engine::ModelConfig& cfg = m.config();
  uint64_t experts = 0;
  for (const io::GgufTensorInfo& t : file.tensors())
    if (t.name.find("_exps") != std::string::npos) experts += t.n_bytes;
  const uint64_t per_token_experts = experts / cfg.n_expert * cfg.n_expert_used;
  const fs::path prof = dir_ / "stages.json";
  const Result r = run_strata(
      dir_.path(),
      fmt::format("run -m '{}' -p 'Hello there' -n 6 --temp 0 --ignore-eos -t 2 --prof-json '{}'",
                  model.string(), prof.string()),
      "PROF=1");
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(prof));
  const uint64_t per_row = uint64_t{cfg.n_ff_exp} * cfg.n_embd;
  const uint64_t rows_per_token = uint64_t{cfg.n_expert_used} * cfg.n_layer;
  const uint64_t tokens[] = {j["prefill_tokens"].get<uint64_t>(),
                             j["decode_tokens"].get<uint64_t>()};
  ASSERT_GT(tokens[0], 1u);
  ASSERT_EQ(tokens[1], 5u);
  double stage_seconds = 0;
  for (int ph = 0; ph < 2; ++ph) {
    const char* name = ph == 0 ? "prefill" : "decode";
    SCOPED_TRACE(name);
    const nlohmann::json& st = j["expert_stages"][name];
    const uint64_t rows = st["rows"].get<uint64_t>();
    EXPECT_EQ(rows, tokens[ph] * rows_per_token);
    EXPECT_EQ(st["calls"].get<uint64_t>(), (ph == 0 ? 1 : tokens[ph]) * cfg.n_layer);
    EXPECT_EQ(st["gate_up_macs"].get<uint64_t>(), 2 * rows * per_row);
    EXPECT_EQ(st["down_macs"].get<uint64_t>(), rows * per_row);
    EXPECT_EQ(st["gate_up_bytes"].get<uint64_t>(), 2 * st["down_bytes"].get<uint64_t>());
    for (const char* key : {"quantize_seconds", "gate_up_seconds", "down_seconds"})
      EXPECT_GT(st[key].get<double>(), 0.0) << key;
    EXPECT_EQ(st["glu_seconds"].get<double>(), 0.0);  // Q8_0 down activation: inside gate+up
    for (const char* key : {"quantize_seconds", "gate_up_seconds", "glu_seconds", "down_seconds"})
      stage_seconds += st[key].get<double>();
    const nlohmann::json& at = j["attention_stages"][name];
    EXPECT_GT(at["core_seconds"].get<double>(), 0.0);
    EXPECT_LT(at["core_seconds"].get<double>(), at["seconds"].get<double>());
  }
  // A decode token computes k distinct experts per layer: their bytes are the stages' bytes.
  const nlohmann::json& dec = j["expert_stages"]["decode"];
  EXPECT_EQ(dec["gate_up_bytes"].get<uint64_t>() + dec["down_bytes"].get<uint64_t>(),
            tokens[1] * per_token_experts);
  EXPECT_LE(stage_seconds, j["tiers"]["ram"]["compute_seconds"].get<double>());
  for (const char* line : {"prof: CPU experts, prefill (passes of several tokens): ",
                           "prof: CPU experts, decode (one-token passes): ",
                           "prof: attention, prefill: ", "prof: attention, decode: "})
    EXPECT_NE(r.err.find(line), std::string::npos) << line << "\n" << r.err;
}

// qwen2moe, granitemoe, deepseek, dbrx, phimoe, arctic and grok (no fixtures): shared experts and
// dense lead layers stay resident while the routed experts move; granitemoe's head is its
// embedding.
TEST_F(TierInvariance, SynthArchitecturesWithoutFixturesAreBitIdenticalAcrossHomes) {
  for (const char* preset : {"tiny-qwen2moe", "tiny-granitemoe", "tiny-deepseek", "tiny-dbrx",
                             "tiny-phimoe", "tiny-arctic", "tiny-grok", "tiny-grok2"}) {
    const fs::path model = dir_ / fmt::format("synth-{}.gguf", preset);
    const Result r = run_strata(dir_.path(), fmt::format("synth --preset {} --out '{}' --threads 2",
                                                         preset, model.string()));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(check_model(model, false));
  }
}

TEST_F(TierInvariance, SynthTinyIsBitIdenticalAcrossHomes) {
  const fs::path model = dir_ / "synth-tiny.gguf";
  const Result r = run_strata(
      dir_.path(), fmt::format("synth --preset tiny --out '{}' --threads 2", model.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(check_model(model, true, /*expect_repin_moves=*/true));
  // REPIN and PREFETCH through the compressed SSD tier: demoted experts stream as sidecar frames,
  // promoted ones are copied out of decompressed slots; same bytes as every expert in RAM.
  const Result p = run_strata(dir_.path(), fmt::format("pack -m '{}'", model.string()));
  ASSERT_EQ(p.rc, 0) << p.err;
  const Model m = Model::load(model.string());
  const placement::ExpertSizes sizes = engine::expert_sizes(m);
  const uint64_t min = placement::min_ram_bytes(sizes), all = placement::all_ram_bytes(sizes);
  const nlohmann::json j =
      replay(model, "u1_zstd_repin",
             fmt::format("-t 2 --zstd 1 --prefetch 1 --repin 2 --repin-moves 3 "
                         "--repin-half-life 16 --ram-gb {} --cache-gb {}",
                         ram_gb(all / 2 + min), ram_gb(all / 4)),
             "", 1);
  ASSERT_FALSE(j.is_null());
  EXPECT_TRUE(j["io"]["zstd"].get<bool>());
  EXPECT_GT(j["repin"]["moves"].get<uint64_t>(), 0u);
  EXPECT_GT(j["prefetch"]["used"].get<uint64_t>(), 0u);
  for (size_t s = 0; s < kLengths.size(); ++s) {
    const std::string name = fmt::format("stream{}.logits.bin", s);
    EXPECT_EQ(slurp(dir_ / "u1_zstd_repin" / name), slurp(dir_ / "u1_all" / name)) << name;
  }
}

// A split model (gguf-split shards, any of them named) runs as the file it was split from: the
// reference path's logits are the unsplit file's bits, and every RAM_GB — down to every expert
// streamed from the shards through io_uring and O_DIRECT — and the zstd sidecar (packed from the
// shards, beside the first) give them too; `inspect` says how the model is split.
TEST_F(TierInvariance, SplitModelIsBitIdenticalToTheWholeFile) {
  struct Case {
    const char* fixture;
    testing::SplitOptions split;
  };
  testing::SplitOptions no_tensors_first;
  no_tensors_first.first_empty = true;
  const Case cases[] = {{"tiny-qwen3moe/tiny-qwen3moe-Q4_0.gguf", {}},
                        {"tiny-deepseek2/tiny-deepseek2-Q8_0.gguf", no_tensors_first}};
  for (const Case& c : cases) {
    const fs::path whole = kFixtures / c.fixture;
    if (!fs::exists(whole)) GTEST_SKIP() << "no fixture " << whole;
    SCOPED_TRACE(c.fixture);
    const std::string prefix = (dir_ / whole.stem().string()).string();
    const auto shards =
        testing::write_gguf_split(io::GgufFile::open(whole.string()), prefix, c.split);
    ASSERT_EQ(shards.size(), 3u);

    const Model a = Model::load(whole.string());
    const Model b = Model::load(shards[1]);
    ASSERT_TRUE(b.file().split());
    // A usage stats file recorded on either fits the other.
    EXPECT_EQ(placement::model_identity(a.file()).fingerprint,
              placement::model_identity(b.file()).fingerprint);
    const Streams streams = make_streams(dir_ / "streams.txt", a.config().n_vocab);
    const auto ref_whole = reference_logits(a, streams);
    const auto ref_split = reference_logits(b, streams);
    for (size_t s = 0; s < ref_whole.size(); ++s)
      EXPECT_EQ(std::memcmp(ref_whole[s].data(), ref_split[s].data(),
                            ref_whole[s].size() * sizeof(float)),
                0)
          << "stream " << s;
    // The three budgets through the tiers, the model named by its last shard.
    EXPECT_TRUE(check_model(shards[2], false));

    const Result p = run_strata(dir_.path(), fmt::format("pack -m '{}'", shards[2]));
    ASSERT_EQ(p.rc, 0) << p.err;
    EXPECT_TRUE(fs::exists(shards[0] + ".stz"));
    const placement::ExpertSizes sizes = engine::expert_sizes(b);
    const uint64_t min = placement::min_ram_bytes(sizes), all = placement::all_ram_bytes(sizes);
    const nlohmann::json j =
        replay(shards[0], "zstd", fmt::format("-t 2 --zstd 1 --ram-gb {}", ram_gb(all / 2 + min)));
    ASSERT_FALSE(j.is_null());
    EXPECT_TRUE(j["io"]["zstd"].get<bool>());
    EXPECT_GT(j["tiers"]["ssd"]["bytes"].get<uint64_t>(), 0u);
    expect_identical("zstd", ref_whole, "split, zstd sidecar");

    const Result info = run_strata(dir_.path(), fmt::format("inspect '{}'", shards[0]));
    ASSERT_EQ(info.rc, 0) << info.err;
    EXPECT_NE(info.out.find("split        3 files (gguf-split)"), std::string::npos) << info.out;
    for (const std::string& s : shards) fs::remove(s);
    fs::remove(shards[0] + ".stz");
  }
}

}  // namespace
}  // namespace strata::tier_test
