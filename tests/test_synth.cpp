// `strata synth` generator (engine/synth.h): determinism, the GGUF it writes (keys, shapes, types),
// the tokenizer's consistency, the massive-activation structure, the router Monte-Carlo Gini, and
// the progress bar's non-terminal mode (tools/progress.h). Tiny preset only, to stay fast.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <thread>
#include <unordered_set>

#include "engine/forward.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "engine/tokenizer.h"
#include "io/check.h"
#include "io/gguf.h"
#include "kernels/quant.h"
#include "tier_test_util.h"
#include "tools/progress.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::engine;

namespace {

SynthOptions tiny(uint64_t seed, SynthDist dist = SynthDist::kUniform,
                  std::optional<GgmlType> type = std::nullopt) {
  SynthOptions o;
  o.preset = *find_synth_preset("tiny");
  o.seed = seed;
  o.dist = dist;
  o.expert_type = type;
  o.n_threads = 2;
  return o;
}

// One model shared by the read-back tests (building it is the slow part).
struct Tiny {
  SynthModel model{tiny(7)};
  std::vector<std::byte> bytes = model.to_bytes();
  io::GgufFile file = io::GgufFile::parse("tiny.gguf", bytes);
};
const Tiny& tiny_model() {
  static const Tiny t;
  return t;
}

std::vector<float> dequant(const io::GgufFile& f, const io::GgufTensorInfo& t, uint64_t row) {
  std::vector<float> out(t.ne[0]);
  kernels::dequantize_row(t.type, f.tensor_data(t) + row * t.row_bytes(), out.data(),
                          static_cast<int64_t>(t.ne[0]));
  return out;
}

size_t tensor_index(const SynthModel& m, const std::string& name) {
  const auto& ts = m.writer().tensors();
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i].name == name) return i;
  ADD_FAILURE() << "no tensor " << name;
  return 0;
}

double rms_of_rows(const io::GgufFile& f, const io::GgufTensorInfo& t, uint64_t n_rows) {
  double ss = 0;
  uint64_t n = 0;
  for (uint64_t r = 0; r < n_rows; ++r)
    for (float v : dequant(f, t, r)) {
      ss += double(v) * v;
      ++n;
    }
  return std::sqrt(ss / n);
}

}  // namespace

TEST(Synth, PresetsExist) {
  for (const char* name : {"tiny", "demo", "qwen3-30b-a3b"})
    ASSERT_NE(find_synth_preset(name), nullptr) << name;
  EXPECT_EQ(find_synth_preset("nope"), nullptr);
  const SynthPreset& q = *find_synth_preset("qwen3-30b-a3b");
  EXPECT_EQ(q.n_layer, 48u);
  EXPECT_EQ(q.n_embd, 2048u);
  EXPECT_EQ(q.n_head, 32u);
  EXPECT_EQ(q.n_head_kv, 4u);
  EXPECT_EQ(q.head_dim, 128u);
  EXPECT_EQ(q.n_expert, 128u);
  EXPECT_EQ(q.n_expert_used, 8u);
  EXPECT_EQ(q.n_ff_exp, 768u);
  EXPECT_GE(q.n_vocab, 32768u);
}

TEST(Synth, SameSeedSameBytesOtherSeedOtherBytes) {
  const auto& a = tiny_model().bytes;
  SynthOptions o = tiny(7);
  o.n_threads = 1;  // the bytes must not depend on the thread count
  const auto b = SynthModel(o).to_bytes();
  const auto c = SynthModel(tiny(8)).to_bytes();
  EXPECT_GT(a.size(), 1u << 20);
  EXPECT_LT(a.size(), 16u << 20);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == c);
}

TEST(Synth, WriteMatchesToBytesAndLeavesNoTemp) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("strata_synth_{}", ::getpid());
  fs::create_directories(dir);
  const std::string path = (dir / "tiny.gguf").string();
  uint64_t last = 0, total = 0;
  tiny_model().model.write(path, [&](uint64_t d, uint64_t t) {
    EXPECT_GE(d, last);
    last = d;
    total = t;
  });
  EXPECT_EQ(total, tiny_model().bytes.size());
  EXPECT_EQ(fs::file_size(path), tiny_model().bytes.size());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const io::GgufFile f = io::GgufFile::open(path);
  EXPECT_TRUE(std::equal(f.bytes().begin(), f.bytes().end(), tiny_model().bytes.begin()));
  fs::remove_all(dir);
}

