// Interleaved weight layouts (kernels/interleave.h): the repack, its inverse, the scalar twins of
// the interleaved kernels (the canonical order of gemv.cpp written out over the new layout) and the
// dispatch. Tested by tests/test_interleave.cpp.
#include "kernels/interleave.h"

#include <emmintrin.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "io/check.h"
#include "kernels/cpu_features.h"
#include "kernels/gemv.h"
#include "kernels/interleave_internal.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

namespace strata::kernels {
namespace {

constexpr int64_t kGroupRows = 16;

// Offsets inside a kQ4_0x16 group whose chunks are `stride` apart (kQ4_0x16Chunk; kQ4_0x32Stride
// in a kQ4_0x32 pair): row r's scale of block b, its code dword j.
size_t scale_at(int64_t b, int r, size_t stride) {
  return detail::q4_0x16_scale_offset(b, stride) + static_cast<size_t>(r) * 2;
}
size_t code_at(int64_t b, int j, int r, size_t stride) {
  return detail::q4_0x16_code_offset(b, stride) + static_cast<size_t>(j) * 64 +
         static_cast<size_t>(r) * 4;
}

// One group (16 GGUF rows of nb blocks at src) into the layout at dst, or back.
// Block-major: the destination is written chunk by chunk (the 16 source rows sit in L1).
// Per block, 4 rows at a time: their 16 code bytes are 4 dwords each, and a 4 x 4 dword transpose
// (SSE2, baseline x86-64) gives the 4 rows' dword j for each j in one 16-byte store.
void pack_group(const uint8_t* src, uint8_t* dst, int64_t nb, size_t stride) {
  const size_t row_bytes = static_cast<size_t>(nb) * sizeof(BlockQ4_0);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* col = src + static_cast<size_t>(b) * sizeof(BlockQ4_0);
    for (int r = 0; r < kGroupRows; ++r)
      std::memcpy(dst + scale_at(b, r, stride), col + r * row_bytes, 2);
    for (int r = 0; r < kGroupRows; r += 4) {
      __m128i a[4];
      for (int i = 0; i < 4; ++i)
        a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(col + (r + i) * row_bytes + 2));
      const __m128i t0 = _mm_unpacklo_epi32(a[0], a[1]), t1 = _mm_unpacklo_epi32(a[2], a[3]);
      const __m128i t2 = _mm_unpackhi_epi32(a[0], a[1]), t3 = _mm_unpackhi_epi32(a[2], a[3]);
      const __m128i j[4] = {_mm_unpacklo_epi64(t0, t1), _mm_unpackhi_epi64(t0, t1),
                            _mm_unpacklo_epi64(t2, t3), _mm_unpackhi_epi64(t2, t3)};
      for (int k = 0; k < 4; ++k)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + code_at(b, k, r, stride)), j[k]);
    }
  }
}
void unpack_group(const uint8_t* src, uint8_t* dst, int64_t nb, size_t stride) {
  const size_t row_bytes = static_cast<size_t>(nb) * sizeof(BlockQ4_0);
  for (int r = 0; r < kGroupRows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = dst + r * row_bytes + static_cast<size_t>(b) * sizeof(BlockQ4_0);
      std::memcpy(blk, src + scale_at(b, r, stride), 2);
      for (int j = 0; j < 4; ++j) std::memcpy(blk + 2 + 4 * j, src + code_at(b, j, r, stride), 4);
    }
}

GgmlType layout_type(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::kQ4_Kx16:
      return GgmlType::Q4_K;
    case WeightLayout::kQ6_Kx16:
      return GgmlType::Q6_K;
    case WeightLayout::kIQ4_XSx16:
      return GgmlType::IQ4_XS;
    case WeightLayout::kIQ4_NLx16:
      return GgmlType::IQ4_NL;  // kQ4_0x16's bytes: the blocks have Q4_0's shape
    case WeightLayout::kMXFP4x16:
      return GgmlType::MXFP4;
    case WeightLayout::kQ8_0x16:
      return GgmlType::Q8_0;
    case WeightLayout::kQ5_Kx16:
      return GgmlType::Q5_K;
    case WeightLayout::kQ2_Kx16:
      return GgmlType::Q2_K;
    case WeightLayout::kQ3_Kx16:
      return GgmlType::Q3_K;
    case WeightLayout::kQ5_0x16:
      return GgmlType::Q5_0;
    case WeightLayout::kQ4_1x16:
      return GgmlType::Q4_1;
    case WeightLayout::kQ5_1x16:
      return GgmlType::Q5_1;
    default:
      return GgmlType::Q4_0;
  }
}

// kQ4_Kx16: offsets inside a group's super-block b.
constexpr size_t kKBlock = kGroupRows * sizeof(BlockQ4_K);  // 2304
size_t k_d_at(int64_t b, int r) {
  return static_cast<size_t>(b) * kKBlock + static_cast<size_t>(r) * 2;
}
size_t k_dmin_at(int64_t b, int r) {
  return k_d_at(b, r) + 32;
}
size_t k_scales_at(int64_t b, int k, int r) {
  return static_cast<size_t>(b) * kKBlock + 64 + static_cast<size_t>(k) * 64 +
         static_cast<size_t>(r) * 4;
}
size_t k_qs_at(int64_t b, int i, int r) {
  return static_cast<size_t>(b) * kKBlock + 256 + static_cast<size_t>(i) * 64 +
         static_cast<size_t>(r) * 4;
}

void pack_group_k(const uint8_t* src, uint8_t* dst, int64_t nb) {
  const size_t row_bytes = static_cast<size_t>(nb) * sizeof(BlockQ4_K);
  for (int64_t b = 0; b < nb; ++b)
    for (int r = 0; r < kGroupRows; ++r) {
      BlockQ4_K blk;
      std::memcpy(&blk, src + r * row_bytes + static_cast<size_t>(b) * sizeof(BlockQ4_K),
                  sizeof(blk));
      std::memcpy(dst + k_d_at(b, r), &blk.d, 2);
      std::memcpy(dst + k_dmin_at(b, r), &blk.dmin, 2);
      for (int k = 0; k < 3; ++k) std::memcpy(dst + k_scales_at(b, k, r), blk.scales + 4 * k, 4);
      for (int i = 0; i < 32; ++i) std::memcpy(dst + k_qs_at(b, i, r), blk.qs + 4 * i, 4);
    }
}
void unpack_group_k(const uint8_t* src, uint8_t* dst, int64_t nb) {
  const size_t row_bytes = static_cast<size_t>(nb) * sizeof(BlockQ4_K);
  for (int64_t b = 0; b < nb; ++b)
    for (int r = 0; r < kGroupRows; ++r) {
      BlockQ4_K blk;
      std::memcpy(&blk.d, src + k_d_at(b, r), 2);
      std::memcpy(&blk.dmin, src + k_dmin_at(b, r), 2);
      for (int k = 0; k < 3; ++k) std::memcpy(blk.scales + 4 * k, src + k_scales_at(b, k, r), 4);
      for (int i = 0; i < 32; ++i) std::memcpy(blk.qs + 4 * i, src + k_qs_at(b, i, r), 4);
      std::memcpy(dst + r * row_bytes + static_cast<size_t>(b) * sizeof(BlockQ4_K), &blk,
                  sizeof(blk));
    }
}

