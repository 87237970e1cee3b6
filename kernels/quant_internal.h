// Block-format helpers shared by quant.cpp and gemv_ref.cpp (both generic x86-64 code): the
// scale/bit unpacking of each format, written once so dequantize_row and the _ref dots agree.
// Exercised by tests/test_quant.cpp and tests/test_gemv.cpp.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/quant.h"

namespace strata::kernels::detail {
// Internal linkage on purpose: the ISA files are compiled with other -m flags and must never
// share a COMDAT copy of these with generic code.
namespace {

// MXFP4's E2M1 code points, doubled so they are integers (ggml's kvalues_mxfp4); the block scale
// is therefore 2^(e-128) instead of 2^(e-127).
constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The code points of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl), ascending.
constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

// 2^(e - 128) for an E8M0 exponent e, built from the bits (ggml's GGML_E8M0_TO_FP32_HALF).
inline float e8m0_to_f32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Q4_K: 8 sub-blocks of 32, each with a 6-bit scale and a 6-bit min packed into 12 bytes:
// bytes 0-3 low 6 bits of scales 0-3, bytes 4-7 low 6 bits of mins 0-3, bytes 8-11 the low
// nibbles of scales 4-7 (low half) and mins 4-7 (high half); the top 2 bits of scales/mins 4-7
// sit in the top 2 bits of bytes 0-3 / 4-7.
inline void q4_k_scale_min(const uint8_t* s, int j, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *mn = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q2_K element e as its 2-bit code (value = d * (scale & 15) * code - dmin * (scale >> 4) of its
// group of 16, e / 16).
inline int q2_k_code(const BlockQ2_K& b, int e) {
  const int h = e / 128, j = (e % 128) / 32, l = e % 32;
  return (b.qs[32 * h + l] >> (2 * j)) & 3;
}

// Q3_K's sixteen 6-bit group scales as 4 words of 4 bytes, scale g in byte g (before the -32;
// ggml's dequantize_row_q3_K unpacking): the low nibble of scale g sits in byte g % 8 (low half for
// g < 8, high half after), its top 2 bits in byte 8 + g % 4 at bits 2 (g / 4).
inline void q3_k_scale_words(const uint8_t* s, uint32_t u[4]) {
  uint32_t a[3];
  std::memcpy(a, s, sizeof(a));
  u[0] = (a[0] & 0x0F0F0F0F) | ((a[2] & 0x03030303) << 4);
  u[1] = (a[1] & 0x0F0F0F0F) | (((a[2] >> 2) & 0x03030303) << 4);
  u[2] = ((a[0] >> 4) & 0x0F0F0F0F) | (((a[2] >> 4) & 0x03030303) << 4);
  u[3] = ((a[1] >> 4) & 0x0F0F0F0F) | (((a[2] >> 6) & 0x03030303) << 4);
}

// The sixteen Q3_K group scales, each less 32.
inline void q3_k_scales(const uint8_t* s, int8_t out[16]) {
  uint32_t u[4];
  q3_k_scale_words(s, u);
  uint8_t bytes[16];
  std::memcpy(bytes, u, sizeof(bytes));
  for (int g = 0; g < 16; ++g) out[g] = static_cast<int8_t>(bytes[g] - 32);
}

// Q3_K element e as a signed value in [-4, 3]: the 2-bit code, less 4 where its hmask bit is clear.
inline int q3_k_value(const BlockQ3_K& b, int e) {
  const int h = e / 128, j = (e % 128) / 32, l = e % 32;
  const int low = (b.qs[32 * h + l] >> (2 * j)) & 3;
  return ((b.hmask[l] >> (e / 32)) & 1) != 0 ? low : low - 4;
}

// Q4_K element e of a super-block as its 4-bit code: qs[32*c + l] holds element 64c + l in the low
// nibble and element 64c + 32 + l in the high nibble.
inline int q4_k_code(const BlockQ4_K& b, int e) {
  const int c = e / 64, l = e % 32;
  const uint8_t byte = b.qs[32 * c + l];
  return (e % 64) < 32 ? (byte & 0xF) : (byte >> 4);
}

// Q5_K element e as its 5-bit code: Q4_K's nibble, plus 16 when bit e / 32 of qh[e % 32] is set.
inline int q5_k_code(const BlockQ5_K& b, int e) {
  const int c = e / 64, l = e % 32;
  const uint8_t byte = b.qs[32 * c + l];
  const int low = (e % 64) < 32 ? (byte & 0xF) : (byte >> 4);
  return low | (((b.qh[l] >> (e / 32)) & 1) << 4);
}

// Q6_K element e as a signed value in [-32, 31]: per 128-element half h, ql[64h + l] holds the
// low nibbles of elements l (low) and l + 64 (high), ql[64h + 32 + l] of l + 32 and l + 96, and
// qh[32h + l] the 2 high bits of l, l + 32, l + 64, l + 96 (bits 0-1, 2-3, 4-5, 6-7).
inline int q6_k_value(const BlockQ6_K& b, int e) {
  const int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
  const uint8_t low_byte = b.ql[64 * h + 32 * (quarter & 1) + l];
  const int low = quarter < 2 ? (low_byte & 0xF) : (low_byte >> 4);
  const int high = (b.qh[32 * h + l] >> (2 * quarter)) & 3;
  return (low | (high << 4)) - 32;
}

// Q5_0 element j (0..31) as a signed value in [-16, 15]; bit j of qh is its 5th bit.
inline int q5_0_value(const BlockQ5_0& b, int j) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, sizeof(qh));
  const int low = j < 16 ? (b.qs[j] & 0xF) : (b.qs[j - 16] >> 4);
  return (low | static_cast<int>(((qh >> j) & 1) << 4)) - 16;
}

// Q4_1 / Q5_1 element j (0..31) as its unsigned code (0..15 / 0..31; element = d * code + m).
inline int q4_1_code(const BlockQ4_1& b, int j) {
  return j < 16 ? (b.qs[j] & 0xF) : (b.qs[j - 16] >> 4);
}
inline int q5_1_code(const BlockQ5_1& b, int j) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, sizeof(qh));
  const int low = j < 16 ? (b.qs[j] & 0xF) : (b.qs[j - 16] >> 4);
  return low | static_cast<int>(((qh >> j) & 1) << 4);
}

