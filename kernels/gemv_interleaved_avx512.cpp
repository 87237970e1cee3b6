// Q4_0 x Q8_0 GEMV/GEMM over the kQ4_0x16 and kQ4_0x32 layouts (kernels/interleave.h), and IQ4_NL /
// MXFP4 over kIQ4_NLx16 / kMXFP4x16 (table lookups of the same nibbles), with
// AVX-512 VNNI: one 512-bit register = one 4-byte code group of 16 rows, so each block of a 16-row
// group is 4 loads, 4 ands and 4 shifts for the nibbles, and 8 vpdpbusd against the activation's
// 4-byte groups broadcast from memory; lane r of the result is row r's exact block sum (no
// horizontal sums). A group is one sequential stream (scales inline, one chunk per two blocks).
// Codes are used unsigned (0..15) and -8 * sum(x) per block is added back (exact). Lane r keeps
// row r's 8 canonical float accumulators acc[b % 8] in 8 registers, so the float steps are those
// of gemv.cpp and results equal gemv_ref.cpp (and the GGUF-layout kernels) bit for bit.
// Tested by tests/test_interleave.cpp; measured by bench/bench_gemv.cpp (--layout) and bench_moe.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/gemv_internal.h"
#include "kernels/interleave_internal.h"
#include "kernels/interleave_prep.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

// GCC 12 reports the _mm512_undefined_*() pass-through operands inside its own cvtph / set1
// intrinsics as uninitialized (GCC bug 105593); nothing in this file reads them.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// This file is compiled twice: as itself (AVX-512 VNNI) and, through
// gemv_interleaved_avx512_gfni.cpp, with STRATA_INTERLEAVED_GFNI = 1 and -mgfni, where the high
// nibbles take one GF(2) affine op instead of a shift and an and: the shift competes with
// vpdpbusd for port 0 (cache-resident 46 vs 62 GB/s, streamed 91% vs 98-100% of the read probe on
// the machine in bench/RESULTS.md).
#ifndef STRATA_INTERLEAVED_GFNI
#define STRATA_INTERLEAVED_GFNI 0
#endif

namespace strata::kernels::detail {
namespace {

// Four activation codes at p as one dword in every lane (a broadcast load from memory).
inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// The high nibble of every byte.
inline __m512i high_nibbles(__m512i v, __m512i m4) {
#if STRATA_INTERLEAVED_GFNI
  (void)m4;
  // GF(2) affine map = a per-byte shift right by 4.
  return _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(0x1020408000000000), 0);
#else
  return _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
#endif
}

// The canonical fold of the 8 accumulators (gemv.cpp step 4), lane by lane.
inline __m512 fold_acc(const __m512* a) {
  return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                       _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])));
}

// The 16-row layouts of 32-element blocks with 4-bit codes, as group_dot reads them: how far
// apart a group's chunks of two blocks are, where block k (of a run of 8 from a chunk boundary)
// has its codes and scales, the 16 rows' scales as floats, and the table the nibbles index (none:
// Q4_0's nibble - 8).
template <size_t kStride>
struct Q4_0Fmt {  // kQ4_0x16, and either group of a kQ4_0x32 pair (kStride = kQ4_0x32Stride)
  static constexpr size_t kChunk = kStride;
  static constexpr const int8_t* kTable = nullptr;
  static size_t codes(int k) { return q4_0x16_code_offset(k, kStride); }
  static size_t scales(int k) { return q4_0x16_scale_offset(k, kStride); }
  static __m512 dw(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};
struct IQ4_NLFmt : Q4_0Fmt<kQ4_0x16Chunk> {  // kIQ4_NLx16: kQ4_0x16's bytes
  static constexpr const int8_t* kTable = kIq4nlValues;
};
template <bool kOdd>
struct MXFP4Fmt {  // kMXFP4x16, a group whose first chunk is odd (kOdd) or even
  static constexpr size_t kChunk = kMXFP4x16Chunk;
  static constexpr const int8_t* kTable = kMxfp4Values;
  static size_t codes(int k) { return mxfp4x16_code_offset(k, kOdd); }
  static size_t scales(int k) { return mxfp4x16_scale_offset(k, kOdd); }
  // 2^(e-128) from the exponent bits (e < 2: the subnormals 2^-128, 2^-127).
  static __m512 dw(const uint8_t* p) {
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(
        _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, tiny));
  }
};

// Token t's activation block b, as the group passes read it. XRows: each token's own row and
// XPreps (the GEMV's one token). XPacked<T>: block b of T tokens side by side (XPackBlock, built
// once per GEMM call by gemm_b32), so every operand is one base pointer and a constant offset
// (T row pointers and T XPrep pointers took more registers than x86 has and spilled).
struct XRows {
  const BlockQ8_0* const* xs;
  const XPrep* const* preps;
  const int8_t* qs(int t, int64_t b) const { return xs[t][b].qs; }
  const XPrep& prep(int t, int64_t b) const { return preps[t][b]; }
};
template <int T>
struct XPackBlock {
  int8_t qs[T][kQK];
  XPrep prep[T];
};
static_assert(sizeof(XPackBlock<3>) == 3 * (kQK + sizeof(XPrep)), "no padding: T tokens' bytes");
template <int T>
struct XPacked {
  const XPackBlock<T>* blocks;
  const int8_t* qs(int t, int64_t b) const { return blocks[b].qs[t]; }
  const XPrep& prep(int t, int64_t b) const { return blocks[b].prep[t]; }
};

// Block b (k = b % 8) of a 16-row group against T activation rows: lo[j] / hi[j] are the group's
// unsigned codes for elements 4j..4j+3 / 16+4j..16+4j+3 (lane = row), offset by kBias (the
// activation's -kBias * sum(x) is XPrep's neg * kBias / 8), dw the rows' scales:
// acc(t) += (float)isum * (dw * d_x) lane by lane, the canonical step (acc(t): token t's
// accumulator of block b, see run_blocks / run_chains).
template <int T, int kBias, typename Acc, typename X>
inline void accumulate_block(Acc&& acc, int64_t b, const __m512i* lo, const __m512i* hi, __m512 dw,
                             const X& x) {
  for (int t = 0; t < T; ++t) {
    // The activation's 4-byte groups, broadcast straight from memory.
    const int8_t* xq = x.qs(t, b);
    // neg = -8 * sum(x) exactly (prep_x), so neg * (kBias / 8) = -kBias * sum(x).
    __m512i s0 = _mm512_set1_epi32(x.prep(t, b).neg * (kBias / 8));
    __m512i s1 = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      s0 = _mm512_dpbusd_epi32(s0, lo[j], bcast4(xq + 4 * j));
      s1 = _mm512_dpbusd_epi32(s1, hi[j], bcast4(xq + 16 + 4 * j));
    }
    const __m512i isum = _mm512_add_epi32(s0, s1);
    const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(x.prep(t, b).dx));
    acc(t) = _mm512_add_ps(acc(t), _mm512_mul_ps(_mm512_cvtepi32_ps(isum), d));
  }
}

// A group pass over nb blocks in block order: step(b, k, acc) for each block b (k = b % 8, a
// constant in the unrolled runs of 8) adds token t's part into acc(t) = the canonical acc[t][k];
// then the T rows' folded accumulators are stored. The stream-order pass of the GEMV: each line
// is used once, so the steps prefetch (those called with kChains false).
template <int T, typename Step>
inline void run_blocks(int64_t nb, float* const* outs, Step&& step) {
  __m512 acc[T][8];
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < 8; ++k) acc[t][k] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) step(b + k, k, [&](int t) -> __m512& { return acc[t][k]; });
  }
  for (int k = 0; b + k < nb; ++k) step(b + k, k, [&](int t) -> __m512& { return acc[t][k]; });
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(outs[t], fold_acc(acc[t]));
}

// The same sums in chain order, for GEMMs: chain k adds blocks k, k + 8, k + 16 ... — the blocks
// of the canonical acc[t][k], in the same order — into one register per token, so T tokens hold
// T accumulators instead of 8T (block order at T = 4 spilled: all 32 registers were
// accumulators). The chains' sums are folded as fold_acc folds, so every output is the same bits.
// A GEMM's group sits in L1 / L2 after its first pass; the steps do not prefetch.
template <int T, typename Step>
inline void run_chains(int64_t nb, float* const* outs, Step&& step) {
  __m512 part[T][8];
  for (int k = 0; k < 8; ++k) {
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = k; b < nb; b += 8) step(b, k, [&](int t) -> __m512& { return acc[t]; });
    for (int t = 0; t < T; ++t) part[t][k] = acc[t];
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(outs[t], fold_acc(part[t]));
}

// run_chains for GEMM passes (kChains), run_blocks for the GEMV's.
template <int T, bool kChains, typename Step>
inline void run_group(int64_t nb, float* const* outs, Step&& step) {
  if constexpr (kChains)
    run_chains<T>(nb, outs, step);
  else
    run_blocks<T>(nb, outs, step);
}

// The table register of a 4-bit format (its values + 128, vpshufb's 16 entries in every lane);
// m4 when it has none (unused then).
template <typename Fmt>
inline __m512i nibble_table(__m512i m4) {
  if constexpr (Fmt::kTable == nullptr) {
    return m4;
  } else {
    return _mm512_xor_si512(
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(Fmt::kTable))),
        _mm512_set1_epi8(static_cast<char>(0x80)));
  }
}

// A block's 4 code lines at q: the low / high nibbles as unsigned codes (with a table: its value
// + 128 for each nibble).
template <typename Fmt>
inline void nibble_codes(const uint8_t* q, __m512i m4, [[maybe_unused]] __m512i table, __m512i* lo,
                         __m512i* hi) {
  for (int j = 0; j < 4; ++j) {
    const __m512i v = _mm512_loadu_si512(q + 64 * j);
    lo[j] = _mm512_and_si512(v, m4);
    hi[j] = high_nibbles(v, m4);
    if constexpr (Fmt::kTable != nullptr) {
      lo[j] = _mm512_shuffle_epi8(table, lo[j]);
      hi[j] = _mm512_shuffle_epi8(table, hi[j]);
    }
  }
}

