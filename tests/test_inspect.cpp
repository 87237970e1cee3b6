// `strata inspect` (engine/model_info.h) against every fixture GGUF and its MODEL.json
// (architecture, expert count, bytes per expert, tensor types), on a synthetic model, and the
// built binary on a truncated copy and a text file (one stderr line, exit code != 0).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/model_info.h"
#include "engine/synth.h"
#include "io/check.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::engine;

namespace {

const fs::path kFixtures = STRATA_FIXTURES_DIR;

struct Variant {
  fs::path gguf;
  nlohmann::json model;    // MODEL.json
  nlohmann::json variant;  // MODEL.json variants[name]
};

std::vector<Variant> fixture_variants() {
  std::vector<Variant> out;
  if (!fs::is_directory(kFixtures)) return out;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(kFixtures))
    if (e.is_directory() && fs::exists(e.path() / "MODEL.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const auto& d : dirs) {
    std::ifstream in(d / "MODEL.json");
    const nlohmann::json m = nlohmann::json::parse(in);
    for (const auto& [name, v] : m["variants"].items()) {
      const fs::path g = d / v["file"].get<std::string>();
      if (fs::exists(g)) out.push_back({g, m, v});  // some F32 files are held back for size
    }
  }
  return out;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

struct RunResult {
  int exit_code;
  std::string out, err;
};
RunResult run_strata(const std::string& args) {
  const fs::path dir = fs::temp_directory_path();
  const fs::path out = dir / fmt::format("strata_inspect_{}.out", ::getpid());
  const fs::path err = dir / fmt::format("strata_inspect_{}.err", ::getpid());
  const std::string cmd = fmt::format("'{}/tools/strata' {} >'{}' 2>'{}'", STRATA_BINARY_DIR, args,
                                      out.string(), err.string());
  const int status = std::system(cmd.c_str());
  RunResult r{WIFEXITED(status) ? WEXITSTATUS(status) : 128, read_text(out), read_text(err)};
  fs::remove(out);
  fs::remove(err);
  return r;
}

}  // namespace

TEST(Inspect, EveryFixtureMatchesModelJson) {
  const auto variants = fixture_variants();
  if (variants.empty()) GTEST_SKIP() << "no fixtures in " << kFixtures;
  EXPECT_GE(variants.size(), 12u);  // six architectures, 1-4 variants each
  const std::map<std::string, std::string> family = {
      {"qwen3moe", "chatml"},  {"llama", "mistral/llama2"}, {"deepseek2", "deepseek3"},
      {"glm4moe", "chatglm4"}, {"olmoe", "glmedge"},        {"gpt-oss", "gpt-oss"}};
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.gguf.string());
    const ModelInfo info = inspect_model(v.gguf.string());
    const auto& cfg = v.model["config"];
    const std::string arch = cfg["arch"];
    EXPECT_EQ(info.arch, arch);
    EXPECT_EQ(info.file_size, v.variant["size_bytes"].get<uint64_t>());
    EXPECT_EQ(info.tokenizer.n_tokens, cfg["vocab"].get<uint64_t>());
    EXPECT_EQ(info.tokenizer.chat_family, family.at(arch));
    ASSERT_NE(info.hparam("block_count"), nullptr);
    EXPECT_EQ(info.hparam("block_count")->as_uint(), cfg["n_layer"].get<uint64_t>());
    EXPECT_EQ(info.rope_type, arch == "llama" || arch == "deepseek2" ? "norm" : "neox");

    // Tensor types: count and bytes per type, from the tensor table.
    std::map<std::string, std::pair<uint64_t, uint64_t>> want_types;
    std::map<int, uint64_t> want_expert_bytes;  // per layer, all *_exps tensors
    uint64_t want_total = 0;
    for (const auto& t : v.variant["tensors"]) {
      auto& wt = want_types[t["type"].get<std::string>()];
      ++wt.first;
      wt.second += t["nbytes"].get<uint64_t>();
      want_total += t["nbytes"].get<uint64_t>();
      const std::string name = t["name"];
      if (name.rfind("blk.", 0) == 0 && name.find("_exps") != std::string::npos)
        want_expert_bytes[std::stoi(name.substr(4))] += t["nbytes"].get<uint64_t>();
    }
    std::set<std::string> want_set;
    for (const auto& t : v.variant["tensor_types"]) want_set.insert(t.get<std::string>());
    std::set<std::string> got_set;
    for (const TypeStat& ts : info.types) {
      const std::string name(ggml_type_name(ts.type));
      got_set.insert(name);
      ASSERT_TRUE(want_types.count(name)) << name;
      EXPECT_EQ(ts.count, want_types[name].first) << name;
      EXPECT_EQ(ts.bytes, want_types[name].second) << name;
    }
    EXPECT_EQ(got_set, want_set);
    EXPECT_EQ(info.tensor_bytes, want_total);
    EXPECT_EQ(info.n_tensors, v.variant["tensors"].size());

