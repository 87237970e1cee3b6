// Block formats and (de)quantizers (kernels/quant.cpp): half/bfloat16 conversions against the
// F16C instructions, known-answer dequantization of hand-built blocks, quantize->dequantize round
// trips, and llama.cpp's own quantized fixture tensors (byte-exact requantization).
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "io/check.h"
#include "io/gguf.h"
#include "kernels/cpu_features.h"
#include "kernels/quant.h"

namespace strata::kernels {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

__attribute__((target("f16c"))) float hw_half_to_float(uint16_t h) {
  return _cvtsh_ss(h);
}
__attribute__((target("f16c"))) uint16_t hw_float_to_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

// ---- fp16 / bf16 ----

// kernels::cpu_has reads CPUID itself (clang 14 lacks some of __builtin_cpu_supports' names);
// on this GCC build both must agree for every feature the kernels dispatch on.
TEST(CpuFeatures, AgreeWithGccBuiltins) {
  using kernels::CpuFeature;
  __builtin_cpu_init();
  const std::pair<CpuFeature, bool> features[] = {
      {CpuFeature::kAvx2, __builtin_cpu_supports("avx2") != 0},
      {CpuFeature::kFma, __builtin_cpu_supports("fma") != 0},
      {CpuFeature::kF16c, __builtin_cpu_supports("f16c") != 0},
      {CpuFeature::kBmi2, __builtin_cpu_supports("bmi2") != 0},
      {CpuFeature::kAvx512f, __builtin_cpu_supports("avx512f") != 0},
      {CpuFeature::kAvx512bw, __builtin_cpu_supports("avx512bw") != 0},
      {CpuFeature::kAvx512vl, __builtin_cpu_supports("avx512vl") != 0},
      {CpuFeature::kAvx512dq, __builtin_cpu_supports("avx512dq") != 0},
      {CpuFeature::kAvx512vnni, __builtin_cpu_supports("avx512vnni") != 0},
      {CpuFeature::kAvx512vbmi, __builtin_cpu_supports("avx512vbmi") != 0},
      {CpuFeature::kGfni, __builtin_cpu_supports("gfni") != 0},
      {CpuFeature::kAvxVnni, __builtin_cpu_supports("avxvnni") != 0},
  };
  for (const auto& [f, want] : features) EXPECT_EQ(kernels::cpu_has(f), want) << int(f);
}

TEST(Fp16, EveryHalfDecodesLikeF16c) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU lacks F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = fp16_to_f32(static_cast<uint16_t>(h));
    const float want = hw_half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(bits_of(got), bits_of(want)) << std::hex << "half 0x" << h;
      ASSERT_EQ(f32_to_fp16(got), h) << std::hex << "round trip of half 0x" << h;
    }
  }
}

TEST(Fp16, EncodeMatchesF16cRoundToNearestEven) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU lacks F16C";
  std::mt19937 rng(7);
  std::vector<float> cases = {0.0f,     -0.0f,     1.0f,           65504.0f,       65519.99f,
                              65520.0f, 1e9f,      -1e9f,          6.1035e-5f,     5.96e-8f,
                              2.98e-8f, 2.99e-8f,  1e-10f,         INFINITY,       -INFINITY,
                              0.1f,     -3.14159f, 1.00048828125f, 1.000732421875f};
  // Halfway points between adjacent halves, both parities, across the whole range.
  for (uint32_t h = 0; h < 0x7BFF; h += 37) {
    const float a = fp16_to_f32(static_cast<uint16_t>(h)), b = fp16_to_f32(h + 1);
    cases.push_back(float_of(bits_of(a) + ((bits_of(b) - bits_of(a)) / 2)));
    cases.push_back(-float_of(bits_of(a) + ((bits_of(b) - bits_of(a)) / 2)));
  }
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = rng();
    if ((u & 0x7F800000) == 0x7F800000) continue;  // NaN / inf handled above
    cases.push_back(float_of(u));
  }
  for (float f : cases)
    ASSERT_EQ(f32_to_fp16(f), hw_float_to_half(f))
        << "f=" << f << " bits 0x" << std::hex << bits_of(f);
  EXPECT_EQ(f32_to_fp16(NAN) & 0x7E00, 0x7E00);
}

