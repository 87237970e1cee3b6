// One flat ModelConfig per model, filled by load_model_config() from GGUF metadata (keys from the
// table in engine/names.h). A missing required key is an Error naming the key.
// Exercised by tests/test_model_config.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/rope.h"
#include "io/gguf.h"

namespace strata::engine {

enum class Arch {
  kQwen3Moe,   // qwen3moe: per-head q/k RMSNorm, NEOX RoPE, softmax router, renormalized top-k
  kLlama,      // llama: Mixtral when expert_count > 0 (dense llama runs as a one-expert MoE)
  kDeepseek2,  // deepseek2: MLA attention, leading dense layers, shared experts, grouped routing
  kGlm4Moe,    // glm4moe: q/k/v biases, per-head q/k norm, partial NEOX RoPE, shared expert
  kOlmoe,      // olmoe: q/k RMSNorm over the whole projection, softmax routing, no renorm
  kGptOss,     // gpt-oss: sinks, alternating sliding window, biases, SwiGLU-OAI experts
  kQwen2Moe,   // qwen2moe: q/k/v biases, NEOX RoPE, softmax routing, no renorm, gated shared expert
  kGraniteMoe,  // granitemoe: llama (Mixtral) with embedding / residual / attention / logit scales
  kDeepseek,    // deepseek (DeepSeek-MoE-16B): llama attention, dense lead layers, shared experts
  kDbrx,        // dbrx: LayerNorms, fused q/k/v clamped, NEOX RoPE, softmax top-k renormalized
  kPhiMoe,      // phimoe (Phi-3.5-MoE): biased RMSNorms, q/k/v/o and head biases, LongRoPE factors
  kArctic,  // arctic (Snowflake Arctic): a dense residual FFN, the experts beside it on the input
  kGrok,    // grok (Grok-1): GELU experts, tanh-capped attention scores, post-attention/FFN norms
  kMinimaxM2,  // minimax-m2: olmoe's whole-projection q/k norm, partial NEOX RoPE, sigmoid routing
  kDots1,      // dots1 (dots.llm1): qwen3's attention, deepseek's FFN layout, sigmoid routing
  kBailingMoe2,  // bailingmoe2 (Ling 2.0): fused q/k/v, per-head norms, partial RoPE, dots1's FFN
  kErnie45Moe,   // ernie4_5-moe (ERNIE 4.5): llama attention, softmax routing with selection bias
  kHunyuanMoe,   // hunyuan-moe (Hunyuan-A13B): q/k norms after RoPE, a shared expert in every layer
};

// How router logits become expert probabilities and weights (llama.cpp's gating functions).
enum class GatingType {
  kSoftmax,      // p = softmax(l); top-k by p (+ exp_probs_b); w = p (renormalized when asked)
  kSigmoid,      // p = sigmoid(l); top-k by p + exp_probs_b (within the best groups); w = p
  kSoftmaxTopK,  // p = l; top-k by l; w = softmax over the k selected logits (gpt-oss)
};

// How the FFN input is projected before the down projection.
enum class FfnActivation {
  kSiluGlu,    // down(silu(gate x) * up x)
  kSwigluOai,  // gpt-oss: a = min(g, 7), u' = clamp(u, -7, 7), down(a·σ(1.702a)·(u' + 1))
  kGeluGlu,    // grok: down(gelu(gate x) * up x), ggml's table GELU (kernels/gelu.h)
};

// How attention reads the cache.
enum class AttentionKind {
  kGqa,  // grouped-query attention over per-head K and V
  kMla,  // DeepSeek multi-head latent attention, absorbed form: the cache holds [c ; k_pe]
  // The same weights as converted before absorption (attn_kv_b, no key_length_mla): the latent is
  // decompressed into per-head K and V, which the cache holds (llama.cpp's non-MLA path).
  kMlaDecompressed,
};

struct ModelConfig {
  Arch arch = Arch::kQwen3Moe;
  std::string arch_name;  // general.architecture as written

  uint32_t n_vocab = 0;
  uint32_t n_ctx_train = 0;
  uint32_t n_embd = 0;
  uint32_t n_layer = 0;

