// ModelConfig and weight binding: the fixtures' configs, small GGUF files built here with
// io::GgufWriter (missing tensor / wrong shape / missing key / unknown architecture errors name
// what is wrong), expert slices, tied output, and a dense FFN computing exactly what a one-expert
// MoE computes (one code path).
// The allocation counter below replaces operator new/delete with malloc/free; GCC then flags every
// inlined delete of a `new` pointer as mismatched (a false positive for replaced operators).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "engine/model.h"
#include "engine/names.h"
#include "io/check.h"
#include "io/gguf.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::engine;

// Counts heap allocations (on every thread) while g_count_allocs is set.
static std::atomic<bool> g_count_allocs{false};
static std::atomic<long> g_allocs{0};
void* operator new(size_t n) {
  if (g_count_allocs.load(std::memory_order_relaxed)) g_allocs.fetch_add(1);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace {

// A tiny model: 2 layers, n_embd 64, 4/2 heads of 16, vocab 40.
struct TinySpec {
  std::string arch = "qwen3moe";
  uint32_t n_expert = 4;  // 0: dense FFN (llama only)
  uint32_t n_expert_used = 2;
  std::set<std::string> drop_tensors;
  std::set<std::string> drop_keys;
  std::map<std::string, std::vector<uint64_t>> reshape;
};

constexpr uint32_t kEmbd = 64, kHead = 4, kHeadKv = 2, kHeadDim = 16, kFf = 32, kVocab = 40,
                   kLayers = 2;

class TmpDir {
 public:
  TmpDir() : path_(fs::temp_directory_path() / fmt::format("strata_model_cfg_{}", ::getpid())) {
    fs::create_directories(path_);
  }
  ~TmpDir() { fs::remove_all(path_); }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// Deterministic values per tensor; "_exps" stacks with one expert get the same values as the
// dense tensor of the same role so dense and one-expert models can be compared.
void fill_values(const std::string& name, std::span<std::byte> out) {
  std::string canonical = name;
  if (auto p = canonical.find("_exps"); p != std::string::npos) canonical.erase(p, 5);
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(canonical)));
  std::normal_distribution<float> nd(0.0f, 0.25f);
  const bool norm = name.find("norm") != std::string::npos;
  std::vector<float> v(out.size() / sizeof(float));
  for (float& x : v) x = norm ? 1.0f + 0.1f * nd(rng) : nd(rng);
  std::memcpy(out.data(), v.data(), out.size());
}

fs::path write_tiny(const TinySpec& spec, const fs::path& path) {
  io::GgufWriter w;
  const std::string a = spec.arch;
  auto set = [&](const std::string& key, io::GgufValue v) {
    if (!spec.drop_keys.count(key)) w.set(key, std::move(v));
  };
  set("general.architecture", a);
  set(a + ".block_count", kLayers);
  set(a + ".context_length", uint32_t{64});
  set(a + ".embedding_length", kEmbd);
  set(a + ".attention.head_count", kHead);
  set(a + ".attention.head_count_kv", kHeadKv);
  set(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  set(a + ".rope.freq_base", 10000.0f);
  set(a + ".vocab_size", kVocab);
  set(a + ".feed_forward_length", kFf);
  if (spec.n_expert > 0) {
    set(a + ".expert_count", spec.n_expert);
    set(a + ".expert_used_count", spec.n_expert_used);
    if (a == "qwen3moe") set(a + ".expert_feed_forward_length", kFf);
  }
  std::vector<std::string> names;
  auto add = [&](const std::string& name, std::vector<uint64_t> ne) {
    if (spec.drop_tensors.count(name)) return;
    if (auto it = spec.reshape.find(name); it != spec.reshape.end()) ne = it->second;
    w.add_tensor(name, GgmlType::F32, ne);
    names.push_back(name);
  };
  add("token_embd.weight", {kEmbd, kVocab});
  add("output_norm.weight", {kEmbd});
  add("output.weight", {kEmbd, kVocab});
  for (uint32_t il = 0; il < kLayers; ++il) {
    auto n = [&](const char* suffix) { return fmt::format("blk.{}.{}.weight", il, suffix); };
    add(n("attn_norm"), {kEmbd});
    add(n("attn_q"), {kEmbd, kHead * kHeadDim});
    add(n("attn_k"), {kEmbd, kHeadKv * kHeadDim});
    add(n("attn_v"), {kEmbd, kHeadKv * kHeadDim});
    add(n("attn_output"), {kHead * kHeadDim, kEmbd});
    if (a == "qwen3moe") {
      add(n("attn_q_norm"), {kHeadDim});
      add(n("attn_k_norm"), {kHeadDim});
    }
    add(n("ffn_norm"), {kEmbd});
    if (spec.n_expert > 0) {
      add(n("ffn_gate_inp"), {kEmbd, spec.n_expert});
      add(n("ffn_gate_exps"), {kEmbd, kFf, spec.n_expert});
      add(n("ffn_up_exps"), {kEmbd, kFf, spec.n_expert});
      add(n("ffn_down_exps"), {kFf, kEmbd, spec.n_expert});
    } else {
      add(n("ffn_gate"), {kEmbd, kFf});
      add(n("ffn_up"), {kEmbd, kFf});
      add(n("ffn_down"), {kFf, kEmbd});
    }
  }
  w.write(path.string(), [&](size_t i, std::span<std::byte> out) { fill_values(names[i], out); });
  return path;
}

// Loads and expects an Error of `kind` whose message contains every needle.
void expect_load_error(const fs::path& path, ErrorKind kind, std::vector<std::string> needles) {
  try {
    Model::load(path.string());
    ADD_FAILURE() << "loading " << path << " did not fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message '" << e.what() << "' does not name '" << n << "'";
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line";
  }
}

TEST(ModelConfig, NameTables) {
  EXPECT_EQ(key_name(Key::kBlockCount, "qwen3moe"), "qwen3moe.block_count");
  EXPECT_EQ(key_name(Key::kArchitecture, "llama"), "general.architecture");
  EXPECT_EQ(tensor_name(TensorId::kFfnDownExps, 7), "blk.7.ffn_down_exps.weight");
  EXPECT_EQ(tensor_name(TensorId::kOutput), "output.weight");
  int stacked = 0;
  for (const TensorSpec& t : kTensorTable) stacked += t.stacked_experts;
  EXPECT_EQ(stacked, 3);  // gate, up, down
}

TEST(ModelConfig, TinyQwen3moeBindsEveryWeight) {
  TmpDir tmp;
  const Model m = Model::load(write_tiny({}, tmp / "ok.gguf").string());
  const ModelConfig& c = m.config();
  EXPECT_EQ(c.arch, Arch::kQwen3Moe);
  EXPECT_EQ(c.n_layer, kLayers);
  EXPECT_EQ(c.n_embd, kEmbd);
  EXPECT_EQ(c.n_vocab, kVocab);
  EXPECT_EQ(c.n_head(1), kHead);
  EXPECT_EQ(c.n_head_kv(1), kHeadKv);
  EXPECT_EQ(c.head_dim_k, kHeadDim);
  EXPECT_EQ(c.n_rot, kHeadDim);
  EXPECT_EQ(c.rope_type, RopeType::kNeox);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.n_expert, 4u);
  EXPECT_EQ(c.n_expert_used, 2u);
  EXPECT_EQ(c.n_ff_exp, kFf);
  EXPECT_TRUE(c.is_moe(0));
  EXPECT_FALSE(m.weights().output_tied);

  // Expert slices: three contiguous byte ranges per expert, back to back.
  const ExpertStack& x = m.weights().layers[1].experts;
  const uint64_t per = uint64_t{kEmbd} * kFf * sizeof(float);
  for (uint32_t e = 0; e < 4; ++e) {
    const ExpertSlice s = x.expert_slice(e);
    EXPECT_EQ(s.gate.n_bytes, per);
    EXPECT_EQ(s.up.n_bytes, per);
    EXPECT_EQ(s.down.n_bytes, per);
    EXPECT_EQ(s.gate.file_offset, x.gate.file_offset + e * per);
    EXPECT_EQ(s.down.file_offset, x.down.file_offset + e * per);
    EXPECT_EQ(s.up.data, x.up.data + e * per);
    EXPECT_EQ(s.n_bytes(), 3 * per);
    const MatrixRef g = x.gate_matrix(s);
    EXPECT_EQ(g.n_rows, kFf);
    EXPECT_EQ(g.n_cols, kEmbd);
    const MatrixRef d = x.down_matrix(s);
    EXPECT_EQ(d.n_rows, kEmbd);
    EXPECT_EQ(d.n_cols, kFf);
  }
}

TEST(ModelConfig, MissingTensorIsNamed) {
  TmpDir tmp;
  TinySpec s;
  s.drop_tensors = {"blk.1.attn_k.weight"};
  expect_load_error(write_tiny(s, tmp / "m.gguf"), ErrorKind::kNotFound,
                    {"blk.1.attn_k.weight", "missing", "m.gguf"});
}

TEST(ModelConfig, WrongShapeNamesTensorAndBothShapes) {
  TmpDir tmp;
  TinySpec s;
  s.reshape["blk.0.ffn_down_exps.weight"] = {kFf, kEmbd, 3};
  expect_load_error(write_tiny(s, tmp / "m.gguf"), ErrorKind::kBadFile,
                    {"blk.0.ffn_down_exps.weight", "[32, 64, 3]", "[32, 64, 4]"});
  TinySpec q;
  q.reshape["blk.1.attn_q_norm.weight"] = {kHeadDim * 2};
  expect_load_error(write_tiny(q, tmp / "q.gguf"), ErrorKind::kBadFile,
                    {"blk.1.attn_q_norm.weight", "[32]", "[16]"});
}

TEST(ModelConfig, MissingKeyIsNamed) {
  TmpDir tmp;
  for (const char* key : {"qwen3moe.expert_feed_forward_length", "qwen3moe.block_count",
                          "qwen3moe.attention.layer_norm_rms_epsilon", "qwen3moe.expert_count"}) {
    TinySpec s;
    s.drop_keys = {key};
    expect_load_error(write_tiny(s, tmp / "k.gguf"), ErrorKind::kNotFound, {key});
  }
}

TEST(ModelConfig, UnknownArchitectureIsNamed) {
  TmpDir tmp;
  TinySpec s;
  s.arch = "gpt2";
  expect_load_error(write_tiny(s, tmp / "a.gguf"), ErrorKind::kUnsupported, {"gpt2"});
}

TEST(ModelConfig, BadValuesAreRejected) {
  TmpDir tmp;
  TinySpec s;
  s.n_expert_used = 5;  // > expert_count 4
  expect_load_error(write_tiny(s, tmp / "b.gguf"), ErrorKind::kBadFile, {"expert_used_count"});
}

TEST(ModelConfig, MissingOutputTiesToEmbeddings) {
  TmpDir tmp;
  TinySpec s;
  s.drop_tensors = {"output.weight"};
  const Model m = Model::load(write_tiny(s, tmp / "t.gguf").string());
  EXPECT_TRUE(m.weights().output_tied);
  EXPECT_EQ(m.weights().output.data, m.weights().token_embd.data);
}

// Logits of `tokens` through a fresh Forward.
std::vector<float> logits_of(const Model& m, const std::vector<int32_t>& tokens, int threads,
                             uint32_t n_ubatch = 64) {
  ForwardOptions o;
  o.n_ctx = 64;
  o.n_threads = threads;
  o.n_ubatch = n_ubatch;
  Forward f(m, o);
  std::vector<float> out(tokens.size() * m.config().n_vocab);
  f.prefill(tokens, out.data());
  return out;
}

// A dense llama FFN and the same weights as a one-expert MoE take one code path: bit-identical.
TEST(ModelConfig, DenseFfnIsOneExpertMoe) {
  TmpDir tmp;
  TinySpec dense;
  dense.arch = "llama";
  dense.n_expert = 0;
  TinySpec moe1;
  moe1.arch = "llama";
  moe1.n_expert = 1;
  moe1.n_expert_used = 1;
  const Model d = Model::load(write_tiny(dense, tmp / "dense.gguf").string());
  const Model e = Model::load(write_tiny(moe1, tmp / "moe1.gguf").string());
  EXPECT_FALSE(d.config().is_moe(0));
  EXPECT_EQ(d.config().layer_n_expert(0), 1u);
  EXPECT_EQ(d.config().rope_type, RopeType::kNorm);
  EXPECT_TRUE(e.config().is_moe(0));
  const std::vector<int32_t> tokens = {1, 5, 9, 39, 0, 17, 17, 3};
  const std::vector<float> a = logits_of(d, tokens, 2);
  const std::vector<float> b = logits_of(e, tokens, 2);
  for (float v : a) ASSERT_TRUE(std::isfinite(v));
  EXPECT_TRUE(a == b);
}

TEST(ModelConfig, ThreadsChunksAndDecodeAgreeOnTinyModel) {
  TmpDir tmp;
  const Model m = Model::load(write_tiny({}, tmp / "t.gguf").string());
  const std::vector<int32_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8};
  const std::vector<float> base = logits_of(m, tokens, 1);
  EXPECT_TRUE(base == logits_of(m, tokens, 3));
  EXPECT_TRUE(base == logits_of(m, tokens, 2, 4));
  ForwardOptions o;
  o.n_ctx = 64;
  o.n_threads = 2;
  Forward f(m, o);
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto row = f.decode(tokens[i]);
    ASSERT_TRUE(std::equal(row.begin(), row.end(), base.begin() + i * kVocab)) << "position " << i;
  }
}