TEST(Bf16, KnownValuesAndRounding) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_bf16(float_of(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(float_of(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(float_of(0x3F808001)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(float_of(0x7F7FFFFF)), 0x7F80);  // rounds to infinity
  EXPECT_EQ(f32_to_bf16(float_of(0x7F800001)), 0x7FC0);  // signalling NaN made quiet
  EXPECT_EQ(bits_of(bf16_to_f32(0x3F81)), 0x3F810000u);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h);
  }
}

TEST(VecDotType, MatchesGgml) {
  EXPECT_EQ(vec_dot_type(GgmlType::F32), GgmlType::F32);
  EXPECT_EQ(vec_dot_type(GgmlType::F16), GgmlType::F16);
  EXPECT_EQ(vec_dot_type(GgmlType::BF16), GgmlType::BF16);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::MXFP4})
    EXPECT_EQ(vec_dot_type(t), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::Q4_K), GgmlType::Q8_K);
  EXPECT_EQ(vec_dot_type(GgmlType::Q5_K), GgmlType::Q8_K);
  EXPECT_EQ(vec_dot_type(GgmlType::Q3_K), GgmlType::Q8_K);
  EXPECT_EQ(vec_dot_type(GgmlType::Q2_K), GgmlType::Q8_K);
  EXPECT_EQ(vec_dot_type(GgmlType::Q6_K), GgmlType::Q8_K);
  EXPECT_EQ(vec_dot_type(GgmlType::IQ4_NL), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::IQ4_XS), GgmlType::Q8_K);
  EXPECT_FALSE(gemv_supported(GgmlType::IQ2_XXS));
  EXPECT_THROW(vec_dot_type(GgmlType::IQ2_XXS), Error);
  EXPECT_EQ(vec_dot_type(GgmlType::Q4_1), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::Q5_1), GgmlType::Q8_0);
}

// ---- known answers: blocks built by hand from the format description ----

std::vector<float> dequant(GgmlType t, const void* blocks, int64_t n) {
  std::vector<float> y(n);
  dequantize_row(t, blocks, y.data(), n);
  return y;
}

TEST(KnownAnswer, Q4_0) {
  BlockQ4_0 b;
  b.d = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = dequant(GgmlType::Q4_0, &b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;
    EXPECT_EQ(y[j + 16], (15 - j - 8) * 0.5f) << j;
  }
}

TEST(KnownAnswer, Q5_0) {
  BlockQ5_0 b;
  b.d = 0xBC00;  // -1.0
  const uint32_t qh = 0xA5C3F00Fu;
  std::memcpy(b.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>((j * 3 % 16) | ((j * 7 % 16) << 4));
  const auto y = dequant(GgmlType::Q5_0, &b, 32);
  for (int j = 0; j < 32; ++j) {
    const int nib = j < 16 ? j * 3 % 16 : (j - 16) * 7 % 16;
    const int v = (nib | (((qh >> j) & 1) << 4)) - 16;
    EXPECT_EQ(y[j], -1.0f * v) << j;
  }
}

TEST(KnownAnswer, Q8_0) {
  BlockQ8_0 b;
  b.d = 0x4000;  // 2.0
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  const auto y = dequant(GgmlType::Q8_0, &b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 2.0f * (j * 8 - 128)) << j;
}

TEST(KnownAnswer, Mxfp4) {
  // E2M1 code points (sign bit 3): 0, 0.5, 1, 1.5, 2, 3, 4, 6; the block scale is 2^(e-127).
  const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int e : {0, 1, 2, 100, 126, 127, 128, 130, 200}) {
    BlockMXFP4 b;
    b.e = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const auto y = dequant(GgmlType::MXFP4, &b, 32);
    const double scale = std::ldexp(1.0, e - 127);
    for (int j = 0; j < 32; ++j) {
      const int code = j < 16 ? j : 15 - (j - 16);
      const double want = (code & 8 ? -1.0 : 1.0) * e2m1[code & 7] * scale;
      EXPECT_EQ(static_cast<double>(y[j]), want) << "e=" << e << " j=" << j;
    }
  }
}

