// Tests for kernels/portable_math.h (label unit, no GPU): portable_expf's error against double
// exp over a dense sweep of the float range (and every float near 0), the special values, and
// portable_silu. The device side of the same functions is compared bit for bit with these in
// tests/test_cuda_grouped.cpp (GroupedDevice.PortableMathDeviceEqualsHost).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/portable_math.h"

namespace strata::kernels {
namespace {

// |got - exact| in units of the float spacing at the exact value (2^-149 below the normals).
double ulp_error(float got, double exact) {
  if (std::isinf(exact) || std::fabs(exact) > std::numeric_limits<float>::max())
    return std::isinf(got) ? 0.0 : 1e30;
  int e = 0;
  std::frexp(exact, &e);  // exact = m · 2^e, m in [0.5, 1)
  const double ulp = std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

struct Worst {
  double ulp = 0.0;
  float at = 0.0f;
  int64_t n = 0;
  void add(float x, double u) {
    ++n;
    if (u > ulp) {
      ulp = u;
      at = x;
    }
  }
};

// Every float bit pattern b = start, start + step, ... whose value lies in [lo, hi].
template <typename Fn>
void sweep(uint64_t step, float lo, float hi, Fn&& fn) {
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += step) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(b));
    if (x >= lo && x <= hi) fn(x);
  }
}

TEST(PortableMath, ExpWithinOneUlpOverTheFloatRange) {
  Worst w;
  // Every result from the largest finite down into the subnormals and to 0.
  sweep(251, -104.0f, 89.0f,
        [&](float x) { w.add(x, ulp_error(portable_expf(x), std::exp(double(x)))); });
  EXPECT_GT(w.n, 8'000'000);
  EXPECT_LE(w.ulp, 1.1) << "worst at x=" << w.at << " (" << std::hexfloat << w.at << ")";
  std::printf("portable_expf: max %.3f ulp over %lld points (worst at %a)\n", w.ulp,
              static_cast<long long>(w.n), static_cast<double>(w.at));
}

TEST(PortableMath, ExpDenseNearZero) {
  Worst w;
  // Floats in [-0.5, 0.5] (every 509th bit pattern, 4 million): the polynomial where the range
  // reduction does not help.
  sweep(509, -0.5f, 0.5f,
        [&](float x) { w.add(x, ulp_error(portable_expf(x), std::exp(double(x)))); });
  EXPECT_LE(w.ulp, 1.0) << "worst at x=" << w.at;
}

TEST(PortableMath, ExpSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(portable_expf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(portable_expf(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(portable_expf(inf), inf);
  EXPECT_EQ(std::bit_cast<uint32_t>(portable_expf(-inf)), 0u);
  EXPECT_EQ(portable_expf(0.0f), 1.0f);
  EXPECT_EQ(portable_expf(-0.0f), 1.0f);
  EXPECT_EQ(portable_expf(std::numeric_limits<float>::denorm_min()), 1.0f);
  EXPECT_EQ(portable_expf(1.0f), 2.71828175f);
  // Correctly rounded at the edges (the double result rounded to float is the oracle):
  const auto rounded = [](float x) { return static_cast<float>(std::exp(static_cast<double>(x))); };
  // the largest x with a finite result, and the next float;
  EXPECT_EQ(portable_expf(88.72283172607422f), rounded(88.72283172607422f));
  EXPECT_LT(portable_expf(88.72283172607422f), inf);
  EXPECT_EQ(portable_expf(88.72283935546875f), inf);
  EXPECT_EQ(portable_expf(89.0f), inf);
  EXPECT_EQ(portable_expf(1e30f), inf);
  // across the smallest normal into the subnormals;
  for (float x : {-87.3365479f, -87.336544f, -88.0f, -95.5f, -100.0f, -103.0f})
    EXPECT_EQ(portable_expf(x), rounded(x)) << "x=" << x;
  // the smallest x whose result rounds up to 2^-149, and the next float down.
  EXPECT_EQ(portable_expf(-103.97207641601562f), std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(std::bit_cast<uint32_t>(portable_expf(-103.97208404541016f)), 0u);
  EXPECT_EQ(portable_expf(-104.0f), 0.0f);
  EXPECT_EQ(portable_expf(-1e30f), 0.0f);
}

TEST(PortableMath, SiluValuesAndLimits) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(std::bit_cast<uint32_t>(portable_silu(0.0f)), 0u);
  EXPECT_EQ(std::bit_cast<uint32_t>(portable_silu(-0.0f)), 0x80000000u);
  EXPECT_EQ(portable_silu(100.0f), 100.0f);
  EXPECT_EQ(portable_silu(inf), inf);
  EXPECT_EQ(std::bit_cast<uint32_t>(portable_silu(-200.0f)), 0x80000000u) << "-0 below e^-104";
  EXPECT_TRUE(std::isnan(portable_silu(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(portable_swiglu(2.0f, 0.0f), 0.0f);
  Worst w;
  sweep(4093, -80.0f, 80.0f, [&](float g) {
    const double exact = double(g) / (1.0 + std::exp(-double(g)));
    if (std::fabs(exact) >= std::numeric_limits<float>::min())
      w.add(g, ulp_error(portable_silu(g), exact));
  });
  EXPECT_LE(w.ulp, 3.0) << "worst at g=" << w.at;
}

}  // namespace
}  // namespace strata::kernels
