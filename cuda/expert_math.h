// Element functions of the grouped expert kernel (cuda/grouped.cu), written once as STRATA_HD so
// the host runs the very same arithmetic: activation quantization (Q8_0 / Q8_K, bit-identical to
// kernels::quantize_activation_row), the per-block partial integer dots and their float finish (the
// canonical order of kernels/gemv.cpp), and the 8-lane fold. Plain C++ when not compiled by nvcc,
// so the emulation (cuda/grouped_emulated.cpp) builds without CUDA. Tested by
// tests/test_cuda_grouped.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#endif

#include "io/ggml_type.h"
#include "kernels/portable_math.h"
#include "kernels/quant.h"

namespace strata::cuda::detail {

using kernels::add_rn;
using kernels::bits_to_f32;
using kernels::div_rn;
using kernels::f32_to_bits;
using kernels::mul_rn;
using kernels::sub_rn;

// ---- loads (little-endian; the alignment each one needs is in its name) ----

STRATA_HD inline uint32_t load_u16_a2(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
#endif
}

STRATA_HD inline uint32_t load_u32_a2(const uint8_t* p) {
  return load_u16_a2(p) | (load_u16_a2(p + 2) << 16);
}

STRATA_HD inline uint32_t load_u32_a4(const void* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
#endif
}

// Four consecutive 32-bit words from a 16-byte aligned address (one 128-bit load on the device).
STRATA_HD inline void load_4x32_a16(const void* p, uint32_t out[4]) {
#ifdef __CUDA_ARCH__
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
#else
  std::memcpy(out, p, 16);
#endif
}

// Sum of the four signed byte products of a and b, plus c (exact int32).
STRATA_HD inline int32_t dp4a(uint32_t a, uint32_t b, int32_t c) {
#ifdef __CUDA_ARCH__
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int i = 0; i < 4; ++i)
    c += static_cast<int8_t>(a >> (8 * i)) * static_cast<int8_t>(b >> (8 * i));
  return c;
#endif
}

// ---- half precision (same conversions as kernels::fp16_to_f32 / f32_to_fp16) ----

STRATA_HD inline float half_to_f32(uint32_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));  // exact
#else
  return kernels::fp16_to_f32(static_cast<uint16_t>(h));
#endif
}

// Round to nearest even; NaN becomes a quiet NaN, overflow infinity (kernels::f32_to_fp16).
STRATA_HD inline uint16_t f32_to_half_bits(float f) {
  const uint32_t x = f32_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (a < 0x38800000u) {
    const float t = add_rn(bits_to_f32(a), 0.5f);  // the adder rounds to a multiple of 2^-24
    return static_cast<uint16_t>(sign | (f32_to_bits(t) - 0x3F000000u));
  }
  a += 0xC8000FFFu + ((a >> 13) & 1u);
  return static_cast<uint16_t>(sign | (a >> 13));
}

// ---- activation quantization ----

// ggml's nearest_int: half-to-even through the float adder, for |f| <= 2^22.
STRATA_HD inline int nearest_int(float f) {
  const float v = add_rn(f, 12582912.0f);
  return static_cast<int>(f32_to_bits(v) & 0x007FFFFFu) - 0x00400000;
}

// |x| for a max-reduction, with NaN as 0 so it never wins (std::max(amax, NaN) keeps amax).
STRATA_HD inline float amax_key(float x) {
  const float a = bits_to_f32(f32_to_bits(x) & 0x7FFFFFFFu);
  return a == a ? a : 0.0f;
}
STRATA_HD inline float max_key(float a, float b) {
  return b > a ? b : a;
}

// Q8_0 activations (32 elements), as kernels::quantize_activation_row (llama.cpp's x86 path):
// d = amax/127 stored as fp16; codes round-half-to-even(x · (127/amax)).
struct Q8_0Scale {
  float id;         // 127/amax (0 when amax == 0)
  float d;          // the stored fp16 value, widened: what the dots multiply by
  uint16_t d_half;  // the stored bits
};
STRATA_HD inline Q8_0Scale q8_0_scale(float amax) {
  const float d = div_rn(amax, 127.0f);
  const float id = amax != 0.0f ? div_rn(127.0f, amax) : 0.0f;
  const uint16_t h = f32_to_half_bits(d);
  return Q8_0Scale{id, half_to_f32(h), h};
}
STRATA_HD inline int8_t q8_0_code(float x, float id) {
  return static_cast<int8_t>(nearest_int(mul_rn(x, id)));  // |x · id| <= 127 (+ulps)
}

// Q8_K (256 elements) scales off the signed value of largest magnitude (the first one on ties):
// iscale = -127/max, codes min(127, nearest_int(iscale · x)), d = 1/iscale.
struct AbsMax {
  float abs;    // |val|, > 0 for a candidate
  int32_t idx;  // element index, for the first-on-ties rule
  float val;
};
STRATA_HD inline AbsMax absmax_none() {
  return AbsMax{0.0f, 0x7FFFFFFF, 0.0f};
}
// Element idx as a candidate: only |x| > 0 can win (NaN never does), as in the CPU loop.
STRATA_HD inline AbsMax absmax_leaf(float x, int32_t idx) {
  const float a = bits_to_f32(f32_to_bits(x) & 0x7FFFFFFFu);
  return a > 0.0f ? AbsMax{a, idx, x} : absmax_none();
}
// Larger magnitude wins, then the smaller index: a total order, so any reduction tree agrees
// with the CPU's sequential scan.
STRATA_HD inline AbsMax absmax_pick(AbsMax a, AbsMax b) {
  return (b.abs > a.abs || (b.abs == a.abs && b.idx < a.idx)) ? b : a;
}