// Q4_K scale packing written from the format description (not from quant_internal.h).
void pack_q4_k_scales(const int sc[8], const int mn[8], uint8_t out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

TEST(KnownAnswer, Q4_K) {
  const int sc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
  const int mn[8] = {0, 5, 10, 63, 16, 31, 47, 62};
  BlockQ4_K b;
  b.d = 0x3C00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  pack_q4_k_scales(sc, mn, b.scales);
  auto code = [](int e) { return (e * 7 + e / 32) % 16; };
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      b.qs[32 * c + l] = static_cast<uint8_t>(code(64 * c + l) | (code(64 * c + 32 + l) << 4));
  const auto y = dequant(GgmlType::Q4_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    EXPECT_EQ(y[e], 1.0f * sc[s] * code(e) - 0.5f * mn[s]) << e;
  }
}

// Q4_1 / Q5_1: element j = d * code + m, the code's low 4 bits in qs[j % 16] (low nibble for
// j < 16), Q5_1's fifth bit in bit j of qh.
TEST(KnownAnswer, Q4_1AndQ5_1) {
  BlockQ4_1 a;
  BlockQ5_1 b;
  a.d = b.d = 0x3800;  // 0.5
  a.m = b.m = 0xBC00;  // -1.0
  auto code = [](int j) { return (j * 13 + 3) % 32; };
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    a.qs[j] = static_cast<uint8_t>((code(j) & 15) | ((code(j + 16) & 15) << 4));
    b.qs[j] = a.qs[j];
    qh |= static_cast<uint32_t>(code(j) >> 4) << j | static_cast<uint32_t>(code(j + 16) >> 4)
                                                         << (j + 16);
  }
  std::memcpy(b.qh, &qh, sizeof(qh));
  const auto y4 = dequant(GgmlType::Q4_1, &a, 32);
  const auto y5 = dequant(GgmlType::Q5_1, &b, 32);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y4[j], 0.5f * (code(j) & 15) - 1.0f) << j;
    EXPECT_EQ(y5[j], 0.5f * code(j) - 1.0f) << j;
  }
}

// IQ4_NL / IQ4_XS, written from the format description: each 4-bit code indexes the table below
// (element j's code in the low nibble of qs[j % 16] for j < 16, the high nibble after); IQ4_XS
// has 8 sub-blocks of 32 (codes in qs[16s..16s+15]) whose 6-bit scales, minus 32, multiply d:
// low 4 bits in nibble s % 2 of scales_l[s / 2], top 2 bits at bit 2s of scales_h.
TEST(KnownAnswer, IQ4_NLAndIQ4_XS) {
  const int table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  auto code = [](int e) { return (e * 7 + e / 32) % 16; };
  BlockIQ4_NL a;
  a.d = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) a.qs[j] = static_cast<uint8_t>(code(j) | (code(j + 16) << 4));
  const auto ya = dequant(GgmlType::IQ4_NL, &a, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(ya[j], 0.5f * table[code(j)]) << j;

  BlockIQ4_XS b;
  b.d = 0x3400;  // 0.25
  const int field[8] = {0, 63, 32, 31, 17, 48, 5, 40};
  b.scales_h = 0;
  std::memset(b.scales_l, 0, sizeof(b.scales_l));
  for (int s = 0; s < 8; ++s) {
    b.scales_l[s / 2] =
        static_cast<uint8_t>(b.scales_l[s / 2] | ((field[s] & 15) << (4 * (s % 2))));
    b.scales_h = static_cast<uint16_t>(b.scales_h | ((field[s] >> 4) << (2 * s)));
    for (int l = 0; l < 16; ++l)
      b.qs[16 * s + l] = static_cast<uint8_t>(code(32 * s + l) | (code(32 * s + l + 16) << 4));
  }
  const auto yb = dequant(GgmlType::IQ4_XS, &b, 256);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(yb[e], 0.25f * static_cast<float>(field[e / 32] - 32) * table[code(e)]) << e;
}

