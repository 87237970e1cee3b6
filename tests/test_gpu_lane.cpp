// Invariant 1 through the GPU lane, end to end: `strata replay` logit dumps are byte-identical
// whatever VRAM_GB — 0, about half the expert bytes, a third with RAM and SSD homes too, two
// GPUs, every expert — with the rest of the experts in RAM and/or on SSD, in chunks and in the
// decode shape (one token per pass, with PREFETCH and REPIN on: cached SSD experts also take GPU
// slots), for the fixture models and a `strata synth --preset tiny` model. GpuLaneEmulated runs the
// VRAM homes through VRAM_EMULATE=1 (the host emulation of the CUDA kernels on worker threads: the
// plan, the dispatch, the launch before the CPU experts, the join and the combine are the real
// ones); GpuLaneDevice does the same on a CUDA device and skips without one. gpt-oss's layers
// (MXFP4, SwiGLU-OAI, expert biases) run on the lane too; layers the kernel cannot run (F32
// weights) stay off the GPU with a notice and still give the same bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cuda/runtime.h"
#include "engine/expert_source.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "io/check.h"
#include "placement/plan.h"
#include "tier_test_util.h"

namespace strata::tier_test {
namespace {

using engine::Model;

constexpr uint32_t kUbatch = 8;
const std::vector<int> kLengths = {24, 13};

std::string gib(double bytes) {
  return fmt::format("{:.12f}", bytes / (1024.0 * 1024.0 * 1024.0));
}

class GpuLane : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
  }

  // Replays the streams with `flags`; returns the PROF JSON (null on failure, reported).
  nlohmann::json replay(const fs::path& model, const std::string& tag, const std::string& flags,
                        uint32_t ubatch = kUbatch) {
    const fs::path out = dir_ / tag;
    const fs::path prof = dir_ / (tag + ".json");
    last_ = run_strata(
        dir_.path(),
        fmt::format(
            "replay -m '{}' --tokens '{}' --ubatch {} --dump-logits '{}' --prof-json '{}' -t 2 {}",
            model.string(), (dir_ / "streams.txt").string(), ubatch, out.string(), prof.string(),
            flags));
    EXPECT_EQ(last_.rc, 0) << model.filename() << " " << flags << ": " << last_.err;
    if (last_.rc != 0) return {};
    return nlohmann::json::parse(slurp(prof));
  }

  void expect_same(const std::string& tag, const std::string& ref, const std::string& what) {
    for (size_t s = 0; s < kLengths.size(); ++s) {
      const std::string name = fmt::format("stream{}.logits.bin", s);
      const std::string a = slurp(dir_ / tag / name), b = slurp(dir_ / ref / name);
      EXPECT_FALSE(a.empty()) << what << ": no dump " << tag << "/" << name;
      EXPECT_TRUE(a == b) << what << " stream " << s << ": logits differ from " << ref;
    }
  }