struct Q8_KScale {
  float iscale;  // 0 for an all-zero block (codes 0)
  float d;
};
STRATA_HD inline Q8_KScale q8_k_scale(float max) {
  if (max == 0.0f) return Q8_KScale{0.0f, 0.0f};
  const float iscale = div_rn(-127.0f, max);
  return Q8_KScale{iscale, div_rn(1.0f, iscale)};
}
STRATA_HD inline int8_t q8_k_code(float x, float iscale) {
  if (iscale == 0.0f) return 0;
  const int q = nearest_int(mul_rn(iscale, x));
  return static_cast<int8_t>(q < 127 ? q : 127);
}

// A quantized activation row as the kernel keeps it (in shared memory on the device): the codes,
// one float scale per block, and the sum of every 16 codes (Q8_K's bsums; Q8_0 uses pairs).
// One token's area is [qs: n bytes][d: n/block floats][sum16: n/16 int32], 16-byte aligned.
struct ActView {
  const int8_t* qs;      // [n]
  const float* d;        // [n / act block]
  const int32_t* sum16;  // [n / 16]
};

STRATA_HD inline uint32_t act_area_bytes(int64_t n, int act_block) {
  const int64_t bytes = n + 4 * (n / act_block) + 4 * (n / 16);
  return static_cast<uint32_t>((bytes + 15) & ~int64_t{15});
}
STRATA_HD inline ActView act_view(const uint8_t* area, int64_t n, int act_block) {
  return ActView{reinterpret_cast<const int8_t*>(area), reinterpret_cast<const float*>(area + n),
                 reinterpret_cast<const int32_t*>(area + n + 4 * (n / act_block))};
}

// ---- weight block dots: canonical order of kernels/gemv.cpp ----
//
// Block b of a row gives r_b = finish(sum over k < kThreads of part(k)): the integer work of a
// block is split over kThreads threads (integer sums are exact in any order), then one float
// expression per type, exactly the CPU's. Rows are cut into 8 accumulator lanes, lane l taking
// blocks l, l+8, ... in order; the device runs each lane in its own group of kThreads threads.

struct Partial {
  int32_t a;  // weighted sum of code products
  int32_t m;  // second integer term (Q4_K mins, Q6_K offset); 0 where unused
};

template <GgmlType T>
struct Dot;

// Q4_0 x Q8_0, one thread per block: code q in [0, 15] stands for q - 8, so
// isum = sum(q·x) - 8·sum(x); r = (float)isum · (d_w · d_x).
template <>
struct Dot<GgmlType::Q4_0> {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 18;
  static constexpr int kThreads = 1;
  static constexpr int kActBlock = 32;
  static constexpr bool kHasM = false;
  STRATA_HD static Partial part(const uint8_t* w, const ActView& x, int64_t b, int) {
    uint32_t xv[8];
    load_4x32_a16(x.qs + 32 * b, xv);
    load_4x32_a16(x.qs + 32 * b + 16, xv + 4);
    int32_t a = 0;
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = load_u32_a2(w + 2 + 4 * i);  // elements 4i..4i+3 low, +16 high
      a = dp4a(q & 0x0F0F0F0Fu, xv[i], a);
      a = dp4a((q >> 4) & 0x0F0F0F0Fu, xv[4 + i], a);
    }
    return Partial{a, 0};
  }
  STRATA_HD static float finish(const uint8_t* w, const ActView& x, int64_t b, Partial t) {
    const int32_t isum = t.a - 8 * (x.sum16[2 * b] + x.sum16[2 * b + 1]);
    return mul_rn(static_cast<float>(isum), mul_rn(half_to_f32(load_u16_a2(w)), x.d[b]));
  }
};

// Bit t_i of t (i < 4) moved to bit 4 of byte i: Q5_0's fifth bits beside their nibbles. The
// four shifted copies of t do not overlap, so the product has no carries.
STRATA_HD inline uint32_t spread_bits4(uint32_t t) {
  return ((t * 0x00204081u) & 0x01010101u) << 4;
}

// Q5_0 x Q8_0, one thread per block (22 bytes: d, qh[4], qs[16]): code c = nibble | (bit j of
// qh) << 4 in [0, 31] stands for c - 16, so isum = sum(c·x) - 16·sum(x).
template <>
struct Dot<GgmlType::Q5_0> {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 22;
  static constexpr int kThreads = 1;
  static constexpr int kActBlock = 32;
  static constexpr bool kHasM = false;
  STRATA_HD static Partial part(const uint8_t* w, const ActView& x, int64_t b, int) {
    uint32_t xv[8];
    load_4x32_a16(x.qs + 32 * b, xv);
    load_4x32_a16(x.qs + 32 * b + 16, xv + 4);
    const uint32_t qh = load_u32_a2(w + 2);
    int32_t a = 0;
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = load_u32_a2(w + 6 + 4 * i);
      a = dp4a((q & 0x0F0F0F0Fu) | spread_bits4((qh >> (4 * i)) & 0xFu), xv[i], a);
      a = dp4a(((q >> 4) & 0x0F0F0F0Fu) | spread_bits4((qh >> (16 + 4 * i)) & 0xFu), xv[4 + i], a);
    }
    return Partial{a, 0};
  }
  STRATA_HD static float finish(const uint8_t* w, const ActView& x, int64_t b, Partial t) {
    const int32_t isum = t.a - 16 * (x.sum16[2 * b] + x.sum16[2 * b + 1]);
    return mul_rn(static_cast<float>(isum), mul_rn(half_to_f32(load_u16_a2(w)), x.d[b]));
  }
};

