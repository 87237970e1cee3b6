// 256-bit parts shared by the super-block layouts' kernels of gemv_interleaved_avx2.cpp
// (vpmaddubsw) and gemv_interleaved_avxvnni.cpp (vpdpbusd): the canonical float step of the layouts
// with mins, the Q4_K / Q5_K mins' integer sum, the accumulators of a 16-row group, and the
// kQ4_Kx16 / kQ5_Kx16 GEMM in chain order with its driver. Include only from those two files.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/gemv_internal.h"
#include "kernels/interleave_internal.h"
#include "kernels/quant.h"

namespace strata::kernels::detail {
namespace {

// 32 bytes at p, loaded once into a register. GCC folds a load whose value has two users (the low
// and high nibbles' and / shift) into both, loading it twice. In the Q4_0 GEMV (half_dot) one load
// was worth 1-5% from cache on an AVX2-only Zen 3; the Q4_K and Q6_K kernels did not move with it
// (bench/RESULTS.md session 40).
inline __m256i load_once(const void* p) {
  __m256i v = _mm256_loadu_si256(static_cast<const __m256i*>(p));
  __asm__("" : "+x"(v));
  return v;
}

// The 4 bytes at p in every dword.
inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Byte j of every dword, zero-extended to the dword.
template <int j>
inline __m256i byte_dword(__m256i v) {
  constexpr char z = -128;
  return _mm256_shuffle_epi8(
      v, _mm256_setr_epi8(j, z, z, z, 4 + j, z, z, z, 8 + j, z, z, z, 12 + j, z, z, z, j, z, z, z,
                          4 + j, z, z, z, 8 + j, z, z, z, 12 + j, z, z, z));
}

// Byte j of every dword (j <= 3), zero-extended into both int16 halves of the dword: a 6-bit
// scale as the pair vpmaddwd needs to weight a row's two int16 partial sums.
template <int j>
inline __m256i dup_byte(__m256i v) {
  constexpr char z = -128;
  return _mm256_shuffle_epi8(v, _mm256_setr_epi8(j, z, j, z, 4 + j, z, 4 + j, z, 8 + j, z, 8 + j, z,
                                                 12 + j, z, 12 + j, z, j, z, j, z, 4 + j, z, 4 + j,
                                                 z, 8 + j, z, 8 + j, z, 12 + j, z, 12 + j, z));
}

// IQ4_XS: sub-block s's 6-bit scale less 32, one per lane (row), from the rows' scales_l dwords
// (sl) and scales_h words widened to dwords and shifted up by 4 (sh4).
inline __m256i iq4_scale(__m256i sl, __m256i sh4, int s) {
  return _mm256_sub_epi32(
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(sl, 4 * s), _mm256_set1_epi32(0x0F)),
                      _mm256_and_si256(_mm256_srli_epi32(sh4, 2 * s), _mm256_set1_epi32(0x30))),
      _mm256_set1_epi32(32));
}

// IQ4_XS rows 8h..8h+7's scale words in super-block blk: their scales_l dwords and their scales_h
// words widened to dwords and shifted up by 4, as iq4_scale takes them.
struct Iq4Scales {
  __m256i sl, sh4;
};
inline Iq4Scales iq4_scales(const uint8_t* blk, int h) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 + 32 * h)),
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(
                                reinterpret_cast<const __m128i*>(blk + 32 + 16 * h))),
                            4)};
}
inline __m256i iq4_scale(const Iq4Scales& sc, int s) {
  return iq4_scale(sc.sl, sc.sh4, s);
}
// The same as the same int16 in both halves of the lane (vpmaddwd's pair).
inline __m256i iq4_scale16(const Iq4Scales& sc, int s) {
  const __m256i v = iq4_scale(sc, s);
  return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
}

// fn(hh, q, j) as integral constants for the 16 (half, quarter, field) runs of a K-quant
// super-block, hh outermost, j innermost.
template <typename Fn, int... I>
inline void each_run(Fn&& fn, std::integer_sequence<int, I...>) {
  (fn(std::integral_constant<int, I / 8>{}, std::integral_constant<int, (I / 4) % 2>{},
      std::integral_constant<int, I % 4>{}),
   ...);
}
template <typename Fn>
inline void for_runs(Fn&& fn) {
  each_run(fn, std::make_integer_sequence<int, 16>{});
}