  // Same dump sizes and headers, finite logits within rel * (largest |ref| logit) of ref: for
  // CUDA_DENSE=2's prefill GEMMs (cuBLASLt on dequantized weights, x not quantized).
  void expect_close(const std::string& tag, const std::string& ref, double rel) {
    for (size_t s = 0; s < kLengths.size(); ++s) {
      const std::string name = fmt::format("stream{}.logits.bin", s);
      const std::string a = slurp(dir_ / tag / name), b = slurp(dir_ / ref / name);
      ASSERT_EQ(a.size(), b.size()) << tag << "/" << name;
      const size_t head = 16 + 4 * static_cast<size_t>(kLengths[s]);  // magic..n_vocab, tokens
      ASSERT_GT(a.size(), head);
      EXPECT_EQ(a.substr(0, head), b.substr(0, head)) << tag;
      const size_t n = (a.size() - head) / 4;
      std::vector<float> x(n), y(n);
      std::memcpy(x.data(), a.data() + head, 4 * n);
      std::memcpy(y.data(), b.data() + head, 4 * n);
      float scale = 0, worst = 0;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(x[i])) << tag << " logit " << i;
        scale = std::max(scale, std::fabs(y[i]));
        worst = std::max(worst, std::fabs(x[i] - y[i]));
      }
      EXPECT_LE(worst, rel * scale) << tag << " stream " << s << ": " << worst << " of " << scale;
    }
  }

  // Per position, the largest |logit - ref| within rel * (largest |ref| logit) at `frac` of the
  // positions at least: for models whose grouped sigmoid routing a rounding flips at a few
  // positions (tiny-deepseek2, tiny-glm4moe), where a bound on every position says nothing.
  void expect_mostly_close(const std::string& tag, const std::string& ref, double rel,
                           double frac) {
    for (size_t s = 0; s < kLengths.size(); ++s) {
      const std::string name = fmt::format("stream{}.logits.bin", s);
      const std::string a = slurp(dir_ / tag / name), b = slurp(dir_ / ref / name);
      ASSERT_EQ(a.size(), b.size()) << tag << "/" << name;
      const size_t n_pos = static_cast<size_t>(kLengths[s]);
      const size_t head = 16 + 4 * n_pos;
      ASSERT_GT(a.size(), head);
      const size_t n = (a.size() - head) / 4, n_vocab = n / n_pos;
      std::vector<float> x(n), y(n);
      std::memcpy(x.data(), a.data() + head, 4 * n);
      std::memcpy(y.data(), b.data() + head, 4 * n);
      float scale = 0;
      for (float v : y) scale = std::max(scale, std::fabs(v));
      size_t close = 0;
      for (size_t p = 0; p < n_pos; ++p) {
        float worst = 0;
        for (size_t i = p * n_vocab; i < (p + 1) * n_vocab; ++i) {
          ASSERT_TRUE(std::isfinite(x[i])) << tag << " logit " << i;
          worst = std::max(worst, std::fabs(x[i] - y[i]));
        }
        close += worst <= rel * scale;
      }
      EXPECT_GE(static_cast<double>(close), frac * static_cast<double>(n_pos))
          << tag << " stream " << s << ": " << close << " of " << n_pos << " positions close";
    }
  }

  // VRAM budgets 0 / half / a third (with RAM and SSD) / two GPUs / all, chunked and decode
  // shape, against VRAM 0 with every expert in RAM. emulate: VRAM_EMULATE=1.
  // Returns false when the engine does not load the model.
  bool check_model(const fs::path& path, bool emulate, bool decode,
                   bool expect_vram_repin = false) {
    std::optional<Model> model;
    try {
      model.emplace(Model::load(path.string()));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kUnsupported) throw;
      return false;
    }
    SCOPED_TRACE(path.filename().string());
    const placement::ExpertSizes sizes = engine::expert_sizes(*model);
    const double total = static_cast<double>(sizes.total_bytes());
    const uint64_t min = placement::min_ram_bytes(sizes);
    const uint64_t all = placement::all_ram_bytes(sizes);
    bool gpu_ok = false;  // some MoE layer the grouped kernel runs
    for (uint32_t l = 0; l < model->config().n_layer; ++l)
      gpu_ok = gpu_ok || (model->config().is_moe(l) &&
                          engine::gpu_stack_supported(model->weights().layers[l].experts));
    write_streams(dir_ / "streams.txt", model->config().n_vocab, kLengths);

    const std::string emu = emulate ? "--vram-emulate 1 " : "--vram-emulate 0 ";
    const std::string mixed_ram = gib(double(min + (all - std::min(all, min)) / 3));
    const nlohmann::json ref = replay(path, "ref", "--vram-gb 0 --ram-gb " + gib(double(all)));
    if (ref.is_null()) return true;
    EXPECT_EQ(ref["plan"]["experts_vram"].get<int64_t>(), 0);
    EXPECT_TRUE(ref["gpu"].is_null());

    struct Run {
      const char* tag;
      std::string flags;
    };
    std::vector<Run> runs = {
        {"half_ram", emu + "--vram-gb " + gib(total / 2) + " --ram-gb " + gib(double(all))},
        {"half_ssd", emu + "--vram-gb " + gib(total / 2) + " --ram-gb " + gib(double(min))},
        {"third_mixed", emu + "--vram-gb " + gib(total / 3) + " --ram-gb " + mixed_ram},
        {"all", emu + "--vram-gb " + gib(2 * total) + " --ram-gb " + gib(double(min))},
    };
    const int n_dev = emulate ? 2 : cuda::cuda_device_count();
    if (n_dev >= 2)
      runs.push_back({"two_gpus", emu + "--vram-gb " + gib(total / 6) + "," + gib(total / 6) +
                                      (n_dev > 2 ? std::string(n_dev - 2, ',') : "") +
                                      " --ram-gb " + mixed_ram});
    for (const Run& run : runs) {
      const nlohmann::json j = replay(path, run.tag, run.flags);
      if (j.is_null()) continue;
      expect_same(run.tag, "ref", run.tag);
      const int64_t n_vram = j["plan"]["experts_vram"].get<int64_t>();
      if (!gpu_ok) {
        EXPECT_EQ(n_vram, 0) << run.tag;
        EXPECT_NE(last_.err.find("stay off the GPU"), std::string::npos) << last_.err;
        continue;
      }
      EXPECT_GT(n_vram, 0) << run.tag;
      if (!j["gpu"].is_object()) {
        ADD_FAILURE() << run.tag << ": no gpu object";
        continue;
      }
      EXPECT_EQ(j["gpu"]["emulated"].get<bool>(), emulate);
      uint64_t jobs = 0;
      for (const auto& d : j["gpu"]["devices"]) {
        jobs += d["experts"].get<uint64_t>();
        for (const char* key : {"device", "name", "resident_experts", "resident_bytes", "launches",
                                "rows", "bytes_read", "kernel_seconds", "gb_s", "ceiling_pct"})
          EXPECT_TRUE(d.contains(key)) << key;
      }
      EXPECT_GT(jobs, 0u) << run.tag;
      EXPECT_EQ(j["tiers"]["vram"]["experts_computed"].get<uint64_t>(), jobs);
      for (const char* key : {"layer_steps", "cpu_seconds", "gpu_seconds", "join_wait_seconds",
                              "gpu_straggler_steps", "straggler"})
        EXPECT_TRUE(j["gpu"]["lanes"].contains(key)) << key;
      const std::string tag = run.tag;
      if (tag == "all") {
        EXPECT_EQ(n_vram, sizes.total_experts());
        EXPECT_EQ(j["tiers"]["ssd"]["bytes"].get<uint64_t>(), 0u);
      }
      // VRAM homes need no RAM cache: with the rest in RAM (or nothing left) there is none.
      if (tag == "all" || tag == "half_ram") {
        EXPECT_EQ(j["plan"]["cache_bytes"].get<uint64_t>(), 0u) << tag;
        EXPECT_EQ(j["plan"]["experts_ssd"].get<int64_t>(), 0) << tag;
      }
      if (tag == "third_mixed") {
        EXPECT_GT(j["plan"]["experts_ram"].get<int64_t>(), 0);
        // SSD homes and their cache, unless the rest fits in RAM with no cache (a model whose
        // minimum cache is most of its experts).
        EXPECT_EQ(j["plan"]["experts_ssd"].get<int64_t>() > 0,
                  j["plan"]["cache_bytes"].get<uint64_t>() > 0);
        ssd_mixed += j["plan"]["experts_ssd"].get<int64_t>() > 0;
      }
      if (tag == "two_gpus") {
        EXPECT_EQ(j["gpu"]["devices"].size(), size_t(n_dev));
      }
    }
    if (!decode) return true;
    // The decode shape: one token per pass, VRAM + RAM + SSD with PREFETCH (it must never read a
    // VRAM expert) and REPIN (RAM <-> SSD only), against one token per pass all in RAM.
    const nlohmann::json r1 = replay(path, "u1_ref", "--ram-gb " + gib(double(all)), 1);
    const nlohmann::json u1 =
        replay(path, "u1_mixed",
               emu + "--vram-gb " + gib(total / 3) + " --ram-gb " + mixed_ram +
                   " --prefetch 1 --repin 2 --repin-moves 3 "
                   "--repin-half-life 16",
               1);
    if (!r1.is_null() && !u1.is_null()) {
      expect_same("u1_mixed", "u1_ref", "decode shape");
      if (gpu_ok) {
        EXPECT_GT(u1["plan"]["experts_vram"].get<int64_t>(), 0);
        EXPECT_GT(u1["gpu"]["lanes"]["layer_steps"].get<uint64_t>(), 0u);
        if (expect_vram_repin) {
          EXPECT_GT(u1["repin"]["vram_moves"].get<uint64_t>(), 0u);
        }
      }
    }
    return true;
  }

  int ssd_mixed = 0;  // third_mixed runs that had SSD homes too

  // CUDA_DENSE decode / chunked replays against the CPU (see the tests).
  void dense_check(bool emulate);

  // In process: all experts in VRAM behind an executor of 3 rows per launch (see the tests).
  void split_check(bool emulate);

  ScratchDir dir_{"gpu_lane"};
  Result last_;
};