    // Experts: count per MoE layer and bytes per expert; dense leading layers counted as dense.
    const uint64_t n_exp = cfg["n_exp"];
    const uint64_t n_dense = cfg.value("n_dense", 0);
    EXPECT_EQ(info.n_moe_layers + n_dense, cfg["n_layer"].get<uint64_t>());
    EXPECT_EQ(info.n_dense_layers, n_dense);
    EXPECT_EQ(info.max_n_expert, n_exp);
    uint64_t expert_total = 0;
    for (const LayerInfo& L : info.layers) {
      SCOPED_TRACE(fmt::format("layer {}", L.index));
      if (static_cast<uint64_t>(L.index) < n_dense) {
        EXPECT_EQ(L.kind, LayerKind::kDense);
        EXPECT_EQ(L.n_expert, 0u);
        EXPECT_GT(L.dense_ffn_bytes, 0u);
        continue;
      }
      EXPECT_EQ(L.kind, LayerKind::kMoe);
      EXPECT_EQ(L.n_expert, n_exp);
      EXPECT_EQ(L.bytes_per_expert * n_exp, want_expert_bytes[L.index]);
      ASSERT_TRUE(L.gate.present && L.up.present && L.down.present);
      EXPECT_EQ(L.gate.ne.back(), n_exp);
      EXPECT_EQ(L.down.ne[1], L.gate.ne[0]);  // down is {n_ff, n_embd, n_expert}
      EXPECT_LE(L.gate.bytes + L.up.bytes + L.down.bytes, L.bytes_per_expert);
      EXPECT_EQ(L.shared_expert_bytes > 0, cfg.value("n_shared", 0) > 0);
      expert_total += L.expert_bytes;
    }
    EXPECT_EQ(info.expert_bytes, expert_total);
    EXPECT_EQ(info.expert_bytes + info.dense_bytes, info.tensor_bytes);

    // The JSON carries the same numbers, and the text report mentions every layer.
    const auto j = model_info_json(info);
    EXPECT_EQ(j["architecture"], arch);
    EXPECT_EQ(j["totals"]["expert_bytes"], info.expert_bytes);
    EXPECT_EQ(j["layers"].size(), info.layers.size());
    EXPECT_EQ(j["hparams"]["expert_count"], n_exp);
    EXPECT_NE(format_model_info(info).find("totals"), std::string::npos);
  }
}

TEST(Inspect, ReportsArchSpecificKeys) {
  const fs::path ds = kFixtures / "tiny-deepseek2" / "tiny-deepseek2-Q4_0.gguf";
  if (!fs::exists(ds)) GTEST_SKIP() << "missing " << ds;
  const ModelInfo info = inspect_model(ds.string());
  for (const char* k : {"expert_shared_count", "leading_dense_block_count", "expert_group_count",
                        "attention.kv_lora_rank", "expert_feed_forward_length"})
    EXPECT_NE(info.hparam(k), nullptr) << k;
  EXPECT_EQ(info.tokenizer.bos_text,
            "<\xef\xbd\x9c"
            "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
  const fs::path oss = kFixtures / "tiny-gpt-oss" / "tiny-gpt-oss-MXFP4.gguf";
  if (fs::exists(oss)) {
    const ModelInfo o = inspect_model(oss.string());
    EXPECT_NE(o.hparam("attention.sliding_window"), nullptr);
    EXPECT_EQ(o.layers[0].gate.type, GgmlType::MXFP4);
    // Expert biases ({64, 32}, F32) are part of each expert's bytes.
    EXPECT_GT(o.layers[0].bytes_per_expert,
              o.layers[0].gate.bytes + o.layers[0].up.bytes + o.layers[0].down.bytes);
  }
}

TEST(Inspect, SyntheticTinyModel) {
  SynthOptions o;
  o.preset = *find_synth_preset("tiny");
  const SynthModel m(o);
  const auto bytes = m.to_bytes();
  const ModelInfo info = summarize_model(io::GgufFile::parse("tiny.gguf", bytes));
  EXPECT_EQ(info.arch, "qwen3moe");
  EXPECT_EQ(info.n_moe_layers, 4u);
  EXPECT_EQ(info.max_n_expert, 16u);
  // gate + up + down: 3 x 128 rows x 256 columns of Q4_0 (18 bytes per 32).
  EXPECT_EQ(info.max_bytes_per_expert, 3u * 128 * 256 / 32 * 18);
  EXPECT_EQ(info.tokenizer.chat_family, "chatml");
  EXPECT_EQ(info.tokenizer.eos_text, "<|im_end|>");
  EXPECT_EQ(info.tokenizer.add_bos, false);
  EXPECT_EQ(info.head_dim, 64u);
}

TEST(Inspect, ChatTemplateFamilies) {
  EXPECT_EQ(chat_template_family("{% for m in messages %}<|im_start|>{% endfor %}"), "chatml");
  EXPECT_EQ(chat_template_family("<|start_header_id|>x<|end_header_id|>"), "llama3");
  EXPECT_EQ(chat_template_family("{{ messages }}"), "custom");
}

TEST(Inspect, BinaryFailsWithOneLineOnBadFiles) {
  const fs::path src = kFixtures / "tiny-qwen3moe" / "tiny-qwen3moe-Q4_0.gguf";
  if (!fs::exists(src)) GTEST_SKIP() << "missing " << src;
  ASSERT_TRUE(fs::exists(fs::path(STRATA_BINARY_DIR) / "tools" / "strata"));
  const fs::path dir = fs::temp_directory_path() / fmt::format("strata_inspect_{}", ::getpid());
  fs::create_directories(dir);
  const fs::path truncated = dir / "truncated.gguf";
  {
    std::ifstream in(src, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream out(truncated, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  const fs::path text = dir / "notes.txt";
  std::ofstream(text) << "this is not a GGUF file\nsecond line\n";
  for (const fs::path& p : {truncated, text, dir / "missing.gguf"}) {
    SCOPED_TRACE(p.string());
    const RunResult r = run_strata("inspect '" + p.string() + "'");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(p.filename().string()), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  const RunResult ok = run_strata("inspect --json '" + src.string() + "'");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  const auto j = nlohmann::json::parse(ok.out);
  EXPECT_EQ(j["architecture"], "qwen3moe");
  EXPECT_EQ(j["layers"][0]["n_expert"], 16);
  fs::remove_all(dir);
}