// kQ5_Kx16: row r's super-block b of a group, written into the layout and gathered back.
void q5k_scatter(const BlockQ5_K& blk, uint8_t* group, int64_t b, int r) {
  uint8_t* at = group + static_cast<size_t>(b) * detail::kQ5_Kx16Block;
  std::memcpy(at + 2 * r, &blk.d, 2);
  std::memcpy(at + 32 + 2 * r, &blk.dmin, 2);
  for (int k = 0; k < 3; ++k) std::memcpy(at + 64 + 64 * k + 4 * r, blk.scales + 4 * k, 4);
  for (int i = 0; i < 8; ++i) std::memcpy(at + 256 + 64 * i + 4 * r, blk.qh + 4 * i, 4);
  for (int i = 0; i < 32; ++i) std::memcpy(at + 768 + 64 * i + 4 * r, blk.qs + 4 * i, 4);
}
BlockQ5_K q5k_gather(const uint8_t* group, int64_t b, int r) {
  const uint8_t* at = group + static_cast<size_t>(b) * detail::kQ5_Kx16Block;
  BlockQ5_K blk;
  std::memcpy(&blk.d, at + 2 * r, 2);
  std::memcpy(&blk.dmin, at + 32 + 2 * r, 2);
  for (int k = 0; k < 3; ++k) std::memcpy(blk.scales + 4 * k, at + 64 + 64 * k + 4 * r, 4);
  for (int i = 0; i < 8; ++i) std::memcpy(blk.qh + 4 * i, at + 256 + 64 * i + 4 * r, 4);
  for (int i = 0; i < 32; ++i) std::memcpy(blk.qs + 4 * i, at + 768 + 64 * i + 4 * r, 4);
  return blk;
}

// kQ2_Kx16: row r's super-block b of a group, written into the layout and gathered back.
void q2k_scatter(const BlockQ2_K& blk, uint8_t* group, int64_t b, int r) {
  uint8_t* at = group + static_cast<size_t>(b) * detail::kQ2_Kx16Block;
  std::memcpy(at + 2 * r, &blk.d, 2);
  std::memcpy(at + 32 + 2 * r, &blk.dmin, 2);
  for (int k = 0; k < 4; ++k) std::memcpy(at + 64 + 64 * k + 4 * r, blk.scales + 4 * k, 4);
  for (int i = 0; i < 16; ++i) std::memcpy(at + 320 + 64 * i + 4 * r, blk.qs + 4 * i, 4);
}
BlockQ2_K q2k_gather(const uint8_t* group, int64_t b, int r) {
  const uint8_t* at = group + static_cast<size_t>(b) * detail::kQ2_Kx16Block;
  BlockQ2_K blk;
  std::memcpy(&blk.d, at + 2 * r, 2);
  std::memcpy(&blk.dmin, at + 32 + 2 * r, 2);
  for (int k = 0; k < 4; ++k) std::memcpy(blk.scales + 4 * k, at + 64 + 64 * k + 4 * r, 4);
  for (int i = 0; i < 16; ++i) std::memcpy(blk.qs + 4 * i, at + 320 + 64 * i + 4 * r, 4);
  return blk;
}

// kQ3_Kx16: row r's super-block b of a group whose first super-block is odd or not, written into
// the layout and gathered back.
void q3k_scatter(const BlockQ3_K& blk, uint8_t* group, int64_t b, int r, bool odd) {
  const detail::Q3KParts p = detail::q3_kx16_parts(b, odd);
  for (int m = 0; m < 8; ++m) std::memcpy(group + p.hmask(m) + 4 * r, blk.hmask + 4 * m, 4);
  for (int i = 0; i < 16; ++i) std::memcpy(group + p.qs(i) + 4 * r, blk.qs + 4 * i, 4);
  for (int k = 0; k < 3; ++k) std::memcpy(group + p.scales + 64 * k + 4 * r, blk.scales + 4 * k, 4);
  std::memcpy(group + p.d + 2 * r, &blk.d, 2);
}
BlockQ3_K q3k_gather(const uint8_t* group, int64_t b, int r, bool odd) {
  const detail::Q3KParts p = detail::q3_kx16_parts(b, odd);
  BlockQ3_K blk;
  for (int m = 0; m < 8; ++m) std::memcpy(blk.hmask + 4 * m, group + p.hmask(m) + 4 * r, 4);
  for (int i = 0; i < 16; ++i) std::memcpy(blk.qs + 4 * i, group + p.qs(i) + 4 * r, 4);
  for (int k = 0; k < 3; ++k) std::memcpy(blk.scales + 4 * k, group + p.scales + 64 * k + 4 * r, 4);
  std::memcpy(&blk.d, group + p.d + 2 * r, 2);
  return blk;
}

// Row r's super-block b of a kQ6_Kx16 group whose first super-block is odd or not: written into
// the layout, and gathered back.
void q6_scatter(const BlockQ6_K& blk, uint8_t* group, int64_t b, int r, bool odd) {
  const detail::Q6KParts p = detail::q6_kx16_parts(b, odd);
  for (int g = 0; g < 16; ++g) group[p.scales + 16 * g + r] = static_cast<uint8_t>(blk.scales[g]);
  for (int i = 0; i < 32; ++i) std::memcpy(group + p.ql + 64 * i + 4 * r, blk.ql + 4 * i, 4);
  for (int i = 0; i < 16; ++i) std::memcpy(group + p.qh + 64 * i + 4 * r, blk.qh + 4 * i, 4);
  std::memcpy(group + p.d + 2 * r, &blk.d, 2);
}
BlockQ6_K q6_gather(const uint8_t* group, int64_t b, int r, bool odd) {
  const detail::Q6KParts p = detail::q6_kx16_parts(b, odd);
  BlockQ6_K blk;
  for (int g = 0; g < 16; ++g) blk.scales[g] = static_cast<int8_t>(group[p.scales + 16 * g + r]);
  for (int i = 0; i < 32; ++i) std::memcpy(blk.ql + 4 * i, group + p.ql + 64 * i + 4 * r, 4);
  for (int i = 0; i < 16; ++i) std::memcpy(blk.qh + 4 * i, group + p.qh + 64 * i + 4 * r, 4);
  std::memcpy(&blk.d, group + p.d + 2 * r, 2);
  return blk;
}

