// The one-pass 16-row group kernel of the kQ4_0x16 / kIQ4_NLx16 / kMXFP4x16 layouts
// (kernels/interleave.h) against Q8_0 activations, 256-bit, and its GEMM in chain order
// (chain_group_dot: 4 tokens per pass, the codes built once; session 35: 1.1-1.27x the one-token
// GEMM it replaced; without AVX-VNNI chain_group_dot_i16, int16 sums: 1.5x that, session 42).
// Instantiated with vpdpbusd by gemv_interleaved_avxvnni.cpp (GEMV and GEMM,
// AVX-VNNI CPUs) and with vpmaddubsw + vpmaddwd by gemv_interleaved_avx2.cpp (the GEMM only:
// plain-AVX2 CPUs stream the GEMV faster with the two-half kernel, sessions 16 and 39). Also
// here: the chain GEMMs of kQ5_0x16 / kQ4_1x16 / kQ5_1x16 (chain_dot_b32, both builds) and
// kQ8_0x16's kernels (chain_dot_q8: AVX-VNNI, session 36; plain AVX2, session 43), through
// gemm_x16_chain.
//
// All 16 rows of a group in one step per block, the blocks in two passes (b % 8 < 4, then the
// rest): each pass keeps 4 of the 8 canonical accumulators for both 8-row halves (8 registers),
// and each broadcast activation word feeds both halves. Both instructions sum 4 code x activation
// products per row into int32 exactly (no product or partial sum comes near int16 saturation:
// |15 x -128 x 2| for Q4_0), so the block sums are the same integers and the float steps the
// canonical ones of gemv.cpp (acc[b % 8] per lane, the fixed fold): the results equal gemv_ref.cpp
// bit for bit. The first pass prefetches each block's lines into L1 2 KiB ahead (the second finds
// them in L1/L2); both prefetch the next group into L2. Include only from those two files.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/gemv_internal.h"
#include "kernels/interleave_internal.h"
#include "kernels/interleave_k_ymm.h"
#include "kernels/interleave_prep.h"
#include "kernels/quant.h"

namespace strata::kernels::detail {
namespace {

inline __m256i broadcast_word(const BlockQ8_0& x, int j) {
  int32_t v;
  std::memcpy(&v, x.qs + 4 * j, 4);
  return _mm256_set1_epi32(v);
}

// The arithmetic both kernels below share. Fmt (ymm::, interleave_prep.h): the layout. With a
// table (kMXFP4x16, kIQ4_NLx16) each nibble becomes its table value + kBias (MXFP4: 12; IQ4_NL:
// 128, as vpdpbusd has no int16 pairs to overflow), an unsigned code as Q4_0's nibble; the offset
// -kBias * sum(x) is XPrep's neg * kBias / 8.
// Without AVX-VNNI IQ4_NL's table values + 128 would overflow vpmaddubsw's int16 pairs (kSigned):
// its codes stay the signed table values and x's signs move onto them, |x| · sign(v, x) (at most
// 2 x 127 x 127 a pair), with no offset.
template <typename Fmt, bool kVnni>
struct B32Ops {
  static constexpr bool kSigned = !kVnni && Fmt::kTable != nullptr && Fmt::kBias == 0;
  static constexpr int kBias = kSigned                  ? 0
                               : Fmt::kTable == nullptr ? 8
                               : Fmt::kBias == 0        ? 128
                                                        : Fmt::kBias;
  __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i ones = _mm256_set1_epi16(1);
  __m256i table = m4;
  B32Ops() {
    if constexpr (Fmt::kTable != nullptr)
      table = _mm256_add_epi8(_mm256_broadcastsi128_si256(
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(Fmt::kTable))),
                              _mm256_set1_epi8(static_cast<char>(kBias)));
  }
  // acc + the 4-product sums per dword: vpdpbusd, or vpmaddubsw + vpmaddwd (pairs within int16:
  // |15 x -128 x 2|, MXFP4's |24 x -128 x 2|).
  __m256i dot(__m256i acc, __m256i u, __m256i s) const {
    if constexpr (kVnni) {
      return _mm256_dpbusd_avx_epi32(acc, u, s);
    } else if constexpr (kSigned) {
      return _mm256_add_epi32(
          acc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(s), _mm256_sign_epi8(u, s)),
                                 ones));
    } else {
      return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
    }
  }
  // The unsigned codes of nibbles v.
  __m256i codes(__m256i v) const {
    if constexpr (Fmt::kTable != nullptr) return _mm256_shuffle_epi8(table, v);
    return v;
  }
};

