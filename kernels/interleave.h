// Interleaved weight layouts: a load-time repack of a quantized matrix so that the GEMV reads one
// sequential stream and needs no byte shuffles (bench/RESULTS.md "CPU speed, session 4"). Same
// bytes as the GGUF layout, rearranged; the kernels that read it (gemv_kernels(type, layout)) keep
// the canonical order of gemv.cpp, so results are bit-identical to the GGUF layout's.
//
// kQ4_0x16 (Q4_0, n_rows % 16 == 0, n_cols % 64 == 0): the matrix is a sequence of groups of 16
// rows (group g = rows 16g..16g+15, 16 * row_bytes bytes at g * 16 * row_bytes). A group of nb
// blocks per row (nb even) is nb / 2 chunks of 576 bytes, chunk c holding blocks 2c and 2c + 1:
//     +0     the 16 rows' fp16 d of block 2c, +32 those of block 2c + 1
//     +64    for j < 4: the 16 rows' qs[4j..4j+3] of block 2c     (256 bytes)
//     +320   the same for block 2c + 1                             (256 bytes)
// so one 64-byte load holds 4 code bytes (8 elements: 4j..4j+3 in the low nibbles, 16+4j..16+4j+3
// in the high ones) of all 16 rows: a 16-lane integer dot per load, no horizontal sums, one lane
// per row. A group, and a run of groups, is read as one sequential stream (scales inline: with
// the scales in a region of their own, one stream per group, the AVX-512 GEMV streamed 62-72% of
// the read probe instead of 81-85%, bench/RESULTS.md session 9). Groups start at multiples of 64
// bytes from the matrix.
//
// kQ4_0x32 (Q4_0, n_rows % 32 == 0, n_cols % 64 == 0; chosen on AVX-512 hosts): the groups of
// kQ4_0x16 in pairs (rows 32p..32p+31, at 32p * row_bytes), woven chunk by chunk: chunk c of the
// pair's first group at 1152 c, the second's at 1152 c + 576. The AVX-512 GEMV computes both
// groups in one pass over one stream, each activation broadcast feeding both: on Zen 5 it streams
// 1.02-1.16x faster than a group at a time (median per-round ratios; bench/RESULTS.md session 17).
// Either group alone reads as a kQ4_0x16 group whose chunks are 1152 bytes apart, so row ranges
// still start and end at multiples of 16.
//
// kIQ4_NLx16 (IQ4_NL, as kQ4_0x16): IQ4_NL blocks have Q4_0's shape (fp16 d, 16 code bytes), so
// the bytes are kQ4_0x16's; the kernels look the nibbles up in the IQ4_NL table instead of
// subtracting 8 (AVX-512: value + 128 unsigned into vpdpbusd, the offset through the activation's
// sum; AVX2: the signed values against |x| by vpmaddubsw).
//
// kMXFP4x16 (MXFP4, n_rows % 16 == 0, n_cols % 64 == 0): MXFP4 blocks are IQ4_NL's with a one-byte
// E8M0 exponent for the fp16 d, so groups of 16 rows as kQ4_0x16 in chunks of two blocks, 544
// bytes each (16 x 17 x 2): the two blocks' 16 exponents each (32 bytes) and their codes as
// kQ4_0x16's (2 x 256 bytes). Chunks are numbered from the matrix's first group on; an even one
// holds its codes first (+0, +256, exponents at +512, +528), an odd one its exponents first (+0,
// +16, codes at +32, +288), so every code load of a 64-byte aligned matrix is one whole line (a
// chunk is 8.5 lines; a group starts half a line in when its chunk count is odd, as gpt-oss's 2880
// columns make it). The kernels look the nibbles up in MXFP4's doubled E2M1 table as kIQ4_NLx16's
// do, and build the scales 2^(e-128) from the exponent bits.
//
// kQ8_0x16 (Q8_0, n_rows % 16 == 0; chosen with AVX-512 or AVX2): groups of 16 rows, per block
// b of the group 544 bytes (16 x 34) in the same alternating order: the 16 rows' fp16 d (32 bytes)
// and, for j < 8, the 16 rows' qs[4j..4j+3] (8 x 64 bytes), codes first in the matrix's even blocks
// and d first in its odd ones. AVX-512: each code line XORed with 0x80 (code + 128, unsigned) is
// one 16-lane vpdpbusd; the offset -128 * sum(x) comes back per block. AVX-VNNI: the same, each
// line as two 8-row halves (interleave_onepass.h's chain_dot_q8, GEMV and chain-order GEMM).
//
// kQ4_Kx16 (Q4_K, n_rows % 16 == 0): groups of 16 rows as above; per super-block b of the group
// 2304 bytes (a multiple of 64):
//     +0     the 16 rows' fp16 d, +32 their fp16 dmin
//     +64    for k < 3: the 16 rows' scale bytes 4k..4k+3 (the packed 6-bit scales and mins)
//     +256   for i < 32: the 16 rows' qs[4i..4i+3]
// Q4_K codes are unsigned (the mins are a separate term), so each load is a 16-lane vpdpbusd
// with no offset; lane r holds row r's sub-block sums, scaled per lane by its 6-bit scales
// (AVX-VNNI: the same with two 8-lane registers per load; AVX2: two 8-row halves by vpmaddubsw).
//
// kQ5_Kx16 (Q5_K, n_rows % 16 == 0): kQ4_Kx16's with the 5th bits
// between the scales and the codes, per super-block b of the group 2816 bytes (44 lines):
//     +0     the 16 rows' fp16 d, +32 their fp16 dmin, +64 the scale dwords as kQ4_Kx16's
//     +256   for i < 8: the 16 rows' qh[4i..4i+3] (bit s of byte l: element 32s + l's 5th bit)
//     +768   for i < 32: the 16 rows' qs[4i..4i+3]
// The kernels OR each code line's 5th bits (one qh line per 8 code lines' position) into the
// nibbles as 16, then AVX-512: vpdpbusd as Q4_K's; AVX2: two 8-row halves as Q4_K's, the int16
// sums to int32 every 4 lines.
//
// kQ2_Kx16 (Q2_K, n_rows % 16 == 0): groups of 16 rows, per super-block b of the group 1344 bytes
// (21 lines):
//     +0     the 16 rows' fp16 d, +32 their fp16 dmin
//     +64    for k < 4: the 16 rows' scales[4k..4k+3] (4-bit scale | 4-bit min << 4 per group)
//     +320   for i < 16: the 16 rows' qs[4i..4i+3]
// AVX-512: each code line's four 2-bit fields, masked in place, are four 16-lane vpdpbusd, one per
// group of 16 elements; the group sums, paired as 16-bit words, meet the scale pairs in vpdpwssd,
// as do the mins and the activation's bsums. AVX2: two 8-row halves, the fields shifted down into
// vpmaddubsw, the int16 sums weighted by vpmaddwd.
//
// kQ3_Kx16 (Q3_K, n_rows % 16 == 0): groups of 16 rows, per super-block b
// of the group 1760 bytes (27.5 lines), its parts ordered by the super-block's parity counted from
// the matrix's first (as kQ6_Kx16's, and across groups: with an odd count per row the next group's
// first super-block is odd), so every load of a 64-byte aligned matrix is one whole line:
//     even: +0 scales, +192 codes, +1728 d;   odd: +0 d, +32 scales, +224 codes
//     scales: for k < 3, the 16 rows' scales[4k..4k+3]   d: the 16 rows' fp16 d
//     codes:  for i < 8, qs line i then hmask line i; then qs lines 8..15 (the kernel's reading
//             order: one stream), qs line i = the 16 rows' qs[4i..4i+3], hmask line m = their
//             hmask[4m..4m+3]
// The kernels build the unsigned 3-bit codes (2 low bits | the hmask bit above them) of each code
// line's four fields (AVX-512: four 16-lane vpdpbusd; AVX2: two 8-row halves by vpmaddubsw); the
// -4 comes off through the bsums.
//
// kQ6_Kx16 (Q6_K, n_rows % 16 == 0): groups of 16 rows as above; per super-block b of the group
// 3360 bytes (16 x 210, 52.5 lines), laid out so that every 64-byte load is aligned: an even
// super-block (counted from the matrix's first, across groups, as kQ3_Kx16's) starts on a line,
// an odd one half a line in, so its d comes first:
//     even: +0 scales, +256 ql, +2304 qh, +3328 d;   odd: +0 d, +32 scales, +288 ql, +2336 qh
//     scales: for g < 16, the 16 rows' int8 scale g (16 bytes each)
//     ql:     for i < 32, the 16 rows' ql[4i..4i+3]       qh: for i < 16, the 16 rows' qh[4i..4i+3]
//     d:      the 16 rows' fp16 d
// Each code load is a 16-lane vpdpbusd of unsigned 6-bit codes (0..63) after the 2 high bits are
// ORed in (AVX2: two 8-row halves, vpmaddubsw, two columns' int16 sums per vpmaddwd by the
// group's scale); the -32 offset is 32 * sum_g sc_g * bsums_g, per lane.
//
// kIQ4_XSx16 (IQ4_XS, n_rows % 16 == 0): groups of 16 rows as above; per super-block b of the
// group 2176 bytes (34 lines):
//     +0     the 16 rows' fp16 d, +32 their scales_h (16 bits each)
//     +64    the 16 rows' scales_l (4 bytes each: lane r's dword holds row r's 8 low nibbles)
//     +128   for i < 32: the 16 rows' qs[4i..4i+3] (sub-block i / 4)
// AVX-512: each code load is a 16-lane vpdpbusd of the table values + 128 (unsigned, by vpshufb);
// the offset comes off as 128 * (bsums[2s] + bsums[2s + 1]) per sub-block, before its scale.
// AVX2: two 8-row halves, the signed values against |x| by vpmaddubsw, vpmaddwd by the scales;
// AVX-VNNI: all 16 rows a step (two registers), the table values + 128 by vpdpbusd as AVX-512's.
//
// kQ5_0x16, kQ4_1x16, kQ5_1x16 (Q5_0 / Q4_1 / Q5_1, n_rows % 16 == 0, n_cols % 64 == 0): groups of
// 16 rows in chunks of two blocks (2c, 2c + 1), as kQ4_0x16's with the blocks' other parts between
// the scales and the codes, every part whole lines:
//     +0     the 16 rows' fp16 d of block 2c, +32 those of block 2c + 1
//     +64    (Q4_1, Q5_1) the 16 rows' fp16 m of the two blocks, as the d
//     then   (Q5_0, Q5_1) the 16 rows' qh dwords of block 2c (64 bytes), then of block 2c + 1,
//            each with its bits regrouped for the code lines: byte b, bit j holds element
//            4j + b's 5th bit, bit 4 + j element 16 + 4j + b's (code line j's low and high
//            nibbles in byte b; deinterleave restores the GGUF order)
//     then   the codes of block 2c (4 lines as kQ4_0x16's), then of block 2c + 1
// so a chunk is 640 (Q4_1), 704 (Q5_0) or 768 (Q5_1) bytes. Per code line j, a 16-bit shift by
// 4 - j (left) or j (right) and an and bring its 5th bits to bit 4 of each byte, ORed into the
// nibbles; AVX-512: then vpdpbusd as Q4_0's; Q5_0's -16 comes back through the
// activation's sum, Q4_1 / Q5_1's m as m * d_x * sum(x). AVX2: two 8-row halves by vpmaddubsw.
//
// Tested by tests/test_interleave.cpp (round trip, kernels vs gemv_ref at awkward shapes).
#pragma once

