// Synthetic MoE models: a qwen3moe, deepseek2 (MLA, shared experts, dense lead layers), gpt-oss
// (sinks, sliding window, biases, MXFP4 experts), qwen2moe (q/k/v biases, gated shared expert),
// granitemoe (embedding / residual / attention / logit scales, tied head), deepseek (V1: llama
// attention, dense lead layers, shared experts), dbrx (LayerNorms, fused clamped q/k/v), phimoe
// (biased RMSNorms, q/k/v/o and head biases, LongRoPE factors), llama (Mixtral layout, Llama 3.1
// rope_freqs), arctic (a dense residual FFN, the experts beside it on the layer's input) or grok
// (GELU experts, capped attention scores, post-attention / post-MoE norms) GGUF
// with random quantized weights, a working byte-level BPE tokenizer and routing skewed like a real
// model, written deterministically from a seed (the generator behind `strata synth`). Tested by
// tests/test_synth.cpp and (the deepseek2 / gpt-oss presets) tests/test_arch_synth.cpp.
//
// Routing skew (the fixtures' recipe, ../shared/fixtures/README.md "Routing skew"): every token
// embedding holds the constant kMassiveValue in dimension kMassiveDim; the matrices writing to the
// residual stream (attn_output, ffn_down_exps) have zeros for that dimension, so it stays
// constant, and every matrix reading the normalized stream except the router (q/k/v, expert
// gate/up, output) ignores it (zero column), so it adds no common vector to all tokens; the
// router's column for it is a per-expert bias alpha_l * b_e, b_e ~ N(0,1). alpha_l is calibrated
// per layer by a Monte-Carlo of the router on random normalized hidden states, to a Gini target
// drawn from U[0.5, 0.7] with the seed. All code distributions have mean exactly zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/ggml_type.h"
#include "io/gguf.h"

namespace strata::engine {

constexpr uint32_t kMassiveDim = 3;
constexpr float kMassiveValue = 6.0f;

struct SynthPreset {
  std::string_view name;
  std::string_view doc;
  uint32_t n_layer;
  uint32_t n_embd;
  uint32_t n_head;
  uint32_t n_head_kv;
  uint32_t head_dim;
  uint32_t n_expert;
  uint32_t n_expert_used;
  uint32_t n_ff_exp;  // width of one routed expert
  uint32_t n_ff;      // qwen3moe.feed_forward_length (unused by the MoE layers, as in Qwen3)
  uint32_t n_vocab;
  uint32_t n_ctx;
  float rope_freq_base;
  float rms_eps;
  GgmlType expert_type;  // Q4_0, Q8_0 or Q4_K
  GgmlType attn_type;    // Q4_0, Q8_0 or Q4_K
  GgmlType embd_type;    // Q8_0, F16 or F32 (holds kMassiveValue exactly)
  GgmlType output_type;  // Q6_K, Q8_0, Q4_0, F16 or F32