// One 16-row group against one activation row; next: the following group of the call (or null).
// Fmt: the layout (B32Ops).
template <typename Fmt, bool kVnni>
inline void group_dot(const uint8_t* g, const BlockQ8_0* x, const XPrep* prep, int64_t nb,
                      float* out, const uint8_t* next) {
  using Ops = B32Ops<Fmt, kVnni>;
  constexpr int kBias = Ops::kBias;
  constexpr size_t kBlockBytes = Fmt::kChunk / 2;  // a block's share of the group's stream
  const Ops ops;
  const __m256i m4 = ops.m4;
  auto dot = [&](__m256i acc, __m256i u, __m256i s) { return ops.dot(acc, u, s); };
  auto codes = [&](__m256i v) { return ops.codes(v); };
  alignas(32) float acc[2][8][8];  // [half][b % 8][row in the half]
  for (int p = 0; p < 2; ++p) {
    __m256 a0[4], a1[4];
    for (int k = 0; k < 4; ++k) a0[k] = a1[k] = _mm256_setzero_ps();
    // Block b = b8 + 4p + k, b8 a multiple of 8.
    auto step = [&](int64_t b, int k) {
      const uint8_t* qb = g + Fmt::codes(b);
      if (next != nullptr) prefetch_lines<320, kToL2>(next + b * kBlockBytes);
      if (p == 0)  // this step's quarter of blocks b8..b8+7 (chunk k from b8's),
                   // kInterleavePrefetch ahead
        prefetch_lines<kQ4_0x16Chunk, kToL1>(g + (b - k) * kBlockBytes + k * Fmt::kChunk +
                                             kInterleavePrefetch);
      __m256i lo0 = _mm256_setzero_si256(), lo1 = lo0, hi0 = lo0, hi1 = lo0;
      for (int j = 0; j < 4; ++j) {
        const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * j));
        const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * j + 32));
        const __m256i xl = broadcast_word(x[b], j), xh = broadcast_word(x[b], 4 + j);
        lo0 = dot(lo0, codes(_mm256_and_si256(v0, m4)), xl);
        hi0 = dot(hi0, codes(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m4)), xh);
        lo1 = dot(lo1, codes(_mm256_and_si256(v1, m4)), xl);
        hi1 = dot(hi1, codes(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m4)), xh);
      }
      const __m256i neg = _mm256_set1_epi32(prep[b].neg / 8 * kBias);
      const __m256i i0 = _mm256_add_epi32(_mm256_add_epi32(lo0, hi0), neg);
      const __m256i i1 = _mm256_add_epi32(_mm256_add_epi32(lo1, hi1), neg);
      const __m256 dx = _mm256_set1_ps(prep[b].dx);
      const uint8_t* sc = g + Fmt::scales(b);
      const __m256 d0 = _mm256_mul_ps(Fmt::dw(sc, 0), dx);
      const __m256 d1 = _mm256_mul_ps(Fmt::dw(sc, 1), dx);
      a0[k] = _mm256_add_ps(a0[k], _mm256_mul_ps(_mm256_cvtepi32_ps(i0), d0));
      a1[k] = _mm256_add_ps(a1[k], _mm256_mul_ps(_mm256_cvtepi32_ps(i1), d1));
    };
    int64_t b8 = 0;
    for (; b8 + 8 <= nb; b8 += 8) {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) step(b8 + 4 * p + k, k);
    }
    for (int k = 0; k < 4 && b8 + 4 * p + k < nb; ++k) step(b8 + 4 * p + k, k);
    for (int k = 0; k < 4; ++k) {
      _mm256_store_ps(acc[0][4 * p + k], a0[k]);
      _mm256_store_ps(acc[1][4 * p + k], a1[k]);
    }
  }
  for (int h = 0; h < 2; ++h) {
    const auto a = [&](int k) { return _mm256_load_ps(acc[h][k]); };
    const __m256 r =
        _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a(0), a(4)), _mm256_add_ps(a(2), a(6))),
                      _mm256_add_ps(_mm256_add_ps(a(1), a(5)), _mm256_add_ps(a(3), a(7))));
    _mm256_storeu_ps(out + 8 * h, r);
  }
}