// kIQ4_XSx16: row r's super-block b of a group, written into the layout and gathered back.
void iq4_scatter(const BlockIQ4_XS& blk, uint8_t* group, int64_t b, int r) {
  uint8_t* at = group + static_cast<size_t>(b) * detail::kIQ4_XSx16Block;
  std::memcpy(at + 2 * r, &blk.d, 2);
  std::memcpy(at + 32 + 2 * r, &blk.scales_h, 2);
  std::memcpy(at + 64 + 4 * r, blk.scales_l, 4);
  for (int i = 0; i < 32; ++i) std::memcpy(at + 128 + 64 * i + 4 * r, blk.qs + 4 * i, 4);
}
BlockIQ4_XS iq4_gather(const uint8_t* group, int64_t b, int r) {
  const uint8_t* at = group + static_cast<size_t>(b) * detail::kIQ4_XSx16Block;
  BlockIQ4_XS blk;
  std::memcpy(&blk.d, at + 2 * r, 2);
  std::memcpy(&blk.scales_h, at + 32 + 2 * r, 2);
  std::memcpy(blk.scales_l, at + 64 + 4 * r, 4);
  for (int i = 0; i < 32; ++i) std::memcpy(blk.qs + 4 * i, at + 128 + 64 * i + 4 * r, 4);
  return blk;
}

// kMXFP4x16: row r's block b of a group whose first chunk is odd or not, written into the layout
// and gathered back.
void mxfp4_scatter(const BlockMXFP4& blk, uint8_t* group, int64_t b, int r, bool odd) {
  group[detail::mxfp4x16_scale_offset(b, odd) + static_cast<size_t>(r)] = blk.e;
  for (int j = 0; j < 4; ++j)
    std::memcpy(group + detail::mxfp4x16_code_offset(b, odd) + 64 * j + 4 * r, blk.qs + 4 * j, 4);
}
BlockMXFP4 mxfp4_gather(const uint8_t* group, int64_t b, int r, bool odd) {
  BlockMXFP4 blk;
  blk.e = group[detail::mxfp4x16_scale_offset(b, odd) + static_cast<size_t>(r)];
  for (int j = 0; j < 4; ++j)
    std::memcpy(blk.qs + 4 * j, group + detail::mxfp4x16_code_offset(b, odd) + 64 * j + 4 * r, 4);
  return blk;
}

// kQ8_0x16: the same for Q8_0's blocks.
void q8_0_scatter(const BlockQ8_0& blk, uint8_t* group, int64_t b, int r, bool odd) {
  std::memcpy(group + detail::q8_0x16_scale_offset(b, odd) + 2 * r, &blk.d, 2);
  for (int j = 0; j < 8; ++j)
    std::memcpy(group + detail::q8_0x16_code_offset(b, odd) + 64 * j + 4 * r, blk.qs + 4 * j, 4);
}
BlockQ8_0 q8_0_gather(const uint8_t* group, int64_t b, int r, bool odd) {
  BlockQ8_0 blk;
  std::memcpy(&blk.d, group + detail::q8_0x16_scale_offset(b, odd) + 2 * r, 2);
  for (int j = 0; j < 8; ++j)
    std::memcpy(blk.qs + 4 * j, group + detail::q8_0x16_code_offset(b, odd) + 64 * j + 4 * r, 4);
  return blk;
}

// kQ5_0x16, kQ4_1x16, kQ5_1x16: row r's block b of a group, written into the layout and gathered
// back (the qh word regrouped by code line).
template <typename Block>
constexpr bool kHasMin = !std::is_same_v<Block, BlockQ5_0>;
template <typename Block>
constexpr bool kHasHigh = !std::is_same_v<Block, BlockQ4_1>;
template <typename Block>
using PartsOf = detail::B32Parts<kHasMin<Block>, kHasHigh<Block>>;
template <typename Block>
void b32_scatter(const Block& blk, uint8_t* group, int64_t b, int r) {
  using P = PartsOf<Block>;
  std::memcpy(group + P::d(b) + 2 * r, &blk.d, 2);
  if constexpr (kHasMin<Block>) std::memcpy(group + P::m(b) + 2 * r, &blk.m, 2);
  if constexpr (kHasHigh<Block>) {
    uint32_t qh = 0;
    std::memcpy(&qh, blk.qh, 4);
    qh = detail::qh_by_line(qh);
    std::memcpy(group + P::qh(b) + 4 * r, &qh, 4);
  }
  for (int j = 0; j < 4; ++j) std::memcpy(group + P::codes(b) + 64 * j + 4 * r, blk.qs + 4 * j, 4);
}
template <typename Block>
Block b32_gather(const uint8_t* group, int64_t b, int r) {
  using P = PartsOf<Block>;
  Block blk;
  std::memcpy(&blk.d, group + P::d(b) + 2 * r, 2);
  if constexpr (kHasMin<Block>) std::memcpy(&blk.m, group + P::m(b) + 2 * r, 2);
  if constexpr (kHasHigh<Block>) {
    uint32_t v = 0;
    std::memcpy(&v, group + P::qh(b) + 4 * r, 4);
    v = detail::qh_from_lines(v);
    std::memcpy(blk.qh, &v, 4);
  }
  for (int j = 0; j < 4; ++j) std::memcpy(blk.qs + 4 * j, group + P::codes(b) + 64 * j + 4 * r, 4);
  return blk;
}

// The layouts whose rows go through scatter(block, group, b, r) / gather(group, b, r) one block
// at a time (the super-block layouts, and the 544-byte unit layouts with the group's parity bound).
template <typename Block, typename Scatter>
void pack_group_blocks(const uint8_t* src, uint8_t* dst, int64_t nb, Scatter&& scatter) {
  const size_t row_bytes = static_cast<size_t>(nb) * sizeof(Block);
  for (int64_t b = 0; b < nb; ++b)
    for (int r = 0; r < kGroupRows; ++r) {
      Block blk;
      std::memcpy(&blk, src + r * row_bytes + static_cast<size_t>(b) * sizeof(Block), sizeof(blk));
      scatter(blk, dst, b, r);
    }
}
template <typename Block, typename Gather>
void unpack_group_blocks(const uint8_t* src, uint8_t* dst, int64_t nb, Gather&& gather) {
  const size_t row_bytes = static_cast<size_t>(nb) * sizeof(Block);
  for (int64_t b = 0; b < nb; ++b)
    for (int r = 0; r < kGroupRows; ++r) {
      const Block blk = gather(src, b, r);
      std::memcpy(dst + r * row_bytes + static_cast<size_t>(b) * sizeof(Block), &blk, sizeof(blk));
    }
}
// A unit layout's scatter / gather with the group's parity bound.
template <typename Block, void (*Scatter)(const Block&, uint8_t*, int64_t, int, bool)>
auto unit_scatter(bool odd) {
  return [odd](const Block& blk, uint8_t* g, int64_t b, int r) { Scatter(blk, g, b, r, odd); };
}
template <typename Block, Block (*Gather)(const uint8_t*, int64_t, int, bool)>
auto unit_gather(bool odd) {
  return [odd](const uint8_t* g, int64_t b, int r) { return Gather(g, b, r, odd); };
}