// Q8_0 x Q8_0, one thread per block: r = (float)isum · (d_w · d_x).
template <>
struct Dot<GgmlType::Q8_0> {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 34;
  static constexpr int kThreads = 1;
  static constexpr int kActBlock = 32;
  static constexpr bool kHasM = false;
  STRATA_HD static Partial part(const uint8_t* w, const ActView& x, int64_t b, int) {
    uint32_t xv[8];
    load_4x32_a16(x.qs + 32 * b, xv);
    load_4x32_a16(x.qs + 32 * b + 16, xv + 4);
    int32_t a = 0;
    for (int i = 0; i < 8; ++i) a = dp4a(load_u32_a2(w + 2 + 4 * i), xv[i], a);
    return Partial{a, 0};
  }
  STRATA_HD static float finish(const uint8_t* w, const ActView& x, int64_t b, Partial t) {
    return mul_rn(static_cast<float>(t.a), mul_rn(half_to_f32(load_u16_a2(w)), x.d[b]));
  }
};

// Q4_K's 6-bit scale and min of sub-block j (kernels' q4_k_scale_min).
STRATA_HD inline void q4_k_scale_min(const uint8_t* s, int j, int32_t* sc, int32_t* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K x Q8_K, four threads per 256-element super-block (144 bytes: d, dmin, scales[12],
// qs[128]); thread k takes qs[32k .. 32k+31], i.e. sub-blocks 2k (low nibbles) and 2k+1 (high).
//   a = sum_s sc_s · sum(q·x),  m = sum_s m_s · (bsums[2s] + bsums[2s+1])
//   r = (d_w · d_x) · (float)a - (dmin_w · d_x) · (float)m
// The block must be 16-byte aligned (rows of 144·nb bytes from a 16-byte aligned matrix are).
template <>
struct Dot<GgmlType::Q4_K> {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 144;
  static constexpr int kThreads = 4;
  static constexpr int kActBlock = 256;
  static constexpr bool kHasM = true;
  STRATA_HD static Partial part(const uint8_t* w, const ActView& x, int64_t b, int k) {
    int32_t sc0, mn0, sc1, mn1;
    q4_k_scale_min(w + 4, 2 * k, &sc0, &mn0);
    q4_k_scale_min(w + 4, 2 * k + 1, &sc1, &mn1);
    const int8_t* xb = x.qs + 256 * b + 64 * k;
    int32_t lo = 0, hi = 0;
    for (int h = 0; h < 2; ++h) {
      uint32_t q[4], xl[4], xh[4];
      load_4x32_a16(w + 16 + 32 * k + 16 * h, q);
      load_4x32_a16(xb + 16 * h, xl);
      load_4x32_a16(xb + 32 + 16 * h, xh);
      for (int i = 0; i < 4; ++i) {
        lo = dp4a(q[i] & 0x0F0F0F0Fu, xl[i], lo);
        hi = dp4a((q[i] >> 4) & 0x0F0F0F0Fu, xh[i], hi);
      }
    }
    const int32_t* s16 = x.sum16 + 16 * b + 4 * k;
    return Partial{sc0 * lo + sc1 * hi, mn0 * (s16[0] + s16[1]) + mn1 * (s16[2] + s16[3])};
  }
  STRATA_HD static float finish(const uint8_t* w, const ActView& x, int64_t b, Partial t) {
    const float dd = mul_rn(half_to_f32(load_u16_a2(w)), x.d[b]);
    const float dm = mul_rn(half_to_f32(load_u16_a2(w + 2)), x.d[b]);
    return sub_rn(mul_rn(dd, static_cast<float>(t.a)), mul_rn(dm, static_cast<float>(t.m)));
  }
};

// Q6_K x Q8_K, four threads per 256-element super-block (210 bytes: ql[128], qh[64],
// scales[16], d); thread k takes half h = k/2, positions l in [16(k%2), 16(k%2)+16) of all four
// quarters. Codes c = q + 32 in [0, 63]:
//   a = sum_g sc_g · sum(c·x),  m = sum_g sc_g · bsums[g]  (isum = a - 32·m)
//   r = (d_w · d_x) · (float)isum
template <>
struct Dot<GgmlType::Q6_K> {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 210;
  static constexpr int kThreads = 4;
  static constexpr int kActBlock = 256;
  static constexpr bool kHasM = true;
  STRATA_HD static Partial part(const uint8_t* w, const ActView& x, int64_t b, int k) {
    const int h = k >> 1, l0 = 16 * (k & 1);
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
    const int8_t* xb = x.qs + 256 * b + 128 * h + l0;
    uint32_t xq[4][4];  // [quarter][word]
    for (int q = 0; q < 4; ++q) load_4x32_a16(xb + 32 * q, xq[q]);
    int32_t dq[4] = {0, 0, 0, 0};  // per quarter
    for (int i = 0; i < 4; ++i) {
      const uint32_t A = load_u32_a2(w + 64 * h + l0 + 4 * i);        // quarters 0 (lo), 2 (hi)
      const uint32_t B = load_u32_a2(w + 64 * h + 32 + l0 + 4 * i);   // quarters 1 (lo), 3 (hi)
      const uint32_t H = load_u32_a2(w + 128 + 32 * h + l0 + 4 * i);  // 2 bits per quarter
      dq[0] = dp4a((A & 0x0F0F0F0Fu) | ((H << 4) & 0x30303030u), xq[0][i], dq[0]);
      dq[1] = dp4a((B & 0x0F0F0F0Fu) | ((H << 2) & 0x30303030u), xq[1][i], dq[1]);
      dq[2] = dp4a(((A >> 4) & 0x0F0F0F0Fu) | (H & 0x30303030u), xq[2][i], dq[2]);
      dq[3] = dp4a(((B >> 4) & 0x0F0F0F0Fu) | ((H >> 2) & 0x30303030u), xq[3][i], dq[3]);
    }
    // The 16 positions of quarter q all sit in scale group 8h + 2q + (l0 / 16).
    const int g0 = 8 * h + (l0 >> 4);
    int32_t a = 0;
    for (int q = 0; q < 4; ++q) a += sc[g0 + 2 * q] * dq[q];
    // The offset term, groups 4k .. 4k+3.
    const int32_t* s16 = x.sum16 + 16 * b;
    int32_t m = 0;
    for (int g = 4 * k; g < 4 * k + 4; ++g) m += sc[g] * s16[g];
    return Partial{a, m};
  }
  STRATA_HD static float finish(const uint8_t* w, const ActView& x, int64_t b, Partial t) {
    const int32_t isum = t.a - 32 * t.m;
    return mul_rn(mul_rn(half_to_f32(load_u16_a2(w + 208)), x.d[b]), static_cast<float>(isum));
  }
};

// MXFP4 x Q8_0, one thread per block (17 bytes: e, qs[16], so no alignment): code c stands for
// kv[c], the doubled E2M1 value (kernels' kMxfp4Values), isum = sum(kv·x), and
// r = (float)isum · (2^(e-128) · d_x).
STRATA_HD inline uint32_t load_u32_a1(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
// Four 4-bit codes (one per byte, low nibbles of n) → their four table bytes: codes 0..7 from
// lo's bytes, 8..15 from hi's.
STRATA_HD inline uint32_t table_kv4(uint32_t n, uint64_t lo, uint64_t hi) {
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t c = (n >> (8 * i)) & 0xFu;
    const uint64_t tab = c < 8 ? lo : hi;
    out |= static_cast<uint32_t>((tab >> (8 * (c & 7u))) & 0xFFu) << (8 * i);
  }
  return out;
}
STRATA_HD inline uint32_t mxfp4_kv4(uint32_t n) {
  return table_kv4(n, 0x0C08060403020100ull, 0xF4F8FAFCFDFEFF00ull);  // kv[0..7], kv[8..15]
}
// 2^(e - 128) from the bits (kernels' e8m0_to_f32_half).
STRATA_HD inline float e8m0_half(uint32_t e) {
  return bits_to_f32(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}
template <>
struct Dot<GgmlType::MXFP4> {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 17;
  static constexpr int kThreads = 1;
  static constexpr int kActBlock = 32;
  static constexpr bool kHasM = false;
  STRATA_HD static Partial part(const uint8_t* w, const ActView& x, int64_t b, int) {
    uint32_t xv[8];
    load_4x32_a16(x.qs + 32 * b, xv);
    load_4x32_a16(x.qs + 32 * b + 16, xv + 4);
    int32_t a = 0;
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = load_u32_a1(w + 1 + 4 * i);  // elements 4i..4i+3 low, +16 high
      a = dp4a(mxfp4_kv4(q & 0x0F0F0F0Fu), xv[i], a);
      a = dp4a(mxfp4_kv4((q >> 4) & 0x0F0F0F0Fu), xv[4 + i], a);
    }
    return Partial{a, 0};
  }
  STRATA_HD static float finish(const uint8_t* w, const ActView& x, int64_t b, Partial t) {
    return mul_rn(static_cast<float>(t.a), mul_rn(e8m0_half(w[0]), x.d[b]));
  }
};

// Q4_1 / Q5_1 x Q8_0, one thread per block (element = d_w · code + m_w, codes unsigned):
//   r = (float)isum · (d_w · d_x) + m_w · (d_x · (float)xsum),  xsum = sum of the block's x codes
// Q4_1: 20 bytes (d, m, qs[16]); Q5_1: 24 bytes (d, m, qh[4], qs[16]).
STRATA_HD inline float q_1_finish(const uint8_t* w, const ActView& x, int64_t b, int32_t isum) {
  const float dx = x.d[b];
  const int32_t xsum = x.sum16[2 * b] + x.sum16[2 * b + 1];
  return add_rn(mul_rn(static_cast<float>(isum), mul_rn(half_to_f32(load_u16_a2(w)), dx)),
                mul_rn(half_to_f32(load_u16_a2(w + 2)), mul_rn(dx, static_cast<float>(xsum))));
}
template <>
struct Dot<GgmlType::Q4_1> {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 20;
  static constexpr int kThreads = 1;
  static constexpr int kActBlock = 32;
  static constexpr bool kHasM = false;
  STRATA_HD static Partial part(const uint8_t* w, const ActView& x, int64_t b, int) {
    uint32_t xv[8];
    load_4x32_a16(x.qs + 32 * b, xv);
    load_4x32_a16(x.qs + 32 * b + 16, xv + 4);
    int32_t a = 0;
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = load_u32_a4(w + 4 + 4 * i);  // elements 4i..4i+3 low, +16 high
      a = dp4a(q & 0x0F0F0F0Fu, xv[i], a);
      a = dp4a((q >> 4) & 0x0F0F0F0Fu, xv[4 + i], a);
    }
    return Partial{a, 0};
  }
  STRATA_HD static float finish(const uint8_t* w, const ActView& x, int64_t b, Partial t) {
    return q_1_finish(w, x, b, t.a);
  }
};
template <>
struct Dot<GgmlType::Q5_1> {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 24;
  static constexpr int kThreads = 1;
  static constexpr int kActBlock = 32;
  static constexpr bool kHasM = false;
  STRATA_HD static Partial part(const uint8_t* w, const ActView& x, int64_t b, int) {
    uint32_t xv[8];
    load_4x32_a16(x.qs + 32 * b, xv);
    load_4x32_a16(x.qs + 32 * b + 16, xv + 4);
    const uint32_t qh = load_u32_a4(w + 4);
    int32_t a = 0;
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = load_u32_a4(w + 8 + 4 * i);
      a = dp4a((q & 0x0F0F0F0Fu) | spread_bits4((qh >> (4 * i)) & 0xFu), xv[i], a);
      a = dp4a(((q >> 4) & 0x0F0F0F0Fu) | spread_bits4((qh >> (16 + 4 * i)) & 0xFu), xv[4 + i], a);
    }
    return Partial{a, 0};
  }
  STRATA_HD static float finish(const uint8_t* w, const ActView& x, int64_t b, Partial t) {
    return q_1_finish(w, x, b, t.a);
  }
};