  // Attention. For MLA, head_dim_k/v are the cache row widths the file declares
  // (kv_lora_rank + n_rot and kv_lora_rank) with one "kv head"; the per-head widths are the
  // *_mla fields.
  AttentionKind attention = AttentionKind::kGqa;
  uint32_t head_dim_k = 0;          // per-head width of q and k
  uint32_t head_dim_v = 0;          // per-head width of v
  float norm_eps = 0;               // RMSNorm epsilon (LayerNorm's where layer_norm)
  bool layer_norm = false;          // dbrx: the block and output norms are LayerNorms (no bias)
  bool norm_bias = false;           // phimoe: every norm adds a bias after its weight (ggml_add)
  float clamp_kqv = 0;              // dbrx: > 0 clamps q, k and v to [-clamp_kqv, clamp_kqv]
  bool qk_norm = false;             // RMSNorm of q and k (attn_q_norm / attn_k_norm)
  bool qk_norm_whole = false;       // ... over the whole projection (olmoe), not per head
  bool qk_norm_after_rope = false;  // hunyuan-moe: ... of the rotated q and k
  bool attn_sinks = false;          // a learned per-head logit joins the softmax denominator
  uint32_t n_swa = 0;               // sliding window of the is_swa layers (query sees n_swa keys)
  float kq_scale = 0;               // attention score scale (1/sqrt(head dim), MLA: YaRN-corrected)
  bool kq_scale_on_q = false;  // phimoe: q × kq_scale after RoPE, the scores unscaled (its graph)
  // grok: > 0 caps the scores, s = attn_softcap · tanh(kq_scale · q·k) before the softmax (its
  // graph: kq_scale is 0.08838834764831845 / 30, the cap 30).
  float attn_softcap = 0;
  // grok: the attention output and the MoE output each pass an RMSNorm (attn_output_norm,
  // layer_output_norm) before they join the residual.
  bool post_norms = false;
  // granitemoe's multipliers (0 = none, as in llama.cpp): embeddings × embedding_scale, each
  // attention / FFN output × residual_scale before it joins the residual, logits × 1/logit_scale.
  float embedding_scale = 0;
  float residual_scale = 0;
  float logit_scale = 0;
  float logit_multiplier = 0;     // grok: logits × this (0 = none)
  float final_logit_softcap = 0;  // grok-2: > 0 caps the logits, c·tanh(logits · (1/c))
  RopeType rope_type = RopeType::kNorm;
  uint32_t n_rot = 0;  // rotated dims per head (the first n_rot; MLA: the decoupled rope part)
  float rope_freq_base = 10000.0f;
  float rope_freq_base_swa = 10000.0f;  // of the sliding-window layers
  RopeScaling rope_scaling;             // as the file says
  RopeParams rope;                      // resolved (full-attention layers)
  RopeParams rope_swa;                  // resolved (sliding-window layers)

  // MLA (deepseek2).
  uint32_t n_lora_q = 0;        // 0: q = attn_q x directly (DeepSeek-V2-Lite)
  uint32_t n_lora_kv = 0;       // compressed latent c
  uint32_t head_dim_k_mla = 0;  // per-head q/k width: qk_nope + n_rot
  uint32_t head_dim_v_mla = 0;  // per-head v width after attn_v_b

  // FFN / MoE.
  uint32_t n_expert = 0;       // routed experts per MoE layer (0 = dense model)
  uint32_t n_expert_used = 0;  // top-k
  uint32_t n_ff_exp = 0;       // width of one routed expert
  GatingType gating = GatingType::kSoftmax;
  bool norm_topk_weights = true;      // renormalize the k selected probabilities to sum 1
  float expert_weights_scale = 1.0f;  // routed weights × this after normalization
  uint32_t n_expert_groups = 0;       // > 1: group-limited top-k over contiguous groups
  uint32_t n_group_used = 0;          // groups kept per token
  uint32_t n_layer_dense_lead = 0;    // leading layers with a dense FFN
  uint32_t n_expert_shared = 0;       // always-on shared experts per MoE layer
  uint32_t n_ff_shexp = 0;            // their combined width (n_ff_exp × n_expert_shared)
  bool shared_expert_gate = false;    // qwen2moe: × sigmoid(ffn_gate_inp_shexp · x) per token
  // arctic: the routed experts read the layer's input (normed by ffn_norm_exps) instead of the
  // attention's output, and the "shared expert" is its dense residual FFN (ffn_gate/up/down,
  // n_embd wide) on ffn_norm(input + attention), added first.
  bool moe_beside_dense = false;
  // grok-2: a dense FFN (ffn_gate/up/down, GELU, feed_forward_length wide) on the same input as the
  // routed experts, bound as the shared expert; the sum (MoE + dense) × this before the post norm.
  float ffn_combine_scale = 0;
  uint32_t n_layer_nextn = 0;  // trailing MTP layers in the file, not run (not in n_layer)
  FfnActivation activation = FfnActivation::kSiluGlu;  // routed experts