// set_prefill_progress: one call per chunk of a prefill longer than a chunk (tokens done, tokens
// of the call), none for a single chunk; the logits do not change.
TEST(ModelConfig, PrefillProgressPerChunk) {
  TmpDir tmp;
  const Model m = Model::load(write_tiny({}, tmp / "t.gguf").string());
  const std::vector<int32_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8};
  ForwardOptions o;
  o.n_ctx = 64;
  o.n_threads = 2;
  o.n_ubatch = 4;
  Forward f(m, o);
  std::vector<std::pair<size_t, size_t>> calls;
  f.set_prefill_progress([&](size_t done, size_t total) { calls.emplace_back(done, total); });
  std::vector<float> out(tokens.size() * kVocab);
  f.prefill(tokens, out.data());
  const std::vector<std::pair<size_t, size_t>> want = {
      {4, 19}, {8, 19}, {12, 19}, {16, 19}, {19, 19}};
  EXPECT_EQ(calls, want);
  EXPECT_TRUE(out == logits_of(m, tokens, 2, 4));
  calls.clear();
  f.prefill(std::vector<int32_t>{1, 2, 3});  // one chunk
  EXPECT_TRUE(calls.empty());
}

// The KV cache's pages are faulted in ahead of decode an extent at a time (Forward::fault_ahead);
// faulting must keep rows already there: rows restored past the first extent (a prompt cache, a
// stash) continue exactly as the cache that computed them.
TEST(ModelConfig, FaultingAheadKeepsRestoredRows) {
  TmpDir tmp;
  const Model m = Model::load(write_tiny({}, tmp / "t.gguf").string());
  ForwardOptions o;
  o.n_ctx = 9000;
  o.n_threads = 2;
  o.n_ubatch = 512;
  std::mt19937 rng(11);
  std::vector<int32_t> tokens(5000);
  for (int32_t& t : tokens) t = int32_t(rng() % kVocab);
  Forward a(m, o);
  a.prefill(tokens);
  std::vector<std::byte> rows;
  a.kv().copy_rows(5000, rows);
  Forward b(m, o);  // faults positions [0, 4096) only
  b.kv().restore_rows(5000, rows);
  b.restored(5000);
  for (int32_t t : {3, 7, 1}) {  // decode faults [4096, 8192) ahead, over restored rows
    const std::span<const float> la = a.decode(t), lb = b.decode(t);
    ASSERT_TRUE(std::equal(la.begin(), la.end(), lb.begin())) << "token " << t;
  }
}