// IQ4_NL / IQ4_XS code points (kernels' kIq4nlValues) as bytes: codes 0..7, 8..15.
constexpr uint64_t kIq4Lo = 0xF6EADDCFBFAD9881ull;  // -127 -104 -83 -65 -49 -35 -22 -10
constexpr uint64_t kIq4Hi = 0x7159453526190D01ull;  // 1 13 25 38 53 69 89 113
STRATA_HD inline uint32_t iq4_kv4(uint32_t n) {
  return table_kv4(n, kIq4Lo, kIq4Hi);
}

// IQ4_NL x Q8_0, one thread per block (18 bytes: d, qs[16] packed as Q4_0's): isum = sum(kv·x),
// r = (float)isum · (d_w · d_x).
template <>
struct Dot<GgmlType::IQ4_NL> {
  static constexpr int kElems = 32;
  static constexpr int kBytes = 18;
  static constexpr int kThreads = 1;
  static constexpr int kActBlock = 32;
  static constexpr bool kHasM = false;
  STRATA_HD static Partial part(const uint8_t* w, const ActView& x, int64_t b, int) {
    uint32_t xv[8];
    load_4x32_a16(x.qs + 32 * b, xv);
    load_4x32_a16(x.qs + 32 * b + 16, xv + 4);
    int32_t a = 0;
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = load_u32_a2(w + 2 + 4 * i);
      a = dp4a(iq4_kv4(q & 0x0F0F0F0Fu), xv[i], a);
      a = dp4a(iq4_kv4((q >> 4) & 0x0F0F0F0Fu), xv[4 + i], a);
    }
    return Partial{a, 0};
  }
  STRATA_HD static float finish(const uint8_t* w, const ActView& x, int64_t b, Partial t) {
    return mul_rn(static_cast<float>(t.a), mul_rn(half_to_f32(load_u16_a2(w)), x.d[b]));
  }
};