// A chain GEMM's first batch over a group: every other block, the next chunk's lines into L1
// kInterleavePrefetch ahead (as the GEMV prefetches).
template <typename Fmt>
inline void cold_prefetch(const uint8_t* g, int64_t b) {
  if ((b & 1) == 0)
    prefetch_lines<Fmt::kChunk, kToL1>(g + static_cast<size_t>(b >> 1) * Fmt::kChunk +
                                       kInterleavePrefetch);
}

// The same group against T activation rows in chain order, for GEMMs: per block and 8-row half,
// the 8 code vectors built once (4 loads, nibbles, table lookups) for T tokens' products, each
// token's block sum to float at once with its XPrep (the canonical acc[b % 8] per token on the
// stack, Acc16). The same integers and float steps as group_dot's: the same bits. cold: the
// group's first batch, which L1-prefetches ahead as the GEMV does.
template <typename Fmt, bool kVnni, int T>
inline void chain_group_dot(const uint8_t* g, const BlockQ8_0* const* xs, const XPrep* const* preps,
                            int64_t nb, float* const* outs, bool cold) {
  using Ops = B32Ops<Fmt, kVnni>;
  constexpr int kBias = Ops::kBias;
  const Ops ops;
  const __m256i m4 = ops.m4;
  auto dot = [&](__m256i acc, __m256i u, __m256i s) { return ops.dot(acc, u, s); };
  auto codes = [&](__m256i v) { return ops.codes(v); };
  Acc16 acc[T];
  for (int64_t b = 0; b < nb; ++b) {
    if (cold) cold_prefetch<Fmt>(g, b);
    const uint8_t* qb = g + Fmt::codes(b);
    const uint8_t* sc = g + Fmt::scales(b);
    for (int h = 0; h < 2; ++h) {
      __m256i lo[4], hi[4];
      for (int j = 0; j < 4; ++j) {
        const __m256i v =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * j + 32 * h));
        lo[j] = codes(_mm256_and_si256(v, m4));
        hi[j] = codes(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
      }
      const __m256 dw = Fmt::dw(sc, h);
      for (int t = 0; t < T; ++t) {
        __m256i i = _mm256_set1_epi32(preps[t][b].neg / 8 * kBias);
        for (int j = 0; j < 4; ++j) {
          i = dot(i, lo[j], broadcast_word(xs[t][b], j));
          i = dot(i, hi[j], broadcast_word(xs[t][b], 4 + j));
        }
        acc[t].add(b, h,
                   _mm256_mul_ps(_mm256_cvtepi32_ps(i),
                                 _mm256_mul_ps(dw, _mm256_set1_ps(preps[t][b].dx))));
      }
    }
  }
  for (int t = 0; t < T; ++t) acc[t].store(outs[t]);
}

