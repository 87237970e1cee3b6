// Dequantization kernels: one thread per output element (grid-stride), each element computed by a
// __host__ __device__ function per format that reads its block's bytes at kernels/quant.h's
// offsets. The same functions back the host emulation. Tested by tests/test_cuda_dequant.cpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cuda/cuda_check.h"
#include "cuda/dequant.h"
#include "cuda/dequant_launch.h"
#include "kernels/quant.h"

#define STRATA_HD __host__ __device__ __forceinline__

namespace strata::cuda {
namespace {

using kernels::BlockIQ4_NL;
using kernels::BlockIQ4_XS;
using kernels::BlockMXFP4;
using kernels::BlockQ2_K;
using kernels::BlockQ3_K;
using kernels::BlockQ4_0;
using kernels::BlockQ4_1;
using kernels::BlockQ4_K;
using kernels::BlockQ5_0;
using kernels::BlockQ5_1;
using kernels::BlockQ5_K;
using kernels::BlockQ6_K;
using kernels::BlockQ8_0;

// Blocks are read byte by byte: their strides (17 to 210 bytes) leave fields unaligned.
STRATA_HD uint32_t load_u16(const uint8_t* p) {
  return p[0] | (static_cast<uint32_t>(p[1]) << 8);
}

STRATA_HD uint32_t load_u32(const uint8_t* p) {
  return load_u16(p) | (load_u16(p + 2) << 16);
}

STRATA_HD float bits_to_f32(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
#endif
}

// Round-to-nearest multiply and subtract that nvcc may not fuse into an FMA (it does by default
// for a*b - c): ggml's CPU code rounds each product, and invariant 1 wants the same bits.
STRATA_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

STRATA_HD float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

STRATA_HD float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// IEEE half → float (exact: every half is a float).
STRATA_HD float fp16_to_f32(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    // Zero or subnormal: mant · 2^-24, exact in float.
    const float mag = mul_rn(static_cast<float>(mant), 0x1p-24f);
    return (sign != 0) ? -mag : mag;
  }
  if (exp == 31) return bits_to_f32(sign | 0x7F800000u | (mant << 13));
  return bits_to_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Signed byte k (0..7) of a word: the code-point tables below are packed 8 per word, so host and
// device read them without a __constant__ array.
STRATA_HD int packed_i8(uint64_t word, uint32_t k) {
  return static_cast<int8_t>(static_cast<uint8_t>(word >> (8 * k)));
}

// IQ4_NL / IQ4_XS code points (kernels' kIq4nlValues): codes 0..7 and 8..15.
constexpr uint64_t kIq4Lo = 0xF6EADDCFBFAD9881ull;  // -127 -104 -83 -65 -49 -35 -22 -10
constexpr uint64_t kIq4Hi = 0x7159453526190D01ull;  // 1 13 25 38 53 69 89 113
STRATA_HD int iq4_value(uint32_t code) {
  return packed_i8(code < 8 ? kIq4Lo : kIq4Hi, code & 7);
}

// MXFP4's doubled E2M1 magnitudes (kernels' kMxfp4Values 0..7); code bit 3 is the sign.
constexpr uint64_t kMxfp4Mag = 0x0C08060403020100ull;  // 0 1 2 3 4 6 8 12
STRATA_HD int mxfp4_value(uint32_t code) {
  const int mag = packed_i8(kMxfp4Mag, code & 7);
  return (code & 8) ? -mag : mag;
}

// 2^(e - 128) from the bits (kernels' e8m0_to_f32_half).
STRATA_HD float e8m0_half(uint32_t e) {
  return bits_to_f32(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

// The 4-bit code of element j of a 32-element block packed as Q4_0's: j < 16 in the low nibble of
// qs[j], j >= 16 in the high nibble of qs[j - 16].
STRATA_HD uint32_t nibble32(const uint8_t* qs, int j) {
  const uint32_t q = qs[j & 15];
  return j < 16 ? (q & 0xF) : (q >> 4);
}

// Bit j of a little-endian 32-bit mask stored as 4 bytes (Q5_0 / Q5_1's qh).
STRATA_HD uint32_t bit32(const uint8_t* qh, int j) {
  return (qh[j >> 3] >> (j & 7)) & 1u;
}

// Q4_K / Q5_K sub-block s's 6-bit scale and min from the 12 packed bytes: sub-blocks 0-3 in the
// low 6 bits of s[sub] (scale) and s[sub + 4] (min); sub-blocks 4-7 take their low nibbles from
// s[sub + 4], their top two bits from the spare bits of s[sub - 4] / s[sub].
STRATA_HD void k_scale_min(const uint8_t* s, int sub, uint32_t* sc, uint32_t* m) {
  if (sub < 4) {
    *sc = s[sub] & 63u;
    *m = s[sub + 4] & 63u;
  } else {
    *sc = (s[sub + 4] & 0xFu) | ((s[sub - 4] >> 6) << 4);
    *m = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
  }
}

// The Q4_K / Q5_K element: (d · sc) · q - (dmin · m).
STRATA_HD float k_min_element(const uint8_t* d_dmin, const uint8_t* scales, int sub, uint32_t q) {
  uint32_t sc, m;
  k_scale_min(scales, sub, &sc, &m);
  const float d = fp16_to_f32(load_u16(d_dmin));
  const float dmin = fp16_to_f32(load_u16(d_dmin + 2));
  const float d1 = mul_rn(d, static_cast<float>(sc));
  const float m1 = mul_rn(dmin, static_cast<float>(m));
  return sub_rn(mul_rn(d1, static_cast<float>(q)), m1);
}

// Q2_K / Q3_K's 2-bit code of element j: qs[32h + l] bits 2g..2g+1 hold element 128h + 32g + l.
STRATA_HD uint32_t crumb(const uint8_t* qs, int j) {
  return (qs[32 * (j >> 7) + (j & 31)] >> (2 * ((j >> 5) & 3))) & 3u;
}

// One struct per format: elements per block, bytes per block, and element j of a block.
template <GgmlType T>
struct Format;

template <>
struct Format<GgmlType::F32> {
  static constexpr int kBlock = 1;
  static constexpr int kBytes = 4;
  static STRATA_HD float element(const uint8_t* b, int) { return bits_to_f32(load_u32(b)); }
};

template <>
struct Format<GgmlType::F16> {
  static constexpr int kBlock = 1;
  static constexpr int kBytes = 2;
  static STRATA_HD float element(const uint8_t* b, int) { return fp16_to_f32(load_u16(b)); }
};

template <>
struct Format<GgmlType::BF16> {
  static constexpr int kBlock = 1;
  static constexpr int kBytes = 2;
  static STRATA_HD float element(const uint8_t* b, int) { return bits_to_f32(load_u16(b) << 16); }
};

// 32 elements: x = (q - 8) · d, element j < 16 in the low nibble of qs[j], j >= 16 in the high
// nibble of qs[j - 16].
template <>
struct Format<GgmlType::Q4_0> {
  static constexpr int kBlock = kernels::kQK;
  static constexpr int kBytes = sizeof(BlockQ4_0);
  static STRATA_HD float element(const uint8_t* b, int j) {
    const float d = fp16_to_f32(load_u16(b + offsetof(BlockQ4_0, d)));
    const int v = static_cast<int>(nibble32(b + offsetof(BlockQ4_0, qs), j)) - 8;
    return mul_rn(static_cast<float>(v), d);
  }
};

// 32 elements: x = (q - 16) · d, q's low 4 bits as Q4_0's and bit j of qh its 5th.
template <>
struct Format<GgmlType::Q5_0> {
  static constexpr int kBlock = kernels::kQK;
  static constexpr int kBytes = sizeof(BlockQ5_0);
  static STRATA_HD float element(const uint8_t* b, int j) {
    const float d = fp16_to_f32(load_u16(b + offsetof(BlockQ5_0, d)));
    const uint32_t q =
        nibble32(b + offsetof(BlockQ5_0, qs), j) | (bit32(b + offsetof(BlockQ5_0, qh), j) << 4);
    return mul_rn(static_cast<float>(static_cast<int>(q) - 16), d);
  }
};

// 32 elements: x = d · q + m (Q4_1: q as Q4_0's nibbles; Q5_1: plus bit j of qh as the 5th).
template <typename Block, bool kFifthBit>
struct MinFormat {
  static constexpr int kBlock = kernels::kQK;
  static constexpr int kBytes = sizeof(Block);
  static STRATA_HD float element(const uint8_t* b, int j) {
    const float d = fp16_to_f32(load_u16(b + offsetof(Block, d)));
    const float m = fp16_to_f32(load_u16(b + offsetof(Block, m)));
    uint32_t q = nibble32(b + offsetof(Block, qs), j);
    if constexpr (kFifthBit) q |= bit32(b + offsetof(Block, qh), j) << 4;
    return add_rn(mul_rn(d, static_cast<float>(q)), m);
  }
};

template <>
struct Format<GgmlType::Q4_1> : MinFormat<BlockQ4_1, false> {};
template <>
struct Format<GgmlType::Q5_1> : MinFormat<BlockQ5_1, true> {};

// 32 elements: x = d · table[q] (q as Q4_0's nibbles).
template <>
struct Format<GgmlType::IQ4_NL> {
  static constexpr int kBlock = kernels::kQK;
  static constexpr int kBytes = sizeof(BlockIQ4_NL);
  static STRATA_HD float element(const uint8_t* b, int j) {
    const float d = fp16_to_f32(load_u16(b + offsetof(BlockIQ4_NL, d)));
    const int v = iq4_value(nibble32(b + offsetof(BlockIQ4_NL, qs), j));
    return mul_rn(d, static_cast<float>(v));
  }
};

// 32 elements: x = e2m1[q] · 2^(e - 128) (doubled code points, halved scale; q as Q4_0's).
template <>
struct Format<GgmlType::MXFP4> {
  static constexpr int kBlock = kernels::kQK;
  static constexpr int kBytes = sizeof(BlockMXFP4);
  static STRATA_HD float element(const uint8_t* b, int j) {
    const float d = e8m0_half(b[offsetof(BlockMXFP4, e)]);
    const int v = mxfp4_value(nibble32(b + offsetof(BlockMXFP4, qs), j));
    return mul_rn(static_cast<float>(v), d);
  }
};

// 32 elements: x = q · d.
template <>
struct Format<GgmlType::Q8_0> {
  static constexpr int kBlock = kernels::kQK;
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static STRATA_HD float element(const uint8_t* b, int j) {
    const float d = fp16_to_f32(load_u16(b + offsetof(BlockQ8_0, d)));
    const int8_t q = static_cast<int8_t>(b[offsetof(BlockQ8_0, qs) + j]);
    return mul_rn(static_cast<float>(q), d);
  }
};

// 256 elements in 8 sub-blocks of 32, each with a 6-bit scale and min packed into scales[12]:
// x = (d · sc) · q - (dmin · m). Element j: 64-element chunk c = j / 64 holds sub-blocks 2c (low
// nibbles of qs[32c .. 32c+31]) and 2c+1 (high nibbles). Q5_K adds bit j / 32 of qh[j % 32] as
// the 5th bit.
template <>
struct Format<GgmlType::Q4_K> {
  static constexpr int kBlock = kernels::kQK_K;
  static constexpr int kBytes = sizeof(BlockQ4_K);
  static STRATA_HD float element(const uint8_t* b, int j) {
    const uint32_t byte = b[offsetof(BlockQ4_K, qs) + 32 * (j >> 6) + (j & 31)];
    const uint32_t q = ((j >> 5) & 1) ? (byte >> 4) : (byte & 0xFu);
    return k_min_element(b + offsetof(BlockQ4_K, d), b + offsetof(BlockQ4_K, scales), j >> 5, q);
  }
};

template <>
struct Format<GgmlType::Q5_K> {
  static constexpr int kBlock = kernels::kQK_K;
  static constexpr int kBytes = sizeof(BlockQ5_K);
  static STRATA_HD float element(const uint8_t* b, int j) {
    const uint32_t byte = b[offsetof(BlockQ5_K, qs) + 32 * (j >> 6) + (j & 31)];
    const uint32_t low = ((j >> 5) & 1) ? (byte >> 4) : (byte & 0xFu);
    const uint32_t q = low | (((b[offsetof(BlockQ5_K, qh) + (j & 31)] >> (j >> 5)) & 1u) << 4);
    return k_min_element(b + offsetof(BlockQ5_K, d), b + offsetof(BlockQ5_K, scales), j >> 5, q);
  }
};

// 256 elements in 16 groups of 16, each with a 4-bit scale (low nibble) and min (high nibble) in
// scales[g]: x = (d · sc) · q - (dmin · m), q the 2-bit code.
template <>
struct Format<GgmlType::Q2_K> {
  static constexpr int kBlock = kernels::kQK_K;
  static constexpr int kBytes = sizeof(BlockQ2_K);
  static STRATA_HD float element(const uint8_t* b, int j) {
    const uint32_t s = b[offsetof(BlockQ2_K, scales) + (j >> 4)];
    const float d = fp16_to_f32(load_u16(b + offsetof(BlockQ2_K, d)));
    const float dmin = fp16_to_f32(load_u16(b + offsetof(BlockQ2_K, dmin)));
    const float dl = mul_rn(d, static_cast<float>(s & 0xFu));
    const float ml = mul_rn(dmin, static_cast<float>(s >> 4));
    const uint32_t q = crumb(b + offsetof(BlockQ2_K, qs), j);
    return sub_rn(mul_rn(dl, static_cast<float>(q)), ml);
  }
};

// 256 elements in 16 groups of 16 with 6-bit scales (less 32): group g's low nibble in byte g % 8
// of scales (low half for g < 8), its top 2 bits in byte 8 + g % 4 at bits 2 (g / 4). The value is
// the 2-bit code, less 4 where bit j / 32 of hmask[j % 32] is clear: x = (d · sc) · v.
template <>
struct Format<GgmlType::Q3_K> {
  static constexpr int kBlock = kernels::kQK_K;
  static constexpr int kBytes = sizeof(BlockQ3_K);
  static STRATA_HD float element(const uint8_t* b, int j) {
    const uint8_t* s = b + offsetof(BlockQ3_K, scales);
    const int g = j >> 4;
    const uint32_t low = (s[g & 7] >> (4 * (g >> 3))) & 0xFu;
    const uint32_t high = (s[8 + (g & 3)] >> (2 * (g >> 2))) & 3u;
    const int sc = static_cast<int>(low | (high << 4)) - 32;
    const int code = static_cast<int>(crumb(b + offsetof(BlockQ3_K, qs), j));
    const bool bit = (b[offsetof(BlockQ3_K, hmask) + (j & 31)] >> (j >> 5)) & 1u;
    const float d = fp16_to_f32(load_u16(b + offsetof(BlockQ3_K, d)));
    return mul_rn(mul_rn(d, static_cast<float>(sc)), static_cast<float>(bit ? code : code - 4));
  }
};

// 256 elements in 8 sub-blocks of 32 with 6-bit scales (less 32): low 4 bits in nibble s % 2 of
// scales_l[s / 2], top 2 in bits 2s..2s+1 of scales_h; sub-block s packed in qs[16s..16s+15] as
// IQ4_NL's: x = (d · sc) · table[q].
template <>
struct Format<GgmlType::IQ4_XS> {
  static constexpr int kBlock = kernels::kQK_K;
  static constexpr int kBytes = sizeof(BlockIQ4_XS);
  static STRATA_HD float element(const uint8_t* b, int j) {
    const int s = j >> 5;
    const uint32_t low = (b[offsetof(BlockIQ4_XS, scales_l) + (s >> 1)] >> (4 * (s & 1))) & 0xFu;
    const uint32_t high = (load_u16(b + offsetof(BlockIQ4_XS, scales_h)) >> (2 * s)) & 3u;
    const int sc = static_cast<int>(low | (high << 4)) - 32;
    const float d = fp16_to_f32(load_u16(b + offsetof(BlockIQ4_XS, d)));
    const int v = iq4_value(nibble32(b + offsetof(BlockIQ4_XS, qs) + 16 * s, j & 31));
    return mul_rn(mul_rn(d, static_cast<float>(sc)), static_cast<float>(v));
  }
};

// 256 elements in two halves of 128; in a half, element l + 32g (g = 0..3, l = 0..31) takes its low
// 4 bits from ql (byte l for g = 0/2, l + 32 for g = 1/3; low nibble for g < 2, high otherwise)
// and its top 2 bits from bits 2g..2g+1 of qh[l]; 16-element groups share an int8 scale:
// x = (d · sc) · (q - 32).
template <>
struct Format<GgmlType::Q6_K> {
  static constexpr int kBlock = kernels::kQK_K;
  static constexpr int kBytes = sizeof(BlockQ6_K);
  static STRATA_HD float element(const uint8_t* b, int j) {
    const int half = j >> 7;
    const int g = (j >> 5) & 3;
    const int l = j & 31;
    const uint32_t lo_byte = b[offsetof(BlockQ6_K, ql) + 64 * half + l + 32 * (g & 1)];
    const uint32_t lo = (g < 2) ? (lo_byte & 0xFu) : (lo_byte >> 4);
    const uint32_t hi = (b[offsetof(BlockQ6_K, qh) + 32 * half + l] >> (2 * g)) & 3u;
    const int q = static_cast<int>(lo | (hi << 4)) - 32;
    const int8_t sc =
        static_cast<int8_t>(b[offsetof(BlockQ6_K, scales) + 8 * half + l / 16 + 2 * g]);
    const float d = fp16_to_f32(load_u16(b + offsetof(BlockQ6_K, d)));
    return mul_rn(mul_rn(d, static_cast<float>(sc)), static_cast<float>(q));
  }
};

template <GgmlType T>
__global__ void dequantize_kernel(const uint8_t* __restrict__ src, float* __restrict__ dst,
                                  int64_t n) {
  using F = Format<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = F::element(src + (i / F::kBlock) * F::kBytes, static_cast<int>(i % F::kBlock));
  }
}

template <GgmlType T>
void launch(const void* src, float* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  // Beyond ~1M blocks of 256 the grid-stride loop takes over; that already fills any GPU.
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 20);
  dequantize_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(src), dst, n);
  CUDA_CHECK(cudaGetLastError());
}

template <GgmlType T>
void emulate(const void* src, float* dst, int64_t n) {
  using F = Format<T>;
  const uint8_t* s = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i)
    dst[i] = F::element(s + (i / F::kBlock) * F::kBytes, static_cast<int>(i % F::kBlock));
}

