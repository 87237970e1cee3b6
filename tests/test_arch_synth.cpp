// `strata synth` presets of the second-batch architectures: the tiny deepseek2 / gpt-oss /
// qwen2moe / granitemoe / deepseek / dbrx models load with the engine's config and weight binding
// (MLA + YaRN + groups + shared expert + dense lead; sinks + sliding window + biases + MXFP4
// experts; biases + gated shared expert; multipliers + tied head; dense lead + shared experts;
// LayerNorms + fused clamped q/k/v), run finite and the same through decode, chunked prefill and
// any thread count, and route with the calibrated skew; the real-shape presets (deepseek-v2-lite,
// gpt-oss-20b, qwen1.5-moe-a2.7b, deepseek-moe-16b) hold the published models' tensor shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "io/check.h"
#include "io/gguf.h"
#include "kernels/quant.h"

using namespace strata;
using namespace strata::engine;

// Counts heap allocations (on every thread) while g_count_allocs is set.
static std::atomic<bool> g_count_allocs{false};
static std::atomic<long> g_allocs{0};
[[gnu::noinline]] void* operator new(size_t n) {
  if (g_count_allocs.load(std::memory_order_relaxed)) g_allocs.fetch_add(1);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p) noexcept {
  std::free(p);
}
[[gnu::noinline]] void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace {

SynthOptions opts(const char* preset) {
  SynthOptions o;
  o.preset = *find_synth_preset(preset);
  o.seed = 3;
  o.n_threads = 2;
  return o;
}

struct Run {
  std::vector<float> logits;
  RoutingTrace trace;
};

Run run(const Model& m, const std::vector<int32_t>& ids, uint32_t n_ubatch, int threads,
        bool decode) {
  ForwardOptions fo;
  fo.n_ctx = 512;
  fo.n_ubatch = n_ubatch;
  fo.n_threads = threads;
  Forward f(m, fo);
  Run r;
  r.logits.resize(ids.size() * m.config().n_vocab);
  r.trace.reset(m.config().n_layer, m.config().n_expert, m.config().n_expert_used);
  if (decode) {
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto row = f.decode(ids[i], &r.trace);
      std::copy(row.begin(), row.end(), r.logits.begin() + i * m.config().n_vocab);
    }
  } else {
    f.prefill(ids, r.logits.data(), &r.trace);
  }
  return r;
}

void check_tiny(const char* preset) {
  SCOPED_TRACE(preset);
  const SynthModel sm(opts(preset));
  const std::vector<std::byte> bytes = sm.to_bytes();
  const Model m = Model::from_file(io::GgufFile::parse(preset, bytes));
  const ModelConfig& c = m.config();
  std::printf("  %s: %s\n", preset, c.describe().c_str());

  std::vector<int32_t> ids(96);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + 13) % c.n_vocab);
  const Run base = run(m, ids, 512, 2, false);
  for (float v : base.logits) ASSERT_TRUE(std::isfinite(v));
  const Run dec = run(m, ids, 512, 1, true);
  const Run chunked = run(m, ids, 7, 3, false);
  EXPECT_TRUE(base.logits == dec.logits);
  EXPECT_TRUE(base.logits == chunked.logits);
  EXPECT_TRUE(base.trace.same_as(dec.trace));
  EXPECT_TRUE(base.trace.same_as(chunked.trace));

  // Routing is skewed (hot and cold experts) in every MoE layer.
  for (uint32_t l = 0; l < c.n_layer; ++l) {
    if (!c.is_moe(l)) continue;
    std::vector<uint64_t> counts(c.n_expert, 0);
    for (uint32_t p = 0; p < base.trace.n_pos; ++p)
      for (uint32_t j = 0; j < c.n_expert_used; ++j) ++counts[base.trace.topk_at(l, p)[j]];
    const double g = gini(counts);
    std::printf("    layer %u: routing Gini %.3f (target %.3f)\n", l, g,
                sm.routing()[l].gini_target);
    EXPECT_GE(g, 0.3) << l;
    EXPECT_LE(g, 0.9) << l;
  }
}

