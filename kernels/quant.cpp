// Half/bfloat16 conversions, row dequantizers and llama.cpp-compatible reference quantizers for
// the block formats in quant.h. Every float operation follows ggml-quants.c's order (this file is
// built with -ffp-contract=off) so quantized bytes match llama.cpp's quantize_row_*_ref.
// Tested by tests/test_quant.cpp (known answers, round trips, llama.cpp fixture tensors).
#include "kernels/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "io/check.h"
#include "kernels/cpu_features.h"
#include "kernels/gemv.h"
#include "kernels/quant_internal.h"

namespace strata::kernels {
namespace {

using detail::e8m0_to_f32_half;
using detail::kIq4nlValues;
using detail::kMxfp4Values;

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// ggml's nearest_int: round half to even through the float adder (valid for |f| <= 2^22).
int nearest_int(float f) {
  const float v = f + 12582912.f;  // 1.5 * 2^23: the integer lands in the low mantissa bits
  return static_cast<int>(f32_bits(v) & 0x007fffff) - 0x00400000;
}

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: a group below this is all zero

void check_blocks(GgmlType t, int64_t n, int64_t block) {
  STRATA_ASSERT(n >= 0 && n % block == 0, "{}: {} elements is not a multiple of the {} block",
                ggml_type_name(t), n, block);
}

// ---- dequantizers (ggml's dequantize_row_*: same float expression per element) ----

void dequant_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = detail::q4_0_value(x[i], j) * d;
  }
}

void dequant_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = detail::q5_0_value(x[i], j) * d;
  }
}

template <typename Block, int (*code)(const Block&, int)>
void dequant_q_1(const Block* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = d * code(x[i], j) + m;
  }
}

void dequant_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = x[i].qs[j] * d;
  }
}

void dequant_mxfp4(const BlockMXFP4* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = e8m0_to_f32_half(x[i].e);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = detail::mxfp4_value(x[i], j) * d;
  }
}

// Q4_K, Q5_K: y = (d * sc_s) * code - dmin * m_s per sub-block s of 32.
void dequant_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = d * detail::iq4_nl_value(x[i], j);
  }
}

void dequant_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int s = 0; s < 8; ++s) {
      const float dl = d * detail::iq4_xs_scale(x[i], s);
      for (int l = 0; l < 32; ++l)
        y[i * kQK_K + 32 * s + l] = dl * detail::iq4_xs_value(x[i], 32 * s + l);
    }
  }
}

template <typename Block, int (*code)(const Block&, int)>
void dequant_k_min(const Block* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const float dmin = fp16_to_f32(x[i].dmin);
    for (int s = 0; s < kQK_K / 32; ++s) {
      uint8_t sc, mn;
      detail::q4_k_scale_min(x[i].scales, s, &sc, &mn);
      const float ds = d * sc;
      const float ms = dmin * mn;
      for (int l = 0; l < 32; ++l) {
        const int e = 32 * s + l;
        y[i * kQK_K + e] = ds * code(x[i], e) - ms;
      }
    }
  }
}

void dequant_q2_k(const BlockQ2_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const float dmin = fp16_to_f32(x[i].dmin);
    for (int g = 0; g < kQK_K / 16; ++g) {
      const float dl = d * (x[i].scales[g] & 0xF);
      const float ml = dmin * (x[i].scales[g] >> 4);
      for (int l = 0; l < 16; ++l)
        y[i * kQK_K + 16 * g + l] = dl * detail::q2_k_code(x[i], 16 * g + l) - ml;
    }
  }
}

void dequant_q3_k(const BlockQ3_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d);
    int8_t sc[16];
    detail::q3_k_scales(x[i].scales, sc);
    for (int e = 0; e < kQK_K; ++e) y[i * kQK_K + e] = d * sc[e / 16] * detail::q3_k_value(x[i], e);
  }
}

void dequant_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int e = 0; e < kQK_K; ++e)
      y[i * kQK_K + e] = d * x[i].scales[e / 16] * detail::q6_k_value(x[i], e);
  }
}

void dequant_q8_k(const BlockQ8_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < kQK_K; ++j) y[i * kQK_K + j] = x[i].d * x[i].qs[j];
}

// ---- reference quantizers (ggml's quantize_row_*_ref) ----

