// Every weight of a model bound at load with its expected shape: typed views into the GGUF mapping.
// Routed experts are [n_expert, rows, cols] stacks; expert_slice(e) gives one expert's three byte
// ranges (gate, up, down), the unit the tiers move. Exercised by tests/test_model_config.cpp
// (shape/missing errors) and tests/test_model_forward.cpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "io/ggml_type.h"
#include "io/gguf.h"
#include "kernels/interleave.h"

namespace strata::engine {

// Bytes of the model file: where they are in the file, and where they are mapped now.
struct ByteRange {
  uint64_t file_offset = 0;
  uint64_t n_bytes = 0;
  const std::byte* data = nullptr;
  // How the bytes at data are laid out: the file's, or repacked in RAM (REPACK; the same bytes
  // rearranged, kernels/interleave.h).
  kernels::WeightLayout layout = kernels::WeightLayout::kRows;
};

// One matrix [n_rows, n_cols] of ggml type `type`, rows row_bytes apart: an expert's gate, up or
// down projection wherever its bytes currently live.
struct MatrixRef {
  GgmlType type = GgmlType::F32;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  size_t row_bytes = 0;
  const std::byte* data = nullptr;
  kernels::WeightLayout layout = kernels::WeightLayout::kRows;  // pass to kernels::gemv_kernels
};

// One tensor: ne[0] is the contiguous (input) dimension, so a 2-D weight with ne {in, out} is
// `out` rows of `in` elements and computes y = W·x.
struct WeightView {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::array<int64_t, 4> ne = {1, 1, 1, 1};
  const std::byte* data = nullptr;  // nullptr: an optional tensor the file does not have
  uint64_t file_offset = 0;
  uint64_t n_bytes = 0;
  size_t row_bytes = 0;  // bytes of one row of ne[0] elements
  // kRows = as in the file; interleave_dense() repacks resident 2-D matrices (REPACK).
  kernels::WeightLayout layout = kernels::WeightLayout::kRows;

  bool present() const { return data != nullptr; }
  int64_t n_cols() const { return ne[0]; }
  int64_t n_rows() const { return ne[1]; }
  const std::byte* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
  const float* f32() const { return reinterpret_cast<const float*>(data); }  // F32 only
  // The first 2-D matrix (ne[0] columns, ne[1] rows).
  MatrixRef matrix() const { return MatrixRef{type, ne[1], ne[0], row_bytes, data, layout}; }
  // The i2-th 2-D matrix of a 3-D tensor (e.g. one head of attn_k_b).
  MatrixRef matrix(int64_t i2) const {
    return MatrixRef{type,
                     ne[1],
                     ne[0],
                     row_bytes,
                     data + static_cast<size_t>(i2) * row_bytes * static_cast<size_t>(ne[1]),
                     layout};
  }
};

// The three byte ranges of one expert (one contiguous slice of each stacked tensor).
struct ExpertSlice {
  ByteRange gate;
  ByteRange up;
  ByteRange down;
  uint64_t n_bytes() const { return gate.n_bytes + up.n_bytes + down.n_bytes; }
};

// A layer's FFN experts, stacked: gate/up ne {n_embd, n_ff, n_expert}, down ne {n_ff, n_embd,
// n_expert}. A dense FFN (or a shared expert) is the same with n_expert = 1.
struct ExpertStack {
  WeightView gate;
  WeightView up;
  WeightView down;
  uint32_t n_expert = 0;  // 0: no such FFN (e.g. no shared expert)
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  FfnActivation activation = FfnActivation::kSiluGlu;
  // Optional per-expert biases (gpt-oss), F32 and resident (they are not part of the slice the
  // tiers move): gate/up {n_ff, n_expert}, down {n_embd, n_expert}.
  WeightView gate_bias;
  WeightView up_bias;
  WeightView down_bias;