// One 16-row group g against T activation rows: a stream of chunks of two blocks (scales and
// codes, Fmt's layout) Fmt::kChunk bytes apart, one L1 prefetch (non-temporal) of a chunk 8
// chunks ahead every other block. With a table (kIQ4_NLx16, kMXFP4x16) each nibble becomes its
// table value + 128 (vpshufb), and the offset -128 * sum(x) is 16 times Q4_0's -8 * sum(x).
template <int T, typename Fmt, bool kChains, typename X>
void group_dot(const uint8_t* g, const X& x, int64_t nb, float* const* outs) {
  constexpr bool kTable = Fmt::kTable != nullptr;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i table = nibble_table<Fmt>(m4);
  // Block b = b8 + k with b8 a multiple of 8: offsets within the 4 chunks from b8 are constants.
  auto step = [&](int64_t b, int k, auto&& acc) {
    const uint8_t* g8 = g + static_cast<size_t>((b - k) >> 1) * Fmt::kChunk;
    const uint8_t* qb = g8 + Fmt::codes(k);
    // The chunk's 8.5-9 lines, 8 chunks ahead.
    if (!kChains && (k & 1) == 0)
      prefetch_lines<kQ4_0x16Chunk, kToL1Nta>(g8 + static_cast<size_t>(k >> 1) * Fmt::kChunk +
                                              kQ4_0x16Prefetch / kQ4_0x16Chunk * Fmt::kChunk);
    __m512i lo[4], hi[4];
    nibble_codes<Fmt>(qb, m4, table, lo, hi);
    accumulate_block<T, kTable ? 128 : 8>(acc, b, lo, hi, Fmt::dw(g8 + Fmt::scales(k)), x);
  };
  run_group<T, kChains>(nb, outs, step);
}

// One 16-row kQ8_0x16 group g (its first block odd: kOdd) against T activation rows: per block 8
// code lines, each XORed with 0x80 (code + 128, unsigned) into one vpdpbusd against an activation
// dword broadcast; the offset -128 * sum(x) is 16 times XPrep's -8 * sum(x). One L1 prefetch
// (non-temporal) of the block 8 blocks ahead, as group_dot's chunks.
template <int T, bool kOdd, bool kChains, typename X>
void group_dot_q8(const uint8_t* g, const X& x, int64_t nb, float* const* outs) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  // Block b = b8 + k with b8 a multiple of 8 (even): offsets from b8's block are constants.
  auto step = [&](int64_t b, int k, auto&& acc) {
    const uint8_t* g8 = g + static_cast<size_t>(b - k) * kUnit544;
    const uint8_t* qb = g8 + q8_0x16_code_offset(k, kOdd);
    if (!kChains)
      prefetch_lines<kQ4_0x16Chunk, kToL1Nta>(g8 + static_cast<size_t>(k + 8) * kUnit544);
    __m512i c[8];  // code lines 0-3: elements 0-15, 4-7: 16-31
    for (int j = 0; j < 8; ++j) c[j] = _mm512_xor_si512(_mm512_loadu_si512(qb + 64 * j), flip);
    const __m512 dw = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g8 + q8_0x16_scale_offset(k, kOdd))));
    accumulate_block<T, 128>(acc, b, c, c + 4, dw, x);
  };
  run_group<T, kChains>(nb, outs, step);
}

// One 16-row kQ5_0x16 / kQ4_1x16 / kQ5_1x16 group (B32Parts<kMin, kHigh>) against T activation
// rows: per block the 4 code lines' nibbles as Q4_0's, code line j's 5th bits (kHigh) brought to
// bit 4 of every byte of the rows' regrouped qh dwords by one 16-bit shift and an and (bit j: the
// low nibbles', bit 4 + j: the high ones'), ORed in; then vpdpbusd. Q5_0: the -16 through the
// activation's sum (16 x sum(x) = -2 x XPrep's neg); Q4_1 / Q5_1: r_b = (float)isum * (d_w * d_x) +
// m_w * (d_x * (float)sum(x)), gemv.cpp's step. One L1 prefetch (non-temporal) of a chunk 8 chunks
// ahead every other block, as group_dot's.
template <int T, bool kMin, bool kHigh, bool kChains, typename X>
void group_dot_b32(const uint8_t* g, const X& x, int64_t nb, float* const* outs) {
  using P = B32Parts<kMin, kHigh>;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i c16 = _mm512_set1_epi8(16);
  auto step = [&](int64_t b, int k, auto&& acc) {
    const uint8_t* g8 = g + static_cast<size_t>(b - k) / 2 * P::kChunk;
    if (!kChains && (k & 1) == 0)
      prefetch_lines<P::kChunk, kToL1Nta>(g8 + P::chunk(k) + kB32PrefetchChunks * P::kChunk);
    const uint8_t* qb = g8 + P::codes(k);
    [[maybe_unused]] __m512i qh;
    if constexpr (kHigh) qh = _mm512_loadu_si512(g8 + P::qh(k));
    __m512i lo[4], hi[4];
    for (int j = 0; j < 4; ++j) {
      const __m512i v = _mm512_loadu_si512(qb + 64 * j);
      lo[j] = _mm512_and_si512(v, m4);
      hi[j] = high_nibbles(v, m4);
      if constexpr (kHigh) {
        // Bit j (low nibble) and bit 4 + j (high) of every byte to bit 4.
        lo[j] = _mm512_or_si512(lo[j], _mm512_and_si512(_mm512_slli_epi16(qh, 4 - j), c16));
        hi[j] = _mm512_or_si512(hi[j], _mm512_and_si512(_mm512_srli_epi16(qh, j), c16));
      }
    }
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g8 + P::d(k))));
    [[maybe_unused]] __m512 mw;
    if constexpr (kMin)
      mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g8 + P::m(k))));
    for (int t = 0; t < T; ++t) {
      const int8_t* xq = x.qs(t, b);
      __m512i s0 = kMin ? _mm512_setzero_si512() : _mm512_set1_epi32(2 * x.prep(t, b).neg);
      __m512i s1 = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        s0 = _mm512_dpbusd_epi32(s0, lo[j], bcast4(xq + 4 * j));
        s1 = _mm512_dpbusd_epi32(s1, hi[j], bcast4(xq + 16 + 4 * j));
      }
      const __m512 dx = _mm512_set1_ps(x.prep(t, b).dx);
      __m512 r = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_mul_ps(dw, dx));
      if constexpr (kMin) {
        const float xsum = static_cast<float>(-x.prep(t, b).neg / 8);
        r = _mm512_add_ps(r, _mm512_mul_ps(mw, _mm512_mul_ps(dx, _mm512_set1_ps(xsum))));
      }
      acc(t) = _mm512_add_ps(acc(t), r);
    }
  };
  run_group<T, kChains>(nb, outs, step);
}

// Both groups of a kQ4_0x32 pair against one activation row in one pass over the pair's one
// stream: per block, the 4 code lines of each group and 8 activation broadcasts feeding both (16
// vpdpbusd), one L1 prefetch (non-temporal) of a chunk pair kQ4_0x32Prefetch ahead every other
// block. Each group's float steps are group_dot's, so the results are the same bits. Per core
// this streams 1.02-1.16x faster than a group at a time (bench/RESULTS.md session 17): every load
// of the activation and its XPrep serves 32 rows, and the pass carries twice the independent
// work between the stream's lines.
void pair_dot(const uint8_t* p, const BlockQ8_0* x, const XPrep* prep, int64_t nb, float* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc0[8], acc1[8];
  for (int k = 0; k < 8; ++k) acc0[k] = acc1[k] = _mm512_setzero_ps();
  auto step = [&](int64_t b, int k) {
    const uint8_t* g8 = p + static_cast<size_t>((b - k) >> 1) * kQ4_0x32Stride;
    const uint8_t* h8 = g8 + kQ4_0x16Chunk;  // the second group's chunks
    if ((k & 1) == 0)
      prefetch_lines<kQ4_0x32Stride, kToL1Nta>(g8 + q4_0x16_scale_offset(k, kQ4_0x32Stride) +
                                               kQ4_0x32Prefetch);
    const uint8_t* qa = g8 + q4_0x16_code_offset(k, kQ4_0x32Stride);
    const uint8_t* qb = h8 + q4_0x16_code_offset(k, kQ4_0x32Stride);
    const int8_t* xq = x[b].qs;
    __m512i a0 = _mm512_set1_epi32(prep[b].neg), a1 = _mm512_setzero_si512();
    __m512i b0 = a0, b1 = a1;
    for (int j = 0; j < 4; ++j) {
      const __m512i va = _mm512_loadu_si512(qa + 64 * j);
      const __m512i vb = _mm512_loadu_si512(qb + 64 * j);
      const __m512i xl = bcast4(xq + 4 * j), xh = bcast4(xq + 16 + 4 * j);
      a0 = _mm512_dpbusd_epi32(a0, _mm512_and_si512(va, m4), xl);
      a1 = _mm512_dpbusd_epi32(a1, high_nibbles(va, m4), xh);
      b0 = _mm512_dpbusd_epi32(b0, _mm512_and_si512(vb, m4), xl);
      b1 = _mm512_dpbusd_epi32(b1, high_nibbles(vb, m4), xh);
    }
    const __m512 dx = _mm512_set1_ps(prep[b].dx);
    const __m512 da = _mm512_mul_ps(
        _mm512_cvtph_ps(_mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(g8 + q4_0x16_scale_offset(k, kQ4_0x32Stride)))),
        dx);
    const __m512 db = _mm512_mul_ps(
        _mm512_cvtph_ps(_mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(h8 + q4_0x16_scale_offset(k, kQ4_0x32Stride)))),
        dx);
    acc0[k] =
        _mm512_add_ps(acc0[k], _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1)), da));
    acc1[k] =
        _mm512_add_ps(acc1[k], _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(b0, b1)), db));
  };
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) step(b + k, k);
  }
  for (int k = 0; b + k < nb; ++k) step(b + k, k);
  auto sum = [](const __m512* acc) {
    return _mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6])),
        _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7])));
  };
  _mm512_storeu_ps(out, sum(acc0));
  _mm512_storeu_ps(out + 16, sum(acc1));
}