void quant_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

// llama.cpp's x86 (AVX2) activation quantizer: id = 127/amax, round half to even. (The scalar
// twin of quant_avx2.cpp's.)
void quant_q8_0_activation(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  }
}

// The value with the largest magnitude (the first one on ties), sign kept.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void quant_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = signed_absmax(x, kQK) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      // Truncation toward zero after +8.5 rounds half up; the largest magnitude maps to code 0.
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quant_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = signed_absmax(x, kQK) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
      const int q1 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 16.5f)));
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

// ggml's quantize_row_q{4,5}_1_ref: d = (max - min) / nmax, m = min, codes (x - min) / d + 0.5
// truncated (Q4_1 through an int8 and clamped to 15).
template <int kBits, typename Block>
void quant_q_1(const float* x, Block* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float min = std::numeric_limits<float>::max(), max = -std::numeric_limits<float>::max();
    for (int j = 0; j < kQK; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / ((1 << kBits) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = (x[j] - min) * id, x1 = (x[j + 16] - min) * id;
      int q0, q1;
      if constexpr (kBits == 4) {
        q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 0.5f)));
        q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 0.5f)));
      } else {
        q0 = static_cast<uint8_t>(x0 + 0.5f);
        q1 = static_cast<uint8_t>(x1 + 0.5f);
        qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
        qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
      }
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
    }
    if constexpr (kBits == 5) std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

int mxfp4_best_index(float x, float d) {
  int best = 0;
  float best_err = std::fabs(kMxfp4Values[0] * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(kMxfp4Values[i] * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

void quant_mxfp4(const float* x, BlockMXFP4* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    // The largest code is 6 = 1.5 * 2^2, so the block exponent is floor(log2(amax)) - 2.
    const uint8_t e =
        amax > 0.0f ? static_cast<uint8_t>(std::floor(std::log2(amax)) - 2 + 127) : uint8_t{0};
    const float d = e8m0_to_f32_half(e);
    y[i].e = e;
    for (int j = 0; j < kQK / 2; ++j)
      y[i].qs[j] =
          static_cast<uint8_t>(mxfp4_best_index(x[j], d) | (mxfp4_best_index(x[j + 16], d) << 4));
  }
}

void quant_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    const float max = signed_absmax(x, kQK_K);
    if (max == 0.0f) {
      y[i].d = 0.0f;
      std::memset(y[i].qs, 0, sizeof(y[i].qs));
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    // -127 (not -128) keeps every code symmetric, as llama.cpp does for its AVX paths.
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[i].qs[16 * g + j];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

// The value of largest magnitude among x[0..n) into *max; false, with L zeroed, when the group is
// all zero (ggml's GROUP_MAX_EPS).
bool group_max(int n, const float* x, int8_t* L, float* max) {
  float amax = 0.0f;
  *max = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      *max = x[i];
    }
  }
  if (amax >= kGroupMaxEps) return true;
  std::memset(L, 0, static_cast<size_t>(n));
  return false;
}

// ggml's make_qx_quants with rmse_type 1 and no importance weights (w = x²): a symmetric scale
// for n values onto codes [-nmax, nmax-1], refined over 18 trial scales. Returns the scale and
// writes codes + nmax into L.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max;
  if (!group_max(n, x, L, &max)) return 0.0f;
  auto clamp = [nmax](int l) { return std::max(-nmax, std::min(nmax - 1, l)); };
  float iscale = -nmax / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp(nearest_int(iscale * x[i]));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp(nearest_int(iscale * x[i]));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i)
        L[i] = static_cast<int8_t>(nmax + clamp(nearest_int(iscale * x[i])));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// ggml's make_qkx2_quants: an asymmetric scale and min for n values onto codes [0, nmax],