TEST(ArchSynth, TinyDeepseek2Runs) {
  check_tiny("tiny-deepseek2");
  const SynthModel sm(opts("tiny-deepseek2"));
  const auto bytes = sm.to_bytes();
  const ModelConfig c = load_model_config(io::GgufFile::parse("t", bytes));
  EXPECT_TRUE(c.is_mla());
  EXPECT_EQ(c.gating, GatingType::kSigmoid);
  EXPECT_EQ(c.n_expert_groups, 4u);
  EXPECT_EQ(c.n_layer_dense_lead, 1u);
  EXPECT_EQ(c.n_ff_shexp, 128u);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_NEAR(c.kq_scale, std::pow(1 + 0.1 * std::log(4.0), 2) / std::sqrt(48.0), 1e-6);
}

// qwen2moe, granitemoe, deepseek, dbrx, phimoe and llama (Llama 3.1 rope_freqs) against llama.cpp:
// tests/test_synth_peer.cpp.
TEST(ArchSynth, TinyQwen2MoeRuns) {
  check_tiny("tiny-qwen2moe");
}

TEST(ArchSynth, TinyGraniteMoeRuns) {
  check_tiny("tiny-granitemoe");
}

TEST(ArchSynth, TinyDeepseekRuns) {
  check_tiny("tiny-deepseek");
}

TEST(ArchSynth, TinyDbrxRuns) {
  check_tiny("tiny-dbrx");
}

TEST(ArchSynth, TinyPhiMoeRuns) {
  check_tiny("tiny-phimoe");
}

TEST(ArchSynth, TinyLlama3MoeRuns) {
  check_tiny("tiny-llama3-moe");
}

TEST(ArchSynth, TinyArcticRuns) {
  check_tiny("tiny-arctic");
}

TEST(ArchSynth, TinyGrokRuns) {
  check_tiny("tiny-grok");
  check_tiny("tiny-grok2");
}

TEST(ArchSynth, TinyMinimaxDots1BailingMoe2AndHunyuanRun) {
  check_tiny("tiny-minimax-m2");
  check_tiny("tiny-dots1");
  check_tiny("tiny-bailingmoe2");
  check_tiny("tiny-hunyuan-moe");
}

// ernie4_5-moe: a dense lead layer, then MoE layers with a shared expert and softmax routing
// whose selection adds the bias. Every layer after the lead is MoE (interleave_moe_layer_step 1,
// required: llama.cpp binds expert weights for all of them); another step, or none, is a
// one-line error naming the key.
TEST(ArchSynth, TinyErnieRuns) {
  check_tiny("tiny-ernie4_5-moe");
  const auto bytes = SynthModel(opts("tiny-ernie4_5-moe")).to_bytes();
  const io::GgufFile f = io::GgufFile::parse("t", bytes);
  const ModelConfig c = load_model_config(f);
  EXPECT_FALSE(c.is_moe(0));
  EXPECT_TRUE(c.is_moe(1) && c.is_moe(3));
  EXPECT_TRUE(c.has_shared_experts(1));
  EXPECT_EQ(c.n_ff_shexp, 256u);
  const auto details = c.arch_details();  // (inspect's line: the shared expert's own width)
  EXPECT_NE(std::find(details.begin(), details.end(),
                      std::pair<std::string, std::string>("shared experts", "1 x 256 (resident)")),
            details.end());
  EXPECT_EQ(c.gating, GatingType::kSoftmax);
  EXPECT_TRUE(c.norm_topk_weights);
  EXPECT_EQ(c.rope_type, RopeType::kNorm);
  const Model m = Model::from_file(io::GgufFile::parse("t", bytes));
  EXPECT_TRUE(m.weights().layers[1].exp_probs_b.present());
  const std::string step_key = "ernie4_5-moe.interleave_moe_layer_step";
  for (const std::optional<uint32_t> step :
       {std::optional<uint32_t>(2), std::optional<uint32_t>()}) {
    io::GgufWriter w(f.alignment());
    for (const io::GgufKv& kv : f.metadata())
      if (kv.key != step_key) w.set(kv.key, kv.value);
    if (step) w.set(step_key, *step);
    const auto edited = w.to_bytes([](size_t, std::span<std::byte>) {});
    try {
      (void)load_model_config(io::GgufFile::parse("edited", edited));
      ADD_FAILURE() << "loaded with step " << step.value_or(0);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(step_key), std::string::npos) << e.what();
    }
  }
}