// Group g (its first row r) of a kLayout matrix against T activation rows (kQ4_0x32: one group of
// a pair, its chunks kQ4_0x32Stride apart).
// kChains: chain order (run_chains, the GEMM's passes), else block order (the GEMV's).
template <int T, WeightLayout kLayout, bool kChains, typename X>
void layout_group_dot(const uint8_t* g, int64_t r, const X& x, int64_t nb, float* const* outs) {
  if constexpr (kLayout == WeightLayout::kQ4_0x32) {
    group_dot<T, Q4_0Fmt<kQ4_0x32Stride>, kChains>(g, x, nb, outs);
  } else if constexpr (kLayout == WeightLayout::kIQ4_NLx16) {
    group_dot<T, IQ4_NLFmt, kChains>(g, x, nb, outs);
  } else if constexpr (kLayout == WeightLayout::kMXFP4x16) {
    if (mxfp4x16_group_odd(r, nb))
      group_dot<T, MXFP4Fmt<true>, kChains>(g, x, nb, outs);
    else
      group_dot<T, MXFP4Fmt<false>, kChains>(g, x, nb, outs);
  } else if constexpr (kLayout == WeightLayout::kQ8_0x16) {
    if (q8_0x16_group_odd(r, nb))
      group_dot_q8<T, true, kChains>(g, x, nb, outs);
    else
      group_dot_q8<T, false, kChains>(g, x, nb, outs);
  } else if constexpr (kLayout == WeightLayout::kQ5_0x16) {
    group_dot_b32<T, false, true, kChains>(g, x, nb, outs);
  } else if constexpr (kLayout == WeightLayout::kQ4_1x16) {
    group_dot_b32<T, true, false, kChains>(g, x, nb, outs);
  } else if constexpr (kLayout == WeightLayout::kQ5_1x16) {
    group_dot_b32<T, true, true, kChains>(g, x, nb, outs);
  } else {
    static_assert(kLayout == WeightLayout::kQ4_0x16);
    group_dot<T, Q4_0Fmt<kQ4_0x16Chunk>, kChains>(g, x, nb, outs);
  }
}

// GEMV over the layouts of 32-element blocks against Q8_0 activations. kQ4_0x16 (and kIQ4_NLx16,
// kMXFP4x16, kQ8_0x16): one group at a time; consecutive groups are adjacent,
// so a row range is one sequential stream and the prefetch runs on into the next group (two
// adjacent groups per pass read two streams and did worse: bench/RESULTS.md session 9). kQ4_0x32: a
// pair at a time where the range holds it whole (one stream), else the lone group.
template <WeightLayout kLayout>
void gemv_b32(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
              int64_t row_end, int64_t n_cols) {
  const int64_t nb = n_cols / kQK;
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  XPrep* prep = prep_buffer(nb, 1);
  prep_x(x, nb, prep);
  if constexpr (kLayout == WeightLayout::kQ4_0x32) {
    for_pairs(
        w, row_stride, row_begin, row_end,
        [&](const uint8_t* p, int64_t r) { pair_dot(p, x, prep, nb, y + r); },
        [&](const uint8_t* g, int64_t r) {
          float* out = y + r;
          layout_group_dot<1, kLayout, false>(g, r, XRows{&x, &prep}, nb, &out);
        });
  } else {
    for_groups(w, row_stride, row_begin, row_end, [&](const uint8_t* g, int64_t r) {
      float* out = y + r;
      layout_group_dot<1, kLayout, false>(g, r, XRows{&x, &prep}, nb, &out);
    });
  }
}

// Tokens per GEMM pass over a group (run_chains: one accumulator each).
constexpr int kGemmTokens = 8;  // 8 accumulators + 8 code registers + temporaries: no spills

// Two 16-row groups of the 4-bit layouts (group_dot's Fmt: a kQ4_0x32 pair, or two adjacent
// kQ4_0x16 / kIQ4_NLx16 / kMXFP4x16 groups) against T packed tokens in chain order (run_chains'
// order for each group): every activation broadcast feeds both groups' codes, half the broadcast
// loads per vpdpbusd of a group at a time. Each group's float steps are accumulate_block's, so
// the results are the same bits. outs[t] / outs[T + t]: token t's rows of group a / b.
template <int T, typename FA, typename FB>
void pair_chains(const uint8_t* ga, const uint8_t* gb, const XPacked<T>& x, int64_t nb,
                 float* const* outs) {
  constexpr bool kTable = FA::kTable != nullptr;
  static_assert(FA::kTable == FB::kTable, "both groups index the same table");
  constexpr int kBias = kTable ? 128 : 8;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i table = nibble_table<FA>(m4);
  // Block b = b8 + k of a group: its unsigned codes (as group_dot's) and the rows' scales.
  auto decode = [&](auto fmt, const uint8_t* g, int64_t b, int k, __m512i* lo, __m512i* hi) {
    using F = decltype(fmt);
    const uint8_t* g8 = g + static_cast<size_t>((b - k) >> 1) * F::kChunk;
    nibble_codes<F>(g8 + F::codes(k), m4, table, lo, hi);
    return F::dw(g8 + F::scales(k));
  };
  // run_chains over 2T outputs: acc(t) is group a's accumulator of token t, acc(T + t) group b's.
  run_chains<2 * T>(nb, outs, [&](int64_t b, int k, auto&& acc) {
    __m512i la[4], ha[4], lb[4], hb[4];
    const __m512 da = decode(FA{}, ga, b, k, la, ha);
    const __m512 db = decode(FB{}, gb, b, k, lb, hb);
    for (int t = 0; t < T; ++t) {
      const int8_t* xq = x.qs(t, b);
      // neg = -8 * sum(x) exactly (prep_x), so neg * (kBias / 8) = -kBias * sum(x).
      __m512i a0 = _mm512_set1_epi32(x.prep(t, b).neg * (kBias / 8)), a1 = _mm512_setzero_si512();
      __m512i b0 = a0, b1 = a1;
      for (int j = 0; j < 4; ++j) {
        const __m512i xl = bcast4(xq + 4 * j), xh = bcast4(xq + 16 + 4 * j);
        a0 = _mm512_dpbusd_epi32(a0, la[j], xl);
        a1 = _mm512_dpbusd_epi32(a1, ha[j], xh);
        b0 = _mm512_dpbusd_epi32(b0, lb[j], xl);
        b1 = _mm512_dpbusd_epi32(b1, hb[j], xh);
      }
      const __m512 dx = _mm512_set1_ps(x.prep(t, b).dx);
      acc(t) = _mm512_add_ps(acc(t), _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1)),
                                                   _mm512_mul_ps(da, dx)));
      acc(T + t) = _mm512_add_ps(
          acc(T + t),
          _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(b0, b1)), _mm512_mul_ps(db, dx)));
    }
  });
}

// The 4-bit layouts whose GEMM runs groups two at a time (pair_chains).
constexpr bool pairs_in_gemm(WeightLayout layout) {
  return layout == WeightLayout::kQ4_0x32 || layout == WeightLayout::kQ4_0x16 ||
         layout == WeightLayout::kIQ4_NLx16 || layout == WeightLayout::kMXFP4x16;
}

// pair_chains for the groups at rows r (ga) and r + 16 (gb) of a kLayout matrix.
template <int T, WeightLayout kLayout>
void layout_pair_chains(const uint8_t* ga, const uint8_t* gb, int64_t r, const XPacked<T>& x,
                        int64_t nb, float* const* outs) {
  if constexpr (kLayout == WeightLayout::kQ4_0x32) {
    pair_chains<T, Q4_0Fmt<kQ4_0x32Stride>, Q4_0Fmt<kQ4_0x32Stride>>(ga, gb, x, nb, outs);
  } else if constexpr (kLayout == WeightLayout::kQ4_0x16) {
    pair_chains<T, Q4_0Fmt<kQ4_0x16Chunk>, Q4_0Fmt<kQ4_0x16Chunk>>(ga, gb, x, nb, outs);
  } else if constexpr (kLayout == WeightLayout::kIQ4_NLx16) {
    pair_chains<T, IQ4_NLFmt, IQ4_NLFmt>(ga, gb, x, nb, outs);
  } else {
    static_assert(kLayout == WeightLayout::kMXFP4x16);
    const bool a = mxfp4x16_group_odd(r, nb), b = mxfp4x16_group_odd(r + 16, nb);
    if (a && b)
      pair_chains<T, MXFP4Fmt<true>, MXFP4Fmt<true>>(ga, gb, x, nb, outs);
    else if (a)
      pair_chains<T, MXFP4Fmt<true>, MXFP4Fmt<false>>(ga, gb, x, nb, outs);
    else if (b)
      pair_chains<T, MXFP4Fmt<false>, MXFP4Fmt<true>>(ga, gb, x, nb, outs);
    else
      pair_chains<T, MXFP4Fmt<false>, MXFP4Fmt<false>>(ga, gb, x, nb, outs);
  }
}

// The token batches of a GEMM over n_tokens: kMax at a time, then 4, 2 and 1 for what is left.
// fn(std::integral_constant<int, T>, first token, offset of its XPackBlock<T> run).
template <int kMax, typename Fn>
inline void for_batches(int64_t n_tokens, int64_t nb, Fn&& fn) {
  int64_t t = 0;
  size_t at = 0;
  auto batch = [&](auto tokens) {
    constexpr int T = decltype(tokens)::value;
    fn(tokens, t, at);
    t += T;
    at += static_cast<size_t>(nb) * sizeof(XPackBlock<T>);
  };
  // Fewer than 4 tokens (a few rows routed to one expert, a short LOOKUP pass): the weights are
  // streamed from RAM more than reused, so each token runs the GEMV's block-order pass with its
  // prefetches (chain order has none); the group stays in L1 for the next token.
  if (n_tokens < 4) {
    while (t < n_tokens) batch(std::integral_constant<int, 1>{});
    return;
  }
  while (t + kMax <= n_tokens) batch(std::integral_constant<int, kMax>{});
  while (t + 4 <= n_tokens) batch(std::integral_constant<int, 4>{});
  if (t + 2 <= n_tokens) batch(std::integral_constant<int, 2>{});
  if (t < n_tokens) batch(std::integral_constant<int, 1>{});
}