// minimising the weighted squared error (use_mad: absolute error) over nstep+1 trial scales.
// Returns the scale, writes the (positive) min to *the_min and the codes to L.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad = false) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, n);
    *the_min = -min;
    return 0.0f;
  }
  auto clamp = [nmax](int l) { return std::max(0, std::min(nmax, l)); };
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clamp(nearest_int(iscale * (x[i] - min))));
    const float diff = scale * L[i] + min - x[i];
    best_error += weights[i] * (use_mad ? std::fabs(diff) : diff * diff);
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp(nearest_int(iscale * (x[i] - min)));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0.0f;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * Laux[i] + this_min - x[i];
        cur_error += weights[i] * (use_mad ? std::fabs(diff) : diff * diff);
      }
      if (cur_error < best_error) {
        std::memcpy(L, Laux, n);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Packs 2-bit codes L (one per element) into a Q2_K / Q3_K qs: qs[32h + l] holds elements
// 128h + l, + 32, + 64, + 96 at bits 0, 2, 4, 6.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < kQK_K / 128; ++h)
    for (int l = 0; l < 32; ++l)
      qs[32 * h + l] =
          static_cast<uint8_t>(L[128 * h + l] | (L[128 * h + l + 32] << 2) |
                               (L[128 * h + l + 64] << 4) | (L[128 * h + l + 96] << 6));
}

void quant_q2_k(const float* x, BlockQ2_K* y, int64_t nb) {
  constexpr float kQ4Scale = 15.f;
  uint8_t L[kQK_K];
  uint8_t Laux[16];
  float weights[16];
  float mins[kQK_K / 16];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0.0f, max_min = 0.0f;
    for (int g = 0; g < kQK_K / 16; ++g) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * g + l]);
      scales[g] = make_qkx2_quants(16, 3, x + 16 * g, weights, L + 16 * g, &mins[g], Laux, -0.5f,
                                   0.1f, 15, /*use_mad=*/true);
      max_scale = std::max(max_scale, scales[g]);
      max_min = std::max(max_min, mins[g]);
    }
    if (max_scale > 0) {
      const float iscale = kQ4Scale / max_scale;
      for (int g = 0; g < kQK_K / 16; ++g)
        y[i].scales[g] = static_cast<uint8_t>(nearest_int(iscale * scales[g]));
      y[i].d = f32_to_fp16(max_scale / kQ4Scale);
    } else {
      std::memset(y[i].scales, 0, sizeof(y[i].scales));
      y[i].d = f32_to_fp16(0.0f);
    }
    if (max_min > 0) {
      const float iscale = kQ4Scale / max_min;
      for (int g = 0; g < kQK_K / 16; ++g)
        y[i].scales[g] |= static_cast<uint8_t>(nearest_int(iscale * mins[g]) << 4);
      y[i].dmin = f32_to_fp16(max_min / kQ4Scale);
    } else {
      y[i].dmin = f32_to_fp16(0.0f);
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      const float d = fp16_to_f32(y[i].d) * (y[i].scales[g] & 0xF);
      if (d == 0.0f) continue;
      const float dm = fp16_to_f32(y[i].dmin) * (y[i].scales[g] >> 4);
      for (int l = 0; l < 16; ++l)
        L[16 * g + l] =
            static_cast<uint8_t>(std::max(0, std::min(3, nearest_int((x[16 * g + l] + dm) / d))));
    }
    pack_2bit(L, y[i].qs);
  }
}

// ggml's make_q3_quants with do_rmse: a symmetric scale for n values onto codes [-nmax, nmax-1]
// (weights x²), refined by up to 5 passes that move single codes while the weighted fit improves.
// Returns the scale and writes codes + nmax into L.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float max;
  if (!group_max(n, x, L, &max)) return 0.0f;
  const float iscale = -nmax / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        const int new_l = std::max(-nmax, std::min(nmax - 1, nearest_int(x[i] * sl2 / slx)));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

