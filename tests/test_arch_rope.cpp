// YaRN RoPE (engine/rope.h) against an independent float64 reference written from the YaRN paper
// / Hugging Face's rope utilities (find_correction_range, linear_ramp_factor, inv_freq blend,
// attention factor 0.1·ln(s) + 1), and the resolution of published configs (gpt-oss-20b,
// DeepSeek-V2-Lite, DeepSeek-V3) into rotation magnitude and attention scale. The fixtures have
// no YaRN keys, so this is YaRN's only check against something other than itself.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "engine/ops.h"
#include "engine/rope.h"

using namespace strata::engine;

namespace {

// Hugging Face's _compute_yarn_parameters in float64: per pair i the inverse frequency and the
// attention (magnitude) factor.
struct YarnRef {
  std::vector<double> inv_freq;
  double mscale = 1.0;
  double low = 0, high = 0;
};

YarnRef yarn_reference(int n_rot, double base, double factor, double n_ctx_orig, double beta_fast,
                       double beta_slow, double mscale, double mscale_all_dim) {
  auto correction_dim = [&](double n_rotations) {
    return n_rot * std::log(n_ctx_orig / (n_rotations * 2 * std::numbers::pi)) /
           (2 * std::log(base));
  };
  YarnRef r;
  r.low = std::max(std::floor(correction_dim(beta_fast)), 0.0);
  r.high = std::min(std::ceil(correction_dim(beta_slow)), double(n_rot - 1));
  double hi = r.high;
  if (r.low == hi) hi += 0.001;
  for (int i = 0; i < n_rot / 2; ++i) {
    const double pos_freq = std::pow(base, 2.0 * i / n_rot);
    const double extrap = 1.0 / pos_freq;
    const double interp = 1.0 / (factor * pos_freq);
    const double ramp = std::clamp((i - r.low) / (hi - r.low), 0.0, 1.0);
    const double extrap_weight = 1.0 - ramp;
    r.inv_freq.push_back(interp * (1 - extrap_weight) + extrap * extrap_weight);
  }
  auto get_mscale = [](double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1.0; };
  r.mscale = mscale_all_dim != 0 ? get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
                                 : get_mscale(factor, 1.0);
  return r;
}

// Compares rope_cache() with the reference at a few positions. Float RoPE advances θ by repeated
// float multiplication (as ggml does), so θ carries a relative error of about (i + 4) ulp.
void expect_cache_matches(const RopeParams& p, const YarnRef& ref, double magnitude) {
  std::vector<float> cs(p.n_rot);
  for (int64_t pos : {0, 1, 7, 100, 1000, 4095}) {
    rope_cache(p, pos, cs.data());
    for (int64_t i = 0; i < p.n_rot / 2; ++i) {
      const double theta = double(pos) * ref.inv_freq[i];
      const double dtheta = std::fabs(theta) * (i + 4) * std::ldexp(1.0, -23) + 1e-7;
      const double tol = magnitude * (dtheta + 4e-7);
      EXPECT_NEAR(cs[2 * i], magnitude * std::cos(theta), tol) << "pos " << pos << " pair " << i;
      EXPECT_NEAR(cs[2 * i + 1], magnitude * std::sin(theta), tol)
          << "pos " << pos << " pair " << i;
    }
  }
}

// gpt-oss-20b / 120b: rope_scaling {yarn, factor 32, original 4096, beta_fast 32, beta_slow 1},
// theta 150000, head_dim 64. Plain YaRN: both q and k rotate with magnitude 1 + 0.1·ln 32.
TEST(ArchRope, GptOssYarnMatchesReference) {
  RopeScaling s;
  s.type = RopeScalingType::kYarn;
  s.factor = 32;
  s.n_ctx_orig = 4096;
  const RopeParams p = resolve_rope(64, 150000.0f, 131072, s, false);
  const YarnRef ref = yarn_reference(64, 150000.0, 32, 4096, 32, 1, 1, 0);
  EXPECT_FLOAT_EQ(p.freq_scale, 1.0f / 32);
  EXPECT_EQ(p.ext_factor, 1.0f);
  EXPECT_EQ(p.corr_low, ref.low);
  EXPECT_EQ(p.corr_high, ref.high);
  EXPECT_GT(ref.high, ref.low);  // the ramp is inside the rotated dims: all three regimes occur
  EXPECT_LT(ref.high, 31);
  EXPECT_NEAR(ref.mscale, 1.0 + 0.1 * std::log(32.0), 1e-12);
  expect_cache_matches(p, ref, ref.mscale);
  // The scale of q·k is then magnitude² / sqrt(head_dim): the usual 1/sqrt(64) stays.
}

// DeepSeek-V2-Lite: {yarn, factor 40, original 4096, mscale 0.707, mscale_all_dim 0.707}; the
// converter writes yarn_log_multiplier = 0.1 × mscale_all_dim. HF rotates with
// get_mscale(40, 0.707) / get_mscale(40, 0.707) = 1 and scales q·k by get_mscale(40, 0.707)² /
// sqrt(q_head_dim = 192).
TEST(ArchRope, DeepseekV2LiteYarnMatchesReference) {
  RopeScaling s;
  s.type = RopeScalingType::kYarn;
  s.factor = 40;
  s.n_ctx_orig = 4096;
  s.yarn_log_mul = 0.0707f / 0.1f;  // as the config loader reads it back
  const RopeParams p = resolve_rope(64, 10000.0f, 163840, s, true);
  const YarnRef ref = yarn_reference(64, 10000.0, 40, 4096, 32, 1, 0.707, 0.707);
  EXPECT_NEAR(ref.mscale, 1.0, 1e-12);
  expect_cache_matches(p, ref, 1.0);
  const double want_scale = std::pow(0.1 * 0.707 * std::log(40.0) + 1.0, 2) / std::sqrt(192.0);
  EXPECT_NEAR(mla_kq_scale(p, s.yarn_log_mul, 192), want_scale, 1e-6 * want_scale);
}

// DeepSeek-V3 / R1 / Kimi-K2: {yarn, factor 40, original 4096, mscale 1, mscale_all_dim 1}.
TEST(ArchRope, DeepseekV3YarnMatchesReference) {
  RopeScaling s;
  s.type = RopeScalingType::kYarn;
  s.factor = 40;
  s.n_ctx_orig = 4096;
  s.yarn_log_mul = 0.1f / 0.1f;
  const RopeParams p = resolve_rope(64, 10000.0f, 163840, s, true);
  const YarnRef ref = yarn_reference(64, 10000.0, 40, 4096, 32, 1, 1.0, 1.0);
  expect_cache_matches(p, ref, ref.mscale);
  const double want_scale = std::pow(0.1 * std::log(40.0) + 1.0, 2) / std::sqrt(192.0);
  EXPECT_NEAR(mla_kq_scale(p, s.yarn_log_mul, 192), want_scale, 1e-6 * want_scale);
}

// Linear scaling divides every angle by the factor; no magnitude change.
TEST(ArchRope, LinearScaling) {
  RopeScaling s;
  s.type = RopeScalingType::kLinear;
  s.factor = 4;
  const RopeParams p = resolve_rope(32, 10000.0f, 4096, s, false);
  YarnRef ref;
  for (int i = 0; i < 16; ++i) ref.inv_freq.push_back(std::pow(10000.0, -2.0 * i / 32) / 4);
  expect_cache_matches(p, ref, 1.0);
}

// No scaling reproduces the unscaled cache bit for bit (the first batch's models depend on it).
TEST(ArchRope, NoScalingIsBitIdenticalToPlainRope) {
  const RopeParams p = resolve_rope(64, 1e6f, 512, RopeScaling{}, false);
  std::vector<float> a(64), b(64);
  for (int64_t pos : {0, 3, 63, 511}) {
    rope_cache(p, pos, a.data());
    rope_cache(pos, 64, 1e6f, b.data());
    EXPECT_EQ(a, b) << pos;
  }
  EXPECT_EQ(mla_kq_scale(p, 0.0f, 48), 1.0f / std::sqrt(48.0f));
}

}  // namespace