// This thread's scratch for a GEMM's packed tokens (grows on first use, then never allocates).
std::byte* pack_buffer(size_t bytes) {
  thread_local std::vector<uint64_t> buf;
  if (buf.size() * sizeof(uint64_t) < bytes) buf.resize((bytes + 7) / 8);
  return reinterpret_cast<std::byte*>(buf.data());
}

// GEMM: the tokens in batches (for_batches), each batch packed once (XPackBlock) and run over a
// group — or two (pairs_in_gemm) — in one chain-order pass (the groups stay in L1 / L2 for the
// other batches); a lone token, and every token of a call under 4, runs the GEMV's block-order
// pass. Every output is the GEMV's bits.
template <WeightLayout kLayout>
void gemm_b32(const void* w, size_t row_stride, const void* xq, size_t xq_stride, float* y,
              size_t y_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end,
              int64_t n_cols) {
  // Pair passes hold two accumulators a token: 4 tokens fill the registers.
  constexpr int kBatch = pairs_in_gemm(kLayout) ? 4 : kGemmTokens;
  const int64_t nb = n_cols / kQK;
  const auto* xbase = static_cast<const uint8_t*>(xq);
  auto xt = [&](int64_t t) { return reinterpret_cast<const BlockQ8_0*>(xbase + t * xq_stride); };
  std::byte* pack = pack_buffer(static_cast<size_t>(n_tokens * nb) * (kQK + sizeof(XPrep)));
  for_batches<kBatch>(n_tokens, nb, [&](auto tokens, int64_t t, size_t at) {
    constexpr int T = decltype(tokens)::value;
    auto* blocks = reinterpret_cast<XPackBlock<T>*>(pack + at);
    for (int64_t b = 0; b < nb; ++b)
      for (int j = 0; j < T; ++j) {
        const BlockQ8_0& x = xt(t + j)[b];
        std::memcpy(blocks[b].qs[j], x.qs, kQK);
        prep_x(&x, 1, &blocks[b].prep[j]);
      }
  });
  // Every batch over n_groups (1, or 2: a kQ4_0x32 pair, or two adjacent groups of a layout that
  // pairs_in_gemm) groups from g on (their first row r; the second group `second` bytes after g)
  // in turn, so the groups are streamed once and stay in L1 for the rest.
  auto groups = [&](const uint8_t* g, int64_t r, int n_groups, size_t second) {
    for_batches<kBatch>(n_tokens, nb, [&](auto tokens, int64_t t, size_t at) {
      constexpr int T = decltype(tokens)::value;
      const XPacked<T> x{reinterpret_cast<const XPackBlock<T>*>(pack + at)};
      if constexpr (pairs_in_gemm(kLayout) && T > 1) {
        if (n_groups == 2) {
          float* outs[2 * T];
          for (int j = 0; j < T; ++j) {
            outs[j] = y + (t + j) * y_stride + r;
            outs[T + j] = outs[j] + 16;
          }
          layout_pair_chains<T, kLayout>(g, g + second, r, x, nb, outs);
          return;
        }
      }
      for (int i = 0; i < n_groups; ++i) {
        const int64_t ri = r + 16 * i;
        float* outs[T];
        for (int j = 0; j < T; ++j) outs[j] = y + (t + j) * y_stride + ri;
        layout_group_dot<T, kLayout, (T > 1)>(g + i * second, ri, x, nb, outs);
      }
    });
  };
  if constexpr (kLayout == WeightLayout::kQ4_0x32) {
    for_pairs(
        w, row_stride, row_begin, row_end,
        [&](const uint8_t* p, int64_t r) { groups(p, r, 2, kQ4_0x16Chunk); },
        [&](const uint8_t* g, int64_t r) { groups(g, r, 1, 0); });
  } else if constexpr (pairs_in_gemm(kLayout)) {
    STRATA_ASSERT(row_begin % 16 == 0 && row_end % 16 == 0,
                  "interleaved rows [{}, {}) are not whole groups of 16", row_begin, row_end);
    const size_t group_bytes = 16 * row_stride;
    const auto* base = static_cast<const uint8_t*>(w);
    for (int64_t r = row_begin; r < row_end;) {
      const int n = r + 32 <= row_end ? 2 : 1;
      groups(base + static_cast<size_t>(r) * row_stride, r, n, group_bytes);
      r += 16 * n;
    }
  } else {
    for_groups(w, row_stride, row_begin, row_end,
               [&](const uint8_t* g, int64_t r) { groups(g, r, 1, 0); });
  }
}

// ---- kQ4_Kx16: Q4_K x Q8_K ----

// Scale (or min) s of the 16 rows' packed 6-bit fields, one per lane, from the three scale
// dwords S0 (bytes 0-3), S1 (4-7), S2 (8-11) of each row (q4_k_scale_min, lane-wise).
inline __m512i k_scale(__m512i s0, __m512i s2, int s) {
  const __m512i m6 = _mm512_set1_epi32(63);
  if (s < 4) return _mm512_and_si512(_mm512_srli_epi32(s0, 8 * s), m6);
  const int k = s - 4;
  const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(s2, 8 * k), _mm512_set1_epi32(0x0F));
  const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(s0, 8 * k + 2), _mm512_set1_epi32(0x30));
  return _mm512_or_si512(lo, hi);
}
inline __m512i k_min(__m512i s1, __m512i s2, int s) {
  const __m512i m6 = _mm512_set1_epi32(63);
  if (s < 4) return _mm512_and_si512(_mm512_srli_epi32(s1, 8 * s), m6);
  const int k = s - 4;
  const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(s2, 8 * k + 4), _mm512_set1_epi32(0x0F));
  const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(s1, 8 * k + 2), _mm512_set1_epi32(0x30));
  return _mm512_or_si512(lo, hi);
}

// Bit n of every byte of v moved to bit 4 (the 5th bit of a Q5_K code), the other bits cleared:
// 16-bit shifts (down by n, keep bit 0, up by 4), as no bit crossing a byte boundary lands there.
inline __m512i bit_to_4(__m512i v, int n) {
  const __m512i b0 =
      _mm512_and_si512(_mm512_srl_epi16(v, _mm_cvtsi32_si128(n)), _mm512_set1_epi8(0x01));
  return _mm512_slli_epi16(b0, 4);
}

// The canonical float step of the layouts with mins (kQ2_Kx16, kQ4_Kx16, kQ5_Kx16) for super-block
// b, lane by lane: acc[t][b % 8] += (d_w * d_x) * (float)sumi - (dmin_w * d_x) * (float)summ, the
// rows' fp16 d at blk and dmin at blk + 32.
inline void min_step_one(__m512& acc, __m512 dw, __m512 dmw, float d_x, __m512i sumi,
                         __m512i summ) {
  const __m512 dx = _mm512_set1_ps(d_x);
  const __m512 dd = _mm512_mul_ps(dw, dx);
  const __m512 dm = _mm512_mul_ps(dmw, dx);
  const __m512 r = _mm512_sub_ps(_mm512_mul_ps(dd, _mm512_cvtepi32_ps(sumi)),
                                 _mm512_mul_ps(dm, _mm512_cvtepi32_ps(summ)));
  acc = _mm512_add_ps(acc, r);
}
template <int T>
inline void min_step(__m512 (*acc)[8], int64_t b, const uint8_t* blk, const BlockQ8_K* const* xs,
                     const __m512i* sumi, const __m512i* summ) {
  const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
  const __m512 dmw =
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
  for (int t = 0; t < T; ++t) min_step_one(acc[t][b % 8], dw, dmw, xs[t][b].d, sumi[t], summ[t]);
}

// Eight per-row 16-bit weights w_s as four dword pairs (w_2m, w_2m+1), against a token's
// sub-block pair sums P_s = bsums[2s] + bsums[2s + 1] (|P| <= 32 * 128): acc + sum_s w_s * P_s,
// exact, by four vpdpwssd. The Q4_K / Q5_K mins and IQ4_XS's scales (its 128 offset).
struct BsumPairDot {
  __m512i pair[4];
  // From a function giving w_s (int32 lanes that fit int16) for s < 8; nonnegative ones need no
  // mask to stay out of the high word.
  template <typename W>
  static BsumPairDot of(W&& w, bool nonnegative) {
    BsumPairDot d;
    for (int m = 0; m < 4; ++m) {
      const __m512i low = w(2 * m);
      d.pair[m] =
          _mm512_or_si512(nonnegative ? low : _mm512_and_si512(low, _mm512_set1_epi32(0xFFFF)),
                          _mm512_slli_epi32(w(2 * m + 1), 16));
    }
    return d;
  }
  __m512i dot(__m512i acc, const int16_t* bsums) const {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums + 8));
    const __m128i pairs = _mm_hadd_epi16(lo, hi);  // P_s, s < 8
    acc = _mm512_dpwssd_epi32(acc, pair[0], _mm512_broadcastd_epi32(pairs));
    acc =
        _mm512_dpwssd_epi32(acc, pair[1], _mm512_broadcastd_epi32(_mm_shuffle_epi32(pairs, 0x55)));
    acc =
        _mm512_dpwssd_epi32(acc, pair[2], _mm512_broadcastd_epi32(_mm_shuffle_epi32(pairs, 0xAA)));
    return _mm512_dpwssd_epi32(acc, pair[3],
                               _mm512_broadcastd_epi32(_mm_shuffle_epi32(pairs, 0xFF)));
  }
};

// The 16 rows' 6-bit mins of a Q4_K / Q5_K super-block (from its scale dwords S1, S2).
inline BsumPairDot k_mins(__m512i s1, __m512i s2) {
  return BsumPairDot::of([&](int s) { return k_min(s1, s2, s); }, true);
}

