// RoPE parameters, YaRN resolution and the cos/sin cache (see rope.h).
// Tested by tests/test_arch_rope.cpp.
#include "engine/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace strata::engine {
namespace {

// The attention magnitude YaRN asks for at a given stretch: 1 + 0.1·mscale·ln(scale).
float yarn_get_mscale(float scale, float mscale) {
  return scale <= 1.0f ? 1.0f : 0.1f * mscale * std::log(scale) + 1.0f;
}

// The dim whose wavelength fits `n_rotations` times into the original context.
float yarn_corr_dim(int64_t n_rot, uint32_t n_ctx_orig, float n_rotations, float base) {
  const float two_pi = 2.0f * std::numbers::pi_v<float>;
  return static_cast<float>(n_rot) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rotations * two_pi)) /
         (2.0f * std::log(base));
}

}  // namespace

void yarn_corr_dims(int64_t n_rot, uint32_t n_ctx_orig, float freq_base, float beta_fast,
                    float beta_slow, float dims[2]) {
  const float start = std::floor(yarn_corr_dim(n_rot, n_ctx_orig, beta_fast, freq_base));
  const float end = std::ceil(yarn_corr_dim(n_rot, n_ctx_orig, beta_slow, freq_base));
  dims[0] = std::max(0.0f, start);
  dims[1] = std::min(static_cast<float>(n_rot - 1), end);
}

RopeParams resolve_rope(int64_t n_rot, float freq_base, uint32_t n_ctx_train, const RopeScaling& s,
                        bool deepseek_mscale) {
  RopeParams p;
  p.n_rot = n_rot;
  p.freq_base = freq_base;
  const bool none = s.type == RopeScalingType::kNone;
  p.freq_scale = none || s.factor == 0.0f ? 1.0f : 1.0f / s.factor;
  p.ext_factor =
      s.ext_factor >= 0.0f ? s.ext_factor : (s.type == RopeScalingType::kYarn ? 1.0f : 0.0f);
  p.attn_factor = s.yarn_attn_factor >= 0.0f ? s.yarn_attn_factor : 1.0f;
  if (p.ext_factor != 0.0f) {
    const float factor = 1.0f / p.freq_scale;
    if (s.yarn_log_mul != 0.0f) {
      // HF's rope utils assume mscale = 1; DeepSeek-V2 sets mscale = mscale_all_dim.
      const float mscale = deepseek_mscale && s.yarn_log_mul != 1.0f ? s.yarn_log_mul : 1.0f;
      p.attn_factor = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, s.yarn_log_mul);
    } else {
      p.attn_factor = yarn_get_mscale(factor, 1.0f);
    }
    // The kernel multiplies by 1 + 0.1·ln(factor) itself whenever ext_factor ≠ 0.
    p.attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
  }
  p.attn_factor *= s.attn_factor;
  float dims[2];
  yarn_corr_dims(n_rot, s.n_ctx_orig ? s.n_ctx_orig : n_ctx_train, freq_base, s.beta_fast,
                 s.beta_slow, dims);
  p.corr_low = dims[0];
  p.corr_high = dims[1];
  return p;
}

void rope_cache(const RopeParams& p, int64_t pos, float* cs, const float* freq_factors) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  float theta_base = static_cast<float>(pos);
  for (int64_t i = 0; i < p.n_rot / 2; ++i) {
    const float theta_extrap = freq_factors ? theta_base / freq_factors[i] : theta_base;
    float theta = p.freq_scale * theta_extrap;
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
      const float y =
          (static_cast<float>(i) - p.corr_low) / std::max(0.001f, p.corr_high - p.corr_low);
      const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
      theta = theta * (1.0f - ramp) + theta_extrap * ramp;
      mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
    }
    cs[2 * i + 0] = std::cos(theta) * mscale;
    cs[2 * i + 1] = std::sin(theta) * mscale;
    theta_base *= theta_scale;
  }
}

float mla_kq_scale(const RopeParams& p, float yarn_log_mul, uint32_t head_dim_k) {
  const float ln_inv_scale = std::log(1.0f / p.freq_scale);
  const float attn_factor_org = p.attn_factor * (1.0f + 0.1f * ln_inv_scale);
  const float mscale = attn_factor_org * (1.0f + 0.1f * yarn_log_mul * ln_inv_scale);
  return mscale * mscale / std::sqrt(static_cast<float>(head_dim_k));
}

}  // namespace strata::engine