void quant_q3_k(const float* x, BlockQ3_K* y, int64_t nb) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0.0f, amax = 0.0f;
    for (int g = 0; g < kQK_K / 16; ++g) {
      scales[g] = make_q3_quants(16, 4, x + 16 * g, L + 16 * g);
      const float scale = std::fabs(scales[g]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[g];
      }
    }
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int g = 0; g < kQK_K / 16; ++g) {
        // ggml keeps the rounded scale in an int8 before clamping (|iscale * scale| <= 32 here).
        const auto rounded = static_cast<int8_t>(nearest_int(iscale * scales[g]));
        const int l = std::max(-32, std::min(31, static_cast<int>(rounded))) + 32;
        if (g < 8)
          y[i].scales[g] = static_cast<uint8_t>(l & 0xF);
        else
          y[i].scales[g - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        y[i].scales[g % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (g / 4)));
      }
      y[i].d = f32_to_fp16(1 / iscale);
    } else {
      y[i].d = f32_to_fp16(0.0f);
    }
    int8_t sc[16];
    detail::q3_k_scales(y[i].scales, sc);
    for (int g = 0; g < kQK_K / 16; ++g) {
      const float d = fp16_to_f32(y[i].d) * sc[g];
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l)
        L[16 * g + l] =
            static_cast<int8_t>(std::max(-4, std::min(3, nearest_int(x[16 * g + l] / d))) + 4);
    }
    // Element e: its third bit in hmask[e % 32] bit e / 32, its low 2 bits in qs.
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    for (int e = 0; e < kQK_K; ++e)
      if (L[e] > 3) {
        y[i].hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
        L[e] = static_cast<int8_t>(L[e] - 4);
      }
    pack_2bit(reinterpret_cast<const uint8_t*>(L), y[i].qs);
  }
}

// The header of a Q4_K / Q5_K super-block as ggml's quantize_row_q{4,5}_K_ref make it: per
// The IQ4 code whose table value is nearest x (ggml's best_index_int8: ties go up).
int iq4_best_index(float x) {
  if (x <= kIq4nlValues[0]) return 0;
  if (x >= kIq4nlValues[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < kIq4nlValues[mid])
      hi = mid;
    else
      lo = mid;
  }
  return x - kIq4nlValues[hi - 1] < kIq4nlValues[hi] - x ? hi - 1 : hi;
}

// ggml's quantize_row_iq4_nl_impl as llama-quantize runs it (ntry = 7, no importance matrix, so
// weights x^2): n / 32 sub-blocks, each given the best of 16 trial scales onto the table; with
// more than one (IQ4_XS) the scales become 6-bit multiples of one fp16 d and the codes are chosen
// again against them. Writes d, the packed codes and (IQ4_XS) the packed scales.
void quant_iq4(const float* x, int n, uint16_t* dh, uint8_t* q4, uint16_t* scales_h,
               uint8_t* scales_l) {
  constexpr int kTries = 7;
  const int nsub = n / 32;
  float scales[kQK_K / 32];
  uint8_t L[kQK_K];
  std::memset(q4, 0, static_cast<size_t>(n / 2));
  *dh = f32_to_fp16(0.0f);
  float max_scale = 0.0f, amax_scale = 0.0f;
  for (int ib = 0; ib < nsub; ++ib) {
    const float* xb = x + 32 * ib;
    uint8_t* Lb = L + 32 * ib;
    float weight[32];
    for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax < kGroupMaxEps) {
      scales[ib] = 0.0f;
      continue;
    }
    auto fit = [&](float id, float* sumqx, float* sumq2, bool keep) {
      *sumqx = *sumq2 = 0.0f;
      for (int j = 0; j < 32; ++j) {
        const int l = iq4_best_index(id * xb[j]);
        if (keep) Lb[j] = static_cast<uint8_t>(l);
        const float q = kIq4nlValues[l];
        *sumqx += weight[j] * q * xb[j];
        *sumq2 += weight[j] * q * q;
      }
    };
    float d = -max / kIq4nlValues[0];
    float sumqx, sumq2;
    fit(1 / d, &sumqx, &sumq2, true);
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -kTries; itry <= kTries; ++itry) {
      fit(static_cast<float>(itry + kIq4nlValues[0]) / max, &sumqx, &sumq2, false);
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) {
      amax_scale = std::fabs(d);
      max_scale = d;
    }
  }
  if (nsub > 1) {
    *scales_h = 0;
    const float d = -max_scale / 32;
    *dh = f32_to_fp16(d);
    const float id = d != 0.0f ? 1 / d : 0.0f;
    for (int ib = 0; ib < nsub; ++ib) {
      const int l = std::clamp(nearest_int(id * scales[ib]), -32, 31);
      const float dl = d * l;
      const float idl = dl != 0.0f ? 1 / dl : 0.0f;
      for (int j = 0; j < 32; ++j)
        L[32 * ib + j] = static_cast<uint8_t>(iq4_best_index(idl * x[32 * ib + j]));
      const int u = l + 32;
      if (ib % 2 == 0)
        scales_l[ib / 2] = static_cast<uint8_t>(u & 0xF);
      else
        scales_l[ib / 2] |= static_cast<uint8_t>((u & 0xF) << 4);
      *scales_h = static_cast<uint16_t>(*scales_h | ((u >> 4) << (2 * ib)));
    }
  } else {
    *dh = f32_to_fp16(scales[0]);
    const float id = scales[0] != 0.0f ? 1 / scales[0] : 0.0f;
    for (int j = 0; j < n; ++j) L[j] = static_cast<uint8_t>(iq4_best_index(id * x[j]));
  }
  for (int i = 0; i < nsub; ++i)
    for (int j = 0; j < 16; ++j)
      q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