// Blocks per row and bytes per group of a layout's matrix.
int64_t layout_blocks(WeightLayout layout, int64_t n_cols) {
  return n_cols / ggml_type_info(layout_type(layout)).block_size;
}
// Where group g (rows 16g..16g+15) starts in a layout's matrix of `group`-byte groups, and how far
// apart its chunks are (kQ4_0x32 weaves pairs of groups; the others hold groups back to back).
size_t group_at(WeightLayout layout, int64_t g, size_t group) {
  if (layout != WeightLayout::kQ4_0x32) return static_cast<size_t>(g) * group;
  return static_cast<size_t>(g & ~int64_t{1}) * group + ((g & 1) != 0 ? detail::kQ4_0x16Chunk : 0);
}
size_t chunk_stride(WeightLayout layout) {
  return layout == WeightLayout::kQ4_0x32 ? detail::kQ4_0x32Stride : detail::kQ4_0x16Chunk;
}
size_t group_bytes(WeightLayout layout, int64_t nb) {
  return static_cast<size_t>(kGroupRows * nb) * ggml_type_info(layout_type(layout)).type_size;
}
// Group g of the matrix (16 GGUF rows at src) into the layout at dst, or back.
void pack_any(WeightLayout layout, const uint8_t* src, uint8_t* dst, int64_t nb, int64_t g) {
  switch (layout) {
    case WeightLayout::kMXFP4x16:
      return pack_group_blocks<BlockMXFP4>(
          src, dst, nb,
          unit_scatter<BlockMXFP4, &mxfp4_scatter>(detail::mxfp4x16_group_odd(g * kGroupRows, nb)));
    case WeightLayout::kQ8_0x16:
      return pack_group_blocks<BlockQ8_0>(
          src, dst, nb,
          unit_scatter<BlockQ8_0, &q8_0_scatter>(detail::q8_0x16_group_odd(g * kGroupRows, nb)));
    case WeightLayout::kQ4_Kx16:
      return pack_group_k(src, dst, nb);
    case WeightLayout::kQ6_Kx16:
      return pack_group_blocks<BlockQ6_K>(
          src, dst, nb,
          unit_scatter<BlockQ6_K, &q6_scatter>(detail::q6_kx16_group_odd(g * kGroupRows, nb)));
    case WeightLayout::kQ5_Kx16:
      return pack_group_blocks<BlockQ5_K>(src, dst, nb, &q5k_scatter);
    case WeightLayout::kQ5_0x16:
      return pack_group_blocks<BlockQ5_0>(src, dst, nb, &b32_scatter<BlockQ5_0>);
    case WeightLayout::kQ4_1x16:
      return pack_group_blocks<BlockQ4_1>(src, dst, nb, &b32_scatter<BlockQ4_1>);
    case WeightLayout::kQ5_1x16:
      return pack_group_blocks<BlockQ5_1>(src, dst, nb, &b32_scatter<BlockQ5_1>);
    case WeightLayout::kIQ4_XSx16:
      return pack_group_blocks<BlockIQ4_XS>(src, dst, nb, &iq4_scatter);
    case WeightLayout::kQ2_Kx16:
      return pack_group_blocks<BlockQ2_K>(src, dst, nb, &q2k_scatter);
    case WeightLayout::kQ3_Kx16:
      return pack_group_blocks<BlockQ3_K>(
          src, dst, nb,
          unit_scatter<BlockQ3_K, &q3k_scatter>(detail::q3_kx16_group_odd(g * kGroupRows, nb)));
    default:
      return pack_group(src, dst, nb, chunk_stride(layout));
  }
}
void unpack_any(WeightLayout layout, const uint8_t* src, uint8_t* dst, int64_t nb, int64_t g) {
  switch (layout) {
    case WeightLayout::kMXFP4x16:
      return unpack_group_blocks<BlockMXFP4>(
          src, dst, nb,
          unit_gather<BlockMXFP4, &mxfp4_gather>(detail::mxfp4x16_group_odd(g * kGroupRows, nb)));
    case WeightLayout::kQ8_0x16:
      return unpack_group_blocks<BlockQ8_0>(
          src, dst, nb,
          unit_gather<BlockQ8_0, &q8_0_gather>(detail::q8_0x16_group_odd(g * kGroupRows, nb)));
    case WeightLayout::kQ4_Kx16:
      return unpack_group_k(src, dst, nb);
    case WeightLayout::kQ6_Kx16:
      return unpack_group_blocks<BlockQ6_K>(
          src, dst, nb,
          unit_gather<BlockQ6_K, &q6_gather>(detail::q6_kx16_group_odd(g * kGroupRows, nb)));
    case WeightLayout::kQ5_Kx16:
      return unpack_group_blocks<BlockQ5_K>(src, dst, nb, &q5k_gather);
    case WeightLayout::kQ5_0x16:
      return unpack_group_blocks<BlockQ5_0>(src, dst, nb, &b32_gather<BlockQ5_0>);
    case WeightLayout::kQ4_1x16:
      return unpack_group_blocks<BlockQ4_1>(src, dst, nb, &b32_gather<BlockQ4_1>);
    case WeightLayout::kQ5_1x16:
      return unpack_group_blocks<BlockQ5_1>(src, dst, nb, &b32_gather<BlockQ5_1>);
    case WeightLayout::kIQ4_XSx16:
      return unpack_group_blocks<BlockIQ4_XS>(src, dst, nb, &iq4_gather);
    case WeightLayout::kQ2_Kx16:
      return unpack_group_blocks<BlockQ2_K>(src, dst, nb, &q2k_gather);
    case WeightLayout::kQ3_Kx16:
      return unpack_group_blocks<BlockQ3_K>(
          src, dst, nb,
          unit_gather<BlockQ3_K, &q3k_gather>(detail::q3_kx16_group_odd(g * kGroupRows, nb)));
    default:
      return unpack_group(src, dst, nb, chunk_stride(layout));
  }
}

}  // namespace