TEST(Synth, KeysShapesAndTypes) {
  const io::GgufFile& f = tiny_model().file;
  const SynthPreset& p = *find_synth_preset("tiny");
  EXPECT_EQ(f.get_string("general.architecture"), "qwen3moe");
  EXPECT_EQ(f.get_uint("general.file_type"), 2u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.get_uint("qwen3moe.block_count"), p.n_layer);
  EXPECT_EQ(f.get_uint("qwen3moe.context_length"), p.n_ctx);
  EXPECT_EQ(f.get_uint("qwen3moe.embedding_length"), p.n_embd);
  EXPECT_EQ(f.get_uint("qwen3moe.feed_forward_length"), p.n_ff);
  EXPECT_EQ(f.get_uint("qwen3moe.attention.head_count"), p.n_head);
  EXPECT_EQ(f.get_uint("qwen3moe.attention.head_count_kv"), p.n_head_kv);
  EXPECT_EQ(f.get_uint("qwen3moe.attention.key_length"), p.head_dim);
  EXPECT_EQ(f.get_uint("qwen3moe.attention.value_length"), p.head_dim);
  EXPECT_DOUBLE_EQ(f.get_double("qwen3moe.rope.freq_base"), 1e6);
  EXPECT_NEAR(f.get_double("qwen3moe.attention.layer_norm_rms_epsilon"), 1e-6, 1e-12);
  EXPECT_EQ(f.get_uint("qwen3moe.expert_count"), p.n_expert);
  EXPECT_EQ(f.get_uint("qwen3moe.expert_used_count"), p.n_expert_used);
  EXPECT_EQ(f.get_uint("qwen3moe.expert_feed_forward_length"), p.n_ff_exp);
  EXPECT_EQ(f.get_string("strata.synth.preset"), "tiny");
  EXPECT_EQ(f.get_uint("strata.synth.seed"), 7u);
  EXPECT_EQ(f.get_array("strata.synth.gini_target").items.size(), p.n_layer);

  struct Want {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
  };
  const std::vector<Want> want = {
      {"token_embd.weight", GgmlType::Q8_0, {256, 1000}},
      {"output.weight", GgmlType::Q6_K, {256, 1000}},
      {"output_norm.weight", GgmlType::F32, {256}},
      {"blk.3.attn_norm.weight", GgmlType::F32, {256}},
      {"blk.3.attn_q.weight", GgmlType::Q4_0, {256, 256}},
      {"blk.3.attn_k.weight", GgmlType::Q4_0, {256, 128}},
      {"blk.3.attn_v.weight", GgmlType::Q4_0, {256, 128}},
      {"blk.3.attn_q_norm.weight", GgmlType::F32, {64}},
      {"blk.3.attn_k_norm.weight", GgmlType::F32, {64}},
      {"blk.3.attn_output.weight", GgmlType::Q4_0, {256, 256}},
      {"blk.3.ffn_norm.weight", GgmlType::F32, {256}},
      {"blk.3.ffn_gate_inp.weight", GgmlType::F32, {256, 16}},
      {"blk.3.ffn_gate_exps.weight", GgmlType::Q4_0, {256, 128, 16}},
      {"blk.3.ffn_up_exps.weight", GgmlType::Q4_0, {256, 128, 16}},
      {"blk.3.ffn_down_exps.weight", GgmlType::Q4_0, {128, 256, 16}},
  };
  EXPECT_EQ(f.tensors().size(), 3u + 12u * p.n_layer);
  for (const auto& w : want) {
    const io::GgufTensorInfo* t = f.find_tensor(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->type, w.type) << w.name;
    ASSERT_EQ(t->n_dims, w.ne.size()) << w.name;
    for (size_t d = 0; d < w.ne.size(); ++d) EXPECT_EQ(t->ne[d], w.ne[d]) << w.name;
  }
}