// One 16-row group of nb super-blocks against T activation rows: kQ4_Kx16, or kQ5_Kx16 (kFive:
// each code line's 5th bits, bits 2c / 2c + 1 of the qh line at its position i, ORed in as 16).
template <int T, bool kFive = false>
void group_dot_k(const uint8_t* g, const BlockQ8_K* const* xs, int64_t nb, float* const* outs) {
  constexpr size_t kBlock = kFive ? kQ5_Kx16Block : 2304;
  constexpr size_t kCodes = kFive ? 768 : 256;
  constexpr size_t kAhead = kFive ? kQ5_Kx16Prefetch : kQ4_Kx16Prefetch;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[T][8];
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < 8; ++k) acc[t][k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kBlock;
    prefetch_lines<kCodes, kToL1>(blk + kAhead);
    const __m512i s0 = _mm512_loadu_si512(blk + 64);
    const __m512i s1 = _mm512_loadu_si512(blk + 128);
    const __m512i s2 = _mm512_loadu_si512(blk + 192);
    __m512i sumi[T], summ[T];
    for (int t = 0; t < T; ++t) sumi[t] = summ[t] = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      __m512i lo_sum[T], hi_sum[T];
      for (int t = 0; t < T; ++t) lo_sum[t] = hi_sum[t] = _mm512_setzero_si512();
      for (int i = 0; i < 8; ++i) {
        prefetch_lines<64, kToL1>(blk + kCodes + (8 * c + i) * 64 + kAhead);
        const __m512i v = _mm512_loadu_si512(blk + kCodes + (8 * c + i) * 64);
        __m512i lo = _mm512_and_si512(v, m4);
        __m512i hi = high_nibbles(v, m4);
        if constexpr (kFive) {
          const __m512i h = _mm512_loadu_si512(blk + 256 + 64 * i);
          lo = _mm512_or_si512(lo, bit_to_4(h, 2 * c));
          hi = _mm512_or_si512(hi, bit_to_4(h, 2 * c + 1));
        }
        for (int t = 0; t < T; ++t) {
          int32_t xl = 0, xh = 0;
          std::memcpy(&xl, xs[t][b].qs + 64 * c + 4 * i, 4);
          std::memcpy(&xh, xs[t][b].qs + 64 * c + 32 + 4 * i, 4);
          lo_sum[t] = _mm512_dpbusd_epi32(lo_sum[t], lo, _mm512_set1_epi32(xl));
          hi_sum[t] = _mm512_dpbusd_epi32(hi_sum[t], hi, _mm512_set1_epi32(xh));
        }
      }
      const __m512i sc_lo = k_scale(s0, s2, 2 * c), sc_hi = k_scale(s0, s2, 2 * c + 1);
      for (int t = 0; t < T; ++t)
        sumi[t] = _mm512_add_epi32(sumi[t], _mm512_add_epi32(_mm512_mullo_epi32(sc_lo, lo_sum[t]),
                                                             _mm512_mullo_epi32(sc_hi, hi_sum[t])));
    }
    const BsumPairDot mins = k_mins(s1, s2);
    for (int t = 0; t < T; ++t) summ[t] = mins.dot(summ[t], xs[t][b].bsums);
    min_step<T>(acc, b, blk, xs, sumi, summ);
  }
  for (int t = 0; t < T; ++t) {
    _mm512_storeu_ps(outs[t], fold_acc(acc[t]));
  }
}

// The same group against T tokens in chain order (run_chains: one accumulator per token), for
// GEMMs: each code line's nibbles feed T tokens' vpdpbusd, sub-block by sub-block (the low
// nibbles' 32 elements, then the high ones': T sub-block sums live, not 2T), each sub-block sum
// scaled into the token's super-block sum (integers: the same sumi in any order), then
// min_step_one's float step. The same bits as group_dot_k; the group sits in L1 / L2 after the
// first batch, so there is no prefetch.
template <int T, bool kFive = false>
void chain_dot_k(const uint8_t* g, const BlockQ8_K* const* xs, int64_t nb, float* const* outs,
                 bool cold) {
  constexpr size_t kBlock = kFive ? kQ5_Kx16Block : 2304;
  constexpr size_t kCodes = kFive ? 768 : 256;
  constexpr size_t kAhead = kFive ? kQ5_Kx16Prefetch : kQ4_Kx16Prefetch;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  auto step = [&](int64_t b, int, auto&& acc) {
    const uint8_t* blk = g + b * kBlock;
    if (cold) prefetch_lines<kBlock, kToL1>(blk + kAhead);
    const __m512i s0 = _mm512_loadu_si512(blk + 64);
    const __m512i s2 = _mm512_loadu_si512(blk + 192);
    __m512i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm512_setzero_si512();
    for (int s = 0; s < 8; ++s) {  // sub-block s: line set c = s / 2, low nibbles if s is even
      const int c = s / 2;
      __m512i sub[T];
      for (int t = 0; t < T; ++t) sub[t] = _mm512_setzero_si512();
      for (int i = 0; i < 8; ++i) {
        const __m512i v = _mm512_loadu_si512(blk + kCodes + (8 * c + i) * 64);
        __m512i q = s % 2 == 0 ? _mm512_and_si512(v, m4) : high_nibbles(v, m4);
        if constexpr (kFive)
          q = _mm512_or_si512(q, bit_to_4(_mm512_loadu_si512(blk + 256 + 64 * i), s));
        for (int t = 0; t < T; ++t)
          sub[t] = _mm512_dpbusd_epi32(sub[t], q, bcast4(xs[t][b].qs + 32 * s + 4 * i));
      }
      const __m512i sc = k_scale(s0, s2, s);
      for (int t = 0; t < T; ++t)
        sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(sc, sub[t]));
    }
    const BsumPairDot mins = k_mins(_mm512_loadu_si512(blk + 128), s2);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    const __m512 dmw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
    for (int t = 0; t < T; ++t)
      min_step_one(acc(t), dw, dmw, xs[t][b].d, sumi[t],
                   mins.dot(_mm512_setzero_si512(), xs[t][b].bsums));
  };
  run_chains<T>(nb, outs, step);
}

// ---- kQ6_Kx16: Q6_K x Q8_K ----

// One 16-row group of nb super-blocks (its first one odd: `odd`) against T activation rows. Per
// 4-byte column i of a 128-element half h, three loads (ql dwords i and 8 + i, qh dword i) give
// the 6-bit codes of four element runs (l, l + 32, l + 64, l + 96); each run's 16-element group is
// summed by 4 vpdpbusd and scaled per lane, with the -32 offset taken off through the activation's
// bsums first.
template <int T>
void group_dot_q6(const uint8_t* g, bool odd, const BlockQ8_K* const* xs, int64_t nb,
                  float* const* outs) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  __m512 acc[T][8];
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < 8; ++k) acc[t][k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Q6KParts p = q6_kx16_parts(b, odd);
    // The scales and d lines (5 at the super-block's start or end), then one per code load.
    prefetch_lines<320, kToL1>(g + b * kQ6_Kx16Block + kQ6_Kx16Prefetch);
    const uint8_t* ql = g + p.ql;
    const uint8_t* qh = g + p.qh;
    __m512i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h)
      for (int q = 0; q < 2; ++q) {
        __m512i s[T][4];
        for (int t = 0; t < T; ++t)
          for (int k = 0; k < 4; ++k) s[t][k] = _mm512_setzero_si512();
        for (int ii = 0; ii < 4; ++ii) {
          const int i = 4 * q + ii;
          const uint8_t* pa = ql + (16 * h + i) * 64;
          const uint8_t* pb = ql + (16 * h + 8 + i) * 64;
          const uint8_t* ph = qh + (8 * h + i) * 64;
          prefetch_lines<64, kToL1>(pa + kQ6_Kx16Prefetch);
          prefetch_lines<64, kToL1>(pb + kQ6_Kx16Prefetch);
          prefetch_lines<64, kToL1>(ph + kQ6_Kx16Prefetch);
          const __m512i a = _mm512_loadu_si512(pa);
          const __m512i c = _mm512_loadu_si512(pb);
          const __m512i hb = _mm512_loadu_si512(ph);
          const __m512i codes[4] = {
              _mm512_or_si512(_mm512_and_si512(a, m4),
                              _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30)),
              _mm512_or_si512(_mm512_and_si512(c, m4),
                              _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30)),
              _mm512_or_si512(high_nibbles(a, m4), _mm512_and_si512(hb, m30)),
              _mm512_or_si512(high_nibbles(c, m4),
                              _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30))};
          for (int t = 0; t < T; ++t) {
            const int8_t* xq = xs[t][b].qs + 128 * h + 4 * i;
            for (int k = 0; k < 4; ++k)
              s[t][k] = _mm512_dpbusd_epi32(s[t][k], codes[k], bcast4(xq + 32 * k));
          }
        }
        for (int k = 0; k < 4; ++k) {
          const int grp = 8 * h + 2 * k + q;  // the 16-element group of run k
          const __m512i sc = _mm512_cvtepi8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + p.scales + 16 * grp)));
          for (int t = 0; t < T; ++t) {
            const __m512i centred =
                _mm512_sub_epi32(s[t][k], _mm512_set1_epi32(32 * xs[t][b].bsums[grp]));
            sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(sc, centred));
          }
        }
      }
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + p.d)));
    for (int t = 0; t < T; ++t) {
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(xs[t][b].d));
      acc[t][b % 8] = _mm512_add_ps(acc[t][b % 8], _mm512_mul_ps(dd, _mm512_cvtepi32_ps(sumi[t])));
    }
  }
  for (int t = 0; t < T; ++t) {
    _mm512_storeu_ps(outs[t], fold_acc(acc[t]));
  }
}