// dots1 and bailingmoe2 run sigmoid routing only (llama.cpp's graphs add the selection bias
// whatever the gating function): another one is a one-line error naming the key.
TEST(ArchSynth, SigmoidArchitecturesRefuseOtherGating) {
  for (const char* preset : {"tiny-dots1", "tiny-bailingmoe2"}) {
    SynthOptions o = opts(preset);
    o.preset.gating = 1;
    const std::vector<std::byte> bytes = SynthModel(o).to_bytes();
    try {
      (void)Model::from_file(io::GgufFile::parse(preset, bytes));
      ADD_FAILURE() << preset << " loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expert_gating_func = 1 is not supported"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ArchSynth, TinyGptOssRuns) {
  check_tiny("tiny-gpt-oss");
  const SynthModel sm(opts("tiny-gpt-oss"));
  const auto bytes = sm.to_bytes();
  const io::GgufFile f = io::GgufFile::parse("t", bytes);
  const ModelConfig c = load_model_config(f);
  EXPECT_EQ(c.n_swa, 16u);
  EXPECT_EQ(c.activation, FfnActivation::kSwigluOai);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_down_exps.weight")->type, GgmlType::MXFP4);
  EXPECT_EQ(f.get_uint("general.file_type"), 38u);
  // MXFP4 weights have the intended scale: rms of a dequantized expert row ~ 1/sqrt(n_embd).
  const io::GgufTensorInfo& t = *f.find_tensor("blk.1.ffn_gate_exps.weight");
  std::vector<float> row(t.ne[0]);
  double ss = 0;
  for (int r = 0; r < 64; ++r) {
    kernels::dequantize_row(GgmlType::MXFP4, f.tensor_data(t) + r * t.row_bytes(), row.data(),
                            int64_t(t.ne[0]));
    for (float v : row) ss += double(v) * v;
  }
  const double rms = std::sqrt(ss / (64.0 * t.ne[0]));
  EXPECT_GT(rms, 0.5 / std::sqrt(double(t.ne[0])));
  EXPECT_LT(rms, 2.0 / std::sqrt(double(t.ne[0])));
}

// Scratch is planned at construction: prefill and decode of MLA, sliding-window/sink attention,
// shared experts (gated too) and biased SwiGLU-OAI experts allocate nothing.
TEST(ArchSynth, DecodeAndPrefillAllocateNothing) {
  for (const char* preset :
       {"tiny-deepseek2", "tiny-gpt-oss", "tiny-qwen2moe", "tiny-granitemoe", "tiny-deepseek",
        "tiny-dbrx", "tiny-phimoe", "tiny-arctic", "tiny-grok", "tiny-grok2"}) {
    SCOPED_TRACE(preset);
    const auto bytes = SynthModel(opts(preset)).to_bytes();
    const Model m = Model::from_file(io::GgufFile::parse(preset, bytes));
    ForwardOptions fo;
    fo.n_ctx = 256;
    fo.n_ubatch = 32;
    fo.n_threads = 2;
    Forward f(m, fo);
    std::vector<int32_t> prompt(40);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(i * 13 % 500);
    f.prefill(prompt);
    f.decode(7);  // warm-up
    f.reset();
    g_allocs = 0;
    g_count_allocs = true;
    f.prefill(prompt);
    for (int32_t t = 0; t < 20; ++t) f.decode(t);
    g_count_allocs = false;
    EXPECT_EQ(g_allocs.load(), 0);
  }
}

// The real-shape presets (~8-12 GB, not generated here): their tensor tables hold the published
// models' shapes (the tiny presets above take the same code paths through the engine).
TEST(ArchSynth, RealShapePresetsHaveTheModelsShapes) {
  using Ne = std::vector<uint64_t>;
  struct Want {
    const char* preset;
    std::vector<std::pair<const char*, Ne>> tensors;
    double min_gb, max_gb;
  };
  const Want wants[] = {
      {"deepseek-v2-lite",
       {{"blk.0.attn_q.weight", {2048, 16 * 192}},
        {"blk.0.attn_kv_a_mqa.weight", {2048, 512 + 64}},
        {"blk.0.attn_k_b.weight", {128, 512, 16}},
        {"blk.0.attn_v_b.weight", {512, 128, 16}},
        {"blk.0.attn_output.weight", {16 * 128, 2048}},
        {"blk.0.ffn_gate.weight", {2048, 10944}},
        {"blk.1.ffn_gate_inp.weight", {2048, 64}},
        {"blk.1.ffn_gate_exps.weight", {2048, 1408, 64}},
        {"blk.26.ffn_down_exps.weight", {1408, 2048, 64}},
        {"blk.26.ffn_up_shexp.weight", {2048, 2 * 1408}},
        {"output.weight", {2048, 102400}}},
       8,
       11},
      {"gpt-oss-20b",
       {{"blk.0.attn_q.weight", {2880, 64 * 64}},
        {"blk.0.attn_k.weight", {2880, 8 * 64}},
        {"blk.0.attn_sinks.weight", {64}},
        {"blk.0.attn_output.weight", {64 * 64, 2880}},
        {"blk.0.ffn_gate_inp.bias", {32}},
        {"blk.23.ffn_gate_exps.weight", {2880, 2880, 32}},
        {"blk.23.ffn_down_exps.bias", {2880, 32}},
        {"blk.23.post_attention_norm.weight", {2880}},
        {"output.weight", {2880, 201088}}},
       11,
       14},
      {"qwen1.5-moe-a2.7b",
       {{"blk.0.attn_q.weight", {2048, 2048}},
        {"blk.0.attn_k.bias", {2048}},
        {"blk.0.ffn_gate_inp.weight", {2048, 60}},
        {"blk.0.ffn_gate_exps.weight", {2048, 1408, 60}},
        {"blk.23.ffn_down_exps.weight", {1408, 2048, 60}},
        {"blk.23.ffn_gate_inp_shexp.weight", {2048}},
        {"blk.23.ffn_up_shexp.weight", {2048, 5632}},
        {"blk.23.ffn_down_shexp.weight", {5632, 2048}},
        {"output.weight", {2048, 151936}}},
       7,
       9.5},
      {"deepseek-moe-16b",
       {{"blk.0.attn_q.weight", {2048, 2048}},
        {"blk.0.ffn_gate.weight", {2048, 10944}},
        {"blk.1.ffn_gate_inp.weight", {2048, 64}},
        {"blk.1.ffn_up_exps.weight", {2048, 1408, 64}},
        {"blk.27.ffn_down_exps.weight", {1408, 2048, 64}},
        {"blk.27.ffn_gate_shexp.weight", {2048, 2 * 1408}},
        {"output.weight", {2048, 102400}}},
       8,
       10.5},
      {"phimoe-3.5",
       {{"rope_factors_long.weight", {64}},
        {"rope_factors_short.weight", {64}},
        {"blk.0.attn_norm.bias", {4096}},
        {"blk.0.attn_q.weight", {4096, 4096}},
        {"blk.0.attn_k.bias", {1024}},
        {"blk.0.attn_output.bias", {4096}},
        {"blk.0.ffn_gate_inp.weight", {4096, 16}},
        {"blk.0.ffn_gate_exps.weight", {4096, 6400, 16}},
        {"blk.31.ffn_down_exps.weight", {6400, 4096, 16}},
        {"blk.31.ffn_norm.bias", {4096}},
        {"output.weight", {4096, 32064}},
        {"output.bias", {32064}}},
       22,
       25},
      {"snowflake-arctic",
       {{"blk.0.attn_q.weight", {7168, 56 * 128}},
        {"blk.0.attn_k.weight", {7168, 8 * 128}},
        {"blk.0.ffn_gate.weight", {7168, 7168}},
        {"blk.0.ffn_down.weight", {7168, 7168}},
        {"blk.0.ffn_norm_exps.weight", {7168}},
        {"blk.0.ffn_gate_inp.weight", {7168, 128}},
        {"blk.34.ffn_up_exps.weight", {7168, 4864, 128}},
        {"blk.34.ffn_down_exps.weight", {4864, 7168, 128}},
        {"output.weight", {7168, 32000}}},
       260,
       280},
      {"grok-1",
       {{"blk.0.attn_q.weight", {6144, 48 * 128}},
        {"blk.0.attn_k.weight", {6144, 8 * 128}},
        {"blk.0.attn_output_norm.weight", {6144}},
        {"blk.0.ffn_gate_inp.weight", {6144, 8}},
        {"blk.0.ffn_gate_exps.weight", {6144, 32768, 8}},
        {"blk.63.ffn_down_exps.weight", {32768, 6144, 8}},
        {"blk.63.layer_output_norm.weight", {6144}},
        {"output.weight", {6144, 131072}}},
       175,
       190},
      {"minimax-m2",
       {{"blk.0.attn_q.weight", {3072, 48 * 128}},
        {"blk.0.attn_k.weight", {3072, 8 * 128}},
        {"blk.0.attn_q_norm.weight", {48 * 128}},  // over the whole projection
        {"blk.0.attn_k_norm.weight", {8 * 128}},
        {"blk.0.exp_probs_b.bias", {256}},
        {"blk.0.ffn_gate_exps.weight", {3072, 1536, 256}},
        {"blk.61.ffn_down_exps.weight", {1536, 3072, 256}},
        {"output.weight", {3072, 200064}}},
       125,
       135},
      {"dots-llm1",
       {{"blk.0.attn_q.weight", {4096, 4096}},
        {"blk.0.attn_k.weight", {4096, 4096}},
        {"blk.0.attn_q_norm.weight", {128}},  // per head
        {"blk.0.ffn_gate.weight", {4096, 10944}},
        {"blk.1.exp_probs_b.bias", {128}},
        {"blk.1.ffn_gate_exps.weight", {4096, 1408, 128}},
        {"blk.1.ffn_gate_shexp.weight", {4096, 2 * 1408}},
        {"blk.61.ffn_down_exps.weight", {1408, 4096, 128}},
        {"output.weight", {4096, 152064}}},
       75,
       90},
      {"ling-flash-2.0",
       {{"blk.0.attn_qkv.weight", {4096, 4096 + 2 * 4 * 128}},
        {"blk.0.attn_q_norm.weight", {128}},
        {"blk.0.ffn_gate.weight", {4096, 9216}},
        {"blk.1.exp_probs_b.bias", {256}},
        {"blk.1.ffn_gate_exps.weight", {4096, 1024, 256}},
        {"blk.1.ffn_gate_shexp.weight", {4096, 1024}},
        {"blk.31.ffn_down_exps.weight", {1024, 4096, 256}},
        {"output.weight", {4096, 157184}}},
       55,
       65},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.preset);
    const SynthModel sm(opts(w.preset));
    std::printf("  %s: %zu tensors, %.2f GB\n", w.preset, sm.writer().tensors().size(),
                sm.file_bytes() / 1e9);
    for (const auto& [name, ne] : w.tensors) {
      const io::GgufTensorInfo* t = nullptr;
      for (const io::GgufTensorInfo& x : sm.writer().tensors())
        if (x.name == name) t = &x;
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(Ne(t->ne.begin(), t->ne.begin() + t->n_dims), ne) << name;
    }
    EXPECT_GE(sm.file_bytes() / 1e9, w.min_gb);
    EXPECT_LE(sm.file_bytes() / 1e9, w.max_gb);
  }
}

}  // namespace