// Bytes j and j + 1 of every dword, zero-extended into its two int16 halves.
template <int j>
inline __m256i pair_bytes(__m256i v) {
  constexpr char z = -128;
  return _mm256_shuffle_epi8(
      v, _mm256_setr_epi8(j, z, j + 1, z, 4 + j, z, 5 + j, z, 8 + j, z, 9 + j, z, 12 + j, z, 13 + j,
                          z, j, z, j + 1, z, 4 + j, z, 5 + j, z, 8 + j, z, 9 + j, z, 12 + j, z,
                          13 + j, z));
}

// The canonical float step of the layouts with mins (kQ2_Kx16, kQ4_Kx16) for rows 8h..8h+7:
// (d_w * d_x) * (float)sumi - (dmin_w * d_x) * (float)summ, the rows' fp16 d at blk, dmin at
// blk + 32.
inline __m256 min_step(const uint8_t* blk, int h, float d_x, __m256i sumi, __m256i summ) {
  const __m256 dx = _mm256_set1_ps(d_x);
  const __m256 dd = _mm256_mul_ps(
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h))), dx);
  const __m256 dm = _mm256_mul_ps(
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 16 * h))), dx);
  return _mm256_sub_ps(_mm256_mul_ps(dd, _mm256_cvtepi32_ps(sumi)),
                       _mm256_mul_ps(dm, _mm256_cvtepi32_ps(summ)));
}

// The activation's 16-element bsums summed in pairs (sub-block s's sum in word s), in both
// 128-bit halves.
inline __m256i bsum_pairs(const int16_t* bsums) {
  return _mm256_broadcastsi128_si256(
      _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums)),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums + 8))));
}

// Q4_K / Q5_K mins of 8 rows: sum over sub-blocks s of min_s x (bsums[2s] + bsums[2s + 1]), per
// lane, from the rows' scale dwords S1 (bytes 4-7) and S2 (8-11) as q4_k_scale_min unpacks them,
// two sub-blocks per vpmaddwd (the pair sums bp, at most 2 x 16 x 128 = 4096 in magnitude, are
// int16).
inline __m256i q4_k_mins(__m256i s1, __m256i s2, __m256i bp) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i mn_lo = _mm256_and_si256(s1, _mm256_set1_epi8(0x3F));  // mins 0-3
  const __m256i mn_hi = _mm256_or_si256(
      _mm256_and_si256(_mm256_srli_epi32(s2, 4), m4),
      _mm256_and_si256(_mm256_srli_epi32(s1, 2), _mm256_set1_epi8(0x30)));  // mins 4-7
  return _mm256_add_epi32(
      _mm256_add_epi32(_mm256_madd_epi16(pair_bytes<0>(mn_lo), _mm256_shuffle_epi32(bp, 0x00)),
                       _mm256_madd_epi16(pair_bytes<2>(mn_lo), _mm256_shuffle_epi32(bp, 0x55))),
      _mm256_add_epi32(_mm256_madd_epi16(pair_bytes<0>(mn_hi), _mm256_shuffle_epi32(bp, 0xAA)),
                       _mm256_madd_epi16(pair_bytes<2>(mn_hi), _mm256_shuffle_epi32(bp, 0xFF))));
}

// The 8 canonical accumulators (acc[b % 8], gemv.cpp) of a 16-row group's two 8-row halves, on
// the stack: one load and store per super-block, no registers held across it.
struct Acc16 {
  alignas(32) float v[8][16];  // [b % 8][row]
  Acc16() {
    for (auto& a : v) {
      _mm256_store_ps(a, _mm256_setzero_ps());
      _mm256_store_ps(a + 8, _mm256_setzero_ps());
    }
  }
  // acc[b % 8] of rows 8h..8h+7 += step.
  void add(int64_t b, int h, __m256 step) {
    float* a = v[b % 8] + 8 * h;
    _mm256_store_ps(a, _mm256_add_ps(_mm256_load_ps(a), step));
  }
  // acc[b % 8] of rows 8h..8h+7 += (dw * d_x) * (float)sumi: the canonical step of the layouts
  // without mins.
  void add_dd(int64_t b, int h, __m256 dw, float d_x, __m256i sumi) {
    add(b, h, _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(d_x)), _mm256_cvtepi32_ps(sumi)));
  }
  // The canonical fold (gemv.cpp step 4), both halves.
  void store(float* out) const {
    for (int h = 0; h < 2; ++h) {
      const auto a = [&](int k) { return _mm256_load_ps(v[k] + 8 * h); };
      const __m256 r =
          _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a(0), a(4)), _mm256_add_ps(a(2), a(6))),
                        _mm256_add_ps(_mm256_add_ps(a(1), a(5)), _mm256_add_ps(a(3), a(7))));
      _mm256_storeu_ps(out + 8 * h, r);
    }
  }
};