  ExpertSlice expert_slice(uint32_t e) const;
  // Matrices of an expert whose slice bytes are at `slice` (the mapping's, or a tier's copy).
  MatrixRef gate_matrix(const ExpertSlice& slice) const;
  MatrixRef up_matrix(const ExpertSlice& slice) const;
  MatrixRef down_matrix(const ExpertSlice& slice) const;
};

struct LayerWeights {
  WeightView attn_norm;    // [n_embd]
  WeightView attn_norm_b;  // [n_embd], when cfg.norm_bias (phimoe)
  WeightView wq;           // {n_embd, n_head * head_dim_k}; MLA without q LoRA: head_dim_k_mla
  WeightView wk;           // {n_embd, n_head_kv * head_dim_k}   (GQA only)
  WeightView wv;           // {n_embd, n_head_kv * head_dim_v}   (GQA only)
  WeightView wo;           // {n_head * head_dim_v, n_embd}; MLA: n_head * head_dim_v_mla
  WeightView bq, bk, bv;   // q/k/v biases [width of wq/wk/wv] (glm4moe, gpt-oss, qwen2moe)
  WeightView bo;           // optional output bias [n_embd] (gpt-oss)
  WeightView attn_sinks;   // [n_head], when cfg.attn_sinks
  WeightView attn_q_norm;  // [head_dim_k] (whole projection: [n_head * head_dim_k])
  WeightView attn_k_norm;  // [head_dim_k] (whole projection: [n_head_kv * head_dim_k])
  // MLA (cfg.is_mla()).
  WeightView wq_a;            // {n_embd, n_lora_q}, when n_lora_q > 0
  WeightView attn_q_a_norm;   // [n_lora_q]
  WeightView wq_b;            // {n_lora_q, n_head * head_dim_k_mla}
  WeightView wkv_a_mqa;       // {n_embd, n_lora_kv + n_rot}
  WeightView attn_kv_a_norm;  // [n_lora_kv]
  WeightView wk_b;            // {qk_nope, n_lora_kv, n_head}: per head, nope → latent
  WeightView wv_b;            // {n_lora_kv, head_dim_v_mla, n_head}: per head, latent → v
  WeightView wkv_b;           // decompressed form: {n_lora_kv, n_head * (qk_nope + head_dim_v_mla)}
  WeightView ffn_norm;        // [n_embd] (post_attention_norm in glm4moe / gpt-oss files)
  WeightView ffn_norm_b;      // [n_embd], when cfg.norm_bias
  WeightView ffn_norm_exps;   // arctic: [n_embd] the routed experts' norm of the layer's input
  WeightView attn_post_norm;  // grok: [n_embd] optional RMSNorm of the attention output
  WeightView ffn_post_norm;   // grok: [n_embd] optional RMSNorm of the MoE output
  WeightView ffn_gate_inp;    // router {n_embd, n_expert}; absent for a dense FFN
  WeightView ffn_gate_inp_b;  // optional router bias [n_expert] (gpt-oss)
  WeightView exp_probs_b;     // optional selection bias [n_expert] (sigmoid gating, ernie4_5-moe)
  ExpertStack experts;        // routed experts (tiered), or the dense FFN (n_expert 1)
  ExpertStack shared;         // always-on shared expert, resident (n_expert 0 when none);
                              // arctic: its dense residual FFN (ffn_gate/up/down)
  WeightView shared_gate;     // qwen2moe: ffn_gate_inp_shexp {n_embd}, the shared expert's gate
};

struct ModelWeights {
  WeightView token_embd;     // {n_embd, n_vocab}
  WeightView output_norm;    // [n_embd]
  WeightView output_norm_b;  // [n_embd], when cfg.norm_bias
  WeightView output;         // {n_embd, n_vocab}; token_embd's view when the file has no output
  WeightView output_b;       // [n_vocab] logit bias (phimoe)
  bool output_tied = false;
  // RoPE frequency divisors [n_rot / 2] (ggml's freq_factors: pair i turns at θ_i / f[i]):
  // rope_freqs always (Llama 3.1 files), else LongRoPE's long or short set by the context size
  // (rope_freq_factors()). All absent for most models.
  WeightView rope_freqs;
  WeightView rope_long;
  WeightView rope_short;
  std::vector<LayerWeights> layers;
};

// The RoPE frequency divisors a context of n_ctx positions uses, as llama.cpp picks them:
// rope_freqs when the file has it; else rope_long when n_ctx exceeds the original context
// (rope.scaling.original_context_length, or the training context), rope_short otherwise; nullptr
// when the file has none.
const float* rope_freq_factors(const ModelWeights& w, const ModelConfig& cfg, uint32_t n_ctx);
// Whether that is LongRoPE's long set (the file has the sets and n_ctx exceeds the original).
bool rope_long_set(const ModelWeights& w, const ModelConfig& cfg, uint32_t n_ctx);

// Binds every tensor the config needs. A missing tensor is Error(kNotFound) naming it; a wrong
// shape is Error(kBadFile) naming the tensor and both shapes; a type no kernel handles is
// Error(kUnsupported) naming the tensor and type.
ModelWeights bind_weights(const io::GgufFile& file, const ModelConfig& cfg);

// REPACK for the dense weights: every 2-D matrix that only feeds matmuls (attention and MLA
// projections, dense FFNs, shared experts, an untied output head) and has an interleaved layout
// is repacked in place and its view says so. The bytes must be private and writable (the tiered
// path's make_resident); routed experts are left alone (the tier store repacks its RAM homes).
// Returns the bytes repacked.
uint64_t interleave_dense(ModelWeights& w);
// The matrices interleave_dense() considers (each is interleaved only where
// kernels::interleave_pays its type and the shape allows); DENSE_ARENA uses the same list.
std::vector<WeightView*> repack_views(ModelWeights& w);
// The layout REPACK gives one of those views: interleaved where kernels::interleave_pays its type
// and it is a 2-D matrix in the file's layout whose shape an interleaved layout takes; else its
// own.
kernels::WeightLayout repack_layout(const WeightView& v);

// Bytes of resident weights one decode token reads: every layer's tensors except the routed
// experts (norms, attention or MLA projections — the absorbed wk_b / wv_b when present, else
// wkv_b —, router, dense FFN, shared expert, biases), the output norm and head, and one row of
// the token embedding. PROF's roofline (engine/prof.h DecodeBytes).
uint64_t dense_bytes_per_token(const ModelWeights& w);

// Every dense tensor a decode token reads, in the order it reads them: per layer the attention
// norm and projections (GQA or MLA: the absorbed wk_b / wv_b when present, else wkv_b) with their
// biases and norms, the FFN norm, the router, a dense FFN and the shared expert; then the output
// norm and an untied head. Routed experts and the token embedding (one row per token; a tied
// head's matrix) are not in it; neither are absent optional tensors. dense_bytes_per_token is
// their bytes plus the embedding's share; DENSE_ARENA moves them (engine/dense_arena.h).
std::vector<WeightView*> decode_dense_views(ModelWeights& w);
std::vector<const WeightView*> decode_dense_views(const ModelWeights& w);

std::string shape_string(const std::array<int64_t, 4>& ne, int n_dims);

}  // namespace strata::engine