// chain_group_dot's GEMM without AVX-VNNI, for the layouts whose codes are unsigned (kQ4_0x16,
// kMXFP4x16): vpmaddubsw's int16 pair sums added in int16 over kRuns of a block's 4 code lines
// (a line's low and high nibbles are 2 of them; Q4_0's pairs reach |15 x -128 x 2| = 3840, so all
// 4 lines sum to at most 30720; MXFP4's codes reach 24, pairs 6144, so 2 lines) before one
// vpmaddwd takes them to int32, where
// chain_group_dot spends a vpmaddwd and a vpaddd on every vpmaddubsw; and both 8-row halves at
// once, so each broadcast activation word feeds 4 products rather than 2. The same int32 block
// sums (exact integers in any order) and the same float step: the same bits.
template <typename Fmt, int T>
inline void chain_group_dot_i16(const uint8_t* g, const BlockQ8_0* const* xs,
                                const XPrep* const* preps, int64_t nb, float* const* outs,
                                bool cold) {
  using Ops = B32Ops<Fmt, false>;
  static_assert(!Ops::kSigned, "signed codes need a vpmaddwd per vpmaddubsw");
  constexpr int kBias = Ops::kBias;
  constexpr int kRuns = Fmt::kTable == nullptr ? 4 : 2;  // code lines per int16 sum
  const Ops ops;
  const __m256i m4 = ops.m4;
  const __m256i ones = ops.ones;
  Acc16 acc[T];
  for (int64_t b = 0; b < nb; ++b) {
    if (cold) cold_prefetch<Fmt>(g, b);
    const uint8_t* qb = g + Fmt::codes(b);
    __m256i i32[2][T], s16[2][T];  // i32 from the first flush (none live across Q4_0's lines)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      __m256i lo[2], hi[2];
      for (int h = 0; h < 2; ++h) {
        const __m256i v =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * j + 32 * h));
        lo[h] = ops.codes(_mm256_and_si256(v, m4));
        hi[h] = ops.codes(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
      }
      for (int t = 0; t < T; ++t) {
        const __m256i xl = broadcast_word(xs[t][b], j), xh = broadcast_word(xs[t][b], 4 + j);
        for (int h = 0; h < 2; ++h) {
          const __m256i p =
              _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], xl), _mm256_maddubs_epi16(hi[h], xh));
          s16[h][t] = j % kRuns == 0 ? p : _mm256_add_epi16(s16[h][t], p);
          // Opaque to GCC's reassociation, which would otherwise form every product of the
          // block first and spill them.
          __asm__("" : "+x"(s16[h][t]));
          if (j % kRuns == kRuns - 1) {
            const __m256i sum = _mm256_madd_epi16(s16[h][t], ones);
            i32[h][t] = j < kRuns ? sum : _mm256_add_epi32(i32[h][t], sum);
          }
        }
      }
    }
    const uint8_t* sc = g + Fmt::scales(b);
    for (int h = 0; h < 2; ++h) {
      const __m256 dw = Fmt::dw(sc, h);
      for (int t = 0; t < T; ++t) {
        const __m256i i =
            _mm256_add_epi32(i32[h][t], _mm256_set1_epi32(preps[t][b].neg / 8 * kBias));
        acc[t].add(b, h,
                   _mm256_mul_ps(_mm256_cvtepi32_ps(i),
                                 _mm256_mul_ps(dw, _mm256_set1_ps(preps[t][b].dx))));
      }
    }
  }
  for (int t = 0; t < T; ++t) acc[t].store(outs[t]);
}

