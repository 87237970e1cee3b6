// Rotary position embedding parameters and the per-position cos/sin cache, including linear and
// YaRN context scaling the way llama.cpp resolves them from GGUF metadata (llama_context +
// ggml's rope kernel). Tested by tests/test_arch_rope.cpp (YaRN against an independent float64
// reference built from the YaRN paper's formulas) and by every model test.
#pragma once

#include <cstdint>

namespace strata::engine {

// Which pairs RoPE rotates: NORM (2i, 2i+1), NEOX (i, i + n_rot/2).
enum class RopeType { kNorm, kNeox };

// How the file stretches the trained context (rope.scaling.type).
enum class RopeScalingType { kNone, kLinear, kYarn };

// Everything the rotation angles of one layer depend on. Angle of pair i at position p:
//   θ_extrap = p · freq_base^(−2i/n_rot),  θ_interp = freq_scale · θ_extrap
//   YaRN (ext_factor ≠ 0): θ = θ_interp·(1 − r_i) + θ_extrap·r_i with the ramp
//     r_i = ext_factor · (1 − clamp((i − corr_low) / max(0.001, corr_high − corr_low), 0, 1)),
//   and the magnitude m = attn_factor · (1 + 0.1·ln(1/freq_scale)); otherwise θ = θ_interp and
//   m = attn_factor. The cache holds m·cos θ and m·sin θ.
struct RopeParams {
  int64_t n_rot = 0;  // rotated dims per head
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // 1 / scaling factor
  float ext_factor = 0.0f;  // YaRN ramp weight; 0 = no YaRN
  float attn_factor = 1.0f;
  float corr_low = 0.0f;  // YaRN correction range, in pair indices
  float corr_high = 0.0f;
};

// The scaling hyperparameters as read from the file, before resolution.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;        // rope.scaling.factor (or rope.scale_linear); 1 = none
  uint32_t n_ctx_orig = 0;    // rope.scaling.original_context_length (0: the training context)
  float attn_factor = 1.0f;   // rope.scaling.attn_factor
  float yarn_log_mul = 0.0f;  // mscale_all_dim (the file stores 0.1× it; already divided back)
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float ext_factor = -1.0f;        // rope.scaling.yarn_ext_factor; < 0: 1 for YaRN, else 0
  float yarn_attn_factor = -1.0f;  // rope.scaling.yarn_attn_factor; < 0: derived
};

// Resolves the file's scaling into the parameters the kernel uses, as llama.cpp's context does:
// freq_scale = 1/factor (1 when type is none), ext_factor 1 for YaRN, and the YaRN attention
// factor get_mscale(factor, ·) cancelled against the kernel's own 1 + 0.1·ln(factor) (so plain
// YaRN rotates with magnitude 1 + 0.1·ln(factor), and DeepSeek's log-multiplier form rotates
// with magnitude 1 and moves the correction into the attention scale — see mla_kq_scale()).
// deepseek_mscale: the DeepSeek-V2 special case (mscale taken equal to mscale_all_dim).
RopeParams resolve_rope(int64_t n_rot, float freq_base, uint32_t n_ctx_train, const RopeScaling& s,
                        bool deepseek_mscale);

// The YaRN correction range for n_rot dims: [floor(d(beta_fast)), ceil(d(beta_slow))] clamped
// to [0, n_rot − 1], d(β) = n_rot · ln(n_ctx_orig / (2π β)) / (2 ln base).
void yarn_corr_dims(int64_t n_rot, uint32_t n_ctx_orig, float freq_base, float beta_fast,
                    float beta_slow, float dims[2]);

// cs[2i] = m·cos θ_i, cs[2i+1] = m·sin θ_i for i < n_rot/2 at position pos (see RopeParams).
// θ_extrap is advanced by repeated float multiplication, as ggml's rope cache does.
// freq_factors (ggml's, n_rot/2 of them; Llama 3.1's rope_freqs, LongRoPE's long/short sets):
// pair i uses θ_extrap / freq_factors[i]; nullptr: none.
void rope_cache(const RopeParams& p, int64_t pos, float* cs, const float* freq_factors = nullptr);

// DeepSeek's attention scale with YaRN: 1/sqrt(head_dim_k) times mscale², mscale =
// attn_factor_org · (1 + 0.1 · yarn_log_mul · ln(1/freq_scale)), attn_factor_org undoing the
// kernel-magnitude cancellation in resolve_rope() (llama.cpp's deepseek2 graph).
float mla_kq_scale(const RopeParams& p, float yarn_log_mul, uint32_t head_dim_k);

}  // namespace strata::engine