void quant_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    uint16_t d = 0;
    quant_iq4(x + i * kQK, kQK, &d, y[i].qs, nullptr, nullptr);
    y[i].d = d;
  }
}

void quant_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    uint16_t d = 0, scales_h = 0;
    quant_iq4(x + i * kQK_K, kQK_K, &d, y[i].qs, &scales_h, y[i].scales_l);
    y[i].d = d;
    y[i].scales_h = scales_h;
  }
}

// sub-block of 32 a weighted scale-and-min search over codes 0..nmax (make_qkx2_quants with rmin
// and nstep), the scales and mins rounded to 6 bits against the block's largest, then the codes
// re-derived against the scales and mins actually stored (into L, one per element).
template <typename Block>
void quant_k_header(const float* x, Block& y, uint8_t* L, int nmax, float rmin, int nstep) {
  uint8_t Laux[32];
  float weights[32];
  float mins[kQK_K / 32];    // [sub-block]
  float scales[kQK_K / 32];  // [sub-block]
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < kQK_K / 32; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] =
        make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(y.scales, 0, sizeof(y.scales));
  for (int j = 0; j < kQK_K / 32; ++j) {
    const uint8_t ls =
        std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    if (j < 4) {
      y.scales[j] = ls;
      y.scales[j + 4] = lm;
    } else {
      y.scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      y.scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      y.scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  y.d = f32_to_fp16(max_scale / 63.f);
  y.dmin = f32_to_fp16(max_min / 63.f);
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, mn;
    detail::q4_k_scale_min(y.scales, j, &sc, &mn);
    const float d = fp16_to_f32(y.d) * sc;
    if (d == 0.0f) continue;
    const float dm = fp16_to_f32(y.dmin) * mn;
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] =
          static_cast<uint8_t>(std::max(0, std::min(nmax, nearest_int((x[32 * j + l] + dm) / d))));
  }
}

void quant_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    quant_k_header(x, y[i], L, 15, -1.f, 20);
    for (int c = 0; c < kQK_K / 64; ++c)
      for (int l = 0; l < 32; ++l)
        y[i].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

void quant_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    quant_k_header(x, y[i], L, 31, -0.5f, 15);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int c = 0; c < kQK_K / 64; ++c)
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        y[i].qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        y[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
  }
}