// One 16-row kQ5_0x16 / kQ4_1x16 / kQ5_1x16 group (B32Parts<kMin, kHigh>) against T activation
// rows in chain order, for GEMMs: per block and 8-row half the 8 code vectors (nibbles with their
// 5th bits ORed in at bit 4) built once, as gemv_interleaved_avx2.cpp's half_dot_b32 builds them,
// for T tokens' products. kVnni: vpdpbusd sums a token's 8 lines in int32; else vpmaddubsw, int16
// sums of 4 lines (of each nibble half apart for 5-bit codes), vpmaddwd: half_dot_b32's. Q5_0's
// -16 through the activation's sum (2 * neg), Q4_1 / Q5_1's m as m_w * (d_x * sum(x)): the same
// integers and float steps as half_dot_b32, the same bits. cold: as chain_group_dot's.
template <bool kMin, bool kHigh, bool kVnni, int T>
inline void chain_dot_b32(const uint8_t* g, const BlockQ8_0* const* xs, const XPrep* const* preps,
                          int64_t nb, float* const* outs, bool cold) {
  using P = B32Parts<kMin, kHigh>;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i c16 = _mm256_set1_epi8(16);
  const auto load = [](const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  };
  const auto halves = [](const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  };
  Acc16 acc[T];
  for (int64_t b = 0; b < nb; ++b) {
    if (cold && (b & 1) == 0)
      prefetch_lines<P::kChunk, kToL1>(g + P::chunk(b) + kInterleavePrefetch);
    const uint8_t* qb = g + P::codes(b);
    for (int h = 0; h < 2; ++h) {
      __m256i lo[4], hi[4];
      [[maybe_unused]] __m256i qh;
      if constexpr (kHigh) qh = load(g + P::qh(b) + 32 * h);
      for (int j = 0; j < 4; ++j) {
        const __m256i v = load(qb + 64 * j + 32 * h);
        lo[j] = _mm256_and_si256(v, m4);
        hi[j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if constexpr (kHigh) {  // bit j (low nibble) and bit 4 + j (high) of every byte to bit 4
          lo[j] = _mm256_or_si256(lo[j], _mm256_and_si256(_mm256_slli_epi16(qh, 4 - j), c16));
          hi[j] = _mm256_or_si256(hi[j], _mm256_and_si256(_mm256_srli_epi16(qh, j), c16));
        }
      }
      const __m256 dw = halves(g + P::d(b) + 16 * h);
      [[maybe_unused]] __m256 mw;
      if constexpr (kMin) mw = halves(g + P::m(b) + 16 * h);
      for (int t = 0; t < T; ++t) {
        const BlockQ8_0& x = xs[t][b];
        const XPrep& pr = preps[t][b];
        __m256i isum;
        if constexpr (kVnni) {
          isum = kMin ? _mm256_setzero_si256() : _mm256_set1_epi32(2 * pr.neg);
          for (int j = 0; j < 4; ++j) {
            isum = _mm256_dpbusd_avx_epi32(isum, lo[j], broadcast_word(x, j));
            isum = _mm256_dpbusd_avx_epi32(isum, hi[j], broadcast_word(x, 4 + j));
          }
        } else {
          constexpr int kSplit = kHigh ? 1 : 0;  // 5-bit codes: low and high nibble sums apart
          __m256i s16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
          for (int j = 0; j < 4; ++j) {
            s16[0] = _mm256_add_epi16(s16[0], _mm256_maddubs_epi16(lo[j], broadcast_word(x, j)));
            s16[kSplit] = _mm256_add_epi16(s16[kSplit],
                                           _mm256_maddubs_epi16(hi[j], broadcast_word(x, 4 + j)));
          }
          isum = _mm256_madd_epi16(s16[0], ones);
          if constexpr (kSplit == 1) isum = _mm256_add_epi32(isum, _mm256_madd_epi16(s16[1], ones));
          if constexpr (!kMin) isum = _mm256_add_epi32(isum, _mm256_set1_epi32(2 * pr.neg));
        }
        const __m256 dx = _mm256_set1_ps(pr.dx);
        __m256 r = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx));
        if constexpr (kMin) {
          const float xsum = static_cast<float>(-pr.neg / 8);
          r = _mm256_add_ps(r, _mm256_mul_ps(mw, _mm256_mul_ps(dx, _mm256_set1_ps(xsum))));
        }
        acc[t].add(b, h, r);
      }
    }
  }
  for (int t = 0; t < T; ++t) acc[t].store(outs[t]);
}