  // Architecture (general.architecture) and what only some architectures have. qwen3moe uses
  // none of these. deepseek2: head_dim is the per-head q/k width qk_nope + qk_rope, n_head_kv is
  // ignored (MLA has one latent "kv head"), n_ff is the dense lead layers' width. gpt-oss:
  // n_ff = n_ff_exp, experts usually MXFP4.
  std::string_view arch = "qwen3moe";
  uint32_t q_lora = 0;         // deepseek2: query LoRA rank; 0 = plain attn_q (V2-Lite)
  uint32_t kv_lora = 0;        // deepseek2: compressed KV latent width
  uint32_t qk_rope = 0;        // deepseek2: decoupled RoPE dims per head
  uint32_t v_head = 0;         // deepseek2: per-head v width
  uint32_t n_dense_lead = 0;   // deepseek2: leading dense FFN layers
  uint32_t n_shared = 0;       // deepseek2: shared experts per MoE layer
  uint32_t gating = 1;         // deepseek2: llama.cpp expert_gating_func (1 softmax, 2 sigmoid)
  bool weights_norm = false;   // deepseek2: renormalize the top-k weights
  float weights_scale = 1.0f;  // deepseek2: routed_scaling_factor
  uint32_t n_groups = 0;       // deepseek2: expert groups (0/1: none)
  uint32_t n_groups_used = 0;
  uint32_t n_swa = 0;          // gpt-oss: sliding window of the even layers
  float yarn_factor = 0;       // > 1: YaRN RoPE scaling with this factor
  uint32_t yarn_orig_ctx = 0;  // YaRN original context length
  float yarn_log_mul = 0;      // deepseek2: rope.scaling.yarn_log_multiplier as written
  // qwen2moe: the sigmoid-gated shared expert's width; ernie4_5-moe's and hunyuan-moe's shared
  // expert's.
  uint32_t n_ff_shexp = 0;
  // granitemoe's multipliers (its experts are n_ff wide and its output head is the embedding).
  float embedding_scale = 0;
  float residual_scale = 0;
  float attention_scale = 0;
  float logit_scale = 0;
  float clamp_kqv = 0;  // dbrx: q/k/v clamp (its norms are LayerNorms, its q/k/v one tensor)
  uint32_t longrope_orig_ctx = 0;  // phimoe: LongRoPE's original context (long / short factors)
  // llama: a rope_freqs tensor as the converter writes for Llama 3.1 (factor 8, low/high
  // frequency factors 1 and 4, original context 8192).
  bool llama3_rope = false;
  // attn_q and attn_k weights × this: grok's scores large enough that its tanh cap bites.
  float qk_gain = 1.0f;
  // grok: Grok-2's layout — a dense GELU FFN n_ff wide beside the experts (expert width
  // n_ff_exp, written as expert_feed_forward_length), post_ffw_norm, and every multiplier written
  // as a key with a value other than Grok-1's (embedding 90.5, scores 0.08 inside a cap of 30,
  // logits × 0.5 then capped at 8).
  bool grok2 = false;
  // rope.dimension_count when RoPE covers only part of each head (0: the whole head_dim).
  uint32_t n_rot = 0;
};

// tiny (a few MB, tests), demo (~1 GB), qwen3-30b-a3b (the real Qwen3-30B-A3B shapes, ~17 GB),
// tiny-deepseek2 / tiny-gpt-oss (tests), deepseek-v2-lite (~9 GB) and gpt-oss-20b (~12 GB) with
// those models' real shapes.
std::span<const SynthPreset> synth_presets();
const SynthPreset* find_synth_preset(std::string_view name);  // nullptr when unknown

// How 4- and 8-bit codes are drawn: uniform, or a discretized Gaussian (compressible, like real
// int4 experts).
enum class SynthDist { kUniform, kGaussian };
std::optional<SynthDist> synth_dist_from_name(std::string_view name);
std::string_view synth_dist_name(SynthDist d);

struct SynthOptions {
  SynthPreset preset;
  uint64_t seed = 1;
  SynthDist dist = SynthDist::kUniform;
  std::optional<GgmlType> expert_type;  // overrides preset.expert_type: Q4_0, Q8_0, Q4_K, MXFP4
  int n_threads = 0;                    // generation threads; 0 = hardware threads (at most 16)
  std::string corpus_dir = "/usr/share/common-licenses";  // tokenizer training text
};

// Byte-level BPE vocabulary (tokenizer.ggml.model = gpt2): ids 0-255 are the GPT-2 byte symbols in
// bytes_to_unicode order, then one token per merge in rank order (merges learned from the corpus,
// then filler merges of random token pairs once the corpus has no pair seen twice), then the
// control tokens <|endoftext|> (bos, pad), <|im_start|>, <|im_end|> (eos).
struct BpeVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> token_type;  // 1 normal, 3 control
  std::vector<std::string> merges;  // "left right", rank order
  uint32_t n_learned_merges = 0;    // merges from the corpus; the rest are filler
  uint32_t bos = 0, eos = 0, pad = 0;
  uint64_t corpus_bytes = 0;
  uint64_t corpus_hash = 0;  // FNV-1a of the corpus (the vocab depends on it)
};
// n_vocab >= 256 + 3. Falls back to a built-in paragraph when corpus_dir has no readable file.
BpeVocab build_bpe_vocab(uint32_t n_vocab, const std::string& corpus_dir);
// The GPT-2 byte symbol for byte b (UTF-8), e.g. ' ' -> "Ġ".
std::string gpt2_byte_symbol(uint8_t b);