// Q2_K, written from the format description: per group of 16 a 4-bit scale (low nibble) and min
// (high nibble); element 128h + 32j + l's 2-bit code in qs[32h + l] at bits 2j;
// value = d * scale * code - dmin * min.
TEST(KnownAnswer, Q2_K) {
  BlockQ2_K b;
  b.d = 0x3800;     // 0.5
  b.dmin = 0x3400;  // 0.25
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<uint8_t>(((g * 7) % 16) | ((15 - g) << 4));
  auto code = [](int e) { return (e * 3 + e / 64) % 4; };
  std::memset(b.qs, 0, sizeof(b.qs));
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    b.qs[32 * h + l] |= static_cast<uint8_t>(code(e) << (2 * j));
  }
  const auto y = dequant(GgmlType::Q2_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 16;
    EXPECT_EQ(y[e], 0.5f * ((g * 7) % 16) * code(e) - 0.25f * (15 - g)) << e;
  }
}

// Q3_K, written from the format description: sixteen 6-bit scales (value - 32) with their low
// nibbles in bytes 0-7 (groups 0-7 low halves, 8-15 high halves) and their top 2 bits in bytes
// 8-11; element 128h + 32j + l's low 2 bits in qs[32h + l] at bits 2j, its third bit in hmask[l]
// at bit 4h + j; value = low 2 bits + 4 x third bit - 4.
TEST(KnownAnswer, Q3_K) {
  BlockQ3_K b;
  b.d = 0x3800;  // 0.5
  int sc6[16];
  for (int g = 0; g < 16; ++g) sc6[g] = (g * 23 + 5) % 64;
  std::memset(b.scales, 0, sizeof(b.scales));
  for (int g = 0; g < 16; ++g) {
    b.scales[g % 8] |= static_cast<uint8_t>((sc6[g] & 15) << (g < 8 ? 0 : 4));
    b.scales[8 + g % 4] |= static_cast<uint8_t>((sc6[g] >> 4) << (2 * (g / 4)));
  }
  auto code = [](int e) { return (e * 5 + e / 16) % 8; };  // 3-bit, value = code - 4
  std::memset(b.qs, 0, sizeof(b.qs));
  std::memset(b.hmask, 0, sizeof(b.hmask));
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    b.qs[32 * h + l] |= static_cast<uint8_t>((code(e) & 3) << (2 * j));
    b.hmask[l] |= static_cast<uint8_t>((code(e) >> 2) << (4 * h + j));
  }
  const auto y = dequant(GgmlType::Q3_K, &b, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.5f * (sc6[e / 16] - 32) * (code(e) - 4)) << e;
}

// Q5_K: Q4_K's header and nibbles, plus the 5th bit of element 32s + l in bit s of qh[l].
TEST(KnownAnswer, Q5_K) {
  const int sc[8] = {63, 1, 40, 4, 17, 33, 50, 2};
  const int mn[8] = {7, 0, 63, 10, 16, 31, 47, 62};
  BlockQ5_K b;
  b.d = 0x3400;     // 0.25
  b.dmin = 0x3C00;  // 1.0
  pack_q4_k_scales(sc, mn, b.scales);
  auto code = [](int e) { return (e * 11 + e / 64) % 32; };
  std::memset(b.qh, 0, sizeof(b.qh));
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int lo = code(64 * c + l), hi = code(64 * c + 32 + l);
      b.qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      b.qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  const auto y = dequant(GgmlType::Q5_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    EXPECT_EQ(y[e], 0.25f * sc[s] * code(e) - 1.0f * mn[s]) << e;
  }
}

TEST(KnownAnswer, Q6_K) {
  BlockQ6_K b;
  b.d = 0x3400;  // 0.25
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(g * 17 - 128);
  auto code = [](int e) { return (e * 5 + e / 64) % 64; };  // unsigned 6-bit, value = code - 32
  std::memset(b.qh, 0, sizeof(b.qh));
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    uint8_t& low = b.ql[64 * h + 32 * (quarter & 1) + l];
    if (quarter < 2)
      low = static_cast<uint8_t>((low & 0xF0) | (code(e) & 0xF));
    else
      low = static_cast<uint8_t>((low & 0x0F) | ((code(e) & 0xF) << 4));
    b.qh[32 * h + l] |= static_cast<uint8_t>((code(e) >> 4) << (2 * quarter));
  }
  const auto y = dequant(GgmlType::Q6_K, &b, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.25f * b.scales[e / 16] * (code(e) - 32)) << e;
}