// The same group against T tokens in chain order, for GEMMs: one 16-element run (k) at a time,
// its codes rebuilt from the three loads for each (T run sums live, not 4T), each run's sum
// scaled into the token's sumi; the -32 offset, sum over runs of scale * 32 * bsum, taken off
// once per super-block by 8 vpdpwssd (two runs' scales as a 16-bit pair against the token's bsums
// pair): the same integers as group_dot_q6's (|sumi| < 2^29), then its float step, so the same
// bits. `cold`: the group's first batch, which L1-prefetches ahead as the GEMV does.
template <int T>
void chain_dot_q6(const uint8_t* g, bool odd, const BlockQ8_K* const* xs, int64_t nb,
                  float* const* outs, bool cold) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  auto scales = [&](const Q6KParts& p, int grp) {
    return _mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + p.scales + 16 * grp)));
  };
  auto step = [&](int64_t b, int, auto&& acc) {
    const Q6KParts p = q6_kx16_parts(b, odd);
    if (cold) prefetch_lines<kQ6_Kx16Block, kToL1>(g + b * kQ6_Kx16Block + kQ6_Kx16Prefetch);
    const uint8_t* ql = g + p.ql;
    const uint8_t* qh = g + p.qh;
    __m512i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h)
      for (int q = 0; q < 2; ++q)
        for (int k = 0; k < 4; ++k) {
          __m512i s[T];
          for (int t = 0; t < T; ++t) s[t] = _mm512_setzero_si512();
          for (int ii = 0; ii < 4; ++ii) {
            const int i = 4 * q + ii;
            // Run k's low nibbles from ql line i (k even) or 8 + i (odd), low (k < 2) or high.
            const __m512i v = _mm512_loadu_si512(ql + (16 * h + 8 * (k & 1) + i) * 64);
            const __m512i hb = _mm512_loadu_si512(qh + (8 * h + i) * 64);
            const __m512i lo4 = k < 2 ? _mm512_and_si512(v, m4) : high_nibbles(v, m4);
            const __m512i hi2 = k == 0   ? _mm512_slli_epi16(hb, 4)
                                : k == 1 ? _mm512_slli_epi16(hb, 2)
                                : k == 2 ? hb
                                         : _mm512_srli_epi16(hb, 2);
            const __m512i code = _mm512_or_si512(lo4, _mm512_and_si512(hi2, m30));
            for (int t = 0; t < T; ++t)
              s[t] =
                  _mm512_dpbusd_epi32(s[t], code, bcast4(xs[t][b].qs + 128 * h + 4 * i + 32 * k));
          }
          const __m512i sc = scales(p, 8 * h + 2 * k + q);
          for (int t = 0; t < T; ++t)
            sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(sc, s[t]));
        }
    __m512i off[T];
    for (int t = 0; t < T; ++t) off[t] = _mm512_setzero_si512();
    for (int m = 0; m < 8; ++m) {
      const __m512i pair =
          _mm512_or_si512(_mm512_and_si512(scales(p, 2 * m), _mm512_set1_epi32(0xFFFF)),
                          _mm512_slli_epi32(scales(p, 2 * m + 1), 16));
      for (int t = 0; t < T; ++t)
        off[t] = _mm512_dpwssd_epi32(
            off[t], pair, bcast4(reinterpret_cast<const int8_t*>(xs[t][b].bsums + 2 * m)));
    }
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + p.d)));
    for (int t = 0; t < T; ++t) {
      const __m512i isum = _mm512_sub_epi32(sumi[t], _mm512_slli_epi32(off[t], 5));
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(xs[t][b].d));
      acc(t) = _mm512_add_ps(acc(t), _mm512_mul_ps(dd, _mm512_cvtepi32_ps(isum)));
    }
  };
  run_chains<T>(nb, outs, step);
}

// ---- kIQ4_XSx16: IQ4_XS x Q8_K ----

// The IQ4_NL table register: each value + 128 (an unsigned code), in every 128-bit lane.
inline __m512i iq4_table() {
  return _mm512_xor_si512(
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues))),
      _mm512_set1_epi8(static_cast<char>(0x80)));
}

// Sub-block s's 6-bit scale less 32, one per lane (row), from the rows' scales_l dwords (sl) and
// scales_h words widened to dwords (sh).
inline __m512i iq4_scale(__m512i sl, __m512i sh, int s) {
  return _mm512_sub_epi32(
      _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(sl, 4 * s), _mm512_set1_epi32(0x0F)),
                      _mm512_slli_epi32(
                          _mm512_and_si512(_mm512_srli_epi32(sh, 2 * s), _mm512_set1_epi32(3)), 4)),
      _mm512_set1_epi32(32));
}

// Sub-block s of super-block blk (its b-th) against T tokens: sub[t] = the sum of the rows'
// table values + 128 times the token's codes, per lane (4 code lines, 8 vpdpbusd a token).
// kPrefetch: each line's L1 prefetch ahead (the GEMV's stream).
template <int T, bool kPrefetch>
inline void iq4_subblock(const uint8_t* blk, int s, const BlockQ8_K* const* xs, int64_t b,
                         __m512i table, __m512i m4, __m512i* sub) {
  for (int t = 0; t < T; ++t) sub[t] = _mm512_setzero_si512();
  for (int ii = 0; ii < 4; ++ii) {
    const uint8_t* at = blk + 128 + (4 * s + ii) * 64;
    if constexpr (kPrefetch) prefetch_lines<64, kToL1>(at + kIQ4_XSx16Prefetch);
    const __m512i v = _mm512_loadu_si512(at);
    const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(v, m4));
    const __m512i hi = _mm512_shuffle_epi8(table, high_nibbles(v, m4));
    for (int t = 0; t < T; ++t) {
      const int8_t* xq = xs[t][b].qs + 32 * s + 4 * ii;
      sub[t] = _mm512_dpbusd_epi32(sub[t], lo, bcast4(xq));
      sub[t] = _mm512_dpbusd_epi32(sub[t], hi, bcast4(xq + 16));
    }
  }
}

// One 16-row group of nb super-blocks against T activation rows. Per sub-block s, four code loads
// (rows' qs dwords 4s..4s+3) give the table values + 128 of 8 elements a row each (vpshufb: one
// table per 128-bit lane); 8 vpdpbusd sum the sub-block per lane; the 128 offset comes off through
// the activation's bsums and the lane's 6-bit scale (unpacked from the rows' scales_l / scales_h
// dwords) weights it.
template <int T>
void group_dot_iq4(const uint8_t* g, const BlockQ8_K* const* xs, int64_t nb, float* const* outs) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i table = iq4_table();
  __m512 acc[T][8];
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < 8; ++k) acc[t][k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kIQ4_XSx16Block;
    prefetch_lines<128, kToL1>(blk + kIQ4_XSx16Prefetch);
    const __m512i sh =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
    const __m512i sl = _mm512_loadu_si512(blk + 64);
    __m512i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm512_setzero_si512();
    for (int s = 0; s < 8; ++s) {
      __m512i sub[T];
      iq4_subblock<T, true>(blk, s, xs, b, table, m4, sub);
      const __m512i sc = iq4_scale(sl, sh, s);
      for (int t = 0; t < T; ++t) {
        const int32_t xsum = xs[t][b].bsums[2 * s] + xs[t][b].bsums[2 * s + 1];
        const __m512i centred = _mm512_sub_epi32(sub[t], _mm512_set1_epi32(128 * xsum));
        sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(sc, centred));
      }
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    for (int t = 0; t < T; ++t) {
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(xs[t][b].d));
      acc[t][b % 8] = _mm512_add_ps(acc[t][b % 8], _mm512_mul_ps(dd, _mm512_cvtepi32_ps(sumi[t])));
    }
  }
  for (int t = 0; t < T; ++t) {
    _mm512_storeu_ps(outs[t], fold_acc(acc[t]));
  }
}

// The same group against T tokens in chain order, for GEMMs: each code line's table values feed
// T tokens' vpdpbusd, one sub-block at a time (T sums live), each scaled into the token's
// integer super-block sum; the 128 offset, sum over sub-blocks of scale * 128 * (its two bsums),
// comes off once per super-block by 4 vpdpwssd (two sub-blocks' scales as a 16-bit pair against
// the token's pair sums, |P| <= 32 * 128: exact). The same integers as group_dot_iq4's, then its
// float step: the same bits. `cold`: the group's first batch, which prefetches as the GEMV does.
template <int T>
void chain_dot_iq4(const uint8_t* g, const BlockQ8_K* const* xs, int64_t nb, float* const* outs,
                   bool cold) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i table = iq4_table();
  auto step = [&](int64_t b, int, auto&& acc) {
    const uint8_t* blk = g + b * kIQ4_XSx16Block;
    if (cold) prefetch_lines<kIQ4_XSx16Block, kToL1>(blk + kIQ4_XSx16Prefetch);
    const __m512i sh =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
    const __m512i sl = _mm512_loadu_si512(blk + 64);
    auto scale = [&](int s) { return iq4_scale(sl, sh, s); };
    __m512i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm512_setzero_si512();
    for (int s = 0; s < 8; ++s) {
      __m512i sub[T];
      iq4_subblock<T, false>(blk, s, xs, b, table, m4, sub);
      const __m512i sc = scale(s);
      for (int t = 0; t < T; ++t)
        sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(sc, sub[t]));
    }
    const BsumPairDot offsets = BsumPairDot::of(scale, false);  // scale - 32 may be negative
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    for (int t = 0; t < T; ++t) {
      const __m512i off = offsets.dot(_mm512_setzero_si512(), xs[t][b].bsums);
      const __m512i isum = _mm512_sub_epi32(sumi[t], _mm512_slli_epi32(off, 7));
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(xs[t][b].d));
      acc(t) = _mm512_add_ps(acc(t), _mm512_mul_ps(dd, _mm512_cvtepi32_ps(isum)));
    }
  };
  run_chains<T>(nb, outs, step);
}

// ---- kQ2_Kx16: Q2_K x Q8_K ----

// vpshufb patterns (indexes within each 128-bit lane; 0x80 clears the byte) that spread bytes a and
// b of every dword into its two 16-bit words.
inline __m512i dword_bytes_to_words(int a, int b) {
  const auto dw = [&](int d) {
    return static_cast<int32_t>(0x80008000u | uint32_t(4 * d + a) | (uint32_t(4 * d + b) << 16));
  };
  return _mm512_broadcast_i32x4(_mm_setr_epi32(dw(0), dw(1), dw(2), dw(3)));
}