#include <cstddef>
#include <cstdint>

#include "io/ggml_type.h"
#include "kernels/gemv.h"

namespace strata::kernels {

enum class WeightLayout : uint8_t {
  kRows,       // the GGUF's: row after row of ggml blocks
  kQ4_0x16,    // Q4_0, 16 rows interleaved per group (above)
  kQ4_Kx16,    // Q4_K, 16 rows interleaved per group (below)
  kQ6_Kx16,    // Q6_K, 16 rows interleaved per group (below)
  kQ4_0x32,    // Q4_0, kQ4_0x16's groups woven in pairs (above)
  kIQ4_XSx16,  // IQ4_XS, 16 rows interleaved per group (above)
  kIQ4_NLx16,  // IQ4_NL, kQ4_0x16's bytes (above)
  kMXFP4x16,   // MXFP4, 16 rows interleaved per group (above)
  kQ8_0x16,    // Q8_0, 16 rows interleaved per group (above)
  kQ5_Kx16,    // Q5_K, 16 rows interleaved per group (above)
  kQ2_Kx16,    // Q2_K, 16 rows interleaved per group (above)
  kQ3_Kx16,    // Q3_K, 16 rows interleaved per group (above)
  kQ5_0x16,    // Q5_0, 16 rows interleaved per group (above)
  kQ4_1x16,    // Q4_1, 16 rows interleaved per group (above)
  kQ5_1x16,    // Q5_1, 16 rows interleaved per group (above)
};

// Rows per group of a layout (1 for kRows): row ranges handed to its kernels start and end at
// multiples of it.
int64_t layout_rows(WeightLayout layout);

// The interleaved layout for a [n_rows, n_cols] matrix of `type` on this CPU, or kRows when there
// is none (another type, or a shape it does not cover). Q4_0: kQ4_0x32 where the best ISA is
// AVX-512 and n_rows % 32 == 0, else kQ4_0x16.
WeightLayout interleaved_layout(GgmlType type, int64_t n_rows, int64_t n_cols);

// The interleaved layout of a type for a matrix of 16 rows (kRows: the type has none).
WeightLayout interleaved_layout(GgmlType type);

// Whether the interleaved kernels of the best ISA are faster than the GGUF layout's on this CPU
// (true with AVX-512 VNNI or AVX2; the scalar twins exist for tests, not speed).
bool interleave_pays();
// The same for one weight type: Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS,
// IQ4_NL, MXFP4 and Q8_0 with AVX-512 or AVX2 (Q8_0: an AVX2 two-half kernel over kQ8_0x16
// streamed 0.85x the row kernel on a 4096 x 2880 matrix, bench/RESULTS.md session 23; the
// AVX-VNNI one-pass kernel 1.09-1.17x, and its GEMM 3x the row kernel's, session 36; the plain
// AVX2 one-pass one 1.0x, its GEMM faster, session 43). On
// an AVX2-only Zen 3 the GGUF layout's Q4_K row kernel is compute-bound (~7 GB/s a core); the
// interleaved one, with its next-group L2 prefetch, streams 94-110% of the in-run probe in the 30B
// against 67-87% (bench/RESULTS.md session 16).
bool interleave_pays(GgmlType type);

// Kernels for a weight type in a layout (kRows: gemv_kernels(type, isa)). The interleaved ones
// take row_stride = the GGUF row bytes and row ranges in whole groups (layout_rows); ISA variants
// fall back as gemv_kernels does.
GemvKernels gemv_kernels(GgmlType type, WeightLayout layout, Isa isa);
inline GemvKernels gemv_kernels(GgmlType type, WeightLayout layout) {
  return gemv_kernels(type, layout, best_isa());
}

// src (GGUF layout, rows row_bytes apart, contiguous) -> dst (layout); src and dst must not
// overlap. n_rows * row_bytes bytes each.
void interleave(WeightLayout layout, const void* src, void* dst, int64_t n_rows, int64_t n_cols);
// The inverse: dst gets the GGUF layout.
void deinterleave(WeightLayout layout, const void* src, void* dst, int64_t n_rows, int64_t n_cols);
// In place, one group (kQ4_0x32: one pair) at a time through a small buffer.
void interleave_in_place(WeightLayout layout, void* data, int64_t n_rows, int64_t n_cols);

}  // namespace strata::kernels