TEST(KnownAnswer, Q8_0QuantizeRoundsHalfAwayFromZero) {
  float x[32] = {};
  x[0] = 127.0f;  // d = 1, id = 1
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.49f;
  x[4] = -126.5f;
  BlockQ8_0 b;
  quantize_row(GgmlType::Q8_0, x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 3);
  EXPECT_EQ(b.qs[2], -3);
  EXPECT_EQ(b.qs[3], 0);
  EXPECT_EQ(b.qs[4], -127);
}

TEST(KnownAnswer, Q8_KQuantize) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(i % 64) - 20.0f;
  x[5] = -127.0f;  // signed max: iscale = -127 / -127 = 1, d = 1
  BlockQ8_K b;
  quantize_row(GgmlType::Q8_K, x.data(), &b, 256);
  EXPECT_EQ(b.d, 1.0f);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(b.qs[i], static_cast<int>(x[i])) << i;
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += b.qs[16 * g + i];
    EXPECT_EQ(b.bsums[g], sum) << g;
  }
  std::vector<float> zeros(256, 0.0f);
  quantize_row(GgmlType::Q8_K, zeros.data(), &b, 256);
  EXPECT_EQ(b.d, 0.0f);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(b.bsums[g], 0);
}

// ---- quantize -> dequantize round trips ----

struct RoundTrip {
  GgmlType type;
  double max_rel_rmse;  // rms(error) / rms(x)
};

class QuantRoundTrip : public ::testing::TestWithParam<RoundTrip> {};