TEST(Synth, TokenizerIsConsistent) {
  const io::GgufFile& f = tiny_model().file;
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), std::string(kChatMlTemplate));
  const auto& tokens = f.get_array("tokenizer.ggml.tokens").items;
  const auto& types = f.get_array("tokenizer.ggml.token_type").items;
  const auto& merges = f.get_array("tokenizer.ggml.merges").items;
  ASSERT_EQ(tokens.size(), 1000u);
  ASSERT_EQ(types.size(), tokens.size());
  std::unordered_set<std::string> set;
  for (const auto& t : tokens) EXPECT_TRUE(set.insert(*t.as_string()).second) << *t.as_string();
  for (int b = 0; b < 256; ++b) EXPECT_TRUE(set.count(gpt2_byte_symbol(static_cast<uint8_t>(b))));
  EXPECT_EQ(*tokens[0].as_string(), "!");         // bytes_to_unicode order starts at '!'
  EXPECT_EQ(gpt2_byte_symbol(' '), "\xc4\xa0");   // Ġ
  EXPECT_EQ(gpt2_byte_symbol('\n'), "\xc4\x8a");  // Ċ
  const uint64_t eos = f.get_uint("tokenizer.ggml.eos_token_id");
  const uint64_t bos = f.get_uint("tokenizer.ggml.bos_token_id");
  EXPECT_EQ(*tokens[eos].as_string(), "<|im_end|>");
  EXPECT_EQ(*tokens[bos].as_string(), "<|endoftext|>");
  EXPECT_EQ(*tokens[998].as_string(), "<|im_start|>");
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(*types[i].as_int(), i >= 997 ? 3 : 1) << i;
  // Every merge joins two existing tokens into an existing token; ranks follow token order.
  EXPECT_GE(merges.size(), 1000u - 256 - 3);
  for (const auto& m : merges) {
    const std::string& s = *m.as_string();
    const size_t sp = s.find(' ');
    ASSERT_NE(sp, std::string::npos) << s;
    ASSERT_EQ(s.find(' ', sp + 1), std::string::npos) << s;
    const std::string l = s.substr(0, sp), r = s.substr(sp + 1);
    EXPECT_TRUE(set.count(l) && set.count(r) && set.count(l + r)) << s;
  }
  EXPECT_GT(f.get_uint("strata.synth.tokenizer_learned_merges"), 500u);  // from the licenses
}

TEST(Synth, TokenizerWorksWithTheEngineTokenizer) {
  // The file's vocabulary through strata's llama.cpp-compatible tokenizer: text round-trips,
  // learned merges compress English, and the ChatML markers are single control tokens.
  const Tokenizer tok = Tokenizer::from_gguf(tiny_model().file);
  const std::string text =
      "This License applies to any program or other work which contains a notice placed by the "
      "copyright holder. Version 2, 1991 \xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 "
      "\xf0\x9f\x98\x80\n\tdone.";
  const auto ids = tok.tokenize(text, true, true);
  EXPECT_EQ(tok.detokenize(ids, false, false), text);
  EXPECT_LT(ids.size(), text.size() / 2);  // ~1000-token vocab learned from license texts
  const auto chat = tok.tokenize("<|im_start|>user\nhi<|im_end|>", false, true);
  ASSERT_GE(chat.size(), 3u);
  EXPECT_EQ(chat.front(), 998);
  EXPECT_EQ(chat.back(), 999);
}

TEST(Synth, LargeVocabAndFallbackCorpus) {
  const BpeVocab v = build_bpe_vocab(8192, "/usr/share/common-licenses");
  ASSERT_EQ(v.tokens.size(), 8192u);
  EXPECT_EQ(v.merges.size() >= 8192u - 259, true);
  std::unordered_set<std::string> set(v.tokens.begin(), v.tokens.end());
  EXPECT_EQ(set.size(), v.tokens.size());
  for (const auto& m : v.merges) {
    const size_t sp = m.find(' ');
    EXPECT_TRUE(set.count(m.substr(0, sp)) && set.count(m.substr(sp + 1)) &&
                set.count(m.substr(0, sp) + m.substr(sp + 1)))
        << m;
  }
  const BpeVocab fb = build_bpe_vocab(600, "/nonexistent/strata");
  EXPECT_EQ(fb.tokens.size(), 600u);
  EXPECT_GT(fb.n_learned_merges, 50u);
}

