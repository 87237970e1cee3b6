// Q4_0 x Q8_0 GEMV over the kQ4_0x16 layout (kernels/interleave.h), IQ4_NL / MXFP4 over
// kIQ4_NLx16 / kMXFP4x16 (table value + bias as the unsigned code), Q8_0 over kQ8_0x16 (code +
// 128; the plain AVX2 build has no kernel for it, so REPACK keeps Q8_0 as rows there; the Q5_0 /
// Q4_1 / Q5_1 layouts' chain GEMMs with vpdpbusd, their GEMVs AVX2's), and IQ4_XS / Q4_K / Q5_K x
// Q8_K over kIQ4_XSx16 / kQ4_Kx16 / kQ5_Kx16, for AVX2 CPUs that also have AVX-VNNI (the
// VEX-encoded vpdpbusd: Intel client cores since Alder Lake, AMD Zen 5 run with ISA=avx2). Picked
// by interleave.cpp's dispatch at the AVX2 level, GEMV and GEMM; the other layouts keep the AVX2
// kernels.
//
// The 32-element layouts' group kernel and GEMM are interleave_onepass.h's, instantiated here with
// vpdpbusd; the super-block layouts' one-pass kernels are below (session 35, bench/RESULTS.md:
// from cache, IQ4_XS 1.6-1.7x and Q4_K 1.25-1.45x the AVX2 kernels, Q5_K 1.2x; a Q6_K one, its
// 16-element runs scaled by vpmulld, was slower than the AVX2 kernel's int16 pairs and vpmaddwd,
// 31 against 35-42 GB/s, and was dropped).
//
// Session 18 (bench/RESULTS.md), Zen 5 at one thread, a harness alternating variants over a
// 2 GiB pool: 1.30-1.43x the AVX2 two-half kernel's streaming rate (median of 9 paired rounds,
// 768 x 2048 and 2048 x 768), 37-50 GB/s against 24-26 from cache. Tested by
// tests/test_interleave.cpp.
#include <cstring>

#include "kernels/interleave_k_ymm.h"
#include "kernels/interleave_onepass.h"
#include "kernels/quant_internal.h"

namespace strata::kernels::detail {
namespace {

// kQ4_0x16, kIQ4_NLx16 and kMXFP4x16 (each group by its parity).
template <WeightLayout kLayout>
void gemv_x16(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
              int64_t row_end, int64_t n_cols) {
  gemv_q4_0x16_groups(w, row_stride, xq, y, row_begin, row_end, n_cols,
                      [](const uint8_t* g, int64_t r, const BlockQ8_0* x, const XPrep* prep,
                         int64_t nb, float* out, const uint8_t* next) {
                        with_ymm_format<kLayout>(r, nb, [&](auto fmt) {
                          group_dot<decltype(fmt), true>(g, x, prep, nb, out, next);
                        });
                      });
}

// ---- kIQ4_XSx16: IQ4_XS x Q8_K, all 16 rows a step ----

// One 16-row kIQ4_XSx16 group against one activation row; next: the following group of the call
// (or null), prefetched into L2 a sub-block's share at a time. Each 64-byte code line holds both
// 8-row halves' qs dwords: per half, the nibbles become table values + 128 (unsigned, vpshufb)
// and two vpdpbusd against the activation's words sum the line's 8 elements a row into the
// sub-block's int32 (at most 32 x 241 x 128, exact). Per sub-block the 128 offset comes off as
// 128 x (its two bsums) and the row's scale weights it (vpmulld), as the AVX-512 kernel's
// group_dot_iq4; the 8 canonical accumulators per half live on the stack (one load and store
// per super-block). The integers are the row kernels', the float steps gemv.cpp's: the same bits
// as gemv_ref.cpp.
void group_dot_iq4(const uint8_t* g, int64_t, const BlockQ8_K* x, int64_t nb, float* out,
                   const uint8_t* next) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i table = _mm256_xor_si256(
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues))),
      _mm256_set1_epi8(static_cast<char>(0x80)));
  Acc16 acc;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kIQ4_XSx16Block;
    prefetch_lines<128, kToL1>(blk + kIQ4_XSx16Prefetch);
    const Iq4Scales sc0 = iq4_scales(blk, 0), sc1 = iq4_scales(blk, 1);
    const int8_t* xq = x[b].qs;
    __m256i sumi0 = _mm256_setzero_si256(), sumi1 = sumi0;
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      if (next != nullptr) prefetch_lines<320, kToL2>(next + (b * 8 + s) * 272);
      // Two chains a half (low and high nibbles), the high one starting at the offset.
      const __m256i neg = _mm256_set1_epi32(-128 * (x[b].bsums[2 * s] + x[b].bsums[2 * s + 1]));
      __m256i t0 = _mm256_setzero_si256(), t1 = t0, u0 = neg, u1 = neg;