// Q4_0 element j (0..31) as a signed value in [-8, 7].
inline int q4_0_value(const BlockQ4_0& b, int j) {
  return (j < 16 ? (b.qs[j] & 0xF) : (b.qs[j - 16] >> 4)) - 8;
}

// IQ4_NL element j (0..31) as its table value.
inline int iq4_nl_value(const BlockIQ4_NL& b, int j) {
  return kIq4nlValues[j < 16 ? (b.qs[j] & 0xF) : (b.qs[j - 16] >> 4)];
}
// IQ4_XS element j (0..255) as its table value, and sub-block s's scale (the 6-bit field - 32).
inline int iq4_xs_value(const BlockIQ4_XS& b, int j) {
  const int s = j / 32, l = j % 32;
  return kIq4nlValues[l < 16 ? (b.qs[16 * s + l] & 0xF) : (b.qs[16 * s + l - 16] >> 4)];
}
inline int iq4_xs_scale(const BlockIQ4_XS& b, int s) {
  const int low = (b.scales_l[s / 2] >> (4 * (s % 2))) & 0xF;
  const int high = (b.scales_h >> (2 * s)) & 3;
  return (low | (high << 4)) - 32;
}
// An IQ4_XS super-block's canonical integer sum against its Q8_K activations (gemv.cpp):
// sum over sub-blocks s of scale_s * sum_l value[32s + l] * q8[32s + l].
inline int32_t iq4_xs_sumi(const BlockIQ4_XS& b, const BlockQ8_K& x) {
  int32_t sumi = 0;
  for (int s = 0; s < 8; ++s) {
    int32_t isum = 0;
    for (int l = 0; l < 32; ++l) isum += iq4_xs_value(b, 32 * s + l) * x.qs[32 * s + l];
    sumi += iq4_xs_scale(b, s) * isum;
  }
  return sumi;
}

// MXFP4 element j (0..31) as its doubled E2M1 value in [-12, 12].
inline int mxfp4_value(const BlockMXFP4& b, int j) {
  return kMxfp4Values[j < 16 ? (b.qs[j] & 0xF) : (b.qs[j - 16] >> 4)];
}

}  // namespace

// AVX2 twins (quant_avx2.cpp) of quant.cpp's activation quantizers, same bytes.
void quant_q8_0_activation_avx2(const float* x, BlockQ8_0* y, int64_t nb);
void quant_q8_k_avx2(const float* x, BlockQ8_K* y, int64_t nb);

}  // namespace strata::kernels::detail