// Two group sums as one dword of 16-bit words (lo in the low word, hi in the high one), each sum
// held scaled by 4^n (the codes were masked in place, not shifted down: lo_n, hi_n) and |sum| <
// 2^15 once unscaled. The dword then meets a pair of 16-bit scales in one vpdpwssd.
template <int kLoShift, int kHiShift>
inline __m512i sum_pair(__m512i lo, __m512i hi) {
  const __m512i l = kLoShift == 0 ? lo : _mm512_srai_epi32(lo, kLoShift);
  // hi / 4^n << 16 == hi << (16 - kHiShift): hi is a multiple of 2^kHiShift.
  const __m512i h = _mm512_slli_epi32(hi, 16 - kHiShift);
  return _mm512_ternarylogic_epi32(l, h, _mm512_set1_epi32(0xFFFF), 0xEC);  // (l & C) | h
}

// One 16-row group of nb super-blocks against T activation rows. Per code line i (rows' qs dwords
// 4i..4i+3: half h = i / 8, elements 128h + 32j + 4(i % 8) + 0..3 in field j), each 2-bit field j
// masked in place (4^j times the code, at most 192) is one vpdpbusd into the sum of its group of
// 16 (8h + 2j + (i % 8) / 4). The group sums, unscaled and paired as 16-bit words, meet the pairs
// of 4-bit scales in vpdpwssd; so do the mins and the activation's bsums.
template <int T>
void group_dot_q2(const uint8_t* g, const BlockQ8_K* const* xs, int64_t nb, float* const* outs) {
  const __m512i field[4] = {_mm512_set1_epi8(0x03), _mm512_set1_epi8(0x0C), _mm512_set1_epi8(0x30),
                            _mm512_set1_epi8(static_cast<char>(0xC0))};
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // Scale pairs of groups (8h + q, 8h + 2 + q) and (8h + 4 + q, 8h + 6 + q): bytes q, q + 2 of the
  // scale dwords 2h, 2h + 1. Min pairs (4k, 4k + 1) and (4k + 2, 4k + 3): bytes 0, 1 / 2, 3.
  const __m512i pick_q[2] = {dword_bytes_to_words(0, 2), dword_bytes_to_words(1, 3)};
  const __m512i pick01 = dword_bytes_to_words(0, 1), pick23 = dword_bytes_to_words(2, 3);
  __m512 acc[T][8];
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < 8; ++k) acc[t][k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kQ2_Kx16Block;
    prefetch_lines<320, kToL1>(blk + kQ2_Kx16Prefetch);
    __m512i sc4[4];
    for (int k = 0; k < 4; ++k) sc4[k] = _mm512_loadu_si512(blk + 64 + 64 * k);
    __m512i sumi[T], summ[T];
    for (int t = 0; t < T; ++t) sumi[t] = summ[t] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h)
      for (int q = 0; q < 2; ++q) {
        __m512i is[T][4];
        for (int t = 0; t < T; ++t)
          for (int j = 0; j < 4; ++j) is[t][j] = _mm512_setzero_si512();
        for (int ii = 0; ii < 4; ++ii) {
          const uint8_t* at = blk + 320 + (8 * h + 4 * q + ii) * 64;
          prefetch_lines<64, kToL1>(at + kQ2_Kx16Prefetch);
          const __m512i v = _mm512_loadu_si512(at);
          for (int j = 0; j < 4; ++j) {
            const __m512i c = _mm512_and_si512(v, field[j]);
            for (int t = 0; t < T; ++t)
              is[t][j] = _mm512_dpbusd_epi32(
                  is[t][j], c, bcast4(xs[t][b].qs + 128 * h + 32 * j + 16 * q + 4 * ii));
          }
        }
        const __m512i sc02 = _mm512_shuffle_epi8(_mm512_and_si512(sc4[2 * h], m4), pick_q[q]);
        const __m512i sc46 = _mm512_shuffle_epi8(_mm512_and_si512(sc4[2 * h + 1], m4), pick_q[q]);
        for (int t = 0; t < T; ++t) {
          sumi[t] = _mm512_dpwssd_epi32(sumi[t], sum_pair<0, 2>(is[t][0], is[t][1]), sc02);
          sumi[t] = _mm512_dpwssd_epi32(sumi[t], sum_pair<4, 6>(is[t][2], is[t][3]), sc46);
        }
      }
    for (int k = 0; k < 4; ++k) {
      const __m512i mins = _mm512_and_si512(_mm512_srli_epi32(sc4[k], 4), m4);
      const __m512i m01 = _mm512_shuffle_epi8(mins, pick01);
      const __m512i m23 = _mm512_shuffle_epi8(mins, pick23);
      for (int t = 0; t < T; ++t) {
        int32_t b01 = 0, b23 = 0;
        std::memcpy(&b01, xs[t][b].bsums + 4 * k, 4);
        std::memcpy(&b23, xs[t][b].bsums + 4 * k + 2, 4);
        summ[t] = _mm512_dpwssd_epi32(summ[t], m01, _mm512_set1_epi32(b01));
        summ[t] = _mm512_dpwssd_epi32(summ[t], m23, _mm512_set1_epi32(b23));
      }
    }
    min_step<T>(acc, b, blk, xs, sumi, summ);
  }
  for (int t = 0; t < T; ++t) {
    _mm512_storeu_ps(outs[t], fold_acc(acc[t]));
  }
}

// ---- kQ3_Kx16: Q3_K x Q8_K ----

// One 16-row group of nb super-blocks (its first one odd: `odd`) against T activation rows. As
// group_dot_q2, with the 3rd bits: fields j < 3 of code line i stay in place (bits 2j, 2j + 1) and
// get bit 4h + j of the rows' hmask byte of the same position (hmask line i % 8) as bit 2j + 2, so
// each is 4^j times an unsigned 0..7 code (value + 4); field 3 is shifted down first. The paired
// 16-bit group sums lose the 4 through the activation's bsums before they meet the pairs of signed
// 6-bit scales in vpdpwssd.
template <int T>
void group_dot_q3(const uint8_t* g, bool odd, const BlockQ8_K* const* xs, int64_t nb,
                  float* const* outs) {
  const __m512i lo4 = _mm512_set1_epi32(0x0F0F0F0F);
  const __m512i lo2 = _mm512_set1_epi32(0x03030303);
  // Signed scale pairs of groups (8h + q, 8h + 2 + q) / (8h + 4 + q, 8h + 6 + q): bytes q, q + 2 of
  // the scale words 2h / 2h + 1, into the high bytes of the 16-bit words (then shifted down).
  const __m512i pick_q[2] = {_mm512_slli_epi16(dword_bytes_to_words(0, 2), 8),
                             _mm512_slli_epi16(dword_bytes_to_words(1, 3), 8)};
  __m512 acc[T][8];
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < 8; ++k) acc[t][k] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Q3KParts p = q3_kx16_parts(b, odd);
    prefetch_lines<192, kToL1>(g + p.scales + kQ3_Kx16Prefetch);
    prefetch_lines<64, kToL1>(g + p.d + kQ3_Kx16Prefetch);
    // The 16 rows' sixteen 6-bit scales less 32 as signed bytes, scale g in byte g % 4 of u[g / 4]
    // (q3_k_scale_words, lane-wise).
    const __m512i a0 = _mm512_loadu_si512(g + p.scales);
    const __m512i a1 = _mm512_loadu_si512(g + p.scales + 64);
    const __m512i a2 = _mm512_loadu_si512(g + p.scales + 128);
    const auto word = [&](__m512i low, int low_shift, int high_shift) {
      const __m512i l = _mm512_and_si512(_mm512_srli_epi32(low, low_shift), lo4);
      const __m512i h =
          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a2, high_shift), lo2), 4);
      return _mm512_sub_epi8(_mm512_or_si512(l, h), _mm512_set1_epi8(32));
    };
    const __m512i u[4] = {word(a0, 0, 0), word(a1, 0, 2), word(a0, 4, 4), word(a1, 4, 6)};
    __m512i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm512_setzero_si512();
      // Unrolled whole: the shift counts and masks follow from h, q and j.
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 2
      for (int q = 0; q < 2; ++q) {
        __m512i is[T][4];
        for (int t = 0; t < T; ++t)
          for (int j = 0; j < 4; ++j) is[t][j] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int ii = 0; ii < 4; ++ii) {
          const uint8_t* at = g + p.qs(8 * h + 4 * q + ii);
          const uint8_t* hat = g + p.hmask(4 * q + ii);
          prefetch_lines<64, kToL1>(at + kQ3_Kx16Prefetch);
          if (h == 0) prefetch_lines<64, kToL1>(hat + kQ3_Kx16Prefetch);
          const __m512i v = _mm512_loadu_si512(at);
          const __m512i hm = _mm512_loadu_si512(hat);
#pragma GCC unroll 4
          for (int j = 0; j < 4; ++j) {
            // Field j's 2 bits at bits 2j, 2j + 1 (j = 3: shifted down to 0, 1) and bit 4h + j of
            // the hmask byte moved just above them (16-bit shifts: no bit that crosses a byte
            // lands there).
            const int at_bit = j < 3 ? 2 * j : 0;
            const __m512i vs = j < 3 ? v : _mm512_srli_epi16(v, 6);
            const int sh = at_bit + 2 - (4 * h + j);
            const __m512i hs = sh > 0   ? _mm512_slli_epi16(hm, sh)
                               : sh < 0 ? _mm512_srli_epi16(hm, -sh)
                                        : hm;
            const __m512i c = _mm512_ternarylogic_epi32(
                vs, _mm512_and_si512(hs, _mm512_set1_epi8(static_cast<char>(4 << at_bit))),
                _mm512_set1_epi8(static_cast<char>(3 << at_bit)), 0xEC);  // (vs & C) | hs
            for (int t = 0; t < T; ++t)
              is[t][j] = _mm512_dpbusd_epi32(
                  is[t][j], c, bcast4(xs[t][b].qs + 128 * h + 32 * j + 16 * q + 4 * ii));
          }
        }
        const __m512i sc02 = _mm512_srai_epi16(_mm512_shuffle_epi8(u[2 * h], pick_q[q]), 8);
        const __m512i sc46 = _mm512_srai_epi16(_mm512_shuffle_epi8(u[2 * h + 1], pick_q[q]), 8);
        for (int t = 0; t < T; ++t) {
          // 4 * bsums of the pairs' groups as 16-bit words (|4 bsums| <= 8192).
          const int16_t* bs = xs[t][b].bsums + 8 * h + q;
          const auto four = [&](int k) { return static_cast<uint32_t>(uint16_t(4 * bs[k])); };
          const __m512i off02 = _mm512_set1_epi32(static_cast<int32_t>(four(0) | four(2) << 16));
          const __m512i off46 = _mm512_set1_epi32(static_cast<int32_t>(four(4) | four(6) << 16));
          const __m512i c02 = _mm512_sub_epi16(sum_pair<0, 2>(is[t][0], is[t][1]), off02);
          const __m512i c46 = _mm512_sub_epi16(sum_pair<4, 0>(is[t][2], is[t][3]), off46);
          sumi[t] = _mm512_dpwssd_epi32(sumi[t], c02, sc02);
          sumi[t] = _mm512_dpwssd_epi32(sumi[t], c46, sc46);
        }
      }
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + p.d)));
    for (int t = 0; t < T; ++t) {
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(xs[t][b].d));
      acc[t][b % 8] = _mm512_add_ps(acc[t][b % 8], _mm512_mul_ps(dd, _mm512_cvtepi32_ps(sumi[t])));
    }
  }
  for (int t = 0; t < T; ++t) {
    _mm512_storeu_ps(outs[t], fold_acc(acc[t]));
  }
}