#pragma GCC unroll 4
      for (int ii = 0; ii < 4; ++ii) {
        const uint8_t* at = blk + 128 + static_cast<size_t>(4 * s + ii) * 64;
        prefetch_lines<64, kToL1>(at + kIQ4_XSx16Prefetch);
        const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
        const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + 32));
        const __m256i xl = bcast4(xq + 32 * s + 4 * ii), xh = bcast4(xq + 32 * s + 16 + 4 * ii);
        t0 = _mm256_dpbusd_avx_epi32(t0, _mm256_shuffle_epi8(table, _mm256_and_si256(v0, m4)), xl);
        t1 = _mm256_dpbusd_avx_epi32(t1, _mm256_shuffle_epi8(table, _mm256_and_si256(v1, m4)), xl);
        u0 = _mm256_dpbusd_avx_epi32(
            u0, _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4)), xh);
        u1 = _mm256_dpbusd_avx_epi32(
            u1, _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4)), xh);
      }
      sumi0 =
          _mm256_add_epi32(sumi0, _mm256_mullo_epi32(iq4_scale(sc0, s), _mm256_add_epi32(t0, u0)));
      sumi1 =
          _mm256_add_epi32(sumi1, _mm256_mullo_epi32(iq4_scale(sc1, s), _mm256_add_epi32(t1, u1)));
    }
    acc.add_dd(b, 0, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk))),
               x[b].d, sumi0);
    acc.add_dd(b, 1, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16))),
               x[b].d, sumi1);
  }
  acc.store(out);
}

// The same group against T activation rows, for GEMMs: one 8-row half at a time (the second finds
// the super-block's lines in L1), each code line's table values built once for T tokens'
// vpdpbusd. The same integers as group_dot_iq4's, then its float step: the same bits. cold: the
// group's first batch, which L1-prefetches ahead as the GEMV does.
template <int T>
void chain_dot_iq4(const uint8_t* g, int64_t, const BlockQ8_K* const* xs, int64_t nb,
                   float* const* outs, bool cold) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i table = _mm256_xor_si256(
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues))),
      _mm256_set1_epi8(static_cast<char>(0x80)));
  Acc16 acc[T];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kIQ4_XSx16Block;
    if (cold) prefetch_lines<kIQ4_XSx16Block, kToL1>(blk + kIQ4_XSx16Prefetch);
    for (int h = 0; h < 2; ++h) {
      const Iq4Scales scales = iq4_scales(blk, h);
      __m256i sumi[T];
      for (auto& v : sumi) v = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        __m256i sub[T];
        for (int t = 0; t < T; ++t)
          sub[t] = _mm256_set1_epi32(-128 * (xs[t][b].bsums[2 * s] + xs[t][b].bsums[2 * s + 1]));
#pragma GCC unroll 4
        for (int ii = 0; ii < 4; ++ii) {
          const __m256i v = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(blk + 128 + (4 * s + ii) * 64 + 32 * h));
          const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, m4));
          const __m256i hi =
              _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
          for (int t = 0; t < T; ++t) {
            const int8_t* xq = xs[t][b].qs + 32 * s + 4 * ii;
            sub[t] = _mm256_dpbusd_avx_epi32(sub[t], lo, bcast4(xq));
            sub[t] = _mm256_dpbusd_avx_epi32(sub[t], hi, bcast4(xq + 16));
          }
        }
        const __m256i sc = iq4_scale(scales, s);
        for (int t = 0; t < T; ++t)
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_mullo_epi32(sc, sub[t]));
      }
      const __m256 dw =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
      for (int t = 0; t < T; ++t) acc[t].add_dd(b, h, dw, xs[t][b].d, sumi[t]);
    }
  }
  for (int t = 0; t < T; ++t) acc[t].store(outs[t]);
}

// chain_dot_iq4's family, for gemm_chain.
struct ChainIQ4 {
  template <int T>
  static constexpr ChainFn fn = &chain_dot_iq4<T>;
};