// One 16-row kQ4_Kx16 (kFive: kQ5_Kx16) group against T activation rows, for GEMMs: one 8-row
// half at a time (the second finds the super-block's lines in L1), each code line's codes (as the
// GEMV kernels build them) built once for T tokens. kVnni: vpdpbusd sums each sub-block per token
// in int32 (at most 32 x 31 x 128) and vpmulld weights it by the row's 6-bit scale; else
// vpmaddubsw sums kFlush lines in int16 and vpmaddwd takes them to int32 by the scale pairs. The
// mins come off through the bsums (q4_k_mins). The integers are the row kernels', the float step
// min_step: the same bits as gemv_ref.cpp. cold: the group's first batch, which L1-prefetches ahead
// as the GEMV does.
template <bool kFive, int T, bool kVnni>
void chain_dot_k(const uint8_t* g, int64_t, const BlockQ8_K* const* xs, int64_t nb,
                 float* const* outs, bool cold) {
  constexpr size_t kBlock = kFive ? kQ5_Kx16Block : 2304;
  constexpr size_t kCodes = kFive ? 768 : 256;
  constexpr size_t kPrefetch = kFive ? kQ5_Kx16Prefetch : kQ4_Kx16Prefetch;
  [[maybe_unused]] constexpr int kFlush = kFive ? 4 : 8;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  Acc16 acc[T];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kBlock;
    if (cold) prefetch_lines<kBlock, kToL1>(blk + kPrefetch);
    const auto load = [&](size_t off) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + off));
    };
    for (int h = 0; h < 2; ++h) {
      const __m256i s0 = load(64 + 32 * h), s2 = load(192 + 32 * h);
      const __m256i sc_lo = _mm256_and_si256(s0, _mm256_set1_epi8(0x3F));
      const __m256i sc_hi =
          _mm256_or_si256(_mm256_and_si256(s2, m4),
                          _mm256_and_si256(_mm256_srli_epi32(s0, 2), _mm256_set1_epi8(0x30)));
      __m256i sumi[T];
      for (auto& v : sumi) v = _mm256_setzero_si256();
      const auto pair = [&](auto c_const) {
        constexpr int c = decltype(c_const)::value;
        constexpr int j = (2 * c) % 4;
        const __m256i sc = c < 2 ? sc_lo : sc_hi;
        __m256i l[T], u[T];
        for (int t = 0; t < T; ++t) l[t] = u[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          const __m256i v = load(kCodes + static_cast<size_t>(8 * c + i) * 64 + 32 * h);
          __m256i lo = _mm256_and_si256(v, m4);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          if constexpr (kFive) {
            const __m256i qh = load(256 + static_cast<size_t>(i) * 64 + 32 * h);
            const auto fifth = [&](int bit) {
              const __m256i f = _mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(1 << bit)));
              return bit <= 4 ? _mm256_slli_epi16(f, 4 - bit) : _mm256_srli_epi16(f, bit - 4);
            };
            lo = _mm256_or_si256(lo, fifth(2 * c));
            hi = _mm256_or_si256(hi, fifth(2 * c + 1));
          }
          for (int t = 0; t < T; ++t) {
            const int8_t* xq = xs[t][b].qs + 64 * c + 4 * i;
            if constexpr (kVnni) {
              l[t] = _mm256_dpbusd_avx_epi32(l[t], lo, bcast4(xq));
              u[t] = _mm256_dpbusd_avx_epi32(u[t], hi, bcast4(xq + 32));
            } else {
              l[t] = _mm256_add_epi16(l[t], _mm256_maddubs_epi16(lo, bcast4(xq)));
              u[t] = _mm256_add_epi16(u[t], _mm256_maddubs_epi16(hi, bcast4(xq + 32)));
              // Opaque to GCC's reassociation, which would otherwise form many lines' products
              // first and spill them.
              __asm__("" : "+x"(l[t]), "+x"(u[t]));
            }
          }
          if constexpr (!kVnni) {
            // int16 sums of kFlush lines (Q4_K 8 x 2 x 15 x 128 = 30720, Q5_K 4 x 2 x 31 x 128 =
            // 31744: exact) to int32 through the scale pairs.
            if ((i + 1) % kFlush == 0)
              for (int t = 0; t < T; ++t) {
                sumi[t] = _mm256_add_epi32(
                    sumi[t], _mm256_add_epi32(_mm256_madd_epi16(l[t], dup_byte<j>(sc)),
                                              _mm256_madd_epi16(u[t], dup_byte<j + 1>(sc))));
                l[t] = u[t] = _mm256_setzero_si256();
              }
          }
        }
        if constexpr (kVnni) {
          const __m256i sl = byte_dword<j>(sc), sh = byte_dword<j + 1>(sc);
          for (int t = 0; t < T; ++t)
            sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(_mm256_mullo_epi32(sl, l[t]),
                                                                 _mm256_mullo_epi32(sh, u[t])));
        }
      };
      pair(std::integral_constant<int, 0>{});
      pair(std::integral_constant<int, 1>{});
      pair(std::integral_constant<int, 2>{});
      pair(std::integral_constant<int, 3>{});
      const __m256i s1 = load(128 + 32 * h), s2b = load(192 + 32 * h);
      for (int t = 0; t < T; ++t) {
        const __m256i summ = q4_k_mins(s1, s2b, bsum_pairs(xs[t][b].bsums));
        acc[t].add(b, h, min_step(blk, h, xs[t][b].d, sumi[t], summ));
      }
    }
  }
  for (int t = 0; t < T; ++t) acc[t].store(outs[t]);
}