// GEMV / GEMM over the super-block layouts from their group pass Dot<T> (two tokens per pass).
template <template <int> class Dot>
void gemv_kx16(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
               int64_t row_end, int64_t n_cols) {
  const int64_t nb = n_cols / kQK_K;
  const auto* x = static_cast<const BlockQ8_K*>(xq);
  for_groups(w, row_stride, row_begin, row_end, [&](const uint8_t* g, int64_t r) {
    float* out = y + r;
    Dot<1>::run(g, r, &x, nb, &out);
  });
}

template <int T>
struct Q4KDot {
  static constexpr bool kChains = true;
  static void run(const uint8_t* g, int64_t, const BlockQ8_K* const* xs, int64_t nb,
                  float* const* outs) {
    group_dot_k<T>(g, xs, nb, outs);
  }
  static void chain(const uint8_t* g, int64_t, const BlockQ8_K* const* xs, int64_t nb,
                    float* const* outs, bool cold) {
    chain_dot_k<T>(g, xs, nb, outs, cold);
  }
};
template <int T>
struct IQ4XSDot {
  static constexpr bool kChains = true;
  static void run(const uint8_t* g, int64_t, const BlockQ8_K* const* xs, int64_t nb,
                  float* const* outs) {
    group_dot_iq4<T>(g, xs, nb, outs);
  }
  static void chain(const uint8_t* g, int64_t, const BlockQ8_K* const* xs, int64_t nb,
                    float* const* outs, bool cold) {
    chain_dot_iq4<T>(g, xs, nb, outs, cold);
  }
};
template <int T>
struct Q5KDot {
  static constexpr bool kChains = true;
  static void run(const uint8_t* g, int64_t, const BlockQ8_K* const* xs, int64_t nb,
                  float* const* outs) {
    group_dot_k<T, true>(g, xs, nb, outs);
  }
  static void chain(const uint8_t* g, int64_t, const BlockQ8_K* const* xs, int64_t nb,
                    float* const* outs, bool cold) {
    chain_dot_k<T, true>(g, xs, nb, outs, cold);
  }
};
template <int T>
struct Q2KDot {
  static constexpr bool kChains = false;  // (chain passes were no faster: RESULTS session 27)
  static void run(const uint8_t* g, int64_t, const BlockQ8_K* const* xs, int64_t nb,
                  float* const* outs) {
    group_dot_q2<T>(g, xs, nb, outs);
  }
};
template <int T>
struct Q3KDot {
  static constexpr bool kChains = false;  // (chain passes were no faster: RESULTS session 27)
  static void run(const uint8_t* g, int64_t r, const BlockQ8_K* const* xs, int64_t nb,
                  float* const* outs) {
    group_dot_q3<T>(g, q3_kx16_group_odd(r, nb), xs, nb, outs);
  }
};
template <int T>
struct Q6KDot {
  static constexpr bool kChains = true;
  static void run(const uint8_t* g, int64_t r, const BlockQ8_K* const* xs, int64_t nb,
                  float* const* outs) {
    group_dot_q6<T>(g, q6_kx16_group_odd(r, nb), xs, nb, outs);
  }
  static void chain(const uint8_t* g, int64_t r, const BlockQ8_K* const* xs, int64_t nb,
                    float* const* outs, bool cold) {
    chain_dot_q6<T>(g, q6_kx16_group_odd(r, nb), xs, nb, outs, cold);
  }
};

// GEMM over the super-block layouts, per group. Dots with a chain-order pass (kChains: Q4_K, Q5_K,
// Q6_K) take the tokens in for_batches' batches — chain passes for 2+ tokens, the first batch
// (which finds the group cold) prefetching, and the block-order GEMV pass for a lone token or
// every token of a call under 4; the others run block-order passes over 2 tokens, then 1.
template <template <int> class Dot>
void gemm_kx16(const void* w, size_t row_stride, const void* xq, size_t xq_stride, float* y,
               size_t y_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end,
               int64_t n_cols) {
  const int64_t nb = n_cols / kQK_K;
  const auto* xbase = static_cast<const uint8_t*>(xq);
  for_groups(w, row_stride, row_begin, row_end, [&](const uint8_t* g, int64_t r) {
    // Tokens t .. t + T - 1 against the group.
    auto pass = [&](auto tokens, int64_t t) {
      constexpr int T = decltype(tokens)::value;
      const BlockQ8_K* xs[T];
      float* outs[T];
      for (int j = 0; j < T; ++j) {
        xs[j] = reinterpret_cast<const BlockQ8_K*>(xbase + (t + j) * xq_stride);
        outs[j] = y + (t + j) * y_stride + r;
      }
      if constexpr (T > 1 && Dot<T>::kChains)
        Dot<T>::chain(g, r, xs, nb, outs, t == 0);
      else
        Dot<T>::run(g, r, xs, nb, outs);
    };
    if constexpr (Dot<1>::kChains) {
      for_batches<kGemmTokens>(n_tokens, nb,
                               [&](auto tokens, int64_t t, size_t) { pass(tokens, t); });
    } else {
      int64_t t = 0;
      for (; t + 2 <= n_tokens; t += 2) pass(std::integral_constant<int, 2>{}, t);
      for (; t < n_tokens; ++t) pass(std::integral_constant<int, 1>{}, t);
    }
  });
}

}  // namespace

#if STRATA_INTERLEAVED_GFNI
GemvKernels interleaved_kernels_avx512_gfni(WeightLayout layout) {
#else
GemvKernels interleaved_kernels_avx512(WeightLayout layout) {
#endif
  if (layout == WeightLayout::kQ4_0x16)
    return GemvKernels{&gemv_b32<WeightLayout::kQ4_0x16>, &gemm_b32<WeightLayout::kQ4_0x16>};
  if (layout == WeightLayout::kQ4_0x32)
    return GemvKernels{&gemv_b32<WeightLayout::kQ4_0x32>, &gemm_b32<WeightLayout::kQ4_0x32>};
  if (layout == WeightLayout::kIQ4_NLx16)
    return GemvKernels{&gemv_b32<WeightLayout::kIQ4_NLx16>, &gemm_b32<WeightLayout::kIQ4_NLx16>};
  if (layout == WeightLayout::kMXFP4x16)
    return GemvKernels{&gemv_b32<WeightLayout::kMXFP4x16>, &gemm_b32<WeightLayout::kMXFP4x16>};
  if (layout == WeightLayout::kQ8_0x16)
    return GemvKernels{&gemv_b32<WeightLayout::kQ8_0x16>, &gemm_b32<WeightLayout::kQ8_0x16>};
  if (layout == WeightLayout::kQ5_0x16)
    return GemvKernels{&gemv_b32<WeightLayout::kQ5_0x16>, &gemm_b32<WeightLayout::kQ5_0x16>};
  if (layout == WeightLayout::kQ4_1x16)
    return GemvKernels{&gemv_b32<WeightLayout::kQ4_1x16>, &gemm_b32<WeightLayout::kQ4_1x16>};
  if (layout == WeightLayout::kQ5_1x16)
    return GemvKernels{&gemv_b32<WeightLayout::kQ5_1x16>, &gemm_b32<WeightLayout::kQ5_1x16>};
  if (layout == WeightLayout::kQ4_Kx16) return GemvKernels{&gemv_kx16<Q4KDot>, &gemm_kx16<Q4KDot>};
  if (layout == WeightLayout::kQ6_Kx16) return GemvKernels{&gemv_kx16<Q6KDot>, &gemm_kx16<Q6KDot>};
  if (layout == WeightLayout::kQ5_Kx16) return GemvKernels{&gemv_kx16<Q5KDot>, &gemm_kx16<Q5KDot>};
  if (layout == WeightLayout::kQ2_Kx16) return GemvKernels{&gemv_kx16<Q2KDot>, &gemm_kx16<Q2KDot>};
  if (layout == WeightLayout::kQ3_Kx16) return GemvKernels{&gemv_kx16<Q3KDot>, &gemm_kx16<Q3KDot>};
  if (layout == WeightLayout::kIQ4_XSx16)
    return GemvKernels{&gemv_kx16<IQ4XSDot>, &gemm_kx16<IQ4XSDot>};
  return GemvKernels{nullptr, nullptr};
}

}  // namespace strata::kernels::detail
