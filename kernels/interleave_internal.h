// Glue between interleave.cpp (layouts, dispatch, scalar twins) and the per-ISA kernels of the
// interleaved layouts (gemv_interleaved_avx2.cpp, gemv_interleaved_avx512.cpp). Exercised by
// tests/test_interleave.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "io/check.h"
#include "kernels/gemv.h"
#include "kernels/interleave.h"

namespace strata::kernels::detail {

// {nullptr, nullptr} when the file has no kernel for the layout.
GemvKernels interleaved_kernels_ref(WeightLayout layout);
GemvKernels interleaved_kernels_avx2(WeightLayout layout);
// AVX2 plus AVX-VNNI: the AVX2 table with a one-pass kQ4_0x16 GEMV (gemv_interleaved_avxvnni.cpp).
GemvKernels interleaved_kernels_avxvnni(WeightLayout layout);
GemvKernels interleaved_kernels_avx512(WeightLayout layout);
GemvKernels interleaved_kernels_avx512_gfni(WeightLayout layout);  // needs GFNI too

// Per activation block, computed once per call for all the groups it serves: -8 * sum(x) (the
// unsigned codes' offset, exact) and fp16(d_x).
struct XPrep {
  int32_t neg;
  float dx;
};
// This thread's scratch for n_blocks x n_tokens XPrep (grows on first use, then never allocates).
XPrep* prep_buffer(int64_t n_blocks, int64_t n_tokens);

// kQ4_0x16 (kernels/interleave.h): a group is a sequence of 576-byte chunks, one per pair of blocks
// (2b, 2b + 1): the pair's scales (2 x 32 bytes), then their codes (2 x 256 bytes).
constexpr size_t kQ4_0x16Chunk = 576;
// kQ4_0x32: a pair of such groups woven chunk by chunk, so each group's chunks are this far apart.
constexpr size_t kQ4_0x32Stride = 2 * kQ4_0x16Chunk;
// Where block b's 16 fp16 scales and its 256 code bytes start inside a group whose chunks are
// `stride` bytes apart (kQ4_0x16Chunk, or kQ4_0x32Stride for either group of a kQ4_0x32 pair).
inline size_t q4_0x16_scale_offset(int64_t b, size_t stride = kQ4_0x16Chunk) {
  return static_cast<size_t>(b >> 1) * stride + static_cast<size_t>(b & 1) * 32;
}
inline size_t q4_0x16_code_offset(int64_t b, size_t stride = kQ4_0x16Chunk) {
  return static_cast<size_t>(b >> 1) * stride + 64 + static_cast<size_t>(b & 1) * 256;
}
// The first chunk of the 16-row group at row r (a multiple of 16) of a kQ4_0x32 matrix.
inline const uint8_t* q4_0x32_group(const uint8_t* base, size_t row_stride, int64_t r) {
  return base + static_cast<size_t>(r & ~int64_t{31}) * row_stride +
         ((r & 16) != 0 ? kQ4_0x16Chunk : 0);
}

// 544-byte units (8.5 lines) in the matrix's alternating order: an even unit (counting from the
// matrix's first group) holds its codes first and its 32 bytes of scales last, an odd one its
// scales first, so a 64-byte aligned matrix has every code line aligned. kMXFP4x16's chunks of two
// blocks (16 + 16 exponents, 2 x 256 code bytes) and kQ8_0x16's blocks (16 fp16 d, 512 code bytes).
constexpr size_t kUnit544 = 544;
// Unit u of a group whose first unit is odd (`odd`) or even: where its scales and codes start.
inline size_t unit544_scales(int64_t u, bool odd) {
  return static_cast<size_t>(u) * kUnit544 + (odd != ((u & 1) != 0) ? 0 : 512);
}
inline size_t unit544_codes(int64_t u, bool odd) {
  return static_cast<size_t>(u) * kUnit544 + (odd != ((u & 1) != 0) ? 32 : 0);
}
// Whether the first unit of the group at row r (a multiple of 16) is odd, the groups before it
// holding r / 16 * units_per_group units (the 544-byte units, and the super-blocks of kQ3_Kx16 and
// kQ6_Kx16, whose halves of a line alternate the same way).
inline bool group_first_odd(int64_t r, int64_t units_per_group) {
  return (((r / 16) * units_per_group) & 1) != 0;
}

// kMXFP4x16: block b's 16 exponents and its 256 code bytes (chunk b / 2 of the group), and the
// parity of the group at row r of a matrix of nb blocks per row.
constexpr size_t kMXFP4x16Chunk = kUnit544;
inline size_t mxfp4x16_scale_offset(int64_t b, bool odd) {
  return unit544_scales(b >> 1, odd) + static_cast<size_t>(b & 1) * 16;
}
inline size_t mxfp4x16_code_offset(int64_t b, bool odd) {
  return unit544_codes(b >> 1, odd) + static_cast<size_t>(b & 1) * 256;
}
inline bool mxfp4x16_group_odd(int64_t r, int64_t nb) {
  return group_first_odd(r, nb / 2);
}

// kQ8_0x16: block b's 16 fp16 d and its 512 code bytes, and the parity of the group at row r.
inline size_t q8_0x16_scale_offset(int64_t b, bool odd) {
  return unit544_scales(b, odd);
}
inline size_t q8_0x16_code_offset(int64_t b, bool odd) {
  return unit544_codes(b, odd);
}
inline bool q8_0x16_group_odd(int64_t r, int64_t nb) {
  return group_first_odd(r, nb);
}

// One L1 prefetch per line this far ahead along a group's byte stream (the Q4_K kernels and the
// AVX2 Q4_0 kernel). Measured with bench_layout on Qwen3-30B-A3B expert shapes (bench/RESULTS.md
// "CPU speed, session 4"): L1 2 KiB 94-98% of the read probe; L1 1 KiB 88-89%, L1 4 KiB 78-80%,
// L2 2 KiB 86-88%.
constexpr size_t kInterleavePrefetch = 2048;
// The AVX-512 Q4_0 GEMV prefetches one chunk (9 lines) into L1 every other block, 8 chunks
// (4.5 KiB) ahead. Session 9 (bench/RESULTS.md), Zen 5, one-stream layout, a harness alternating
// variants in one process: 2.25 KiB 78%, 3.4 KiB 76%, 4.5 KiB 81-83%, 6.75 KiB 79-82%, 9 KiB
// 61-77%, 13.5 KiB 63-68% of the read probe (items of 64 rows, 2 threads / 1 thread); an added L2
// prefetch 6-9 KiB ahead cost 15-20 points. The old two-stream layout (scales, then codes) with a
// two-group pass peaked at 62-65% there.
constexpr size_t kQ4_0x16Prefetch = 8 * kQ4_0x16Chunk;
// The AVX-512 two-group pass over a kQ4_0x32 pair prefetches one chunk pair (18 lines) into L1
// every other block, 8 chunk pairs (9 KiB) ahead. Session 17 (bench/RESULTS.md), Zen 5, one thread:
// scratch copies of the two passes (median ratios over alternated rounds): 9 KiB ahead 1.34-1.44x
// the one-group pass, 4.5 KiB 1.31-1.36x (the one-group copy ran slower than the library's own;
// the library's two passes differ by 1.12-1.14x).
constexpr size_t kQ4_0x32Prefetch = 8 * kQ4_0x32Stride;
// The AVX-512 Q4_K kernel's L1 prefetch per line: two 2304-byte super-blocks ahead. Session 9,
// Zen 5, bench_layout alternated 4x: 90-91% of the read probe (median) vs 82-83% at 2 KiB and 84%
// at 3 KiB.
constexpr size_t kQ4_Kx16Prefetch = 2 * 2304;

// kIQ4_XSx16 (kernels/interleave.h): super-block b of a group is 2176 bytes at 2176 b; its d at
// +0, scales_h at +32, scales_l at +64, codes at +128.
constexpr size_t kIQ4_XSx16Block = 2176;
// The AVX-512 IQ4_XS kernel's L1 prefetch per line, two super-blocks ahead (as Q4_K's).
constexpr size_t kIQ4_XSx16Prefetch = 2 * kIQ4_XSx16Block;

// kQ5_Kx16 (kernels/interleave.h): super-block b of a group is 2816 bytes at 2816 b; its d at +0,
// dmin at +32, scale dwords at +64, qh dwords at +256, codes at +768.
constexpr size_t kQ5_Kx16Block = 2816;
// The AVX-512 Q5_K kernel's L1 prefetch per line, two super-blocks ahead (as Q4_K's).
constexpr size_t kQ5_Kx16Prefetch = 2 * kQ5_Kx16Block;

// kQ2_Kx16 (kernels/interleave.h): super-block b of a group is 1344 bytes (21 lines) at 1344 b; its
// d at +0, dmin at +32, scale dwords at +64, codes at +320.
constexpr size_t kQ2_Kx16Block = 1344;
// The Q2_K kernels' L1 prefetch, this far ahead (AVX-512: per line; AVX2: the whole super-block
// at its start).
constexpr size_t kQ2_Kx16Prefetch = 2 * kQ2_Kx16Block;

// kQ3_Kx16 (kernels/interleave.h): super-block b of a group is 1760 bytes (27.5 lines) at 1760 b,
// its parts in the order its parity asks (counted from the matrix's first super-block: the group's
// first one is odd when `odd`), so that every load of a 64-byte aligned matrix is one whole line:
// the scale dwords, the code lines (qs line i and hmask line i alternating for i < 8, then qs lines
// 8..15: the kernel's reading order), the d.
constexpr size_t kQ3_Kx16Block = 1760;
struct Q3KParts {
  size_t scales, codes, d;
  size_t qs(int i) const {
    return codes + static_cast<size_t>(i < 8 ? 128 * i : 1024 + 64 * (i - 8));
  }
  size_t hmask(int m) const { return codes + static_cast<size_t>(128 * m + 64); }
};
inline Q3KParts q3_kx16_parts(int64_t b, bool odd) {
  const size_t at = static_cast<size_t>(b) * kQ3_Kx16Block;
  if (odd != ((b & 1) != 0)) return {at + 32, at + 224, at};
  return {at, at + 192, at + 1728};
}
// Whether the first super-block of the group at row r (a multiple of 16) of a matrix of nb
// super-blocks per row is odd.
inline bool q3_kx16_group_odd(int64_t r, int64_t nb) {
  return group_first_odd(r, nb);
}
// The Q3_K kernels' L1 prefetch, this far ahead (as Q2_K's).
constexpr size_t kQ3_Kx16Prefetch = 2 * kQ3_Kx16Block;

// kQ6_Kx16 (kernels/interleave.h): super-block b of a group is 3360 bytes at 3360 b; its parts, in
// the order its parity asks (counted from the matrix's first super-block, as kQ3_Kx16's).
constexpr size_t kQ6_Kx16Block = 3360;
struct Q6KParts {
  size_t scales, ql, qh, d;
};
inline Q6KParts q6_kx16_parts(int64_t b, bool odd) {
  const size_t at = static_cast<size_t>(b) * kQ6_Kx16Block;
  if (odd != ((b & 1) != 0)) return {at + 32, at + 288, at + 2336, at};
  return {at, at + 256, at + 2304, at + 3328};
}
inline bool q6_kx16_group_odd(int64_t r, int64_t nb) {
  return group_first_odd(r, nb);
}
// The AVX-512 Q6_K kernel's L1 prefetch per line, this far ahead (two super-blocks, as Q4_K's).
constexpr size_t kQ6_Kx16Prefetch = 2 * kQ6_Kx16Block;

// kQ5_0x16 (kMin false, kHigh true), kQ4_1x16 (true, false), kQ5_1x16 (true, true)
// (kernels/interleave.h): where block b's parts start in its group (chunks of two blocks).
template <bool kMin, bool kHigh>
struct B32Parts {
  static constexpr size_t kHead = 64 * (1 + (kMin ? 1 : 0) + (kHigh ? 2 : 0));
  static constexpr size_t kChunk = kHead + 512;
  static size_t chunk(int64_t b) { return static_cast<size_t>(b >> 1) * kChunk; }
  static size_t d(int64_t b) { return chunk(b) + static_cast<size_t>(b & 1) * 32; }
  static size_t m(int64_t b) { return chunk(b) + 64 + static_cast<size_t>(b & 1) * 32; }
  static size_t qh(int64_t b) {
    return chunk(b) + (kMin ? 128 : 64) + static_cast<size_t>(b & 1) * 64;
  }
  static size_t codes(int64_t b) { return chunk(b) + kHead + static_cast<size_t>(b & 1) * 256; }
};
// A GGUF qh word (bit e: element e's 5th bit) regrouped for the code lines, and back: byte b, bit
// j is element 4j + b's (code line j's low nibble in byte b), bit 4 + j element 16 + 4j + b's (its
// high nibble), so a 16-bit shift by 4 - j (left) or j (right) brings line j's bits to bit 4 of
// every byte (no bit crosses into bit 4 of another byte).
inline uint32_t qh_by_line(uint32_t qh) {
  uint32_t out = 0;
  for (int b = 0; b < 4; ++b)
    for (int j = 0; j < 4; ++j) {
      out |= ((qh >> (4 * j + b)) & 1u) << (8 * b + j);
      out |= ((qh >> (16 + 4 * j + b)) & 1u) << (8 * b + 4 + j);
    }
  return out;
}
inline uint32_t qh_from_lines(uint32_t v) {
  uint32_t qh = 0;
  for (int b = 0; b < 4; ++b)
    for (int j = 0; j < 4; ++j) {
      qh |= ((v >> (8 * b + j)) & 1u) << (4 * j + b);
      qh |= ((v >> (8 * b + 4 + j)) & 1u) << (16 + 4 * j + b);
    }
  return qh;
}
// The L1 prefetch of these layouts' kernels: one chunk, 8 chunks ahead (as kQ4_0x16Prefetch).
constexpr int64_t kB32PrefetchChunks = 8;

namespace {

// fn(group, first_row) for every 16-row group of [row_begin, row_end) of an interleaved matrix
// whose GGUF rows are row_stride bytes (the group is 16 * row_stride bytes).
template <typename Fn>
inline void for_groups(const void* w, size_t row_stride, int64_t row_begin, int64_t row_end,
                       Fn&& fn) {
  STRATA_ASSERT(row_begin % 16 == 0 && row_end % 16 == 0,
                "interleaved rows [{}, {}) are not whole groups of 16", row_begin, row_end);
  const auto* base = static_cast<const uint8_t*>(w);
  for (int64_t r = row_begin; r < row_end; r += 16) {
    fn(base + static_cast<size_t>(r) * row_stride, r);
  }
}

// kQ4_0x32 (kernels/interleave.h): pair(first_chunk, first_row) for every whole pair of groups in
// [row_begin, row_end), group(first_chunk, first_row) for a group whose pair the range splits
// (its chunks kQ4_0x32Stride apart).
template <typename PairFn, typename GroupFn>
inline void for_pairs(const void* w, size_t row_stride, int64_t row_begin, int64_t row_end,
                      PairFn&& pair, GroupFn&& group) {
  STRATA_ASSERT(row_begin % 16 == 0 && row_end % 16 == 0,
                "interleaved rows [{}, {}) are not whole groups of 16", row_begin, row_end);
  const auto* base = static_cast<const uint8_t*>(w);
  for (int64_t r = row_begin; r < row_end;) {
    if (r % 32 == 0 && r + 32 <= row_end) {
      pair(base + static_cast<size_t>(r) * row_stride, r);
      r += 32;
    } else {
      group(q4_0x32_group(base, row_stride, r), r);
      r += 16;
    }
  }
}

}  // namespace
}  // namespace strata::kernels::detail