// The fixture models the tests use: one file per family and quant type the kernel takes, plus
// one it refuses (F32 weights). gpt-oss (MXFP4 and Q4_0 experts, SwiGLU-OAI, expert biases)
// runs on the GPU lane.
std::vector<fs::path> lane_fixtures() {
  std::vector<fs::path> out;
  for (const fs::path& m : fixture_models()) {
    const std::string n = m.filename().string();
    if (n.find("F32") != std::string::npos && n.find("qwen3moe") == std::string::npos) continue;
    out.push_back(m);
  }
  return out;
}

TEST_F(GpuLane, EmulatedSynthTinyIsBitIdenticalAcrossVramBudgets) {
  const fs::path model = dir_ / "synth-tiny.gguf";
  const Result r = run_strata(
      dir_.path(), fmt::format("synth --preset tiny --out '{}' --threads 2", model.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(check_model(model, /*emulate=*/true, /*decode=*/true, /*expect_vram_repin=*/true));
}

// The expert types of llama.cpp's Q5_K_M, Q3_K_M, Q2_K and IQ4_XS files, through the lane (the
// tiny preset's experts synthesized in each type).
TEST_F(GpuLane, EmulatedSynthTypesAreBitIdenticalAcrossVramBudgets) {
  for (const char* type : {"Q5_K", "Q3_K", "Q2_K", "IQ4_XS"}) {
    SCOPED_TRACE(type);
    const fs::path model = dir_ / fmt::format("synth-tiny-{}.gguf", type);
    const Result r = run_strata(dir_.path(), fmt::format("synth --preset tiny --type {} --out '{}' "
                                                         "--threads 2",
                                                         type, model.string()));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(
        engine::gpu_stack_supported(Model::load(model.string()).weights().layers[1].experts));
    EXPECT_TRUE(check_model(model, /*emulate=*/true, /*decode=*/false));
  }
}

// grok (no fixture): GELU experts through the lane's half table (kernels/gelu.h).
TEST_F(GpuLane, EmulatedSynthGrokIsBitIdenticalAcrossVramBudgets) {
  const fs::path model = dir_ / "synth-tiny-grok.gguf";
  const Result r = run_strata(
      dir_.path(), fmt::format("synth --preset tiny-grok --out '{}' --threads 2", model.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(check_model(model, /*emulate=*/true, /*decode=*/false));
}

TEST_F(GpuLane, EmulatedFixturesAreBitIdenticalAcrossVramBudgets) {
  const auto models = lane_fixtures();
  if (models.empty()) GTEST_SKIP() << "fixtures not found at " << kFixtures;
  int checked = 0;
  for (const fs::path& m : models) {
    const bool decode = m.filename().string().find("Q4_0") != std::string::npos &&
                        m.filename().string().find("qwen3moe") != std::string::npos;
    checked += check_model(m, /*emulate=*/true, decode);
  }
  EXPECT_GE(checked, 6);
  EXPECT_GE(ssd_mixed, 4);  // VRAM + RAM + SSD homes together
}

TEST_F(GpuLane, BadVramKnobsAreOneLineErrors) {
  const fs::path model = dir_ / "synth-tiny.gguf";
  ASSERT_EQ(run_strata(dir_.path(),
                       fmt::format("synth --preset tiny --out '{}' --threads 2", model.string()))
                .rc,
            0);
  write_streams(dir_ / "streams.txt", 1000, kLengths);
  const std::string base = fmt::format("replay -m '{}' --tokens '{}' -t 2 ", model.string(),
                                       (dir_ / "streams.txt").string());
  struct Case {
    std::string flags;
    std::string needle;
  };
  std::vector<Case> cases = {
      {"--vram-gb x", "knob VRAM_GB (--vram-gb): bad value 'x'"},
      {"--vram-gb 1,-2 --vram-emulate 1", "knob VRAM_GB (--vram-gb): bad value '1,-2'"},
      {"--vram-gb 1,,2 --vram-emulate 1", "bad value '1,,2'"},
  };
  if (cuda::cuda_device_count() == 0) {
    cases.push_back({"--vram-gb 4", "no usable CUDA device"});
    cases.push_back({"--vram-gb 4,4", "2 per-GPU values for 0 usable GPU(s)"});
  }
  for (const Case& c : cases) {
    const Result r = run_strata(dir_.path(), base + c.flags);
    EXPECT_NE(r.rc, 0) << c.flags;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.flags << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.flags << ": " << r.err;
  }
  // VRAM_GB=0 without a device is fine, and auto is 0 without one.
  EXPECT_EQ(run_strata(dir_.path(), base + "--vram-gb 0").rc, 0);
}

// CUDA_DENSE=1 (emulated): the attention projections, the dense FFN layers, the shared experts and
// the output head of one-token passes on the "GPU" give the CPU's bytes, alone and with VRAM expert
// homes (tiny-deepseek2 and tiny-glm4moe have a leading dense FFN layer and a shared expert in
// every MoE layer: their FFNs must be taken, counted matrix by matrix and call by call); without a
// device (and without VRAM_EMULATE) it is a one-line error.
TEST_F(GpuLane, EmulatedCudaDenseIsBitIdentical) {
  dense_check(/*emulate=*/true);
}

TEST_F(GpuLane, DeviceCudaDenseIsBitIdentical) {
  if (cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::cuda_describe();
  dense_check(/*emulate=*/false);
}

void GpuLane::dense_check(bool emulate) {
  const std::string emu = emulate ? " --vram-emulate 1" : " --vram-emulate 0";
  // The tiny synth, then architectures the fixtures lack: qwen2moe (a gated shared expert, q/k/v
  // biases), phimoe (biased norms, q/k/v/o biases, LongRoPE, a bias on the GPU's head output),
  // arctic (its dense residual FFN runs as the shared expert, on GPU 0 here) and grok-2 (its dense
  // GELU FFN beside the experts, on GPU 0 here).
  std::vector<fs::path> models;
  for (const char* preset : {"tiny", "tiny-qwen2moe", "tiny-phimoe", "tiny-arctic", "tiny-grok2"}) {
    models.push_back(dir_ / fmt::format("synth-{}.gguf", preset));
    ASSERT_EQ(run_strata(dir_.path(), fmt::format("synth --preset {} --out '{}' --threads 2",
                                                  preset, models.back().string()))
                  .rc,
              0)
        << preset;
  }
  for (const fs::path& m : fixture_models()) {
    const std::string n = m.filename().string();
    if (n == "tiny-qwen3moe-Q4_K_M.gguf" || n == "tiny-gpt-oss-MXFP4.gguf" ||
        n == "tiny-mixtral-Q4_0.gguf" || n == "tiny-deepseek2-Q4_0.gguf" ||
        n == "tiny-glm4moe-Q4_0.gguf")
      models.push_back(m);
  }
  // The fixtures with FFNs that are not routed (one dense layer, three shared experts; every
  // matrix Q4_0): matrices on the GPU (attention + 3 per FFN + the head), GEMV calls per
  // one-token pass (q/k/v and o per GQA layer, gate+up and down per FFN, the head) and CUDA_DENSE=2
  // GEMM calls per chunk (the same but the head). Without the FFNs they would be 17 and 1
  // matrices, 9 and 1 calls, 8 and 0 per chunk.
  struct FfnCase {
    uint64_t ffns, matrices, calls_per_token, calls_per_chunk;
  };
  const std::map<std::string, FfnCase> ffn_cases = {
      {"tiny-glm4moe-Q4_0.gguf", {4, 16 + 12 + 1, 8 + 8 + 1, 8 + 8}},  // GQA
      {"tiny-deepseek2-Q4_0.gguf", {4, 12 + 1, 8 + 1, 8}},             // MLA: attention on the CPU
      // The shared experts' sigmoid gates (1-row F32) stay on the CPU with the routers.
      {"synth-tiny-qwen2moe.gguf", {4, 16 + 12 + 1, 8 + 8 + 1, 8 + 8}},
      // Grok-2's dense GELU FFN beside the experts, one per layer (Q8_0, like its attention).
      {"synth-tiny-grok2.gguf", {4, 16 + 12 + 1, 8 + 8 + 1, 8 + 8}},
  };
  uint64_t n_chunks = 0;  // chunks of kUbatch tokens the streams make
  for (int len : kLengths) n_chunks += static_cast<uint64_t>((len + kUbatch - 1) / kUbatch);
  int ffn_checked = 0;
  for (const fs::path& m : models) {
    SCOPED_TRACE(m.filename().string());
    const Model model = Model::load(m.string());
    write_streams(dir_ / "streams.txt", model.config().n_vocab, kLengths);
    const double total = static_cast<double>(engine::expert_sizes(model).total_bytes());
    const nlohmann::json ref = replay(m, "d_ref", "--vram-gb 0", 1);
    if (ref.is_null()) continue;
    EXPECT_TRUE(ref["cuda_dense"].is_null());
    const nlohmann::json dj = replay(m, "d_dense", "--vram-gb 0 --cuda-dense 1" + emu, 1);
    if (dj.is_null()) continue;
    EXPECT_EQ(dj["cuda_dense"]["emulated"].get<bool>(), emulate);
    // The tiny gpt-oss fixture keeps its dense matrices in F32 (CPU); the others are quantized.
    const bool f32_dense = m.filename().string().find("gpt-oss") != std::string::npos;
    EXPECT_EQ(dj["cuda_dense"]["matrices"].get<uint64_t>() > 0, !f32_dense);
    EXPECT_EQ(dj["cuda_dense"]["calls"].get<uint64_t>() > 0, !f32_dense);
    EXPECT_NE(last_.err.find(emulate ? "CUDA_DENSE (VRAM_EMULATE" : "CUDA_DENSE:"),
              std::string::npos)
        << last_.err;
    // VRAM_GB auto reserves what GpuDense uploads.
    EXPECT_EQ(dj["cuda_dense"]["bytes"].get<uint64_t>(), engine::gpu_dense_bytes(model));
    if (const auto c = ffn_cases.find(m.filename().string()); c != ffn_cases.end()) {
      ++ffn_checked;
      EXPECT_EQ(dj["cuda_dense"]["matrices"].get<uint64_t>(), c->second.matrices);
      uint64_t tokens = 0;
      for (int len : kLengths) tokens += static_cast<uint64_t>(len);
      EXPECT_EQ(dj["cuda_dense"]["calls"].get<uint64_t>(), c->second.calls_per_token * tokens);
      EXPECT_NE(last_.err.find(fmt::format("(with {} dense / shared-expert FFNs)", c->second.ffns)),
                std::string::npos)
          << last_.err;
    }
    expect_same("d_dense", "d_ref", "CUDA_DENSE decode");
    if (replay(m, "d_both", "--vram-gb " + gib(total / 2) + " --cuda-dense 1" + emu, 1).is_null())
      continue;
    expect_same("d_both", "d_ref", "CUDA_DENSE + VRAM homes decode");
    // Chunks of several tokens (prefill) stay on the CPU: same bytes as well.
    if (replay(m, "c_ref", "--vram-gb 0").is_null()) continue;
    const nlohmann::json cj = replay(m, "c_dense", "--vram-gb 0 --cuda-dense 1" + emu);
    if (cj.is_null()) continue;
    expect_same("c_dense", "c_ref", "CUDA_DENSE chunked");
    EXPECT_EQ(cj["cuda_dense"]["calls"].get<uint64_t>(), 0u);
    // CUDA_DENSE=2: one-token passes still bit-identical; chunks through the GEMMs close.
    if (replay(m, "d_dense2", "--vram-gb 0 --cuda-dense 2" + emu, 1).is_null()) continue;
    expect_same("d_dense2", "d_ref", "CUDA_DENSE=2 decode");
    const nlohmann::json c2 = replay(m, "c_dense2", "--vram-gb 0 --cuda-dense 2" + emu);
    if (c2.is_null()) continue;
    EXPECT_NE(last_.err.find("and prefill (cuBLASLt"), std::string::npos) << last_.err;
    if (const auto c = ffn_cases.find(m.filename().string()); c != ffn_cases.end()) {
      EXPECT_EQ(c2["cuda_dense"]["calls"].get<uint64_t>(), c->second.calls_per_chunk * n_chunks);
    }
    // A sanity bound, not an accuracy claim: a projection that moves by a rounding can flip a
    // tiny random MoE's top-k routing, which moves logits far more than the GEMMs do (their own
    // accuracy is test_cuda_grouped's DenseGemm test); wrong strides or rows give errors ~1.
    // The FFN fixtures (the FFNs' GEMMs too; routing flips carry on through the KV cache): half
    // the positions within 10% (most are at 1-2%; wrong strides or rows give ~100%).
    if (ffn_cases.count(m.filename().string()) == 0)
      expect_close("c_dense2", "c_ref", 0.25);
    else
      expect_mostly_close("c_dense2", "c_ref", 0.1, 0.5);
  }
  EXPECT_EQ(ffn_checked, fs::exists(kFixtures) ? 4 : 2);
  if (!fs::exists(kFixtures)) return;
  if (cuda::cuda_device_count() == 0) {
    const Result r = run_strata(
        dir_.path(), fmt::format("replay -m '{}' --tokens '{}' -t 2 --cuda-dense 1",
                                 models.front().string(), (dir_ / "streams.txt").string()));
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("knob CUDA_DENSE (--cuda-dense): no usable CUDA device"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// PROF=2's per-token lines carry the GPU lane's numbers: experts and rows on the GPU, the two
// lanes' times, the host's wait, and the straggler with its step count.
TEST_F(GpuLane, EmulatedProf2TokenLinesHaveGpuFields) {
  const fs::path model = dir_ / "synth-tiny.gguf";
  ASSERT_EQ(run_strata(dir_.path(),
                       fmt::format("synth --preset tiny --out '{}' --threads 2", model.string()))
                .rc,
            0);
  const Result r = run_strata(
      dir_.path(), fmt::format("run -m '{}' -p 'hello world' -n 4 -t 2 --prof 2 --vram-emulate 1 "
                               "--vram-gb 1",
                               model.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  int lines = 0;
  std::istringstream in(r.err);
  for (std::string line; std::getline(in, line);) {
    if (line.find("prof: decode token") == std::string::npos) continue;
    ++lines;
    EXPECT_NE(line.find(", gpu "), std::string::npos) << line;
    EXPECT_NE(line.find(" rows, lanes cpu "), std::string::npos) << line;
    EXPECT_NE(line.find(", straggler "), std::string::npos) << line;
    EXPECT_NE(line.find(" steps GPU)"), std::string::npos) << line;
    EXPECT_EQ(line.find("gpu 0 experts"), std::string::npos) << line;  // every expert is on the GPU
  }
  EXPECT_GE(lines, 3) << r.err;
}

// In process: an executor of 3 rows per launch runs each 16-token chunk's GPU experts in several
// launches (the prefill path of a chunk larger than the executor), still byte-identical to the
// experts read through the mapping.
TEST_F(GpuLane, EmulatedSmallExecutorSplitsLargeChunks) {
  split_check(/*emulate=*/true);
}

TEST_F(GpuLane, DeviceSmallExecutorSplitsLargeChunks) {
  if (cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::cuda_describe();
  split_check(/*emulate=*/false);
}

void GpuLane::split_check(bool emulate) {
  const fs::path path = dir_ / "synth-tiny.gguf";
  ASSERT_EQ(run_strata(dir_.path(),
                       fmt::format("synth --preset tiny --out '{}' --threads 2", path.string()))
                .rc,
            0);
  const Model model = Model::load(path.string());
  write_streams(dir_ / "streams.txt", model.config().n_vocab, {40});
  std::vector<int32_t> ids;
  {
    std::ifstream in(dir_ / "streams.txt");
    for (int32_t id; in >> id;) ids.push_back(id);
  }
  const auto logits = [&](engine::ExpertSource* experts) {
    engine::ForwardOptions fo;
    fo.n_ctx = 64;
    fo.n_ubatch = 16;
    fo.n_threads = 2;
    fo.experts = experts;
    engine::Forward fwd(model, fo);
    std::vector<float> out(ids.size() * model.config().n_vocab);
    fwd.prefill(ids, out.data());
    return out;
  };
  const std::vector<float> ref = logits(nullptr);
  engine::TierOptions o;
  o.vram_gb = "1";
  o.vram_emulate = emulate;
  o.gpu_max_rows = 3;
  o.ram_bytes = placement::all_ram_bytes(engine::expert_sizes(model));
  o.notice = nullptr;
  engine::ExpertSource src(model, o);
  ASSERT_NE(src.gpu_lane(), nullptr);
  ASSERT_EQ(src.plan()->count(placement::HomeKind::kVram), src.plan()->sizes().total_experts());
  const std::vector<float> got = logits(&src);
  ASSERT_EQ(got.size(), ref.size());
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0);
  const engine::GpuDeviceStats& st = src.gpu_lane()->stats().at(0);
  // 3 chunks x 4 MoE layers would be 12 launches without splitting; 16 tokens x top-4 = 64 rows
  // per chunk and layer need 22 launches of 3 rows.
  EXPECT_GT(st.launches, 12u * 10);
  EXPECT_EQ(st.rows, uint64_t{40} * 4 * 4);
}

// VRAM_GB -> per-device budgets (pure; fake devices).
TEST(VramBudgets, TotalsListsAutoAndErrors) {
  using engine::vram_budgets;
  constexpr uint64_t kGiB = 1ull << 30;
  const std::vector<engine::VramDevice> two = {{80 * kGiB, 140 * kGiB}, {100 * kGiB, 140 * kGiB}};
  // One number is the total, split evenly; a list is per device.
  EXPECT_EQ(vram_budgets("48", false, two, 0), (std::vector<uint64_t>{24 * kGiB, 24 * kGiB}));
  EXPECT_EQ(vram_budgets("10,20.5", false, two, 0),
            (std::vector<uint64_t>{10 * kGiB, 41 * kGiB / 2}));
  // Auto: free less 1 GiB + 5% of the total and the reserve, per device; none without devices.
  EXPECT_EQ(
      vram_budgets("", false, two, kGiB),
      (std::vector<uint64_t>{80 * kGiB - 2 * kGiB - 7 * kGiB, 100 * kGiB - 2 * kGiB - 7 * kGiB}));
  EXPECT_TRUE(vram_budgets("", false, {}, 0).empty());
  EXPECT_TRUE(vram_budgets("0", false, {}, 0).empty());
  EXPECT_TRUE(vram_budgets("", true, two, 0).empty());  // emulated: only what VRAM_GB says
  // Emulated: the list makes the devices.
  EXPECT_EQ(vram_budgets("1,2,3", true, {}, 0).size(), 3u);
  // A device with less free memory than the headroom gets 0.
  EXPECT_EQ(vram_budgets("", false, {{kGiB, 80 * kGiB}}, 0), (std::vector<uint64_t>{0}));
  for (const char* bad : {"x", "-1", "1,", ",1", "1;2", "nan", "inf", "1,2,3"})
    EXPECT_THROW(vram_budgets(bad, false, two, 0), Error) << bad;
  // Beyond 1 PiB the byte count would overflow: refused, emulated or not.
  for (const bool emulate : {false, true}) {
    EXPECT_THROW(vram_budgets("1e99", emulate, two, 0), Error);
    EXPECT_THROW(vram_budgets("1,1048577", emulate, two, 0), Error);
  }
  EXPECT_EQ(vram_budgets("1048576", true, {}, 0), (std::vector<uint64_t>{1048576 * kGiB}));
  EXPECT_THROW(vram_budgets("4", false, {}, 0), Error);  // VRAM asked for, no device
  // An explicit budget larger than a device's free memory less the reserve is refused, naming
  // the most that fits; at the limit it is taken.
  EXPECT_THROW(vram_budgets("81", false, {two[0]}, 0), Error);
  EXPECT_THROW(vram_budgets("80,100", false, two, kGiB), Error);
  EXPECT_EQ(vram_budgets("79,99", false, two, kGiB), (std::vector<uint64_t>{79 * kGiB, 99 * kGiB}));
  EXPECT_THROW(vram_budgets("200", false, two, 0), Error);  // 100 + 100: GPU 0 has 80 free
  try {
    vram_budgets("90", false, {two[0]}, kGiB);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 79.00 GiB"), std::string::npos) << e.what();
  }
}

// The same on a real device (bench/gpu_check.sh runs it on the lent GPU).
TEST_F(GpuLane, DeviceFixturesAreBitIdenticalAcrossVramBudgets) {
  if (cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::cuda_describe();
  const fs::path model = dir_ / "synth-tiny.gguf";
  const Result r = run_strata(
      dir_.path(), fmt::format("synth --preset tiny --out '{}' --threads 2", model.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(check_model(model, /*emulate=*/false, /*decode=*/true));
  // The decode shape on the synth model only (each replay pays for a CUDA context).
  for (const fs::path& m : lane_fixtures()) check_model(m, /*emulate=*/false, /*decode=*/false);
  // grok's GELU experts (the device's copy of the half table).
  const fs::path grok = dir_ / "synth-tiny-grok.gguf";
  ASSERT_EQ(run_strata(dir_.path(), fmt::format("synth --preset tiny-grok --out '{}' --threads 2",
                                                grok.string()))
                .rc,
            0);
  EXPECT_TRUE(check_model(grok, /*emulate=*/false, /*decode=*/false));
}

}  // namespace
}  // namespace strata::tier_test