int64_t layout_rows(WeightLayout layout) {
  return layout == WeightLayout::kRows ? 1 : kGroupRows;
}

WeightLayout interleaved_layout(GgmlType type, int64_t n_rows, int64_t n_cols) {
  if (n_rows <= 0 || n_rows % kGroupRows != 0 || n_cols <= 0) return WeightLayout::kRows;
  if (type == GgmlType::Q4_0 && n_cols % (2 * kQK) == 0)
    return best_isa() == Isa::kAvx512 && n_rows % 32 == 0 ? WeightLayout::kQ4_0x32
                                                          : WeightLayout::kQ4_0x16;
  if (type == GgmlType::Q4_K && n_cols % kQK_K == 0) return WeightLayout::kQ4_Kx16;
  if (type == GgmlType::Q6_K && n_cols % kQK_K == 0) return WeightLayout::kQ6_Kx16;
  if (type == GgmlType::Q5_K && n_cols % kQK_K == 0) return WeightLayout::kQ5_Kx16;
  if (type == GgmlType::Q2_K && n_cols % kQK_K == 0) return WeightLayout::kQ2_Kx16;
  if (type == GgmlType::Q3_K && n_cols % kQK_K == 0) return WeightLayout::kQ3_Kx16;
  if (type == GgmlType::IQ4_XS && n_cols % kQK_K == 0) return WeightLayout::kIQ4_XSx16;
  if (type == GgmlType::IQ4_NL && n_cols % (2 * kQK) == 0) return WeightLayout::kIQ4_NLx16;
  if (type == GgmlType::MXFP4 && n_cols % (2 * kQK) == 0) return WeightLayout::kMXFP4x16;
  if (type == GgmlType::Q8_0 && n_cols % kQK == 0) return WeightLayout::kQ8_0x16;
  if (type == GgmlType::Q5_0 && n_cols % (2 * kQK) == 0) return WeightLayout::kQ5_0x16;
  if (type == GgmlType::Q4_1 && n_cols % (2 * kQK) == 0) return WeightLayout::kQ4_1x16;
  if (type == GgmlType::Q5_1 && n_cols % (2 * kQK) == 0) return WeightLayout::kQ5_1x16;
  return WeightLayout::kRows;
}

WeightLayout interleaved_layout(GgmlType type) {
  return interleaved_layout(type, kGroupRows, kQK_K);
}

namespace {

// Whether a [n_rows, n_cols] matrix can be held in `layout`.
bool layout_fits(WeightLayout layout, int64_t n_rows, int64_t n_cols) {
  if (n_rows <= 0 || n_cols <= 0) return false;
  switch (layout) {
    case WeightLayout::kQ4_0x16:
    case WeightLayout::kIQ4_NLx16:
    case WeightLayout::kMXFP4x16:
    case WeightLayout::kQ5_0x16:
    case WeightLayout::kQ4_1x16:
    case WeightLayout::kQ5_1x16:
      return n_rows % kGroupRows == 0 && n_cols % (2 * kQK) == 0;
    case WeightLayout::kQ4_0x32:
      return n_rows % (2 * kGroupRows) == 0 && n_cols % (2 * kQK) == 0;
    case WeightLayout::kQ2_Kx16:
    case WeightLayout::kQ3_Kx16:
    case WeightLayout::kQ4_Kx16:
    case WeightLayout::kQ5_Kx16:
    case WeightLayout::kQ6_Kx16:
    case WeightLayout::kIQ4_XSx16:
      return n_rows % kGroupRows == 0 && n_cols % kQK_K == 0;
    case WeightLayout::kQ8_0x16:
      return n_rows % kGroupRows == 0 && n_cols % kQK == 0;
    default:
      return false;
  }
}

void check_layout(WeightLayout layout, int64_t n_rows, int64_t n_cols) {
  STRATA_ASSERT(layout_fits(layout, n_rows, n_cols),
                "no interleaved layout {} for a {} x {} matrix", static_cast<int>(layout), n_rows,
                n_cols);
}

}  // namespace

bool interleave_pays() {
  return best_isa() != Isa::kRef;
}

bool interleave_pays(GgmlType type) {
  switch (best_isa()) {
    case Isa::kAvx512:
      return type == GgmlType::Q4_0 || type == GgmlType::Q4_K || type == GgmlType::Q6_K ||
             type == GgmlType::IQ4_XS || type == GgmlType::IQ4_NL || type == GgmlType::MXFP4 ||
             type == GgmlType::Q8_0 || type == GgmlType::Q5_K || type == GgmlType::Q2_K ||
             type == GgmlType::Q3_K || type == GgmlType::Q5_0 || type == GgmlType::Q4_1 ||
             type == GgmlType::Q5_1;
    case Isa::kAvx2:
      // Q8_0 too since session 43: the plain AVX2 one-pass kernel streams as the row kernel does
      // and computes 1.7x faster (the GEMM more); the two-half one of session 23 streamed 0.85x.
      return type == GgmlType::Q4_0 || type == GgmlType::Q4_K || type == GgmlType::Q6_K ||
             type == GgmlType::IQ4_XS || type == GgmlType::IQ4_NL || type == GgmlType::MXFP4 ||
             type == GgmlType::Q5_K || type == GgmlType::Q2_K || type == GgmlType::Q3_K ||
             type == GgmlType::Q5_0 || type == GgmlType::Q4_1 || type == GgmlType::Q5_1 ||
             type == GgmlType::Q8_0;
    default:
      return false;
  }
}

void interleave(WeightLayout layout, const void* src, void* dst, int64_t n_rows, int64_t n_cols) {
  check_layout(layout, n_rows, n_cols);
  const int64_t nb = layout_blocks(layout, n_cols);
  const size_t group = group_bytes(layout, nb);
  for (int64_t g = 0; g < n_rows / kGroupRows; ++g)
    pack_any(layout, static_cast<const uint8_t*>(src) + g * group,
             static_cast<uint8_t*>(dst) + group_at(layout, g, group), nb, g);
}

void deinterleave(WeightLayout layout, const void* src, void* dst, int64_t n_rows, int64_t n_cols) {
  check_layout(layout, n_rows, n_cols);
  const int64_t nb = layout_blocks(layout, n_cols);
  const size_t group = group_bytes(layout, nb);
  for (int64_t g = 0; g < n_rows / kGroupRows; ++g) {
    const auto* from = static_cast<const uint8_t*>(src) + group_at(layout, g, group);
    auto* to = static_cast<uint8_t*>(dst) + g * group;
    unpack_any(layout, from, to, nb, g);
  }
}