TEST_P(QuantRoundTrip, ErrorWithinFormatPrecision) {
  const auto [type, max_rel_rmse] = GetParam();
  const int64_t n = 256 * 12;
  std::mt19937 rng(static_cast<uint32_t>(type) * 1000 + 3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    // Block-to-block scale changes, one all-zero block and one constant block.
    const int64_t blk = i / 256;
    x[i] = blk == 3   ? 0.0f
           : blk == 5 ? 0.75f
                      : normal(rng) * std::ldexp(1.0f, static_cast<int>(blk % 7) - 3);
  }
  std::vector<uint8_t> q(ggml_row_bytes(type, n));
  quantize_row(type, x.data(), q.data(), n);
  std::vector<float> y(n);
  dequantize_row(type, q.data(), y.data(), n);
  // Per 256-block relative RMSE, so small-scale blocks count as much as large ones.
  for (int64_t blk = 0; blk < n / 256; ++blk) {
    double err2 = 0, ref2 = 0;
    for (int64_t i = 256 * blk; i < 256 * (blk + 1); ++i) {
      ASSERT_FALSE(std::isnan(y[i])) << i;
      err2 += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
      ref2 += double(x[i]) * x[i];
    }
    if (ref2 == 0) {
      EXPECT_EQ(err2, 0.0) << "zero block " << blk;
    } else {
      EXPECT_LE(std::sqrt(err2 / ref2), max_rel_rmse) << ggml_type_name(type) << " block " << blk;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, QuantRoundTrip,
    ::testing::Values(RoundTrip{GgmlType::F32, 0.0}, RoundTrip{GgmlType::F16, 4e-4},
                      RoundTrip{GgmlType::BF16, 3e-3}, RoundTrip{GgmlType::Q8_0, 0.01},
                      RoundTrip{GgmlType::Q8_K, 0.01}, RoundTrip{GgmlType::Q6_K, 0.04},
                      RoundTrip{GgmlType::Q5_0, 0.06}, RoundTrip{GgmlType::Q5_K, 0.06},
                      RoundTrip{GgmlType::Q4_K, 0.12}, RoundTrip{GgmlType::Q4_0, 0.13},
                      RoundTrip{GgmlType::Q3_K, 0.25}, RoundTrip{GgmlType::Q2_K, 0.45},
                      RoundTrip{GgmlType::Q4_1, 0.12}, RoundTrip{GgmlType::Q5_1, 0.06},
                      RoundTrip{GgmlType::MXFP4, 0.2}, RoundTrip{GgmlType::IQ4_NL, 0.12},
                      RoundTrip{GgmlType::IQ4_XS, 0.12}),
    [](const auto& info) { return std::string(ggml_type_name(info.param.type)); });

// ---- llama.cpp's own quantized tensors ----
// The fixtures were quantized by llama-quantize (no importance matrix) from the F32 files of the
// same models, so every quantized tensor must (a) requantize byte for byte from the F32 tensor
// with our reference quantizers and (b) dequantize to within format precision of it.

struct FixturePair {
  const char* model;
  const char* variant;
};

class LlamaCppFixture : public ::testing::TestWithParam<FixturePair> {};

TEST_P(LlamaCppFixture, RequantizesByteExactAndDequantizesClose) {
  const auto [model, variant] = GetParam();
  const std::filesystem::path dir = std::filesystem::path(STRATA_FIXTURES_DIR) / model;
  const auto f32_path = dir / (std::string(model) + "-F32.gguf");
  const auto q_path = dir / (std::string(model) + "-" + variant + ".gguf");
  if (!std::filesystem::exists(f32_path) || !std::filesystem::exists(q_path))
    GTEST_SKIP() << "fixture missing: " << q_path;
  const io::GgufFile f32 = io::GgufFile::open(f32_path.string());
  const io::GgufFile qf = io::GgufFile::open(q_path.string());
  int n_checked = 0;
  for (const io::GgufTensorInfo& qt : qf.tensors()) {
    if (qt.type == GgmlType::F32 || !gemv_supported(qt.type)) continue;
    const io::GgufTensorInfo* ft = f32.find_tensor(qt.name);
    ASSERT_NE(ft, nullptr) << qt.name;
    ASSERT_EQ(ft->type, GgmlType::F32) << qt.name;
    ASSERT_EQ(ft->ne, qt.ne) << qt.name;
    const int64_t n_cols = static_cast<int64_t>(qt.ne[0]);
    const int64_t n_rows = static_cast<int64_t>(qt.n_elements() / qt.ne[0]);
    const size_t q_row = qt.row_bytes();
    const auto* qdata = reinterpret_cast<const uint8_t*>(qf.tensor_data(qt));
    const auto* fdata = reinterpret_cast<const float*>(f32.tensor_data(*ft));
    std::vector<uint8_t> requant(q_row);
    std::vector<float> deq(n_cols);
    int64_t rows_differing = 0;
    double err2 = 0, ref2 = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* x = fdata + r * n_cols;
      quantize_row(qt.type, x, requant.data(), n_cols);
      if (std::memcmp(requant.data(), qdata + r * q_row, q_row) != 0) ++rows_differing;
      dequantize_row(qt.type, qdata + r * q_row, deq.data(), n_cols);
      for (int64_t i = 0; i < n_cols; ++i) {
        ASSERT_TRUE(std::isfinite(deq[i])) << qt.name << " row " << r;
        err2 += (double(deq[i]) - x[i]) * (double(deq[i]) - x[i]);
        ref2 += double(x[i]) * x[i];
      }
    }
    EXPECT_EQ(rows_differing, 0) << qt.name << " (" << ggml_type_name(qt.type) << ", " << n_rows
                                 << " rows): rows whose requantized bytes differ";
    const double limit = qt.type == GgmlType::Q8_0    ? 0.01
                         : qt.type == GgmlType::Q6_K  ? 0.04
                         : qt.type == GgmlType::Q5_0  ? 0.06
                         : qt.type == GgmlType::MXFP4 ? 0.2
                                                      : 0.13;
    EXPECT_LE(std::sqrt(err2 / ref2), limit) << qt.name << " " << ggml_type_name(qt.type);
    ++n_checked;
  }
  EXPECT_GT(n_checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaCppFixture,
                         ::testing::Values(FixturePair{"tiny-qwen3moe", "Q4_K_M"},
                                           FixturePair{"tiny-qwen3moe", "Q8_0"},
                                           FixturePair{"tiny-qwen3moe", "Q4_0"},
                                           FixturePair{"tiny-gpt-oss", "MXFP4"}),
                         [](const auto& info) {
                           std::string s = std::string(info.param.model) + "_" + info.param.variant;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace strata::kernels

// Activations: llama.cpp's x86 Q8_0 path (127/amax, round half to even), not the reference
// quantizer (1/d, round half away from zero).
TEST(QuantActivation, Q8_0RoundsHalfToEvenWithInverseOfAmax) {
  float x[32] = {};
  x[0] = 127.0f;  // amax = 127: id = 1
  x[1] = 0.5f;
  x[2] = 1.5f;
  x[3] = 2.5f;
  x[4] = -0.5f;
  x[5] = -2.5f;
  strata::kernels::BlockQ8_0 act{}, ref{};
  strata::kernels::quantize_activation_row(strata::GgmlType::Q8_0, x, &act, 32);
  strata::kernels::quantize_row(strata::GgmlType::Q8_0, x, &ref, 32);
  EXPECT_EQ(act.qs[0], 127);
  EXPECT_EQ(act.qs[1], 0);
  EXPECT_EQ(act.qs[2], 2);
  EXPECT_EQ(act.qs[3], 2);
  EXPECT_EQ(act.qs[4], 0);
  EXPECT_EQ(act.qs[5], -2);
  EXPECT_EQ(ref.qs[1], 1);  // the reference rounds half away from zero
  EXPECT_EQ(ref.qs[3], 3);
  EXPECT_EQ(act.d, ref.d);
  // Other types are quantize_row.
  float y[256];
  for (int i = 0; i < 256; ++i) y[i] = std::sin(0.37f * i) * 3.0f;
  strata::kernels::BlockQ8_K a{}, b{};
  strata::kernels::quantize_activation_row(strata::GgmlType::Q8_K, y, &a, 256);
  strata::kernels::quantize_row(strata::GgmlType::Q8_K, y, &b, 256);
  EXPECT_EQ(std::memcmp(&a, &b, sizeof(a)), 0);
}

// quantize_activation_row (AVX2 twins where the CPU has AVX2) against the scalar twin, byte for
// byte: random rows of awkward lengths and scales, plus blocks that are all zero, blocks whose
// scaled values land exactly on .5 (round half to even), blocks whose largest magnitude appears
// with both signs (Q8_K keeps the first one's sign), and denormal and huge values.
TEST(QuantActivation, MatchesTheScalarTwinByteForByte) {
  using strata::GgmlType;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q8_K}) {
    const int64_t block = t == GgmlType::Q8_0 ? strata::kernels::kQK : strata::kernels::kQK_K;
    const size_t block_bytes = t == GgmlType::Q8_0 ? sizeof(strata::kernels::BlockQ8_0)
                                                   : sizeof(strata::kernels::BlockQ8_K);
    for (int64_t nb : {1, 2, 3, 7, 16, 33, 64, 129}) {
      for (int pattern = 0; pattern < 6; ++pattern) {
        const int64_t n = nb * block;
        std::vector<float> x(static_cast<size_t>(n));
        const float scale = std::pow(10.0f, float(pattern) - 2.0f);  // 0.01 .. 1000
        for (float& v : x) v = normal(rng) * scale;
        if (pattern == 1) std::fill(x.begin(), x.begin() + block, 0.0f);  // a zero block
        if (pattern == 2) {  // amax 127: scale 1, so k + 0.5 are exact ties
          for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(int(i % 200) - 100) + 0.5f;
          for (int64_t b = 0; b < nb; ++b) x[size_t(b * block)] = 127.0f;
        }
        if (pattern == 3)  // the largest magnitude with both signs, negative first
          for (int64_t b = 0; b < nb; ++b) {
            x[size_t(b * block + 5)] = -50.0f * scale;
            x[size_t(b * block + block - 3)] = 50.0f * scale;
          }
        if (pattern == 4) x[size_t(n / 2)] = 1e-40f;  // a denormal
        if (pattern == 5) x[size_t(n - 1)] = -3e37f;  // a huge value: the rest rounds to 0
        std::vector<uint8_t> got(size_t(nb) * block_bytes, 0xAB), want(got.size(), 0xCD);
        strata::kernels::quantize_activation_row(t, x.data(), got.data(), n);
        strata::kernels::quantize_activation_row_ref(t, x.data(), want.data(), n);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0)
            << strata::ggml_type_name(t) << " nb " << nb << " pattern " << pattern;
      }
    }
  }
}