// ---- kQ4_Kx16, kQ5_Kx16: Q4_K / Q5_K x Q8_K, all 16 rows a step ----

// One 16-row kQ4_Kx16 (kFive: kQ5_Kx16) group against one activation row; next: as in
// group_dot_iq4. Per sub-block pair c (8 code lines, each both 8-row halves' qs dwords), the
// unsigned codes (the nibbles; Q5_K: with each line's 5th bits, bits 2c / 2c + 1 of the qh line at
// its position, ORed in as 16) meet the activation's words in vpdpbusd, one int32 sum per
// sub-block and half (at most 32 x 31 x 128, exact); each is weighted by its row's 6-bit scale
// (vpmulld), and the mins come off through the bsums as the AVX2 kernel's. The integers are the
// row kernels', the float steps gemv.cpp's: the same bits as gemv_ref.cpp.
template <bool kFive>
void group_dot_k(const uint8_t* g, int64_t, const BlockQ8_K* x, int64_t nb, float* out,
                 const uint8_t* next) {
  constexpr size_t kBlock = kFive ? kQ5_Kx16Block : 2304;
  constexpr size_t kCodes = kFive ? 768 : 256;
  constexpr size_t kPrefetch = kFive ? kQ5_Kx16Prefetch : kQ4_Kx16Prefetch;
  constexpr size_t kQuarter = kBlock / 4;  // the next group's bytes prefetched per pair
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m6 = _mm256_set1_epi8(0x3F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  Acc16 acc;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kBlock;
    prefetch_lines<kCodes, kToL1>(blk + kPrefetch);
    const auto load = [&](size_t off) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + off));
    };
    // Per half h, the scale bytes as the AVX2 kernel unpacks them: lo = scales 0-3, hi = 4-7.
    __m256i sc_lo[2], sc_hi[2];
    for (int h = 0; h < 2; ++h) {
      const __m256i s0 = load(64 + 32 * h), s2 = load(192 + 32 * h);
      sc_lo[h] = _mm256_and_si256(s0, m6);
      sc_hi[h] = _mm256_or_si256(_mm256_and_si256(s2, m4),
                                 _mm256_and_si256(_mm256_srli_epi32(s0, 2), m30));
    }
    const int8_t* xq = x[b].qs;
    __m256i sumi0 = _mm256_setzero_si256(), sumi1 = sumi0;
    const auto pair = [&](auto c_const) {
      constexpr int c = decltype(c_const)::value;
      if (next != nullptr)
        prefetch_lines<(kQuarter + 63) / 64 * 64, kToL2>(next + (b * 4 + c) * kQuarter);
      __m256i l0 = _mm256_setzero_si256(), l1 = l0, h0 = l0, h1 = l0;
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const size_t at = kCodes + static_cast<size_t>(8 * c + i) * 64;
        prefetch_lines<64, kToL1>(blk + at + kPrefetch);
        const __m256i v0 = load(at), v1 = load(at + 32);
        __m256i lo0 = _mm256_and_si256(v0, m4), lo1 = _mm256_and_si256(v1, m4);
        __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
        __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
        if constexpr (kFive) {
          // Bits 2c and 2c + 1 of each qh byte to bit 4 (no bit crosses a byte).
          const auto fifth = [&](__m256i qh, int bit) {
            const __m256i v = _mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(1 << bit)));
            return bit <= 4 ? _mm256_slli_epi16(v, 4 - bit) : _mm256_srli_epi16(v, bit - 4);
          };
          const __m256i q0 = load(256 + static_cast<size_t>(i) * 64), q1 = load(288 + i * 64);
          lo0 = _mm256_or_si256(lo0, fifth(q0, 2 * c));
          lo1 = _mm256_or_si256(lo1, fifth(q1, 2 * c));
          hi0 = _mm256_or_si256(hi0, fifth(q0, 2 * c + 1));
          hi1 = _mm256_or_si256(hi1, fifth(q1, 2 * c + 1));
        }
        const __m256i xl = bcast4(xq + 64 * c + 4 * i), xh = bcast4(xq + 64 * c + 32 + 4 * i);
        l0 = _mm256_dpbusd_avx_epi32(l0, lo0, xl);
        l1 = _mm256_dpbusd_avx_epi32(l1, lo1, xl);
        h0 = _mm256_dpbusd_avx_epi32(h0, hi0, xh);
        h1 = _mm256_dpbusd_avx_epi32(h1, hi1, xh);
      }
      // Sub-blocks 2c and 2c + 1: bytes 2c % 4 and 2c % 4 + 1 of the scale dwords.
      constexpr int j = (2 * c) % 4;
      const __m256i* sc = c < 2 ? sc_lo : sc_hi;
      sumi0 = _mm256_add_epi32(sumi0,
                               _mm256_add_epi32(_mm256_mullo_epi32(byte_dword<j>(sc[0]), l0),
                                                _mm256_mullo_epi32(byte_dword<j + 1>(sc[0]), h0)));
      sumi1 = _mm256_add_epi32(sumi1,
                               _mm256_add_epi32(_mm256_mullo_epi32(byte_dword<j>(sc[1]), l1),
                                                _mm256_mullo_epi32(byte_dword<j + 1>(sc[1]), h1)));
    };
    pair(std::integral_constant<int, 0>{});
    pair(std::integral_constant<int, 1>{});
    pair(std::integral_constant<int, 2>{});
    pair(std::integral_constant<int, 3>{});
    const __m256i bp = bsum_pairs(x[b].bsums);
    const __m256i summ0 = q4_k_mins(load(128), load(192), bp);
    const __m256i summ1 = q4_k_mins(load(160), load(224), bp);
    acc.add(b, 0, min_step(blk, 0, x[b].d, sumi0, summ0));
    acc.add(b, 1, min_step(blk, 1, x[b].d, sumi1, summ1));
  }
  acc.store(out);
}