void interleave_in_place(WeightLayout layout, void* data, int64_t n_rows, int64_t n_cols) {
  check_layout(layout, n_rows, n_cols);
  const int64_t nb = layout_blocks(layout, n_cols);
  const size_t group = group_bytes(layout, nb);
  // The groups a unit of the layout weaves together (kQ4_0x32: a pair) go through tmp together.
  const int64_t unit = layout == WeightLayout::kQ4_0x32 ? 2 : 1;
  std::vector<uint8_t> tmp(static_cast<size_t>(unit) * group);
  for (int64_t g = 0; g < n_rows / kGroupRows; g += unit) {
    uint8_t* p = static_cast<uint8_t*>(data) + g * group;
    std::memcpy(tmp.data(), p, tmp.size());
    for (int64_t i = 0; i < unit; ++i)
      pack_any(layout, tmp.data() + i * group, p + group_at(layout, i, group), nb, g + i);
  }
}

GemvKernels gemv_kernels(GgmlType type, WeightLayout layout, Isa isa) {
  if (layout == WeightLayout::kRows) return gemv_kernels(type, isa);
  STRATA_ASSERT(layout_type(layout) == type, "layout {} does not hold {}", static_cast<int>(layout),
                ggml_type_name(type));
  for (;;) {
    if (isa_supported(isa)) {
      GemvKernels k{nullptr, nullptr};
      switch (isa) {
        case Isa::kAvx512: {
          static const bool gfni = cpu_has(CpuFeature::kGfni);
          k = gfni ? detail::interleaved_kernels_avx512_gfni(layout)
                   : detail::interleaved_kernels_avx512(layout);
          break;
        }
        case Isa::kAvx2: {
          // AVX-VNNI is an AVX2-generation extension (Alder Lake's cores have it without
          // AVX-512), so the AVX2 level uses it wherever the CPU has it, also under ISA=avx2.
          k = avxvnni_in_use() ? detail::interleaved_kernels_avxvnni(layout)
                               : detail::interleaved_kernels_avx2(layout);
          break;
        }
        case Isa::kRef:
          k = detail::interleaved_kernels_ref(layout);
          break;
      }
      if (k.gemv != nullptr) return k;
    }
    STRATA_ASSERT(isa != Isa::kRef, "no reference kernel for layout {}", static_cast<int>(layout));
    isa = isa == Isa::kAvx512 ? Isa::kAvx2 : Isa::kRef;
  }
}