// One 16-row kQ8_0x16 group (its first block odd: kOdd) against T activation rows, AVX-VNNI:
// the GEMV (T = 1) and, in chain order, the GEMM. Per block and 8-row half the 8 code lines
// (line j: elements 4j..4j+3 of the 8 rows) XORed with 0x80 (code + 128, unsigned) once for the T
// tokens, each one vpdpbusd against the token's activation dword j (two sums, elements 0-15 and
// 16-31); the offset -128 * sum(x) is 16 times XPrep's neg. The integers are the row kernel's
// block sums, the float step Acc16::add_dd's: the same bits as gemv_ref.cpp. cold: L1-prefetch
// the group kInterleavePrefetch ahead (the GEMV, the GEMM's first batch). No L2 prefetch of the
// next group, unlike the 4-bit GEMVs: with one the GEMV streamed 0.92x the row kernel, without
// it 1.11-1.17x (bench/RESULTS.md session 36).
//
// Plain AVX2 (kVnni false; session 43): the signs move onto the activations as in the row
// kernel's dot_i8: per code line |code| once, then per token vpsignb of the broadcast activation
// dword, vpmaddubsw and vpmaddwd into int32. No offset; the same integers.
template <bool kOdd, int T, bool kVnni = true>
inline void chain_dot_q8(const uint8_t* g, const BlockQ8_0* const* xs, const XPrep* const* preps,
                         int64_t nb, float* const* outs, bool cold) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  Acc16 acc[T];
  for (int64_t b = 0; b < nb; ++b) {
    const size_t at = static_cast<size_t>(b) * kUnit544;
    if (cold) prefetch_lines<kUnit544, kToL1>(g + at + kInterleavePrefetch);
    const uint8_t* qb = g + q8_0x16_code_offset(b, kOdd);
    const uint8_t* sc = g + q8_0x16_scale_offset(b, kOdd);
    if constexpr (!kVnni) {
      const __m256i ones = _mm256_set1_epi16(1);
      for (int h = 0; h < 2; ++h) {
        __m256i lo[T], hi[T];
        for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm256_setzero_si256();
        for (int j = 0; j < 4; ++j) {
          const __m256i c0 =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * j + 32 * h));
          const __m256i c1 =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * (4 + j) + 32 * h));
          const __m256i a0 = _mm256_abs_epi8(c0), a1 = _mm256_abs_epi8(c1);
          for (int t = 0; t < T; ++t) {
            const __m256i s0 = _mm256_sign_epi8(broadcast_word(xs[t][b], j), c0);
            const __m256i s1 = _mm256_sign_epi8(broadcast_word(xs[t][b], 4 + j), c1);
            lo[t] = _mm256_add_epi32(lo[t], _mm256_madd_epi16(_mm256_maddubs_epi16(a0, s0), ones));
            hi[t] = _mm256_add_epi32(hi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(a1, s1), ones));
          }
        }
        const __m256 dw =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16 * h)));
        for (int t = 0; t < T; ++t)
          acc[t].add_dd(b, h, dw, preps[t][b].dx, _mm256_add_epi32(lo[t], hi[t]));
      }
      continue;
    }
    for (int h = 0; h < 2; ++h) {
      __m256i c[8];
      for (int j = 0; j < 8; ++j)
        c[j] = _mm256_xor_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * j + 32 * h)), flip);
      const __m256 dw =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16 * h)));
      for (int t = 0; t < T; ++t) {
        __m256i lo = _mm256_set1_epi32(preps[t][b].neg * 16);
        __m256i hi = _mm256_setzero_si256();
        for (int j = 0; j < 4; ++j) {
          lo = _mm256_dpbusd_avx_epi32(lo, c[j], broadcast_word(xs[t][b], j));
          hi = _mm256_dpbusd_avx_epi32(hi, c[4 + j], broadcast_word(xs[t][b], 4 + j));
        }
        acc[t].add_dd(b, h, dw, preps[t][b].dx, _mm256_add_epi32(lo, hi));
      }
    }
  }
  for (int t = 0; t < T; ++t) acc[t].store(outs[t]);
}

// kQ8_0x16's GEMV: chain_dot_q8 over one token (kVnni: vpdpbusd, else the plain AVX2 form).
template <bool kVnni>
void gemv_q8_0x16(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
                  int64_t row_end, int64_t n_cols) {
  gemv_q4_0x16_groups(w, row_stride, xq, y, row_begin, row_end, n_cols,
                      [](const uint8_t* g, int64_t r, const BlockQ8_0* x, const XPrep* prep,
                         int64_t nb, float* out, const uint8_t*) {
                        if (q8_0x16_group_odd(r, nb))
                          chain_dot_q8<true, 1, kVnni>(g, &x, &prep, nb, &out, true);
                        else
                          chain_dot_q8<false, 1, kVnni>(g, &x, &prep, nb, &out, true);
                      });
}