TEST(Synth, MassiveActivationStructure) {
  const io::GgufFile& f = tiny_model().file;
  const auto* embd = f.find_tensor("token_embd.weight");
  for (uint64_t t : {0ull, 1ull, 500ull, 999ull}) {
    const auto row = dequant(f, *embd, t);
    EXPECT_EQ(row[kMassiveDim], kMassiveValue) << t;
  }
  EXPECT_NEAR(rms_of_rows(f, *embd, 64), 1.0, 0.1);  // includes the massive dim (~1.07)
  const auto* out = f.find_tensor("output.weight");
  for (uint64_t t = 0; t < 1000; t += 37) EXPECT_EQ(dequant(f, *out, t)[kMassiveDim], 0.0f) << t;
  // Only the router reads the massive dimension.
  for (const char* name : {"blk.2.attn_q.weight", "blk.2.attn_k.weight", "blk.2.attn_v.weight",
                           "blk.2.ffn_gate_exps.weight", "blk.2.ffn_up_exps.weight"}) {
    const auto* t = f.find_tensor(name);
    for (uint64_t r = 0; r < t->ne[1] * t->ne[2]; r += 7)
      ASSERT_EQ(dequant(f, *t, r)[kMassiveDim], 0.0f) << name << " row " << r;
  }
  const auto* router = f.find_tensor("blk.2.ffn_gate_inp.weight");
  EXPECT_NE(reinterpret_cast<const float*>(f.tensor_data(*router))[kMassiveDim], 0.0f);
  for (int l = 0; l < 4; ++l) {
    const auto* down = f.find_tensor(fmt::format("blk.{}.ffn_down_exps.weight", l));
    for (uint64_t e = 0; e < 16; ++e) {
      for (float v : dequant(f, *down, e * 256 + kMassiveDim)) ASSERT_EQ(v, 0.0f);
      const auto next = dequant(f, *down, e * 256 + kMassiveDim + 1);
      EXPECT_GT(std::count_if(next.begin(), next.end(), [](float v) { return v != 0; }), 64);
    }
    const auto* wo = f.find_tensor(fmt::format("blk.{}.attn_output.weight", l));
    for (float v : dequant(f, *wo, kMassiveDim)) ASSERT_EQ(v, 0.0f);
  }
}

TEST(Synth, WeightScalesAreSane) {
  // Weights ~ N(0, 1/fan_in); residual writers scaled down by sqrt(2 n_layer).
  auto check = [](const SynthModel& m, const char* what) {
    const auto bytes = m.to_bytes();
    const io::GgufFile f = io::GgufFile::parse("t.gguf", bytes);
    const auto* gate = f.find_tensor("blk.1.ffn_gate_exps.weight");
    EXPECT_NEAR(rms_of_rows(f, *gate, 256) * 16.0, 1.0, 0.1) << what;
    // Centered: a wrong Q4_K scale/min packing would shift the mean by whole steps.
    double sum = 0;
    for (uint64_t r = 0; r < 256; ++r)
      for (float v : dequant(f, *gate, r)) sum += v;
    EXPECT_LT(std::abs(sum / (256.0 * 256)), 0.02 / 16) << what;
    for (uint64_t r = 0; r < 256; r += 5)
      EXPECT_EQ(dequant(f, *gate, r)[kMassiveDim], 0.0f) << what;
    const auto* q = f.find_tensor("blk.1.attn_q.weight");
    EXPECT_NEAR(rms_of_rows(f, *q, 256) * 16.0, 1.0, 0.1) << what;
    const auto* down = f.find_tensor("blk.1.ffn_down_exps.weight");
    const double want = 1.0 / std::sqrt(128.0) / std::sqrt(8.0);
    EXPECT_NEAR(rms_of_rows(f, *down, 256) / want, 1.0, 0.1) << what;  // includes one zero row
    const auto* out = f.find_tensor("output.weight");
    EXPECT_NEAR(rms_of_rows(f, *out, 64) * 16.0, 1.0, 0.1) << what;
  };
  check(SynthModel(tiny(3, SynthDist::kGaussian)), "gaussian Q4_0");
  const SynthModel k(tiny(3, SynthDist::kUniform, GgmlType::Q4_K));
  EXPECT_EQ(k.writer().tensors()[tensor_index(k, "blk.0.ffn_gate_exps.weight")].type,
            GgmlType::Q4_K);
  // ne[0] = 128 is no multiple of 256: the down projection falls back to Q4_0.
  EXPECT_EQ(k.writer().tensors()[tensor_index(k, "blk.0.ffn_down_exps.weight")].type,
            GgmlType::Q4_0);
  check(k, "uniform Q4_K");
  check(SynthModel(tiny(3, SynthDist::kGaussian, GgmlType::Q8_0)), "gaussian Q8_0");
  const SynthModel iq4(tiny(3, SynthDist::kUniform, GgmlType::IQ4_XS));
  EXPECT_EQ(iq4.writer().tensors()[tensor_index(iq4, "blk.0.ffn_gate_exps.weight")].type,
            GgmlType::IQ4_XS);
  check(iq4, "IQ4_XS");
  for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q4_1,
                     GgmlType::Q5_0, GgmlType::Q5_1}) {
    const SynthModel m(tiny(3, SynthDist::kUniform, t));
    EXPECT_EQ(m.writer().tensors()[tensor_index(m, "blk.0.ffn_gate_exps.weight")].type, t);
    check(m, std::string(ggml_type_name(t)).c_str());
  }
}