  // Per-layer arrays (size n_layer); read them through the accessors.
  std::vector<uint32_t> n_head_arr;
  std::vector<uint32_t> n_head_kv_arr;
  std::vector<uint32_t> n_ff_arr;   // dense FFN width per layer (unused where the layer is MoE)
  std::vector<uint8_t> is_moe_arr;  // 1 = routed experts, 0 = dense FFN (a one-expert MoE)
  std::vector<uint8_t> is_swa_arr;  // 1 = sliding-window attention (n_swa)

  uint32_t n_head(uint32_t il) const { return n_head_arr[il]; }
  uint32_t n_head_kv(uint32_t il) const { return n_head_kv_arr[il]; }
  uint32_t n_ff(uint32_t il) const { return n_ff_arr[il]; }
  bool is_moe(uint32_t il) const { return is_moe_arr[il] != 0; }
  bool is_swa(uint32_t il) const { return is_swa_arr[il] != 0; }
  const RopeParams& layer_rope(uint32_t il) const { return is_swa(il) ? rope_swa : rope; }
  // The original context RoPE scaling starts from (rope.scaling.original_context_length, else the
  // training context).
  uint32_t rope_n_ctx_orig() const {
    return rope_scaling.n_ctx_orig ? rope_scaling.n_ctx_orig : n_ctx_train;
  }
  bool is_mla() const { return attention == AttentionKind::kMla; }
  // Either MLA form: q / kv LoRA projections, decoupled RoPE, the *_mla head widths.
  bool has_mla_projections() const { return attention != AttentionKind::kGqa; }
  bool has_shared_experts(uint32_t il) const { return is_moe(il) && n_ff_shexp > 0; }
  uint32_t n_embd_q(uint32_t il) const { return n_head(il) * head_dim_k; }
  uint32_t n_embd_k_gqa(uint32_t il) const { return n_head_kv(il) * head_dim_k; }
  uint32_t n_embd_v_gqa(uint32_t il) const { return n_head_kv(il) * head_dim_v; }
  // Floats per position the KV cache stores: MLA keeps only [c ; k_pe] (V is a view of c).
  uint32_t kv_k_width(uint32_t il) const { return n_embd_k_gqa(il); }
  uint32_t kv_v_width(uint32_t il) const { return is_mla() ? 0 : n_embd_v_gqa(il); }
  // Experts a layer's FFN has: n_expert for MoE layers, 1 for a dense FFN.
  uint32_t layer_n_expert(uint32_t il) const { return is_moe(il) ? n_expert : 1; }
  uint32_t layer_n_expert_used(uint32_t il) const { return is_moe(il) ? n_expert_used : 1; }
  uint32_t layer_n_ff(uint32_t il) const { return is_moe(il) ? n_ff_exp : n_ff(il); }
  // Largest per-layer values, for sizing scratch.
  uint32_t max_n_expert_used() const;
  uint32_t max_n_ff() const;  // including the shared experts' width
  uint32_t max_n_embd_q() const;
  uint32_t max_n_embd_kv() const;

  // One line: "qwen3moe: 4 layers, n_embd 256, 4/2 heads × 64, 16 experts top-4 × 128, ...".
  std::string describe() const;
  // The architecture-specific hyperparameters as (name, value) pairs for `strata inspect`:
  // gating, groups, shared experts, MLA ranks, sliding window, RoPE scaling, ...
  std::vector<std::pair<std::string, std::string>> arch_details() const;
};

// Reads the config from a GGUF file. Unknown architecture: Error(kUnsupported) naming it; missing
// required key: Error(kNotFound) naming the key; nonsensical values: Error(kBadFile).
ModelConfig load_model_config(const io::GgufFile& file);

}  // namespace strata::engine