// A GEMM in chain order: the tokens in batches of 4 through Chain::fn<4> (one pass over a group's
// lines per batch, the first one cold), the last 1-3 as one batch through Chain::fn<1..3>. Chain is
// a family: a struct with `template <int T> static constexpr ChainFn fn`, as ChainK.
using ChainFn = void (*)(const uint8_t* g, int64_t r0, const BlockQ8_K* const* xs, int64_t nb,
                         float* const* outs, bool cold);

// chain_dot_k's family.
template <bool kFive, bool kVnni>
struct ChainK {
  template <int T>
  static constexpr ChainFn fn = &chain_dot_k<kFive, T, kVnni>;
};

// A GEMM's tokens [0, n_tokens) in batches of 4, then the last 1-3 as one batch:
// batch(std::integral_constant<int, n>{}, first token) (gemm_chain, gemm_x16_chain).
template <typename Batch>
inline void chain_batches(int64_t n_tokens, Batch&& batch) {
  int64_t t = 0;
  for (; t + 4 <= n_tokens; t += 4) batch(std::integral_constant<int, 4>{}, t);
  switch (n_tokens - t) {
    case 3:
      batch(std::integral_constant<int, 3>{}, t);
      break;
    case 2:
      batch(std::integral_constant<int, 2>{}, t);
      break;
    case 1:
      batch(std::integral_constant<int, 1>{}, t);
      break;
    default:
      break;
  }
}

template <typename Chain>
void gemm_chain(const void* w, size_t row_stride, const void* xq, size_t xq_stride, float* y,
                size_t y_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end,
                int64_t n_cols) {
  const int64_t nb = n_cols / kQK_K;
  const auto* xbase = static_cast<const uint8_t*>(xq);
  const size_t group_bytes = 16 * row_stride;
  for_groups(w, row_stride, row_begin, row_end, [&](const uint8_t* g, int64_t r) {
    const uint8_t* next = r + 16 < row_end ? g + group_bytes : nullptr;
    if (next != nullptr) prefetch_lines<kInterleavePrefetch, kToL2>(next);
    const auto batch = [&](auto n_const, int64_t t) {
      constexpr int n = decltype(n_const)::value;
      const BlockQ8_K* xs[n];
      float* outs[n];
      for (int k = 0; k < n; ++k) {
        xs[k] = reinterpret_cast<const BlockQ8_K*>(xbase + (t + k) * xq_stride);
        outs[k] = y + (t + k) * y_stride + r;
      }
      Chain::template fn<n>(g, r, xs, nb, outs, t == 0);
    };
    chain_batches(n_tokens, batch);
  });
}

}  // namespace
}  // namespace strata::kernels::detail