TEST(Synth, GaussianCodesAreMoreCompressibleThanUniform) {
  // Empirical entropy of the 4-bit codes in an expert tensor: uniform log2(15), gaussian ~3.
  auto entropy = [](const SynthModel& m) {
    const size_t i = tensor_index(m, "blk.0.ffn_gate_exps.weight");
    const auto& t = m.writer().tensors()[i];
    std::vector<std::byte> buf(t.n_bytes);
    m.fill(i, buf);
    std::array<double, 16> hist{};
    for (uint64_t b = 0; b < t.n_bytes / 18; ++b)
      for (int i = 2; i < 18; ++i) {
        const auto v = static_cast<uint8_t>(buf[b * 18 + i]);
        ++hist[v & 15];
        ++hist[v >> 4];
      }
    double n = 0, h = 0;
    for (double c : hist) n += c;
    for (double c : hist)
      if (c > 0) h -= c / n * std::log2(c / n);
    return h;
  };
  EXPECT_GT(entropy(SynthModel(tiny(5))), 3.85);  // log2(15): codes 1..15
  EXPECT_LT(entropy(SynthModel(tiny(5, SynthDist::kGaussian))), 3.4);
}

TEST(Synth, RouterGiniOnCalibratedRouters) {
  const Tiny& t = tiny_model();
  const SynthPreset& p = *find_synth_preset("tiny");
  const auto& targets = t.file.get_array("strata.synth.gini_target").items;
  for (uint32_t l = 0; l < p.n_layer; ++l) {
    const SynthLayerRouting& r = t.model.routing()[l];
    EXPECT_GE(r.gini_target, 0.5f);
    EXPECT_LE(r.gini_target, 0.7f);
    EXPECT_FLOAT_EQ(*targets[l].as_double(), r.gini_target);
    EXPECT_GE(r.gini_mc, 0.45f) << l;
    EXPECT_LE(r.gini_mc, 0.75f) << l;
    EXPECT_NEAR(r.gini_mc, r.gini_target, 0.05) << l;
    // The same simulation through the router weights as written (full matrix-vector products).
    const auto* router = t.file.find_tensor(fmt::format("blk.{}.ffn_gate_inp.weight", l));
    const auto* norm = t.file.find_tensor(fmt::format("blk.{}.ffn_norm.weight", l));
    const auto* rp = reinterpret_cast<const float*>(t.file.tensor_data(*router));
    const auto* np = reinterpret_cast<const float*>(t.file.tensor_data(*norm));
    RouterSim sim{p.n_embd,      p.n_expert,  p.n_expert_used, kMassiveDim,
                  kMassiveValue, r.resid_std, p.rms_eps};
    const auto counts =
        simulate_router(sim, {rp, size_t(p.n_embd) * p.n_expert}, {np, p.n_embd}, 4096, 99);
    const double g = gini(counts);
    EXPECT_GE(g, 0.45) << l;
    EXPECT_LE(g, 0.75) << l;
    EXPECT_NEAR(g, r.gini_target, 0.08) << l;
  }
}