// The B32Parts of a layout with mins or 5th bits (kQ5_0x16, kQ4_1x16, kQ5_1x16).
template <WeightLayout kLayout>
struct B32Of {
  static constexpr bool kParts = kLayout == WeightLayout::kQ5_0x16 ||
                                 kLayout == WeightLayout::kQ4_1x16 ||
                                 kLayout == WeightLayout::kQ5_1x16;
  static constexpr bool kMin = kLayout != WeightLayout::kQ5_0x16;
  static constexpr bool kHigh = kLayout != WeightLayout::kQ4_1x16;
};

// The GEMM in chain order: every token's activation prepared once per call, then per group the
// tokens in batches of 4 through chain_group_dot or chain_dot_b32 (the first batch cold), the last
// 1-3 as one batch.
template <WeightLayout kLayout, bool kVnni>
void gemm_x16_chain(const void* w, size_t row_stride, const void* xq, size_t xq_stride, float* y,
                    size_t y_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end,
                    int64_t n_cols) {
  const int64_t nb = n_cols / kQK;
  const auto* xbase = static_cast<const uint8_t*>(xq);
  auto xt = [&](int64_t t) { return reinterpret_cast<const BlockQ8_0*>(xbase + t * xq_stride); };
  XPrep* prep = prep_buffer(nb, n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) prep_x(xt(t), nb, prep + t * nb);
  // chain(integral_constant<n>, xs, preps, outs, cold) for every batch of the group at rows r.
  const auto batches = [&](int64_t r, auto&& chain) {
    const auto batch = [&](auto n_const, int64_t t) {
      constexpr int n = decltype(n_const)::value;
      const BlockQ8_0* xs[n];
      const XPrep* ps[n];
      float* outs[n];
      for (int k = 0; k < n; ++k) {
        xs[k] = xt(t + k);
        ps[k] = prep + (t + k) * nb;
        outs[k] = y + (t + k) * y_stride + r;
      }
      chain(n_const, xs, ps, outs, t == 0);
    };
    chain_batches(n_tokens, batch);
  };
  for_groups(w, row_stride, row_begin, row_end, [&](const uint8_t* g, int64_t r) {
    if constexpr (kLayout == WeightLayout::kQ8_0x16) {
      const bool odd = q8_0x16_group_odd(r, nb);
      batches(r, [&](auto n_const, auto xs, auto ps, auto outs, bool cold) {
        constexpr int n = decltype(n_const)::value;
        if (odd)
          chain_dot_q8<true, n, kVnni>(g, xs, ps, nb, outs, cold);
        else
          chain_dot_q8<false, n, kVnni>(g, xs, ps, nb, outs, cold);
      });
    } else if constexpr (B32Of<kLayout>::kParts) {
      using B = B32Of<kLayout>;
      batches(r, [&](auto n_const, auto xs, auto ps, auto outs, bool cold) {
        chain_dot_b32<B::kMin, B::kHigh, kVnni, decltype(n_const)::value>(g, xs, ps, nb, outs,
                                                                          cold);
      });
    } else {
      with_ymm_format<kLayout>(r, nb, [&](auto fmt) {
        batches(r, [&](auto n_const, auto xs, auto ps, auto outs, bool cold) {
          using F = decltype(fmt);
          constexpr int n = decltype(n_const)::value;
          if constexpr (!kVnni && !B32Ops<F, false>::kSigned)
            chain_group_dot_i16<F, n>(g, xs, ps, nb, outs, cold);
          else
            chain_group_dot<F, kVnni, n>(g, xs, ps, nb, outs, cold);
        });
      });
    }
  });
}

}  // namespace
}  // namespace strata::kernels::detail