// IQ4_XS x Q8_K, four threads per 256-element super-block (136 bytes: d, scales_h, scales_l[4],
// qs[128]); thread k takes sub-blocks 2k and 2k+1 (qs[32k .. 32k+31]), each 16 bytes packed as
// IQ4_NL's, with signed 6-bit scales sc_s (the field - 32):
//   a = sum_s sc_s · sum(kv·x),  r = (d_w · d_x) · (float)a
template <>
struct Dot<GgmlType::IQ4_XS> {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 136;
  static constexpr int kThreads = 4;
  static constexpr int kActBlock = 256;
  static constexpr bool kHasM = false;
  STRATA_HD static int32_t scale(const uint8_t* w, int s) {
    const uint32_t low = (w[4 + s / 2] >> (4 * (s % 2))) & 0xFu;
    const uint32_t high = (load_u16_a2(w + 2) >> (2 * s)) & 3u;
    return static_cast<int32_t>(low | (high << 4)) - 32;
  }
  STRATA_HD static Partial part(const uint8_t* w, const ActView& x, int64_t b, int k) {
    int32_t a = 0;
    for (int h = 0; h < 2; ++h) {
      const int s = 2 * k + h;
      uint32_t xv[8];
      load_4x32_a16(x.qs + 256 * b + 32 * s, xv);
      load_4x32_a16(x.qs + 256 * b + 32 * s + 16, xv + 4);
      int32_t isum = 0;
      for (int i = 0; i < 4; ++i) {
        const uint32_t q = load_u32_a4(w + 8 + 16 * s + 4 * i);
        isum = dp4a(iq4_kv4(q & 0x0F0F0F0Fu), xv[i], isum);
        isum = dp4a(iq4_kv4((q >> 4) & 0x0F0F0F0Fu), xv[4 + i], isum);
      }
      a += scale(w, s) * isum;
    }
    return Partial{a, 0};
  }
  STRATA_HD static float finish(const uint8_t* w, const ActView& x, int64_t b, Partial t) {
    return mul_rn(mul_rn(half_to_f32(load_u16_a2(w)), x.d[b]), static_cast<float>(t.a));
  }
};