// GEMV and GEMM over a super-block layout from its 16-row group kernel.
using GroupDotFn = void (*)(const uint8_t* g, int64_t r0, const BlockQ8_K* x, int64_t nb,
                            float* out, const uint8_t* next);

template <GroupDotFn Dot>
void gemv_groups(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
                 int64_t row_end, int64_t n_cols) {
  const int64_t nb = n_cols / kQK_K;
  const auto* x = static_cast<const BlockQ8_K*>(xq);
  const size_t group_bytes = 16 * row_stride;
  for_groups(w, row_stride, row_begin, row_end, [&](const uint8_t* g, int64_t r) {
    Dot(g, r, x, nb, y + r, r + 16 < row_end ? g + group_bytes : nullptr);
  });
}

}  // namespace

GemvKernels interleaved_kernels_avxvnni(WeightLayout layout) {
  GemvKernels k = interleaved_kernels_avx2(layout);
  if (layout == WeightLayout::kQ4_0x16)
    k = {&gemv_x16<WeightLayout::kQ4_0x16>, &gemm_x16_chain<WeightLayout::kQ4_0x16, true>};
  if (layout == WeightLayout::kIQ4_NLx16)
    k = {&gemv_x16<WeightLayout::kIQ4_NLx16>, &gemm_x16_chain<WeightLayout::kIQ4_NLx16, true>};
  if (layout == WeightLayout::kMXFP4x16)
    k = {&gemv_x16<WeightLayout::kMXFP4x16>, &gemm_x16_chain<WeightLayout::kMXFP4x16, true>};
  if (layout == WeightLayout::kQ8_0x16)
    k = {&gemv_q8_0x16<true>, &gemm_x16_chain<WeightLayout::kQ8_0x16, true>};
  // Q5_0 / Q4_1 / Q5_1: the AVX2 GEMV, the chain GEMM with vpdpbusd.
  if (layout == WeightLayout::kQ5_0x16) k.gemm = &gemm_x16_chain<WeightLayout::kQ5_0x16, true>;
  if (layout == WeightLayout::kQ4_1x16) k.gemm = &gemm_x16_chain<WeightLayout::kQ4_1x16, true>;
  if (layout == WeightLayout::kQ5_1x16) k.gemm = &gemm_x16_chain<WeightLayout::kQ5_1x16, true>;
  if (layout == WeightLayout::kIQ4_XSx16) k = {&gemv_groups<&group_dot_iq4>, &gemm_chain<ChainIQ4>};
  if (layout == WeightLayout::kQ4_Kx16)
    k = {&gemv_groups<&group_dot_k<false>>, &gemm_chain<ChainK<false, true>>};
  if (layout == WeightLayout::kQ5_Kx16)
    k = {&gemv_groups<&group_dot_k<true>>, &gemm_chain<ChainK<true, true>>};
  return k;
}

}  // namespace strata::kernels::detail