void quant_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];  // [group of 16]
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int g = 0; g < kQK_K / 16; ++g) {
      scales[g] = make_qx_quants(16, 32, x + 16 * g, L + 16 * g);
      const float abs_scale = std::fabs(scales[g]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[g];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(y[i]));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = f32_to_fp16(1 / iscale);
    for (int g = 0; g < kQK_K / 16; ++g)
      y[i].scales[g] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[g])));
    for (int g = 0; g < kQK_K / 16; ++g) {
      const float d = fp16_to_f32(y[i].d) * y[i].scales[g];
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        const int q = std::max(-32, std::min(31, nearest_int(x[16 * g + l] / d)));
        L[16 * g + l] = static_cast<int8_t>(q + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const int8_t* Lh = L + 128 * h;
      uint8_t* ql = y[i].ql + 64 * h;
      uint8_t* qh = y[i].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                     ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    return bits_f32(sign | f32_bits(static_cast<float>(mant) * 0x1p-24f));
  }
  if (exp == 31) return bits_f32(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_fp16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t a = x & 0x7FFFFFFF;
  if (a > 0x7F800000) return sign | 0x7E00;   // NaN: a quiet NaN, as ggml
  if (a >= 0x477FF000) return sign | 0x7C00;  // >= 65520 rounds (to even) to infinity
  if (a < 0x38800000) {
    // Below 2^-14: a half subnormal. Adding 0.5 (ulp 2^-24) makes the float adder round |f| to
    // a multiple of 2^-24, nearest-even; the multiple is then the low mantissa bits.
    const float t = bits_f32(a) + 0.5f;
    return static_cast<uint16_t>(sign | (f32_bits(t) - 0x3F000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even; a
  // mantissa carry correctly bumps the exponent.
  a += 0xC8000FFFu + ((a >> 13) & 1);
  return static_cast<uint16_t>(sign | (a >> 13));
}

float bf16_to_f32(uint16_t h) {
  return bits_f32(static_cast<uint32_t>(h) << 16);
}

uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((u >> 16) | 64);  // quiet NaN
  return static_cast<uint16_t>((u + (0x7FFF + ((u >> 16) & 1))) >> 16);
}

bool gemv_supported(GgmlType w) {
  switch (w) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::MXFP4:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

GgmlType vec_dot_type(GgmlType w) {
  switch (w) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      return w;
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::MXFP4:
    case GgmlType::IQ4_NL:
      return GgmlType::Q8_0;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
      return GgmlType::Q8_K;
    default:
      fail(ErrorKind::kUnsupported, "no CPU matmul kernel for weight type {}", ggml_type_name(w));
  }
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case GgmlType::F32:
      check_blocks(t, n, 1);
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16: {
      check_blocks(t, n, 1);
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(h[i]);
      return;
    }
    case GgmlType::BF16: {
      check_blocks(t, n, 1);
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case GgmlType::Q4_0:
      check_blocks(t, n, kQK);
      return dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, n / kQK);
    case GgmlType::Q5_0:
      check_blocks(t, n, kQK);
      return dequant_q5_0(static_cast<const BlockQ5_0*>(src), dst, n / kQK);
    case GgmlType::Q4_1:
      check_blocks(t, n, kQK);
      return dequant_q_1<BlockQ4_1, &detail::q4_1_code>(static_cast<const BlockQ4_1*>(src), dst,
                                                        n / kQK);
    case GgmlType::Q5_1:
      check_blocks(t, n, kQK);
      return dequant_q_1<BlockQ5_1, &detail::q5_1_code>(static_cast<const BlockQ5_1*>(src), dst,
                                                        n / kQK);
    case GgmlType::Q8_0:
      check_blocks(t, n, kQK);
      return dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, n / kQK);
    case GgmlType::MXFP4:
      check_blocks(t, n, kQK);
      return dequant_mxfp4(static_cast<const BlockMXFP4*>(src), dst, n / kQK);
    case GgmlType::IQ4_NL:
      check_blocks(t, n, kQK);
      return dequant_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n / kQK);
    case GgmlType::IQ4_XS:
      check_blocks(t, n, kQK_K);
      return dequant_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n / kQK_K);
    case GgmlType::Q4_K:
      check_blocks(t, n, kQK_K);
      return dequant_k_min<BlockQ4_K, &detail::q4_k_code>(static_cast<const BlockQ4_K*>(src), dst,
                                                          n / kQK_K);
    case GgmlType::Q5_K:
      check_blocks(t, n, kQK_K);
      return dequant_k_min<BlockQ5_K, &detail::q5_k_code>(static_cast<const BlockQ5_K*>(src), dst,
                                                          n / kQK_K);
    case GgmlType::Q2_K:
      check_blocks(t, n, kQK_K);
      return dequant_q2_k(static_cast<const BlockQ2_K*>(src), dst, n / kQK_K);
    case GgmlType::Q3_K:
      check_blocks(t, n, kQK_K);
      return dequant_q3_k(static_cast<const BlockQ3_K*>(src), dst, n / kQK_K);
    case GgmlType::Q6_K:
      check_blocks(t, n, kQK_K);
      return dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, n / kQK_K);
    case GgmlType::Q8_K:
      check_blocks(t, n, kQK_K);
      return dequant_q8_k(static_cast<const BlockQ8_K*>(src), dst, n / kQK_K);
    default:
      fail(ErrorKind::kUnsupported, "dequantize_row: type {} is not supported", ggml_type_name(t));
  }
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case GgmlType::F32:
      check_blocks(t, n, 1);
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16: {
      check_blocks(t, n, 1);
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_fp16(src[i]);
      return;
    }
    case GgmlType::BF16: {
      check_blocks(t, n, 1);
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      return;
    }
    case GgmlType::Q4_0:
      check_blocks(t, n, kQK);
      return quant_q4_0(src, static_cast<BlockQ4_0*>(dst), n / kQK);
    case GgmlType::Q5_0:
      check_blocks(t, n, kQK);
      return quant_q5_0(src, static_cast<BlockQ5_0*>(dst), n / kQK);
    case GgmlType::Q4_1:
      check_blocks(t, n, kQK);
      return quant_q_1<4>(src, static_cast<BlockQ4_1*>(dst), n / kQK);
    case GgmlType::Q5_1:
      check_blocks(t, n, kQK);
      return quant_q_1<5>(src, static_cast<BlockQ5_1*>(dst), n / kQK);
    case GgmlType::Q8_0:
      check_blocks(t, n, kQK);
      return quant_q8_0(src, static_cast<BlockQ8_0*>(dst), n / kQK);
    case GgmlType::MXFP4:
      check_blocks(t, n, kQK);
      return quant_mxfp4(src, static_cast<BlockMXFP4*>(dst), n / kQK);
    case GgmlType::IQ4_NL:
      check_blocks(t, n, kQK);
      return quant_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n / kQK);
    case GgmlType::IQ4_XS:
      check_blocks(t, n, kQK_K);
      return quant_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n / kQK_K);
    case GgmlType::Q4_K:
      check_blocks(t, n, kQK_K);
      return quant_q4_k(src, static_cast<BlockQ4_K*>(dst), n / kQK_K);
    case GgmlType::Q5_K:
      check_blocks(t, n, kQK_K);
      return quant_q5_k(src, static_cast<BlockQ5_K*>(dst), n / kQK_K);
    case GgmlType::Q2_K:
      check_blocks(t, n, kQK_K);
      return quant_q2_k(src, static_cast<BlockQ2_K*>(dst), n / kQK_K);
    case GgmlType::Q3_K:
      check_blocks(t, n, kQK_K);
      return quant_q3_k(src, static_cast<BlockQ3_K*>(dst), n / kQK_K);
    case GgmlType::Q6_K:
      check_blocks(t, n, kQK_K);
      return quant_q6_k(src, static_cast<BlockQ6_K*>(dst), n / kQK_K);
    case GgmlType::Q8_K:
      check_blocks(t, n, kQK_K);
      return quant_q8_k(src, static_cast<BlockQ8_K*>(dst), n / kQK_K);
    default:
      fail(ErrorKind::kUnsupported, "quantize_row: type {} is not supported", ggml_type_name(t));
  }
}