// Q5_K x Q8_K, four threads per super-block (176 bytes: d, dmin, scales[12], qh[32], qs[128]):
// Q4_K's split and sums, the code of element 32s + l being its nibble | (bit s of qh[l]) << 4.
template <>
struct Dot<GgmlType::Q5_K> {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 176;
  static constexpr int kThreads = 4;
  static constexpr int kActBlock = 256;
  static constexpr bool kHasM = true;
  STRATA_HD static Partial part(const uint8_t* w, const ActView& x, int64_t b, int k) {
    int32_t sc0, mn0, sc1, mn1;
    q4_k_scale_min(w + 4, 2 * k, &sc0, &mn0);
    q4_k_scale_min(w + 4, 2 * k + 1, &sc1, &mn1);
    const int8_t* xb = x.qs + 256 * b + 64 * k;
    int32_t lo = 0, hi = 0;
    for (int h = 0; h < 2; ++h) {
      uint32_t q[4], qh[4], xl[4], xh[4];
      load_4x32_a16(w + 48 + 32 * k + 16 * h, q);
      load_4x32_a16(w + 16 + 16 * h, qh);
      load_4x32_a16(xb + 16 * h, xl);
      load_4x32_a16(xb + 32 + 16 * h, xh);
      for (int i = 0; i < 4; ++i) {
        const uint32_t b_lo = ((qh[i] >> (2 * k)) & 0x01010101u) << 4;
        const uint32_t b_hi = ((qh[i] >> (2 * k + 1)) & 0x01010101u) << 4;
        lo = dp4a((q[i] & 0x0F0F0F0Fu) | b_lo, xl[i], lo);
        hi = dp4a(((q[i] >> 4) & 0x0F0F0F0Fu) | b_hi, xh[i], hi);
      }
    }
    const int32_t* s16 = x.sum16 + 16 * b + 4 * k;
    return Partial{sc0 * lo + sc1 * hi, mn0 * (s16[0] + s16[1]) + mn1 * (s16[2] + s16[3])};
  }
  STRATA_HD static float finish(const uint8_t* w, const ActView& x, int64_t b, Partial t) {
    return Dot<GgmlType::Q4_K>::finish(w, x, b, t);
  }
};

// Q2_K x Q8_K, four threads per super-block (84 bytes: scales[16], qs[64], d, dmin; blocks are
// 4-byte aligned): element 128h + 32j + l has code (qs[32h + l] >> 2j) & 3 and sits in group
// g = (128h + 32j + l) / 16 with scale sc_g = scales[g] & 15 and min m_g = scales[g] >> 4.
// Thread k takes h = k / 2, j in {2(k % 2), 2(k % 2) + 1}: groups 4k .. 4k+3.
//   a = sum_g sc_g · sum(code·x),  m = sum_g m_g · bsums[g]
//   r = (d_w · d_x) · (float)a - (dmin_w · d_x) · (float)m
template <>
struct Dot<GgmlType::Q2_K> {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 84;
  static constexpr int kThreads = 4;
  static constexpr int kActBlock = 256;
  static constexpr bool kHasM = true;
  STRATA_HD static Partial part(const uint8_t* w, const ActView& x, int64_t b, int k) {
    const int h = k >> 1;
    int32_t a = 0, m = 0;
    for (int jj = 0; jj < 2; ++jj) {
      const int j = 2 * (k & 1) + jj;
      const int8_t* xb = x.qs + 256 * b + 128 * h + 32 * j;
      uint32_t xv[8];
      load_4x32_a16(xb, xv);
      load_4x32_a16(xb + 16, xv + 4);
      int32_t isum[2] = {0, 0};  // the two groups of 16
      for (int i = 0; i < 8; ++i) {
        const uint32_t q = load_u32_a4(w + 16 + 32 * h + 4 * i);
        isum[i >> 2] = dp4a((q >> (2 * j)) & 0x03030303u, xv[i], isum[i >> 2]);
      }
      for (int e = 0; e < 2; ++e) {
        const int g = 8 * h + 2 * j + e;
        a += static_cast<int32_t>(w[g] & 0xF) * isum[e];
        m += static_cast<int32_t>(w[g] >> 4) * x.sum16[16 * b + g];
      }
    }
    return Partial{a, m};
  }
  STRATA_HD static float finish(const uint8_t* w, const ActView& x, int64_t b, Partial t) {
    const float dd = mul_rn(half_to_f32(load_u16_a2(w + 80)), x.d[b]);
    const float dm = mul_rn(half_to_f32(load_u16_a2(w + 82)), x.d[b]);
    return sub_rn(mul_rn(dd, static_cast<float>(t.a)), mul_rn(dm, static_cast<float>(t.m)));
  }
};

// Q3_K x Q8_K, four threads per super-block (110 bytes: hmask[32], qs[64], scales[12], d; blocks
// are 2-byte aligned): element e = 128h + 32j + l has code c = ((qs[32h + l] >> 2j) & 3) |
// (bit (e / 32) of hmask[l]) << 2 in [0, 7] standing for c - 4, in group g = e / 16 with the
// signed 6-bit scale sc_g (the field - 32). Thread k takes Q2_K's elements:
//   a = sum_g sc_g · sum(c·x),  m = sum_g sc_g · bsums[g]  (isum = a - 4·m)
//   r = (d_w · d_x) · (float)isum
template <>
struct Dot<GgmlType::Q3_K> {
  static constexpr int kElems = 256;
  static constexpr int kBytes = 110;
  static constexpr int kThreads = 4;
  static constexpr int kActBlock = 256;
  static constexpr bool kHasM = true;
  // Group g's scale: its low nibble in byte g % 8 of scales (high half from g = 8), its top two
  // bits in byte 8 + g % 4 at bit 2 (g / 4) (kernels' q3_k_scale_words).
  STRATA_HD static int32_t scale(const uint8_t* s, int g) {
    const uint32_t low = (s[g % 8] >> (4 * (g / 8))) & 0xFu;
    const uint32_t high = (s[8 + g % 4] >> (2 * (g / 4))) & 3u;
    return static_cast<int32_t>(low | (high << 4)) - 32;
  }
  STRATA_HD static Partial part(const uint8_t* w, const ActView& x, int64_t b, int k) {
    const int h = k >> 1;
    int32_t a = 0, m = 0;
    for (int jj = 0; jj < 2; ++jj) {
      const int j = 2 * (k & 1) + jj;
      const int bit = 4 * h + j;  // the element's hmask bit, e / 32
      const int8_t* xb = x.qs + 256 * b + 128 * h + 32 * j;
      uint32_t xv[8];
      load_4x32_a16(xb, xv);
      load_4x32_a16(xb + 16, xv + 4);
      int32_t isum[2] = {0, 0};
      for (int i = 0; i < 8; ++i) {
        const uint32_t q = load_u32_a2(w + 32 + 32 * h + 4 * i);
        const uint32_t hm = load_u32_a2(w + 4 * i);
        const uint32_t c = ((q >> (2 * j)) & 0x03030303u) | (((hm >> bit) & 0x01010101u) << 2);
        isum[i >> 2] = dp4a(c, xv[i], isum[i >> 2]);
      }
      for (int e = 0; e < 2; ++e) {
        const int g = 8 * h + 2 * j + e;
        const int32_t sc = scale(w + 96, g);
        a += sc * isum[e];
        m += sc * x.sum16[16 * b + g];
      }
    }
    return Partial{a, m};
  }
  STRATA_HD static float finish(const uint8_t* w, const ActView& x, int64_t b, Partial t) {
    const int32_t isum = t.a - 4 * t.m;
    return mul_rn(mul_rn(half_to_f32(load_u16_a2(w + 108)), x.d[b]), static_cast<float>(isum));
  }
};

