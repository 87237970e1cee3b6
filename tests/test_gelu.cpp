// kernels/gelu.h: ggml's table GELU (grok's experts). The whole table against a digest of the
// output of llama.cpp c392e50's ggml_gelu (CPU backend, GGML_GELU_FP16, built -march=native on
// x86-64) over every IEEE half, NaNs made one quiet NaN; the element's branches (x <= -10, x >= 10,
// rounding to a half between table entries) and the aliasing GELU-GLU row.
#include "kernels/gelu.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/quant.h"

namespace strata::kernels {
namespace {

// FNV-1a 64 of the little-endian bytes of each float.
uint64_t digest(const std::vector<float>& v) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (float f : v) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if (std::isnan(f)) u = 0x7FC00000u;
    for (int b = 0; b < 4; ++b) h = (h ^ ((u >> (8 * b)) & 0xFFu)) * 0x100000001b3ull;
  }
  return h;
}

float gelu(float x) {
  const float one = 1.0f;
  float y = 0;
  gelu_glu_row(&x, &one, &y, 1);
  return y;
}

TEST(Gelu, EveryHalfIsLlamaCppsGelu) {
  std::vector<float> x(kGeluTableSize), one(kGeluTableSize, 1.0f), y(kGeluTableSize);
  for (int h = 0; h < kGeluTableSize; ++h) x[h] = fp16_to_f32(static_cast<uint16_t>(h));
  gelu_glu_row(x.data(), one.data(), y.data(), kGeluTableSize);
  // scripts/peer/ggml_gelu.c's output for llama.cpp c392e50 (2046 of the 65536 are NaN).
  EXPECT_EQ(digest(y), 0xff6d550c59775bfdull);
  // Without the fused multiply-add gcc puts in ggml's formula, x = -1.999 (half 0xBFFF) differs.
  EXPECT_EQ(y[0xBFFF], -0.045501708984375f);
  EXPECT_EQ(y[0x3C00], 0.84130859375f);  // gelu(1)
  EXPECT_EQ(y[0xBC00], -0.1588134765625f);
  EXPECT_EQ(y[0x4000], 1.955078125f);  // gelu(2)
}

TEST(Gelu, ElementBranches) {
  EXPECT_EQ(gelu(-10.0f), 0.0f);
  EXPECT_EQ(gelu(-1e30f), 0.0f);
  EXPECT_EQ(gelu(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(gelu(10.0f), 10.0f);
  EXPECT_EQ(gelu(123.456f), 123.456f);
  EXPECT_EQ(gelu(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(gelu(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(gelu(0.0f), 0.0f);
  // Between the table's halves the input rounds to the nearest one (ties to even).
  const float h1 = fp16_to_f32(0x3C00), h2 = fp16_to_f32(0x3C01);
  EXPECT_EQ(gelu(std::nextafter(h1, h2)), gelu(h1));
  EXPECT_EQ(gelu((h1 + h2) / 2), gelu(h1));  // tie: 0x3C00 is even
  EXPECT_EQ(gelu(std::nextafter((h1 + h2) / 2, h2)), gelu(h2));
  // Close to the exact tanh GELU (a half's precision).
  for (float v = -9.9f; v < 9.9f; v += 0.37f) {
    const double t = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(gelu(v), t, 2e-3 * std::fabs(t) + 1e-4) << v;
  }
}

TEST(Gelu, GluRowMultipliesUpAndMayAlias) {
  std::vector<float> g = {-11.0f, -1.0f, 0.5f, 3.0f, 12.0f}, u = {2.0f, -3.0f, 4.0f, 0.5f, -1.0f};
  std::vector<float> want(g.size());
  for (size_t i = 0; i < g.size(); ++i) want[i] = u[i] * gelu(g[i]);
  std::vector<float> out(g.size());
  gelu_glu_row(g.data(), u.data(), out.data(), int64_t(g.size()));
  EXPECT_EQ(out, want);
  gelu_glu_row(g.data(), u.data(), g.data(), int64_t(g.size()));  // out aliases gate
  EXPECT_EQ(g, want);
}

}  // namespace
}  // namespace strata::kernels