void quantize_activation_row_ref(GgmlType t, const float* src, void* dst, int64_t n) {
  if (t == GgmlType::Q8_0) {
    STRATA_ASSERT(n % kQK == 0, "{} activations are not whole Q8_0 blocks", n);
    return quant_q8_0_activation(src, static_cast<BlockQ8_0*>(dst), n / kQK);
  }
  quantize_row(t, src, dst, n);
}

void quantize_activation_row(GgmlType t, const float* src, void* dst, int64_t n) {
  static const bool cpu_avx2 = cpu_has(CpuFeature::kAvx2) && cpu_has(CpuFeature::kF16c);
  const bool avx2 = cpu_avx2 && isa_cap() >= Isa::kAvx2;
  // A length that is not whole blocks goes on to the scalar code, which reports it.
  if (avx2 && t == GgmlType::Q8_0 && n % kQK == 0)
    return detail::quant_q8_0_activation_avx2(src, static_cast<BlockQ8_0*>(dst), n / kQK);
  if (avx2 && t == GgmlType::Q8_K && n % kQK_K == 0)
    return detail::quant_q8_k_avx2(src, static_cast<BlockQ8_K*>(dst), n / kQK_K);
  quantize_activation_row_ref(t, src, dst, n);
}

}  // namespace strata::kernels