// ---- SwiGLU-OAI (gpt-oss): engine/ops.cpp's swiglu_oai element, bit for bit ----
//
// The CPU computes a / (1 + std::exp(1.702 · -a)) · (u + 1), a = min(g, 7), u = clamp(u, -7, 7),
// with glibc's expf. oai_expf is that expf (glibc 2.28+ sysdeps/ieee754/flt-32/e_expf.c, from
// ARM's optimized-routines: a 32-entry 2^(i/32) table and a cubic in double) as x86-64 runs it:
// the FMA variant glibc's ifunc picks on AVX2+FMA hosts, in which the compiler fused
// InvLn2N·x + SHIFT, InvLn2N·x - kd and the polynomial's three multiply-adds. Checked against
// this host's expf over every float in (-103.9, 88.7) (0 mismatches; the unfused variant misses
// 2), and in tests/test_cuda_grouped.cpp on a sweep. A host whose libm picks the unfused
// variant (no FMA) may differ from it in those rare inputs.
STRATA_HD inline double dfma(double a, double b, double c) {
#ifdef __CUDA_ARCH__
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
STRATA_HD inline double dmul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
STRATA_HD inline double dsub(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
STRATA_HD inline uint64_t f64_to_bits(double d) {
#ifdef __CUDA_ARCH__
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  return u;
#endif
}
STRATA_HD inline double bits_to_f64(uint64_t u) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, sizeof(d));
  return d;
#endif
}
// 2^(i/32) with i << 47 subtracted from the bits (glibc's __exp2f_data.tab), as a function so it
// needs no table object on either side.
STRATA_HD inline uint64_t exp2f_tab(uint32_t i) {
  switch (i) {
    case 0:
      return 0x3ff0000000000000ull;
    case 1:
      return 0x3fefd9b0d3158574ull;
    case 2:
      return 0x3fefb5586cf9890full;
    case 3:
      return 0x3fef9301d0125b51ull;
    case 4:
      return 0x3fef72b83c7d517bull;
    case 5:
      return 0x3fef54873168b9aaull;
    case 6:
      return 0x3fef387a6e756238ull;
    case 7:
      return 0x3fef1e9df51fdee1ull;
    case 8:
      return 0x3fef06fe0a31b715ull;
    case 9:
      return 0x3feef1a7373aa9cbull;
    case 10:
      return 0x3feedea64c123422ull;
    case 11:
      return 0x3feece086061892dull;
    case 12:
      return 0x3feebfdad5362a27ull;
    case 13:
      return 0x3feeb42b569d4f82ull;
    case 14:
      return 0x3feeab07dd485429ull;
    case 15:
      return 0x3feea47eb03a5585ull;
    case 16:
      return 0x3feea09e667f3bcdull;
    case 17:
      return 0x3fee9f75e8ec5f74ull;
    case 18:
      return 0x3feea11473eb0187ull;
    case 19:
      return 0x3feea589994cce13ull;
    case 20:
      return 0x3feeace5422aa0dbull;
    case 21:
      return 0x3feeb737b0cdc5e5ull;
    case 22:
      return 0x3feec49182a3f090ull;
    case 23:
      return 0x3feed503b23e255dull;
    case 24:
      return 0x3feee89f995ad3adull;
    case 25:
      return 0x3feeff76f2fb5e47ull;
    case 26:
      return 0x3fef199bdd85529cull;
    case 27:
      return 0x3fef3720dcef9069ull;
    case 28:
      return 0x3fef5818dcfba487ull;
    case 29:
      return 0x3fef7c97337b9b5full;
    case 30:
      return 0x3fefa4afa2a490daull;
    default:
      return 0x3fefd0765b6e4540ull;
  }
}
STRATA_HD inline float oai_expf(float x) {
  const uint32_t ux = f32_to_bits(x);
  const uint32_t abstop = (ux >> 20) & 0x7FFu;
  if (abstop >= 0x42Bu) {                                    // |x| >= 88 or NaN (top12(88.0f))
    if (ux == 0xFF800000u) return 0.0f;                      // -inf
    if (abstop >= 0x7F8u) return add_rn(x, x);               // +inf, NaN
    if (x > 0x1.62e42ep6f) return bits_to_f32(0x7F800000u);  // overflow
    if (x < -0x1.9fe368p6f) return 0.0f;                     // underflow
  }
  constexpr double kInvLn2N = 0x1.71547652b82fep+0 * 32;
  constexpr double kShift = 0x1.8p+52;
  constexpr double kC0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32;
  constexpr double kC1 = 0x1.ebfce50fac4f3p-3 / 32 / 32;
  constexpr double kC2 = 0x1.62e42ff0c52d6p-1 / 32;
  const double xd = static_cast<double>(x);
  double kd = dfma(kInvLn2N, xd, kShift);
  const uint64_t ki = f64_to_bits(kd);
  kd = dsub(kd, kShift);
  const double r = dfma(kInvLn2N, xd, -kd);
  const uint64_t t = exp2f_tab(static_cast<uint32_t>(ki % 32)) + (ki << 47);
  const double s = bits_to_f64(t);
  const double z = dfma(kC0, r, kC1);
  const double r2 = dmul(r, r);
  double y = dfma(kC2, r, 1.0);
  y = dfma(z, r2, y);
  y = dmul(y, s);
#ifdef __CUDA_ARCH__
  return __double2float_rn(y);
#else
  return static_cast<float>(y);
#endif
}
// One SwiGLU-OAI element (alpha 1.702, limit 7), engine/ops.cpp's expression in its order.
STRATA_HD inline float swiglu_oai_elem(float g, float u) {
  constexpr float kAlpha = 1.702f;
  constexpr float kLimit = 7.0f;
  const float a = kLimit < g ? kLimit : g;                            // std::min(g, 7)
  const float c = u < -kLimit ? -kLimit : (kLimit < u ? kLimit : u);  // std::clamp(u, -7, 7)
  const float e = oai_expf(mul_rn(kAlpha, -a));
  return mul_rn(div_rn(a, add_rn(1.0f, e)), add_rn(c, 1.0f));
}