namespace detail {

XPrep* prep_buffer(int64_t n_blocks, int64_t n_tokens) {
  thread_local std::vector<XPrep> buf;
  const size_t n = static_cast<size_t>(n_blocks * n_tokens);
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

namespace {

// The canonical order of gemv.cpp for one row of a kQ4_0x16 group whose chunks are kStride apart,
// literally.
// Value: a nibble as Q4_0 (nibble - 8) or IQ4_NL (its table value: kIQ4_NLx16, the same bytes).
int q4_0_nibble(int c) {
  return c - 8;
}
int iq4_nl_nibble(int c) {
  return detail::kIq4nlValues[c];
}
template <size_t kStride, int (*Value)(int) = &q4_0_nibble>
float dot_row_ref(const uint8_t* group, int r, const BlockQ8_0* x, int64_t nb) {
  float acc[8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 4; ++k) {
        const uint8_t byte = group[code_at(b, j, r, kStride) + k];
        isum += Value(byte & 0x0F) * x[b].qs[4 * j + k];
        isum += Value(byte >> 4) * x[b].qs[16 + 4 * j + k];
      }
    uint16_t dw = 0;
    std::memcpy(&dw, group + scale_at(b, r, kStride), 2);
    const float d = fp16_to_f32(dw) * fp16_to_f32(x[b].d);
    acc[b % 8] = acc[b % 8] + static_cast<float>(isum) * d;
  }
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// The canonical order of gemv.cpp for one row of a kMXFP4x16 / kQ8_0x16 group (its first unit
// odd or not), literally: isum over the codes' values (MXFP4: doubled E2M1), r_b = (float)isum *
// (scale_w * fp16(d_x)), scale_w = 2^(e-128) (MXFP4) or fp16(d) (Q8_0).
int mxfp4_code(const BlockMXFP4& b, int j) {
  return mxfp4_value(b, j);
}
float mxfp4_scale(const BlockMXFP4& b) {
  return e8m0_to_f32_half(b.e);
}
int q8_0_code(const BlockQ8_0& b, int j) {
  return b.qs[j];
}
float q8_0_scale(const BlockQ8_0& b) {
  return fp16_to_f32(b.d);
}
template <typename Block, Block (*Gather)(const uint8_t*, int64_t, int, bool),
          int (*Code)(const Block&, int), float (*Scale)(const Block&), bool kOdd>
float dot_row_unit_ref(const uint8_t* group, int r, const BlockQ8_0* x, int64_t nb) {
  float acc[8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const Block blk = Gather(group, b, r, kOdd);
    int32_t isum = 0;
    for (int j = 0; j < kQK; ++j) isum += Code(blk, j) * x[b].qs[j];
    const float d = Scale(blk) * fp16_to_f32(x[b].d);
    acc[b % 8] = acc[b % 8] + static_cast<float>(isum) * d;
  }
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// The canonical order of gemv.cpp (gemv_ref.cpp's dot_q8_0_acts / dot_q_1) for one row of a
// kQ5_0x16 / kQ4_1x16 / kQ5_1x16 group, each block gathered back.
int q5_0_val(const BlockQ5_0& b, int j) {
  return q5_0_value(b, j);
}
int q4_1_val(const BlockQ4_1& b, int j) {
  return q4_1_code(b, j);
}
int q5_1_val(const BlockQ5_1& b, int j) {
  return q5_1_code(b, j);
}
template <typename Block, int (*Value)(const Block&, int)>
float dot_row_b32_ref(const uint8_t* group, int r, const BlockQ8_0* x, int64_t nb) {
  float acc[8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const Block blk = b32_gather<Block>(group, b, r);
    int32_t isum = 0, xsum = 0;
    for (int j = 0; j < kQK; ++j) {
      isum += Value(blk, j) * x[b].qs[j];
      xsum += x[b].qs[j];
    }
    const float dx = fp16_to_f32(x[b].d);
    float rb = static_cast<float>(isum) * (fp16_to_f32(blk.d) * dx);
    if constexpr (kHasMin<Block>) rb = rb + fp16_to_f32(blk.m) * (dx * static_cast<float>(xsum));
    acc[b % 8] = acc[b % 8] + rb;
  }
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// The canonical Q4_K order of gemv.cpp for one row of a kQ4_Kx16 group, literally.
float dot_row_k_ref(const uint8_t* group, int r, const BlockQ8_K* x, int64_t nb) {
  float acc[8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t scales[12];
    for (int k = 0; k < 3; ++k) std::memcpy(scales + 4 * k, group + k_scales_at(b, k, r), 4);
    int32_t sumi = 0, summ = 0;
    for (int s = 0; s < 8; ++s) {
      uint8_t sc = 0, mn = 0;
      q4_k_scale_min(scales, s, &sc, &mn);
      int32_t isum = 0;
      for (int l = 0; l < 32; ++l) {
        // Element 32s + l: qs byte 32 (s / 2) + l, the low nibble for even s.
        const int q = 32 * (s / 2) + l;
        const uint8_t byte = group[k_qs_at(b, q / 4, r) + q % 4];
        isum += (s % 2 ? byte >> 4 : byte & 0x0F) * x[b].qs[32 * s + l];
      }
      sumi += sc * isum;
      summ += mn * (x[b].bsums[2 * s] + x[b].bsums[2 * s + 1]);
    }
    uint16_t d = 0, dmin = 0;
    std::memcpy(&d, group + k_d_at(b, r), 2);
    std::memcpy(&dmin, group + k_dmin_at(b, r), 2);
    const float dd = fp16_to_f32(d) * x[b].d;
    const float dm = fp16_to_f32(dmin) * x[b].d;
    acc[b % 8] = acc[b % 8] + (dd * static_cast<float>(sumi) - dm * static_cast<float>(summ));
  }
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// The canonical Q5_K order of gemv.cpp for one row of a kQ5_Kx16 group, literally (dot_k_min of
// gemv_ref.cpp over the super-blocks gathered back).
float dot_row_q5_k_ref(const uint8_t* group, int r, const BlockQ8_K* x, int64_t nb) {
  float acc[8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ5_K blk = q5k_gather(group, b, r);
    int32_t sumi = 0, summ = 0;
    for (int s = 0; s < 8; ++s) {
      uint8_t sc = 0, mn = 0;
      q4_k_scale_min(blk.scales, s, &sc, &mn);
      int32_t isum = 0;
      for (int l = 0; l < 32; ++l) isum += q5_k_code(blk, 32 * s + l) * x[b].qs[32 * s + l];
      sumi += sc * isum;
      summ += mn * (x[b].bsums[2 * s] + x[b].bsums[2 * s + 1]);
    }
    const float dd = fp16_to_f32(blk.d) * x[b].d;
    const float dm = fp16_to_f32(blk.dmin) * x[b].d;
    acc[b % 8] = acc[b % 8] + (dd * static_cast<float>(sumi) - dm * static_cast<float>(summ));
  }
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// The canonical Q2_K order of gemv.cpp for one row of a kQ2_Kx16 group, literally (dot_q2_k of
// gemv_ref.cpp over the super-blocks gathered back).
float dot_row_q2_k_ref(const uint8_t* group, int r, const BlockQ8_K* x, int64_t nb) {
  float acc[8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ2_K blk = q2k_gather(group, b, r);
    int32_t sumi = 0, summ = 0;
    for (int g = 0; g < 16; ++g) {
      int32_t isum = 0;
      for (int l = 0; l < 16; ++l) isum += q2_k_code(blk, 16 * g + l) * x[b].qs[16 * g + l];
      sumi += (blk.scales[g] & 0xF) * isum;
      summ += (blk.scales[g] >> 4) * x[b].bsums[g];
    }
    const float dd = fp16_to_f32(blk.d) * x[b].d;
    const float dm = fp16_to_f32(blk.dmin) * x[b].d;
    acc[b % 8] = acc[b % 8] + (dd * static_cast<float>(sumi) - dm * static_cast<float>(summ));
  }
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// The integer sums of one Q3_K / Q6_K super-block over groups of 16 with signed scales (Q3_K:
// its 6-bit fields - 32; IQ4_XS's: iq4_xs_sumi, quant_internal.h).
int32_t q3_sumi(const BlockQ3_K& blk, const BlockQ8_K& x) {
  int8_t sc[16];
  q3_k_scales(blk.scales, sc);
  int32_t sumi = 0;
  for (int g = 0; g < 16; ++g) {
    int32_t isum = 0;
    for (int l = 0; l < 16; ++l) isum += q3_k_value(blk, 16 * g + l) * x.qs[16 * g + l];
    sumi += sc[g] * isum;
  }
  return sumi;
}
int32_t q6_sumi(const BlockQ6_K& blk, const BlockQ8_K& x) {
  int32_t sumi = 0;
  for (int g = 0; g < 16; ++g) {
    int32_t isum = 0;
    for (int l = 0; l < 16; ++l) isum += q6_k_value(blk, 16 * g + l) * x.qs[16 * g + l];
    sumi += blk.scales[g] * isum;
  }
  return sumi;
}

// The canonical Q3_K / Q6_K / IQ4_XS order of gemv.cpp for one row of a kQ3_Kx16 / kQ6_Kx16 /
// kIQ4_XSx16 group, literally: r_b = (fp16(d_w) * d_x) * (float)sumi, each super-block gathered
// back from the group.
template <typename Block, Block (*Gather)(const uint8_t*, int64_t, int),
          int32_t (*Sumi)(const Block&, const BlockQ8_K&)>
float dot_row_sym_ref(const uint8_t* group, int r, const BlockQ8_K* x, int64_t nb) {
  float acc[8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const Block blk = Gather(group, b, r);
    const float dd = fp16_to_f32(blk.d) * x[b].d;
    acc[b % 8] = acc[b % 8] + dd * static_cast<float>(Sumi(blk, x[b]));
  }
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}
// A parity layout's gather with the group's parity fixed.
template <typename Block, Block (*Gather)(const uint8_t*, int64_t, int, bool), bool kOdd>
Block gather_at(const uint8_t* group, int64_t b, int r) {
  return Gather(group, b, r, kOdd);
}
// kQ3_Kx16, kQ6_Kx16: each group by the twin of its first super-block's parity.
template <typename Block, Block (*Gather)(const uint8_t*, int64_t, int, bool),
          int32_t (*Sumi)(const Block&, const BlockQ8_K&)>
void gemv_parity_ref(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
                     int64_t row_end, int64_t n_cols) {
  const int64_t nb = n_cols / kQK_K;
  const auto* x = static_cast<const BlockQ8_K*>(xq);
  for_groups(w, row_stride, row_begin, row_end, [&](const uint8_t* group, int64_t r0) {
    const bool odd = group_first_odd(r0, nb);
    for (int r = 0; r < kGroupRows; ++r)
      y[r0 + r] =
          odd ? dot_row_sym_ref<Block, &gather_at<Block, Gather, true>, Sumi>(group, r, x, nb)
              : dot_row_sym_ref<Block, &gather_at<Block, Gather, false>, Sumi>(group, r, x, nb);
  });
}
// GEMV / GEMM over whole 16-row groups from a row twin: y[r] = Row(group, r, x, nb), token by
// token.
template <typename XBlock, int64_t kElems,
          float (*Row)(const uint8_t*, int, const XBlock*, int64_t)>
void gemv_x16_ref(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
                  int64_t row_end, int64_t n_cols) {
  const int64_t nb = n_cols / kElems;
  const auto* x = static_cast<const XBlock*>(xq);
  for_groups(w, row_stride, row_begin, row_end, [&](const uint8_t* group, int64_t r0) {
    for (int r = 0; r < kGroupRows; ++r) y[r0 + r] = Row(group, r, x, nb);
  });
}

// GEMM token by token from a GEMV.
template <GemvFn Gemv>
void gemm_by_token_ref(const void* w, size_t row_stride, const void* xq, size_t xq_stride, float* y,
                       size_t y_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end,
                       int64_t n_cols) {
  for (int64_t t = 0; t < n_tokens; ++t)
    Gemv(w, row_stride, static_cast<const uint8_t*>(xq) + t * xq_stride, y + t * y_stride,
         row_begin, row_end, n_cols);
}

template <typename XBlock, int64_t kElems,
          float (*Row)(const uint8_t*, int, const XBlock*, int64_t)>
GemvKernels x16_ref() {
  return GemvKernels{&gemv_x16_ref<XBlock, kElems, Row>,
                     &gemm_by_token_ref<&gemv_x16_ref<XBlock, kElems, Row>>};
}

// kMXFP4x16, kQ8_0x16: each group by the twin of its first unit's parity.
template <typename Block, Block (*Gather)(const uint8_t*, int64_t, int, bool),
          int (*Code)(const Block&, int), float (*Scale)(const Block&),
          bool (*GroupOdd)(int64_t, int64_t)>
void gemv_units_ref(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
                    int64_t row_end, int64_t n_cols) {
  const int64_t nb = n_cols / kQK;
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  for_groups(w, row_stride, row_begin, row_end, [&](const uint8_t* group, int64_t r0) {
    const bool odd = GroupOdd(r0, nb);
    for (int r = 0; r < kGroupRows; ++r)
      y[r0 + r] = odd ? dot_row_unit_ref<Block, Gather, Code, Scale, true>(group, r, x, nb)
                      : dot_row_unit_ref<Block, Gather, Code, Scale, false>(group, r, x, nb);
  });
}
template <typename Block, Block (*Gather)(const uint8_t*, int64_t, int, bool),
          int (*Code)(const Block&, int), float (*Scale)(const Block&),
          bool (*GroupOdd)(int64_t, int64_t)>
GemvKernels units_ref() {
  constexpr GemvFn kGemv = &gemv_units_ref<Block, Gather, Code, Scale, GroupOdd>;
  return GemvKernels{kGemv, &gemm_by_token_ref<kGemv>};
}

template <typename Block, Block (*Gather)(const uint8_t*, int64_t, int, bool),
          int32_t (*Sumi)(const Block&, const BlockQ8_K&)>
GemvKernels parity_ref() {
  constexpr GemvFn kGemv = &gemv_parity_ref<Block, Gather, Sumi>;
  return GemvKernels{kGemv, &gemm_by_token_ref<kGemv>};
}

// kQ4_0x32: each 16-row group of the range on its own, its chunks kQ4_0x32Stride apart.
void gemv_q4_0x32_ref(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
                      int64_t row_end, int64_t n_cols) {
  const int64_t nb = n_cols / kQK;
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  STRATA_ASSERT(row_begin % 16 == 0 && row_end % 16 == 0,
                "interleaved rows [{}, {}) are not whole groups of 16", row_begin, row_end);
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kGroupRows) {
    const uint8_t* group = q4_0x32_group(static_cast<const uint8_t*>(w), row_stride, r0);
    for (int r = 0; r < kGroupRows; ++r) y[r0 + r] = dot_row_ref<kQ4_0x32Stride>(group, r, x, nb);
  }
}

}  // namespace

GemvKernels interleaved_kernels_ref(WeightLayout layout) {
  if (layout == WeightLayout::kQ6_Kx16) return parity_ref<BlockQ6_K, &q6_gather, &q6_sumi>();
  if (layout == WeightLayout::kIQ4_XSx16)
    return x16_ref<BlockQ8_K, kQK_K, &dot_row_sym_ref<BlockIQ4_XS, &iq4_gather, &iq4_xs_sumi>>();
  if (layout == WeightLayout::kQ4_0x16)
    return x16_ref<BlockQ8_0, kQK, &dot_row_ref<kQ4_0x16Chunk>>();
  if (layout == WeightLayout::kQ4_0x32)
    return GemvKernels{&gemv_q4_0x32_ref, &gemm_by_token_ref<&gemv_q4_0x32_ref>};
  if (layout == WeightLayout::kMXFP4x16)
    return units_ref<BlockMXFP4, &mxfp4_gather, &mxfp4_code, &mxfp4_scale, &mxfp4x16_group_odd>();
  if (layout == WeightLayout::kQ8_0x16)
    return units_ref<BlockQ8_0, &q8_0_gather, &q8_0_code, &q8_0_scale, &q8_0x16_group_odd>();
  if (layout == WeightLayout::kIQ4_NLx16)
    return x16_ref<BlockQ8_0, kQK, &dot_row_ref<kQ4_0x16Chunk, &iq4_nl_nibble>>();
  if (layout == WeightLayout::kQ4_Kx16) return x16_ref<BlockQ8_K, kQK_K, &dot_row_k_ref>();
  if (layout == WeightLayout::kQ5_Kx16) return x16_ref<BlockQ8_K, kQK_K, &dot_row_q5_k_ref>();
  if (layout == WeightLayout::kQ2_Kx16) return x16_ref<BlockQ8_K, kQK_K, &dot_row_q2_k_ref>();
  if (layout == WeightLayout::kQ3_Kx16) return parity_ref<BlockQ3_K, &q3k_gather, &q3_sumi>();
  if (layout == WeightLayout::kQ5_0x16)
    return x16_ref<BlockQ8_0, kQK, &dot_row_b32_ref<BlockQ5_0, &q5_0_val>>();
  if (layout == WeightLayout::kQ4_1x16)
    return x16_ref<BlockQ8_0, kQK, &dot_row_b32_ref<BlockQ4_1, &q4_1_val>>();
  if (layout == WeightLayout::kQ5_1x16)
    return x16_ref<BlockQ8_0, kQK, &dot_row_b32_ref<BlockQ5_1, &q5_1_val>>();
  return GemvKernels{nullptr, nullptr};
}

}  // namespace detail
}  // namespace strata::kernels