// Scratch is planned up front: steady-state decode allocates nothing (prefill of a chunk no
// larger than n_ubatch neither).
TEST(ModelConfig, DecodeDoesNotAllocate) {
  TmpDir tmp;
  const Model m = Model::load(write_tiny({}, tmp / "t.gguf").string());
  ForwardOptions o;
  o.n_ctx = 64;
  o.n_threads = 2;
  o.n_ubatch = 16;
  Forward f(m, o);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  f.prefill(prompt);
  f.decode(9);  // warm-up
  g_allocs = 0;
  g_count_allocs = true;
  std::vector<std::string> probe(3, std::string(100, 'x'));  // the counter counts
  g_count_allocs = false;
  ASSERT_GT(g_allocs.load(), 0) << probe.size();
  g_allocs = 0;
  g_count_allocs = true;
  f.prefill(prompt);
  for (int32_t t = 0; t < 20; ++t) f.decode(t);
  g_count_allocs = false;
  EXPECT_EQ(g_allocs.load(), 0);
}

TEST(ModelConfig, BadTokensAndFullContextAreErrors) {
  TmpDir tmp;
  const Model m = Model::load(write_tiny({}, tmp / "t.gguf").string());
  ForwardOptions o;
  o.n_ctx = 4;
  Forward f(m, o);
  const std::vector<int32_t> bad = {1, int32_t{kVocab}};
  try {
    f.prefill(bad);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadValue);
    EXPECT_NE(std::string(e.what()).find("40"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.decode(-1), Error);
  EXPECT_EQ(f.n_past(), 0u);
  const std::vector<int32_t> five = {1, 2, 3, 4, 5};
  EXPECT_THROW(f.prefill(five), Error);
  f.prefill(std::vector<int32_t>{1, 2, 3, 4});
  EXPECT_THROW(f.decode(1), Error);
  f.reset();
  EXPECT_NO_THROW(f.decode(1));
}

// The fixtures' configs read as MODEL.json describes them.
TEST(ModelConfig, FixtureConfigs) {
  const fs::path root = STRATA_FIXTURES_DIR;
  if (!fs::exists(root)) GTEST_SKIP() << "fixtures not found at " << root;
  for (const char* name : {"tiny-qwen3moe", "tiny-mixtral"}) {
    std::ifstream in(root / name / "MODEL.json");
    const auto j = nlohmann::json::parse(in);
    const auto& c = j["config"];
    for (const auto& [variant, info] : j["variants"].items()) {
      const fs::path p = root / name / info["file"].get<std::string>();
      if (!fs::exists(p)) continue;
      SCOPED_TRACE(p.string());
      const Model m = Model::load(p.string());
      const ModelConfig& mc = m.config();
      EXPECT_EQ(mc.n_layer, c["n_layer"].get<uint32_t>());
      EXPECT_EQ(mc.n_embd, c["d"].get<uint32_t>());
      EXPECT_EQ(mc.n_head(0), c["n_head"].get<uint32_t>());
      EXPECT_EQ(mc.n_head_kv(0), c["n_head_kv"].get<uint32_t>());
      EXPECT_EQ(mc.head_dim_k, c["hd"].get<uint32_t>());
      EXPECT_EQ(mc.n_expert, c["n_exp"].get<uint32_t>());
      EXPECT_EQ(mc.n_expert_used, c["k"].get<uint32_t>());
      EXPECT_EQ(mc.n_ff_exp, c["ff"].get<uint32_t>());
      EXPECT_EQ(mc.n_vocab, c["vocab"].get<uint32_t>());
      EXPECT_EQ(mc.n_ctx_train, c["ctx"].get<uint32_t>());
      EXPECT_FLOAT_EQ(mc.rope_freq_base, c["rope_base"].get<float>());
      EXPECT_FLOAT_EQ(mc.norm_eps, c["eps"].get<float>());
      EXPECT_EQ(mc.rope_type,
                std::string(name) == "tiny-mixtral" ? RopeType::kNorm : RopeType::kNeox);
      EXPECT_FALSE(m.weights().output_tied);
      std::printf("  %s: %s\n", p.filename().c_str(), mc.describe().c_str());
    }
  }
}

}  // namespace