// The one dispatch switch of this module: runtime type → template. Returns false for types
// without a kernel (listed, not defaulted, so a new GgmlType is a compiler warning here).
template <typename Fn>
bool dispatch(GgmlType t, Fn&& fn) {
  switch (t) {
    case GgmlType::F32:
      fn(Format<GgmlType::F32>{});
      return true;
    case GgmlType::F16:
      fn(Format<GgmlType::F16>{});
      return true;
    case GgmlType::BF16:
      fn(Format<GgmlType::BF16>{});
      return true;
    case GgmlType::Q4_0:
      fn(Format<GgmlType::Q4_0>{});
      return true;
    case GgmlType::Q8_0:
      fn(Format<GgmlType::Q8_0>{});
      return true;
    case GgmlType::Q4_K:
      fn(Format<GgmlType::Q4_K>{});
      return true;
    case GgmlType::Q6_K:
      fn(Format<GgmlType::Q6_K>{});
      return true;
    case GgmlType::Q4_1:
      fn(Format<GgmlType::Q4_1>{});
      return true;
    case GgmlType::Q5_0:
      fn(Format<GgmlType::Q5_0>{});
      return true;
    case GgmlType::Q5_1:
      fn(Format<GgmlType::Q5_1>{});
      return true;
    case GgmlType::Q2_K:
      fn(Format<GgmlType::Q2_K>{});
      return true;
    case GgmlType::Q3_K:
      fn(Format<GgmlType::Q3_K>{});
      return true;
    case GgmlType::Q5_K:
      fn(Format<GgmlType::Q5_K>{});
      return true;
    case GgmlType::IQ4_NL:
      fn(Format<GgmlType::IQ4_NL>{});
      return true;
    case GgmlType::IQ4_XS:
      fn(Format<GgmlType::IQ4_XS>{});
      return true;
    case GgmlType::MXFP4:
      fn(Format<GgmlType::MXFP4>{});
      return true;
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
  return false;  // a value outside the enum (corrupt input)
}

// Maps a Format tag back to its GgmlType for the templates above.
template <typename F>
struct TypeOf;
template <GgmlType T>
struct TypeOf<Format<T>> {
  static constexpr GgmlType kValue = T;
};

}  // namespace

bool cuda_dequantize_supported(GgmlType t) {
  return dispatch(t, [](auto) {});
}

namespace detail {

bool launch_dequantize(GgmlType t, const void* dev_src, float* dev_dst, int64_t n, void* stream) {
  return dispatch(t, [&](auto tag) {
    launch<TypeOf<decltype(tag)>::kValue>(dev_src, dev_dst, n, static_cast<cudaStream_t>(stream));
  });
}

bool emulate_dequantize(GgmlType t, const void* src, float* dst, int64_t n) {
  return dispatch(t, [&](auto tag) { emulate<TypeOf<decltype(tag)>::kValue>(src, dst, n); });
}

}  // namespace detail
}  // namespace strata::cuda