// One GELU-GLU element (grok), kernels::gelu_glu_row's: g rounded to a half indexes
// gelu_table (kernels::gelu_table(), or its device copy), g <= -10 gives 0, g >= 10 gives g; times
// u.
STRATA_HD inline float gelu_glu_elem(float g, float u, const float* gelu_table) {
  const float a = g <= -10.0f ? 0.0f : g >= 10.0f ? g : gelu_table[f32_to_half_bits(g)];
  return mul_rn(u, a);
}

// The activation of a layer, by its code (StageParams::act, ExpertShape::activation);
// gelu_table is read by code 2 only.
STRATA_HD inline float glu_elem(int act, float g, float u, const float* gelu_table) {
  return act == 0   ? kernels::portable_swiglu(g, u)
         : act == 1 ? swiglu_oai_elem(g, u)
                    : gelu_glu_elem(g, u, gelu_table);
}

// The canonical fold of the 8 accumulator lanes.
STRATA_HD inline float fold8(const float a[8]) {
  return add_rn(add_rn(add_rn(a[0], a[4]), add_rn(a[2], a[6])),
                add_rn(add_rn(a[1], a[5]), add_rn(a[3], a[7])));
}

// The one runtime-type → template switch of the grouped kernel: calls fn(TypeTag<T>{}) for the
// weight types with a Dot<T>, returns false for the rest (listed, so a new GgmlType is a
// -Wswitch error here).
template <GgmlType T>
struct TypeTag {
  static constexpr GgmlType kType = T;
};

template <typename Fn>
bool dispatch_grouped(GgmlType t, Fn&& fn) {
  switch (t) {
    case GgmlType::Q4_0:
      fn(TypeTag<GgmlType::Q4_0>{});
      return true;
    case GgmlType::Q5_0:
      fn(TypeTag<GgmlType::Q5_0>{});
      return true;
    case GgmlType::Q8_0:
      fn(TypeTag<GgmlType::Q8_0>{});
      return true;
    case GgmlType::Q4_K:
      fn(TypeTag<GgmlType::Q4_K>{});
      return true;
    case GgmlType::Q6_K:
      fn(TypeTag<GgmlType::Q6_K>{});
      return true;
    case GgmlType::MXFP4:
      fn(TypeTag<GgmlType::MXFP4>{});
      return true;
    case GgmlType::Q4_1:
      fn(TypeTag<GgmlType::Q4_1>{});
      return true;
    case GgmlType::Q5_1:
      fn(TypeTag<GgmlType::Q5_1>{});
      return true;
    case GgmlType::IQ4_NL:
      fn(TypeTag<GgmlType::IQ4_NL>{});
      return true;
    case GgmlType::IQ4_XS:
      fn(TypeTag<GgmlType::IQ4_XS>{});
      return true;
    case GgmlType::Q2_K:
      fn(TypeTag<GgmlType::Q2_K>{});
      return true;
    case GgmlType::Q3_K:
      fn(TypeTag<GgmlType::Q3_K>{});
      return true;
    case GgmlType::Q5_K:
      fn(TypeTag<GgmlType::Q5_K>{});
      return true;
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_1:
    case GgmlType::Q8_K:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ1_S:
    case GgmlType::IQ3_S:
    case GgmlType::IQ2_S:
    case GgmlType::I8:
    case GgmlType::I16:
    case GgmlType::I32:
    case GgmlType::I64:
    case GgmlType::F64:
    case GgmlType::IQ1_M:
    case GgmlType::TQ1_0:
    case GgmlType::TQ2_0:
      return false;
  }
  return false;  // a value outside the enum
}

}  // namespace strata::cuda::detail