// The ChatML template Qwen models ship (tokenizer.chat_template).
extern const std::string_view kChatMlTemplate;

// Router Monte-Carlo. Hidden states before the FFN norm are h_j ~ N(0, resid_std^2) for
// j != massive_dim and h_m = massive_value; x = RMSNorm(h) * ffn_norm; logits = router * x;
// each token picks the top-k logits.
struct RouterSim {
  uint32_t n_embd = 0;
  uint32_t n_expert = 0;
  uint32_t n_expert_used = 0;
  uint32_t massive_dim = kMassiveDim;
  float massive_value = kMassiveValue;
  float resid_std = 1.0f;
  float rms_eps = 1e-6f;
};
// Tokens routed to each expert, over n_tokens random hidden states, with a full router matrix
// router [n_expert][n_embd] (row-major, as ffn_gate_inp stores it) and ffn_norm [n_embd].
std::vector<uint64_t> simulate_router(const RouterSim& sim, std::span<const float> router,
                                      std::span<const float> ffn_norm, uint32_t n_tokens,
                                      uint64_t seed);
// Gini coefficient of expert popularity (0 = uniform, 1 - k/n_expert = always the same k).
double gini(std::span<const uint64_t> counts);

struct SynthLayerRouting {
  float gini_target = 0;  // drawn from U[0.5, 0.7]
  float alpha = 0;        // calibrated bias scale
  float gini_mc = 0;      // Gini of the calibrated router on fresh Monte-Carlo samples
  float resid_std = 1;    // hidden-state std the calibration assumed at this layer
};

// The planned model: metadata, tensor table and the per-tensor generator. Construction learns the
// tokenizer and calibrates the routers (about a second for the largest preset); the weights are
// generated on demand by fill(), per tensor, from a counter-based RNG keyed by (seed, tensor
// index), so tensors can be generated in any order or in parallel and the bytes depend only on
// the options (and the corpus), never on the thread count.
class SynthModel {
 public:
  explicit SynthModel(const SynthOptions& options);

  const SynthOptions& options() const { return opt_; }
  GgmlType expert_type() const { return expert_type_; }
  const io::GgufWriter& writer() const { return writer_; }
  uint64_t file_bytes() const { return file_bytes_; }
  const std::vector<SynthLayerRouting>& routing() const { return routing_; }
  const BpeVocab& vocab() const { return vocab_; }

  // Writes exactly writer().tensors()[index].n_bytes bytes. Thread-safe.
  void fill(size_t index, std::span<std::byte> out) const;
  // Streams the file to path (via path.tmp + rename).
  void write(const std::string& path, const io::GgufWriter::ProgressFn& progress = {}) const;
  std::vector<std::byte> to_bytes() const;

 private:
  enum class Role {
    kEmbd,
    kNorm,
    kRouter,
    kIn,
    kResidualOut,
    kOutput,
    kZero,
    kBias,
    kRopeLong,    // LongRoPE divisors: 1 at the fastest pair rising to 40 at the slowest
    kRopeShort,   // ... 1 rising to 1.5
    kRopeLlama3,  // Llama 3.1's divisors for this head dim and base
  };
  struct Recipe {
    Role role = Role::kNorm;
    int layer = -1;
    float sigma = 0;  // target weight std
  };
  void fill_rows(size_t index, std::span<std::byte> out, uint64_t row_begin,
                 uint64_t row_end) const;

  SynthOptions opt_;
  GgmlType expert_type_;
  BpeVocab vocab_;
  std::vector<SynthLayerRouting> routing_;
  std::vector<std::vector<float>> router_bias_;  // [n_layer][n_expert] b_e
  std::vector<std::vector<float>> router_norm_;  // [n_layer][n_expert] router row norms
  std::vector<Recipe> recipes_;                  // one per tensor
  io::GgufWriter writer_;
  uint64_t file_bytes_ = 0;
};

}  // namespace strata::engine