TEST(Synth, EngineRoutingGiniNearTargets) {
  // The real forward pass (engine/forward.h) on the tiny model: routing skew per layer lands near
  // the calibrated targets, so the Monte-Carlo's assumptions hold for these weights.
  const Tiny& t = tiny_model();
  const Model model = Model::from_file(io::GgufFile::parse("tiny.gguf", t.bytes));
  constexpr uint32_t kTokens = 512;
  std::vector<int32_t> ids(kTokens);
  for (uint32_t i = 0; i < kTokens; ++i) ids[i] = static_cast<int32_t>((i * 7919 + 13) % 997);
  ForwardOptions fo;
  fo.n_ctx = kTokens;
  fo.n_threads = 2;
  Forward fwd(model, fo);
  RoutingTrace trace;
  trace.reset(model.config().n_layer, model.config().n_expert, model.config().n_expert_used);
  fwd.prefill(ids, nullptr, &trace);
  for (uint32_t l = 0; l < trace.n_layer; ++l) {
    std::vector<uint64_t> counts(trace.n_expert, 0);
    for (uint32_t p = 0; p < trace.n_pos; ++p)
      for (uint32_t j = 0; j < trace.k; ++j) ++counts[trace.topk_at(l, p)[j]];
    const double g = gini(counts);
    EXPECT_GE(g, 0.45) << l;
    EXPECT_LE(g, 0.75) << l;
    EXPECT_NEAR(g, t.model.routing()[l].gini_target, 0.08) << l;
  }
}

TEST(Synth, GiniFormula) {
  const std::vector<uint64_t> uniform(8, 5);
  EXPECT_NEAR(gini(uniform), 0.0, 1e-12);
  std::vector<uint64_t> one(8, 0);
  one[3] = 10;
  EXPECT_NEAR(gini(one), 1.0 - 1.0 / 8, 1e-12);
}

TEST(Progress, QuietWhenNotATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    tools::Progress bar("synth tiny", 1000, tools::ProgressUnit::kBytes, f, 0);
    EXPECT_FALSE(bar.is_tty());
    for (uint64_t d = 0; d <= 1000; d += 100) bar.update(d);
    bar.finish();
  }
  std::rewind(f);
  std::string s;
  for (int c; (c = std::fgetc(f)) != EOF;) s += static_cast<char>(c);
  std::fclose(f);
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1) << s;
  EXPECT_EQ(s.rfind("synth tiny: 1.00 KB in ", 0), 0u) << s;
}

TEST(Progress, TerminalRedrawsOneLine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    tools::Progress bar("gen", 2000000000, tools::ProgressUnit::kBytes, f, 1);
    bar.update(500000000);  // within 0.1 s of the start: no bar yet
    EXPECT_EQ(std::ftell(f), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    bar.update(1000000000);
  }  // the destructor finishes
  std::rewind(f);
  std::string s;
  for (int c; (c = std::fgetc(f)) != EOF;) s += static_cast<char>(c);
  std::fclose(f);
  EXPECT_NE(s.find(" 50% 1.00 GB/2.00 GB"), std::string::npos) << s;
  EXPECT_NE(s.find("ETA"), std::string::npos) << s;
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1) << s;
  EXPECT_EQ(tools::human_bytes(17.3e9), "17.3 GB");
  EXPECT_EQ(tools::human_duration(185), "3m05s");
}

// Bad `strata synth` arguments: one line on stderr naming the problem, exit 1, no file written.
TEST(SynthCli, BadArgumentsAreOneLineErrors) {
  namespace fs = std::filesystem;
  using tier_test::run_strata;
  const tier_test::ScratchDir dir("synth_cli");
  const std::string out = (dir / "m.gguf").string();
  struct Case {
    std::string args, says;
  };
  const Case cases[] = {
      {"synth --preset nope --out '" + out + "'", "unknown preset 'nope'"},
      {"synth --preset tiny --type Q9_9 --out '" + out + "'", "--type 'Q9_9'"},
      {"synth --preset tiny --dist wide --out '" + out + "'", "--dist 'wide'"},
      {"synth --preset tiny --out '" + (dir / "missing" / "m.gguf").string() + "'",
       "does not exist"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const tier_test::Result r = run_strata(dir.path(), c.args);
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(out));
  }
  // An existing file needs --force.
  ASSERT_EQ(run_strata(dir.path(), "synth --preset tiny-granitemoe --out '" + out + "'").rc, 0);
  const tier_test::Result again =
      run_strata(dir.path(), "synth --preset tiny-granitemoe --out '" + out + "'");
  EXPECT_EQ(again.rc, 1);
  EXPECT_NE(again.err.find("--force"), std::string::npos) << again.err;
}
