// One flat ModelConfig per model, filled by load_model_config() from GGUF metadata (keys from the
// table in engine/names.h). A missing required key is an Error naming the key.
// Exercised by tests/test_model_config.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/gguf.h"

namespace strata::engine {

enum class Arch {
  kQwen3Moe,  // qwen3moe: per-head q/k RMSNorm, NEOX RoPE, softmax router, renormalized top-k
  kLlama,     // llama: Mixtral when expert_count > 0 (dense llama runs as a one-expert MoE)
};

// Which pairs RoPE rotates: NORM (2i, 2i+1), NEOX (i, i + n_rot/2).
enum class RopeType { kNorm, kNeox };

// How router logits become expert probabilities (later: sigmoid + bias, gpt-oss softmax-over-k).
enum class GatingType { kSoftmax };

// How the FFN input is projected before the down projection.
enum class FfnActivation { kSiluGlu };  // down(silu(gate x) * up x)

struct ModelConfig {
  Arch arch = Arch::kQwen3Moe;
  std::string arch_name;  // general.architecture as written

  uint32_t n_vocab = 0;
  uint32_t n_ctx_train = 0;
  uint32_t n_embd = 0;
  uint32_t n_layer = 0;

  // Attention.
  uint32_t head_dim_k = 0;  // per-head width of q and k
  uint32_t head_dim_v = 0;  // per-head width of v
  float norm_eps = 0;       // RMSNorm epsilon
  bool qk_norm = false;     // per-head RMSNorm of q and k (attn_q_norm / attn_k_norm)
  RopeType rope_type = RopeType::kNorm;
  uint32_t n_rot = 0;  // rotated dims per head (the first n_rot)
  float rope_freq_base = 10000.0f;

  // FFN / MoE.
  uint32_t n_expert = 0;       // routed experts per MoE layer (0 = dense model)
  uint32_t n_expert_used = 0;  // top-k
  uint32_t n_ff_exp = 0;       // width of one routed expert
  GatingType gating = GatingType::kSoftmax;
  bool norm_topk_weights = true;  // renormalize the k selected probabilities to sum 1
  FfnActivation activation = FfnActivation::kSiluGlu;

  // Per-layer arrays (size n_layer); read them through the accessors.
  std::vector<uint32_t> n_head_arr;
  std::vector<uint32_t> n_head_kv_arr;
  std::vector<uint32_t> n_ff_arr;   // dense FFN width per layer (unused where the layer is MoE)
  std::vector<uint8_t> is_moe_arr;  // 1 = routed experts, 0 = dense FFN (a one-expert MoE)

  uint32_t n_head(uint32_t il) const { return n_head_arr[il]; }
  uint32_t n_head_kv(uint32_t il) const { return n_head_kv_arr[il]; }
  uint32_t n_ff(uint32_t il) const { return n_ff_arr[il]; }
  bool is_moe(uint32_t il) const { return is_moe_arr[il] != 0; }
  uint32_t n_embd_q(uint32_t il) const { return n_head(il) * head_dim_k; }
  uint32_t n_embd_k_gqa(uint32_t il) const { return n_head_kv(il) * head_dim_k; }
  uint32_t n_embd_v_gqa(uint32_t il) const { return n_head_kv(il) * head_dim_v; }
  // Experts a layer's FFN has: n_expert for MoE layers, 1 for a dense FFN.
  uint32_t layer_n_expert(uint32_t il) const { return is_moe(il) ? n_expert : 1; }
  uint32_t layer_n_expert_used(uint32_t il) const { return is_moe(il) ? n_expert_used : 1; }
  uint32_t layer_n_ff(uint32_t il) const { return is_moe(il) ? n_ff_exp : n_ff(il); }
  // Largest per-layer values, for sizing scratch.
  uint32_t max_n_expert_used() const;
  uint32_t max_n_ff() const;
  uint32_t max_n_embd_q() const;
  uint32_t max_n_embd_kv() const;

  // One line: "qwen3moe: 4 layers, n_embd 256, 4/2 heads × 64, 16 experts top-4 × 128, ...".
  std::string describe() const;
};

// Reads the config from a GGUF file. Unknown architecture: Error(kUnsupported) naming it; missing
// required key: Error(kNotFound) naming the key; nonsensical values: Error(kBadFile).
ModelConfig load_model_config(const io::GgufFile& file);

}  // namespace strata::engine
