// Q4_0 x Q8_0 GEMV/GEMM over the kQ4_0x16 layout (kernels/interleave.h) with AVX2: a 256-bit
// register holds one 4-byte code group of 8 rows, so a group is done as two halves of 8 rows
// (the second half finds the group's lines in L1). Per block and half: 4 loads, the nibbles by
// and / shift, 8 vpmaddubsw against the activation's 4-byte groups broadcast from memory summed in
// int16 (at most 8 x 2 x 15 x 128 = 30720, exact) and one vpmaddwd to int32: lane r is row r's
// exact block sum. Codes are unsigned and -8 * sum(x) is added back. The float steps are the
// canonical ones of gemv.cpp (8 accumulators acc[b % 8] per lane), so results equal gemv_ref.cpp
// bit for bit. Tested by tests/test_interleave.cpp.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/gemv_internal.h"
#include "kernels/interleave_internal.h"
#include "kernels/interleave_k_ymm.h"
#include "kernels/interleave_onepass.h"
#include "kernels/interleave_prep.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

namespace strata::kernels::detail {
namespace {

// fn(h) with the half h (0 or 1) as a compile-time constant: the half_dot kernels take it as a
// template argument (bench/RESULTS.md session 40).
template <typename Fn>
inline void with_half(int h, Fn&& fn) {
  if (h == 0)
    fn(std::integral_constant<int, 0>{});
  else
    fn(std::integral_constant<int, 1>{});
}

// The canonical fold of the 8 accumulators (gemv.cpp step 4), lane by lane.
inline __m256 fold_acc(const __m256* a) {
  return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])),
                       _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])));
}

// Rows 8h..8h+7 of one 16-row group against one activation row. next: the following group of the
// same call (nullptr for the last): it is prefetched into L2 across both halves, 144 bytes a step,
// so memory keeps streaming while the second half computes from L1 (with only the L1 prefetch in
// the first half, the two halves' memory and compute took turns).
// IQ4_NL (kIQ4_NLx16): the nibbles become signed table values (vpshufb), and vpmaddubsw takes |x|
// as the unsigned operand and the values with x's sign; those int16 pair sums reach 2 x 128 x 127,
// so each goes to int32 at once (no offset term). MXFP4 (kMXFP4x16): table value + 12, unsigned,
// as Q4_0's nibbles.
// Codegen matters here (bench/RESULTS.md session 40, an AVX2-only Zen 3): with the half a template
// argument, the activation broadcast straight from x (not through a copy on the stack) and Q4_0's
// offset broadcast from prep, GCC keeps the 8 accumulators in registers, and the kernel computes
// 1.25-1.3x faster from cache (22 -> 28-29 GB/s a thread) and streams at a larger share of the
// probe.
template <typename Fmt, int h>
void half_dot(const uint8_t* g, const BlockQ8_0* x, const XPrep* prep, int64_t nb, float* out,
              const uint8_t* next) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  [[maybe_unused]] __m256i table = m4;
  if constexpr (Fmt::kTable != nullptr)
    table = _mm256_add_epi8(
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(Fmt::kTable))),
        _mm256_set1_epi8(static_cast<char>(Fmt::kBias)));
  __m256 acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_ps();
  // Block b = b8 + k with b8 a multiple of 8: offsets within the 4 chunks from b8 are constants
  // (from a pointer that already holds the half's offset, so no offset needs a register).
  const uint8_t* gq = g + 32 * h;  // half h's code bytes
  auto step = [&](int64_t b, int k) {
    const uint8_t* g8 = g + static_cast<size_t>((b - k) >> 1) * Fmt::kChunk;
    const uint8_t* qb = gq + (g8 - g) + Fmt::codes(k);
    // Block k's share of its chunk's lines (the first 5, then the rest), kInterleavePrefetch
    // ahead.
    const uint8_t* ck = g8 + static_cast<size_t>(k >> 1) * Fmt::kChunk + kInterleavePrefetch;
    if (h == 0 && (k & 1) == 0) prefetch_lines<320, kToL1>(ck);
    if (h == 0 && (k & 1) == 1) prefetch_lines<256, kToL1>(ck + 320);
    if (next != nullptr) prefetch_lines<192, kToL2>(next + (h * nb + b) * 144);
    const int8_t* xq = x[b].qs;
    __m256i isum;
    if constexpr (Fmt::kTable != nullptr && Fmt::kBias == 0) {
      isum = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * j));
        const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, m4));
        const __m256i hi =
            _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        const __m256i xl = bcast4(xq + 4 * j), xh = bcast4(xq + 16 + 4 * j);
        const __m256i pl = _mm256_maddubs_epi16(_mm256_abs_epi8(xl), _mm256_sign_epi8(lo, xl));
        const __m256i ph = _mm256_maddubs_epi16(_mm256_abs_epi8(xh), _mm256_sign_epi8(hi, xh));
        isum = _mm256_add_epi32(
            isum, _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones)));
      }
    } else {
      // Unsigned codes: the nibble (Q4_0) or the table value + kBias (MXFP4, 0..24). int16 sums
      // of at most 8 x 2 x 15 x 128 = 30720 (Q4_0) or 4 x 2 x 24 x 128 = 24576 (MXFP4's two, low
      // and high nibbles apart): exact. The offset -kBias * sum(x) is neg * kBias / 8.
      __m256i s16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      constexpr int kHi = Fmt::kBias > 8 ? 1 : 0;
      for (int j = 0; j < 4; ++j) {
        const __m256i v = load_once(qb + 64 * j);
        __m256i lo = _mm256_and_si256(v, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if constexpr (Fmt::kTable != nullptr) {
          lo = _mm256_shuffle_epi8(table, lo);
          hi = _mm256_shuffle_epi8(table, hi);
        }
        s16[0] = _mm256_add_epi16(s16[0], _mm256_maddubs_epi16(lo, bcast4(xq + 4 * j)));
        s16[kHi] = _mm256_add_epi16(s16[kHi], _mm256_maddubs_epi16(hi, bcast4(xq + 16 + 4 * j)));
      }
      // neg = -8 * sum(x) exactly (prep_x): Q4_0's offset is neg itself, broadcast from memory.
      const __m256i off = Fmt::kBias == 8 ? _mm256_set1_epi32(prep[b].neg)
                                          : _mm256_set1_epi32(prep[b].neg / 8 * Fmt::kBias);
      isum = _mm256_add_epi32(_mm256_madd_epi16(s16[0], ones), off);
      if constexpr (kHi == 1) isum = _mm256_add_epi32(isum, _mm256_madd_epi16(s16[1], ones));
    }
    const __m256 dw = Fmt::dw(g8 + Fmt::scales(k), h);
    const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(prep[b].dx));
    acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(_mm256_cvtepi32_ps(isum), d));
  };
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) step(b + k, k);
  }
  for (int k = 0; b + k < nb; ++k) step(b + k, k);
  _mm256_storeu_ps(out + 8 * h, fold_acc(acc));
}

// Rows 8h..8h+7 of one kQ5_0x16 / kQ4_1x16 / kQ5_1x16 group (B32Parts<kMin, kHigh>) against one
// activation row: the nibbles as half_dot's, code line j's 5th bits (kHigh) brought to bit 4 of
// every byte of the rows' regrouped qh dwords by a 16-bit shift and an and, ORed in. int16 sums of
// the 4 lines per nibble half (at most 4 x 2 x 31 x 128 = 31744; Q4_1 both halves: 8 x 2 x 15 x
// 128), one vpmaddwd to int32. Q5_0's -16 through the activation's sum; Q4_1 / Q5_1 add m_w * (d_x
// * sum(x)), gemv.cpp's step. next: as in half_dot. The half is a template argument as in half_dot
// (half the stack spills; on an AVX2-only Zen 3 Q5_0 computes 19 -> 24 GB/s a core from cache and
// Q4_1 13-20 -> 27-28, bench/RESULTS.md session 40).
template <bool kMin, bool kHigh, int h>
void half_dot_b32(const uint8_t* g, const BlockQ8_0* x, const XPrep* prep, int64_t nb, float* out,
                  const uint8_t* next) {
  using P = B32Parts<kMin, kHigh>;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i c16 = _mm256_set1_epi8(16);
  __m256 acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_ps();
  auto step = [&](int64_t b, int k) {
    const uint8_t* g8 = g + static_cast<size_t>(b - k) / 2 * P::kChunk;
    if (h == 0 && (k & 1) == 0)
      prefetch_lines<P::kChunk, kToL1>(g8 + P::chunk(k) + kInterleavePrefetch);
    if (next != nullptr)
      prefetch_lines<(P::kChunk / 4 + 63) / 64 * 64, kToL2>(next + (h * nb + b) * (P::kChunk / 4));
    const uint8_t* qb = g8 + P::codes(k) + 32 * h;
    [[maybe_unused]] __m256i qh;
    if constexpr (kHigh)
      qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g8 + P::qh(k) + 32 * h));
    constexpr int kSplit = kHigh ? 1 : 0;  // 5-bit codes: low and high nibble sums apart
    __m256i s16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int j = 0; j < 4; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 64 * j));
      __m256i lo = _mm256_and_si256(v, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (kHigh) {  // bit j (low nibble) and bit 4 + j (high) of every byte to bit 4
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4 - j), c16));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srli_epi16(qh, j), c16));
      }
      s16[0] = _mm256_add_epi16(s16[0], _mm256_maddubs_epi16(lo, bcast4(x[b].qs + 4 * j)));
      s16[kSplit] =
          _mm256_add_epi16(s16[kSplit], _mm256_maddubs_epi16(hi, bcast4(x[b].qs + 16 + 4 * j)));
    }
    __m256i isum = _mm256_madd_epi16(s16[0], ones);
    if constexpr (kSplit == 1) isum = _mm256_add_epi32(isum, _mm256_madd_epi16(s16[1], ones));
    if constexpr (!kMin) isum = _mm256_add_epi32(isum, _mm256_set1_epi32(2 * prep[b].neg));
    const __m256 dx = _mm256_set1_ps(prep[b].dx);
    const __m256 dw =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g8 + P::d(k) + 16 * h)));
    __m256 r = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx));
    if constexpr (kMin) {
      const __m256 mw =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g8 + P::m(k) + 16 * h)));
      const float xsum = static_cast<float>(-prep[b].neg / 8);
      r = _mm256_add_ps(r, _mm256_mul_ps(mw, _mm256_mul_ps(dx, _mm256_set1_ps(xsum))));
    }
    acc[k] = _mm256_add_ps(acc[k], r);
  };
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) step(b + k, k);
  }
  for (int k = 0; b + k < nb; ++k) step(b + k, k);
  _mm256_storeu_ps(out + 8 * h, fold_acc(acc));
}

// Half h of group g (its first row r) of a kLayout matrix.
template <WeightLayout kLayout>
void layout_half_dot(const uint8_t* g, int64_t r, int h, const BlockQ8_0* x, const XPrep* prep,
                     int64_t nb, float* out, const uint8_t* next) {
  if constexpr (kLayout == WeightLayout::kQ5_0x16 || kLayout == WeightLayout::kQ4_1x16 ||
                kLayout == WeightLayout::kQ5_1x16) {
    constexpr bool kMin = kLayout != WeightLayout::kQ5_0x16;
    constexpr bool kHigh = kLayout != WeightLayout::kQ4_1x16;
    with_half(h, [&](auto hc) {
      half_dot_b32<kMin, kHigh, decltype(hc)::value>(g, x, prep, nb, out, next);
    });
  } else {
    with_ymm_format<kLayout>(r, nb, [&](auto fmt) {
      with_half(h, [&](auto hc) {
        half_dot<decltype(fmt), decltype(hc)::value>(g, x, prep, nb, out, next);
      });
    });
  }
}

// kQ4_0x16, kIQ4_NLx16 and kMXFP4x16.
template <WeightLayout kLayout>
void gemv_q4_0x16(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
                  int64_t row_end, int64_t n_cols) {
  gemv_q4_0x16_groups(w, row_stride, xq, y, row_begin, row_end, n_cols,
                      [](const uint8_t* g, int64_t r, const BlockQ8_0* x, const XPrep* prep,
                         int64_t nb, float* out, const uint8_t* next) {
                        for (int h = 0; h < 2; ++h)
                          layout_half_dot<kLayout>(g, r, h, x, prep, nb, out, next);
                      });
}

// ---- kQ4_Kx16, kQ5_Kx16: Q4_K / Q5_K x Q8_K, 8 rows (half h of the group) per register ----

// Rows 8h..8h+7 of one 16-row group against one activation row: kQ4_Kx16, or kQ5_Kx16 (kFive:
// each code line's 5th bits, bits 2c / 2c + 1 of the qh line at its position i, ORed in as 16).
// next: as in half_dot, the following group of the same call, prefetched into L2 across both
// halves (an eighth of a super-block per 64-element step). Without it, on an AVX2-only Zen 3,
// the Q4_K kernel computed 16-17 GB/s from cache but streamed no faster than the GGUF layout's row
// kernel (~7 GB/s a core, compute-bound); with it the 30B's Q4_K experts stream at 94-110% of the
// in-run probe (bench/RESULTS.md session 16). The 6-bit scales and mins are unpacked once per
// block into bytes (lane r, byte j: row r's scale j or 4 + j) and applied by vpmaddwd to the int16
// sums, a byte pair at a time for the mins: no 32-bit multiplies (bench/RESULTS.md session 19:
// 1.3x from cache, 1.05-1.15x streaming). Q4_K's int16 sums of 8 lines reach 8 x 2 x 15 x 128 =
// 30720; Q5_K's 5-bit codes go to int32 every 4 lines (4 x 2 x 31 x 128 = 31744): both exact.
template <bool kFive>
void half_dot_k(const uint8_t* g, int64_t, int h, const BlockQ8_K* x, int64_t nb, float* out,
                const uint8_t* next) {
  constexpr size_t kBlock = kFive ? kQ5_Kx16Block : 2304;
  constexpr size_t kCodes = kFive ? 768 : 256;
  constexpr size_t kStep = kBlock / 8;  // the next group's bytes prefetched per step and half
  constexpr int kFlush = kFive ? 4 : 8;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m6 = _mm256_set1_epi8(0x3F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  __m256 acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kBlock;
    if (h == 0) prefetch_lines<kCodes, kToL1>(blk + kInterleavePrefetch);
    auto load = [&](size_t off) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + off + 32 * h));
    };
    auto bcast = [](const int8_t* p) {
      int32_t v;
      std::memcpy(&v, p, 4);
      return _mm256_set1_epi32(v);
    };
    // The dwords S0 (scale bytes 0-3 of each row), S1 (4-7), S2 (8-11): q4_k_scale_min lane-wise.
    const __m256i s0 = load(64), s1 = load(128), s2 = load(192);
    const __m256i sc_lo = _mm256_and_si256(s0, m6);  // scales 0-3
    const __m256i sc_hi =
        _mm256_or_si256(_mm256_and_si256(s2, m4), _mm256_and_si256(_mm256_srli_epi32(s0, 2), m30));
    const int8_t* xq = x[b].qs;
    __m256i sumi = _mm256_setzero_si256();
    auto pair = [&](auto c_const, __m256i sc) {
      constexpr int c = decltype(c_const)::value;
      constexpr int j = (2 * c) % 4;
      // Sub-blocks 2c (low nibbles) and 2c + 1 (high).
      __m256i lo16 = _mm256_setzero_si256(), hi16 = _mm256_setzero_si256();
      if (next != nullptr)
        prefetch_lines<(kStep + 63) / 64 * 64, kToL2>(next + ((h * nb + b) * 4 + c) * kStep);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        if (h == 0)
          prefetch_lines<64, kToL1>(blk + kCodes + (8 * c + i) * 64 + kInterleavePrefetch);
        const __m256i v = load(kCodes + static_cast<size_t>(8 * c + i) * 64);
        __m256i lo = _mm256_and_si256(v, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if constexpr (kFive) {
          // Bits 2c and 2c + 1 of each qh byte to bit 4 (no bit crosses a byte).
          const __m256i qh = load(256 + static_cast<size_t>(i) * 64);
          const __m256i bl =
              _mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * c))));
          const __m256i bh =
              _mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1))));
          lo = _mm256_or_si256(
              lo, 2 * c <= 4 ? _mm256_slli_epi16(bl, 4 - 2 * c) : _mm256_srli_epi16(bl, 2 * c - 4));
          hi = _mm256_or_si256(hi, 2 * c + 1 <= 4 ? _mm256_slli_epi16(bh, 3 - 2 * c)
                                                  : _mm256_srli_epi16(bh, 2 * c - 3));
        }
        lo16 = _mm256_add_epi16(lo16, _mm256_maddubs_epi16(lo, bcast(xq + 64 * c + 4 * i)));
        hi16 = _mm256_add_epi16(hi16, _mm256_maddubs_epi16(hi, bcast(xq + 64 * c + 32 + 4 * i)));
        if ((i + 1) % kFlush == 0) {
          sumi = _mm256_add_epi32(sumi,
                                  _mm256_add_epi32(_mm256_madd_epi16(lo16, dup_byte<j>(sc)),
                                                   _mm256_madd_epi16(hi16, dup_byte<j + 1>(sc))));
          lo16 = hi16 = _mm256_setzero_si256();
        }
      }
    };
    pair(std::integral_constant<int, 0>{}, sc_lo);
    pair(std::integral_constant<int, 1>{}, sc_lo);
    pair(std::integral_constant<int, 2>{}, sc_hi);
    pair(std::integral_constant<int, 3>{}, sc_hi);
    const __m256i summ = q4_k_mins(s1, s2, bsum_pairs(x[b].bsums));
    acc[b % 8] = _mm256_add_ps(acc[b % 8], min_step(blk, h, x[b].d, sumi, summ));
  }
  _mm256_storeu_ps(out + 8 * h, fold_acc(acc));
}

// ---- kQ6_Kx16: Q6_K x Q8_K, 8 rows (half h of the group) per register ----

// Rows 8h..8h+7 of one kQ6_Kx16 group (its first row r0: the parity) against one activation row.
// Per 4-byte column i of a 128-element half hh, three loads (ql lines i and 8 + i, qh line i) give
// the unsigned 6-bit codes of four element runs (l, l + 32, l + 64, l + 96), one vpmaddubsw each;
// two columns' int16 sums (at most 2 x 2 x 63 x 128 = 32256, exact) meet the run's group scale (an
// int16 pair per lane) in vpmaddwd. The -32 comes off as 32 x sum_g sc_g x bsums_g (vpmaddwd of
// the scale pairs against the bsum broadcast to both words: twice the product). next: as in
// half_dot_k.
void half_dot_q6(const uint8_t* g, int64_t r0, int h, const BlockQ8_K* x, int64_t nb, float* out,
                 const uint8_t* next) {
  const bool odd = q6_kx16_group_odd(r0, nb);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  // Bytes 0..7 each twice: row r's scale into both bytes of word pair r, then to int16.
  const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  __m256 acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Q6KParts p = q6_kx16_parts(b, odd);
    if (h == 0) prefetch_lines<320, kToL1>(g + b * kQ6_Kx16Block + kQ6_Kx16Prefetch);
    const int8_t* xq = x[b].qs;
    const auto scale = [&](int grp) {
      const __m128i s8 = _mm_loadl_epi64(
          reinterpret_cast<const __m128i*>(g + p.scales + 16 * static_cast<size_t>(grp) + 8 * h));
      return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s8, dup));
    };
    __m256i sumi = _mm256_setzero_si256(), off = _mm256_setzero_si256();
    const auto run = [&](auto hh_const, auto q_const) {
      constexpr int hh = decltype(hh_const)::value, q = decltype(q_const)::value;
      if (next != nullptr)
        prefetch_lines<448, kToL2>(next + ((h * nb + b) * 4 + 2 * hh + q) * (kQ6_Kx16Block / 8));
      __m256i sc[4];
      for (int k = 0; k < 4; ++k) {
        const int grp = 8 * hh + 2 * k + q;  // the 16-element group of run k
        sc[k] = scale(grp);
        off = _mm256_add_epi32(off, _mm256_madd_epi16(sc[k], _mm256_set1_epi16(x[b].bsums[grp])));
      }
#pragma GCC unroll 2
      for (int ip = 0; ip < 2; ++ip) {
        __m256i s16[4];
        for (int k = 0; k < 4; ++k) s16[k] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int i2 = 0; i2 < 2; ++i2) {
          const int i = 4 * q + 2 * ip + i2;
          const uint8_t* pa = g + p.ql + static_cast<size_t>(16 * hh + i) * 64;
          const uint8_t* pb = g + p.ql + static_cast<size_t>(16 * hh + 8 + i) * 64;
          const uint8_t* ph = g + p.qh + static_cast<size_t>(8 * hh + i) * 64;
          if (h == 0) {
            prefetch_lines<64, kToL1>(pa + kQ6_Kx16Prefetch);
            prefetch_lines<64, kToL1>(pb + kQ6_Kx16Prefetch);
            prefetch_lines<64, kToL1>(ph + kQ6_Kx16Prefetch);
          }
          const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa + 32 * h));
          const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 32 * h));
          const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ph + 32 * h));
          const __m256i codes[4] = {
              _mm256_or_si256(_mm256_and_si256(a, m4),
                              _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
              _mm256_or_si256(_mm256_and_si256(c, m4),
                              _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4),
                              _mm256_and_si256(hb, m30)),
              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4),
                              _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30))};
          for (int k = 0; k < 4; ++k)
            s16[k] = _mm256_add_epi16(
                s16[k], _mm256_maddubs_epi16(codes[k], bcast4(xq + 128 * hh + 32 * k + 4 * i)));
        }
        for (int k = 0; k < 4; ++k) sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(s16[k], sc[k]));
      }
    };
    using I0 = std::integral_constant<int, 0>;
    using I1 = std::integral_constant<int, 1>;
    run(I0{}, I0{});
    run(I0{}, I1{});
    run(I1{}, I0{});
    run(I1{}, I1{});
    const __m256i centred = _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 4));
    const __m256 dd = _mm256_mul_ps(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + p.d + 16 * h))),
        _mm256_set1_ps(x[b].d));
    acc[b % 8] = _mm256_add_ps(acc[b % 8], _mm256_mul_ps(dd, _mm256_cvtepi32_ps(centred)));
  }
  _mm256_storeu_ps(out + 8 * h, fold_acc(acc));
}

// A kQ6_Kx16 group (first row r0) against T activation rows, for GEMMs, both halves in turn: per
// 16-element run (hh, q, k) and 4-byte column, the run's codes built once (two loads from L1) for
// T tokens' vpmaddubsw, two columns' int16 sums to int32 by the scale pair in vpmaddwd; the -32
// as 32 x sum_g sc_g x bsums_g, two groups per vpmaddwd (half_dot_q6, as this GEMM did before,
// spends a vpmaddwd a group on twice that sum: 1.13x the GEMM, bench/RESULTS.md session 42). The
// same integers, then half_dot_q6's float step: the same bits. cold: the group's first batch, which
// L1-prefetches ahead as the GEMV does.
template <int T>
void chain_dot_q6(const uint8_t* g, int64_t r0, const BlockQ8_K* const* xs, int64_t nb,
                  float* const* outs, bool cold) {
  const bool odd = q6_kx16_group_odd(r0, nb);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  Acc16 acc[T];
  for (int64_t b = 0; b < nb; ++b) {
    const Q6KParts p = q6_kx16_parts(b, odd);
    if (cold) prefetch_lines<kQ6_Kx16Block + 64, kToL1>(g + b * kQ6_Kx16Block + kQ6_Kx16Prefetch);
    for (int h = 0; h < 2; ++h) {
      const auto scales8 = [&](int grp) {  // the 8 rows' int8 scales of a 16-element group
        return _mm_loadl_epi64(
            reinterpret_cast<const __m128i*>(g + p.scales + 16 * static_cast<size_t>(grp) + 8 * h));
      };
      // The -32's sum_g sc_g x bsums_g per row, groups 2n and 2n + 1 in one vpmaddwd (the rows'
      // scale pairs against the adjacent bsums pair).
      __m256i sumi[T], off[T];
      for (int t = 0; t < T; ++t) sumi[t] = off[t] = _mm256_setzero_si256();
      for (int n = 0; n < 8; ++n) {
        const __m256i sp =
            _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(scales8(2 * n), scales8(2 * n + 1)));
        for (int t = 0; t < T; ++t)
          off[t] = _mm256_add_epi32(off[t], _mm256_madd_epi16(sp, bcast4(xs[t][b].bsums + 2 * n)));
      }
      const auto run = [&](auto hh_const, auto q_const, auto k_const) {
        constexpr int hh = decltype(hh_const)::value, q = decltype(q_const)::value;
        constexpr int k = decltype(k_const)::value;
        const int grp = 8 * hh + 2 * k + q;  // the run's 16-element group
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales8(grp), dup));
        for (int ip = 0; ip < 2; ++ip) {
          __m256i s16[T];
          for (auto& v : s16) v = _mm256_setzero_si256();
          for (int i2 = 0; i2 < 2; ++i2) {
            const int i = 4 * q + 2 * ip + i2;
            // Runs 0 and 2 read ql line i, 1 and 3 line 8 + i; the qh line's bit pair k.
            const __m256i lq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                g + p.ql + static_cast<size_t>(16 * hh + (k & 1) * 8 + i) * 64 + 32 * h));
            const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                g + p.qh + static_cast<size_t>(8 * hh + i) * 64 + 32 * h));
            const __m256i low =
                k < 2 ? _mm256_and_si256(lq, m4) : _mm256_and_si256(_mm256_srli_epi16(lq, 4), m4);
            const __m256i high = k == 0   ? _mm256_slli_epi16(hb, 4)
                                 : k == 1 ? _mm256_slli_epi16(hb, 2)
                                 : k == 2 ? hb
                                          : _mm256_srli_epi16(hb, 2);
            const __m256i code = _mm256_or_si256(low, _mm256_and_si256(high, m30));
            for (int t = 0; t < T; ++t)
              s16[t] = _mm256_add_epi16(
                  s16[t],
                  _mm256_maddubs_epi16(code, bcast4(xs[t][b].qs + 128 * hh + 32 * k + 4 * i)));
          }
          for (int t = 0; t < T; ++t)
            sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(s16[t], sc));
        }
      };
      for_runs(run);
      const __m256 dw =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + p.d + 16 * h)));
      for (int t = 0; t < T; ++t)
        acc[t].add_dd(b, h, dw, xs[t][b].d,
                      _mm256_sub_epi32(sumi[t], _mm256_slli_epi32(off[t], 5)));
    }
  }
  for (int t = 0; t < T; ++t) acc[t].store(outs[t]);
}

// ---- kIQ4_XSx16: IQ4_XS x Q8_K, 8 rows (half h of the group) per register ----

// Rows 8h..8h+7 of one 16-row group against one activation row. The nibbles become signed table
// values (vpshufb); vpmaddubsw takes |x| as the unsigned operand and the values with x's sign
// (|x| <= 128 and |value| <= 127, so any Q8_K row is exact, -128 included): int16 pair sums of at
// most 2 x 128 x 127, each weighted by its row's sub-block scale (an int16 pair per lane) in
// vpmaddwd. next: the following group, prefetched into L2 across both halves (as half_dot_k).
void half_dot_iq4(const uint8_t* g, int64_t, int h, const BlockQ8_K* x, int64_t nb, float* out,
                  const uint8_t* next) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  __m256 acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kIQ4_XSx16Block;
    if (h == 0) prefetch_lines<128, kToL1>(blk + kInterleavePrefetch);
    const Iq4Scales scales = iq4_scales(blk, h);
    const int8_t* xq = x[b].qs;
    __m256i sumi = _mm256_setzero_si256();
    for (int s = 0; s < 8; ++s) {
      if (next != nullptr) prefetch_lines<192, kToL2>(next + ((h * nb + b) * 8 + s) * 136);
      const __m256i sc16 = iq4_scale16(scales, s);
      for (int ii = 0; ii < 4; ++ii) {
        const size_t off = 128 + static_cast<size_t>(4 * s + ii) * 64;
        if (h == 0) prefetch_lines<64, kToL1>(blk + off + kInterleavePrefetch);
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + off + 32 * h));
        const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, m4));
        const __m256i hi =
            _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        int32_t xl, xh;
        std::memcpy(&xl, xq + 32 * s + 4 * ii, 4);
        std::memcpy(&xh, xq + 32 * s + 16 + 4 * ii, 4);
        const __m256i bl = _mm256_set1_epi32(xl), bh = _mm256_set1_epi32(xh);
        const __m256i pl = _mm256_maddubs_epi16(_mm256_abs_epi8(bl), _mm256_sign_epi8(lo, bl));
        const __m256i ph = _mm256_maddubs_epi16(_mm256_abs_epi8(bh), _mm256_sign_epi8(hi, bh));
        sumi = _mm256_add_epi32(
            sumi, _mm256_add_epi32(_mm256_madd_epi16(pl, sc16), _mm256_madd_epi16(ph, sc16)));
      }
    }
    const __m256 dd = _mm256_mul_ps(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h))),
        _mm256_set1_ps(x[b].d));
    acc[b % 8] = _mm256_add_ps(acc[b % 8], _mm256_mul_ps(dd, _mm256_cvtepi32_ps(sumi)));
  }
  _mm256_storeu_ps(out + 8 * h, fold_acc(acc));
}

// The same rows against T activation rows, for GEMMs, both halves in turn: each code line's signed
// values looked up once for T tokens, the tokens' |x| taken once per super-block into a stack copy
// (so a line costs a token 2 vpsignb, 2 vpmaddubsw and 2 vpmaddwd). The same integers as
// half_dot_iq4's, then its float step: the same bits. cold: the group's first batch, which
// L1-prefetches ahead as the GEMV does.
template <int T>
void chain_dot_iq4(const uint8_t* g, int64_t, const BlockQ8_K* const* xs, int64_t nb,
                   float* const* outs, bool cold) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  Acc16 acc[T];
  alignas(32) int8_t ax[T][kQK_K];  // |x| of each token's super-block
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kIQ4_XSx16Block;
    if (cold) prefetch_lines<kIQ4_XSx16Block, kToL1>(blk + kIQ4_XSx16Prefetch);
    for (int t = 0; t < T; ++t)
      for (int k = 0; k < kQK_K / 32; ++k)
        _mm256_store_si256(reinterpret_cast<__m256i*>(ax[t] + 32 * k),
                           _mm256_abs_epi8(_mm256_loadu_si256(
                               reinterpret_cast<const __m256i*>(xs[t][b].qs + 32 * k))));
    for (int h = 0; h < 2; ++h) {
      const Iq4Scales scales = iq4_scales(blk, h);
      __m256i sumi[T];
      for (auto& v : sumi) v = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        const __m256i sc16 = iq4_scale16(scales, s);
#pragma GCC unroll 4
        for (int ii = 0; ii < 4; ++ii) {
          const __m256i v = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(blk + 128 + (4 * s + ii) * 64 + 32 * h));
          const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, m4));
          const __m256i hi =
              _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
          for (int t = 0; t < T; ++t) {
            const int off = 32 * s + 4 * ii;
            const __m256i pl = _mm256_maddubs_epi16(
                bcast4(ax[t] + off), _mm256_sign_epi8(lo, bcast4(xs[t][b].qs + off)));
            const __m256i ph = _mm256_maddubs_epi16(
                bcast4(ax[t] + off + 16), _mm256_sign_epi8(hi, bcast4(xs[t][b].qs + off + 16)));
            sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(_mm256_madd_epi16(pl, sc16),
                                                                 _mm256_madd_epi16(ph, sc16)));
            __asm__("" : "+x"(sumi[t]));  // no reassociation (chain_dot_k)
          }
        }
      }
      const __m256 dw =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
      for (int t = 0; t < T; ++t) acc[t].add_dd(b, h, dw, xs[t][b].d, sumi[t]);
    }
  }
  for (int t = 0; t < T; ++t) acc[t].store(outs[t]);
}

// ---- kQ2_Kx16, kQ3_Kx16: Q2_K / Q3_K x Q8_K, 8 rows (half h of the group) per register ----

// Byte j of every dword (j <= 3) as a signed 16-bit value in both halves of the dword (into the
// high byte by vpshufb, then an arithmetic shift down).
template <int j>
inline __m256i dup_byte_signed(__m256i v) {
  constexpr char z = -128;
  const __m256i hi =
      _mm256_shuffle_epi8(v, _mm256_setr_epi8(z, j, z, j, z, 4 + j, z, 4 + j, z, 8 + j, z, 8 + j, z,
                                              12 + j, z, 12 + j, z, j, z, j, z, 4 + j, z, 4 + j, z,
                                              8 + j, z, 8 + j, z, 12 + j, z, 12 + j));
  return _mm256_srai_epi16(hi, 8);
}
// Bytes j and j + 1 of every dword as signed 16-bit values in its two halves.
template <int j>
inline __m256i pair_bytes_signed(__m256i v) {
  constexpr char z = -128;
  const __m256i hi =
      _mm256_shuffle_epi8(v, _mm256_setr_epi8(z, j, z, j + 1, z, 4 + j, z, 5 + j, z, 8 + j, z,
                                              9 + j, z, 12 + j, z, 13 + j, z, j, z, j + 1, z, 4 + j,
                                              z, 5 + j, z, 8 + j, z, 9 + j, z, 12 + j, z, 13 + j));
  return _mm256_srai_epi16(hi, 8);
}

// The weighted group sums of one Q2_K / Q3_K super-block for rows 8h..8h+7: per code line i (half
// hh = i / 8 of the super-block), field j (the 2-bit codes, by shift and and; Q3_K: the hmask bit
// as bit 2, code(v, hm, hh, j)) is one vpmaddubsw into the int16 sums of its group of 16 (8hh + 2j
// + (i % 8) / 4: at most 4 x 2 x 7 x 128 = 7168, exact), and each group's int16 pair sums meet the
// row's scale (scale<grp>(), an int16 pair) in vpmaddwd. line(i) / hmask(m): the code lines' and
// hmask lines' half-h addresses (hmask nullptr: none, Q2_K); step(k): called before each of the 4
// (hh, q) steps.
template <typename Code, typename Scale, typename Line, typename Hmask, typename Step>
inline __m256i k_low_sumi(const int8_t* xq, Code&& code, Scale&& scale, Line&& line, Hmask&& hmask,
                          Step&& step) {
  const auto run = [&](auto hh_const, auto q_const) {
    constexpr int hh = decltype(hh_const)::value, q = decltype(q_const)::value;
    step(2 * hh + q);
    __m256i s16[4];
    for (int j = 0; j < 4; ++j) s16[j] = _mm256_setzero_si256();
    for (int ii = 0; ii < 4; ++ii) {
      const __m256i v =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line(8 * hh + 4 * q + ii)));
      __m256i hm = _mm256_setzero_si256();
      if constexpr (!std::is_null_pointer_v<std::decay_t<Hmask>>)
        hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hmask(4 * q + ii)));
      for (int j = 0; j < 4; ++j)
        s16[j] = _mm256_add_epi16(
            s16[j], _mm256_maddubs_epi16(code(v, hm, hh, j),
                                         bcast4(xq + 128 * hh + 32 * j + 16 * q + 4 * ii)));
    }
    return _mm256_add_epi32(
        _mm256_add_epi32(
            _mm256_madd_epi16(s16[0], scale(std::integral_constant<int, 8 * hh + q>{})),
            _mm256_madd_epi16(s16[1], scale(std::integral_constant<int, 8 * hh + 2 + q>{}))),
        _mm256_add_epi32(
            _mm256_madd_epi16(s16[2], scale(std::integral_constant<int, 8 * hh + 4 + q>{})),
            _mm256_madd_epi16(s16[3], scale(std::integral_constant<int, 8 * hh + 6 + q>{}))));
  };
  using I0 = std::integral_constant<int, 0>;
  using I1 = std::integral_constant<int, 1>;
  return _mm256_add_epi32(_mm256_add_epi32(run(I0{}, I0{}), run(I0{}, I1{})),
                          _mm256_add_epi32(run(I1{}, I0{}), run(I1{}, I1{})));
}

// The same group sums against T activation rows (kChain order for GEMMs): per field j of each code
// line the code vector is built once (code(v, hm, hh, j), the line reloaded from L1 per field) and
// meets each token's activation word, so T tokens' int16 group sums are live (not 4T); each
// group's sums then meet the scale pair in vpmaddwd, added into sumi[t]. The same integers as
// k_low_sumi's.
// kPin: the int16 sums behind an empty asm, so that GCC cannot reassociate them into products
// held at once (chain_dot_k): Q2_K 1.09-1.16x, Q3_K 0.8x with it (bench/RESULTS.md session 42).
template <int T, bool kPin, typename Code, typename Scale, typename Line, typename Hmask>
inline void k_low_sumi_chain(const BlockQ8_K* const* xs, int64_t b, Code&& code, Scale&& scale,
                             Line&& line, Hmask&& hmask, __m256i* sumi) {
  const auto run = [&](auto hh_const, auto q_const, auto j_const) {
    constexpr int hh = decltype(hh_const)::value, q = decltype(q_const)::value;
    constexpr int j = decltype(j_const)::value;
    __m256i s16[T];
    for (auto& v : s16) v = _mm256_setzero_si256();
    for (int ii = 0; ii < 4; ++ii) {
      const __m256i v =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line(8 * hh + 4 * q + ii)));
      __m256i hm = _mm256_setzero_si256();
      if constexpr (!std::is_null_pointer_v<std::decay_t<Hmask>>)
        hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hmask(4 * q + ii)));
      const __m256i c = code(v, hm, hh, j);
      for (int t = 0; t < T; ++t) {
        s16[t] = _mm256_add_epi16(
            s16[t],
            _mm256_maddubs_epi16(c, bcast4(xs[t][b].qs + 128 * hh + 32 * j + 16 * q + 4 * ii)));
        if constexpr (kPin) __asm__("" : "+x"(s16[t]));
      }
    }
    const __m256i sc = scale(std::integral_constant<int, 8 * hh + 2 * j + q>{});
    for (int t = 0; t < T; ++t) sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(s16[t], sc));
  };
  for_runs(run);
}

// kQ2_Kx16's 2-bit fields: field j of a code line, shifted down.
struct Q2Code {
  __m256i m3 = _mm256_set1_epi8(3);
  __m256i operator()(__m256i v, __m256i, int, int j) const {
    return _mm256_and_si256(j == 0 ? v : _mm256_srli_epi16(v, 2 * j), m3);
  }
};

// A kQ2_Kx16 super-block's 4-bit scales (sc: group g in byte g % 4 of sc[g / 4]) and mins (mn,
// likewise) for rows 8h..8h+7.
inline void q2_scales_mins(const uint8_t* blk, int h, __m256i* sc, __m256i* mn) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int k = 0; k < 4; ++k) {
    const __m256i s =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 + 64 * k + 32 * h));
    sc[k] = _mm256_and_si256(s, m4);
    mn[k] = _mm256_and_si256(_mm256_srli_epi32(s, 4), m4);
  }
}

// sum_g min_g x bsums_g for 8 rows, the mins as int16 pairs against the bsum pairs in vpmaddwd.
inline __m256i q2_mins(const __m256i* mn, const int16_t* bsums) {
  __m256i summ = _mm256_setzero_si256();
  for (int k = 0; k < 4; ++k) {
    const __m256i b01 = bcast4(bsums + 4 * k);
    const __m256i b23 = bcast4(bsums + 4 * k + 2);
    summ = _mm256_add_epi32(summ, _mm256_add_epi32(_mm256_madd_epi16(pair_bytes<0>(mn[k]), b01),
                                                   _mm256_madd_epi16(pair_bytes<2>(mn[k]), b23)));
  }
  return summ;
}

// Rows 8h..8h+7 of one kQ2_Kx16 group against one activation row; next: the following group,
// prefetched into L2 across both halves (as half_dot_k). The mins meet the activation's bsum pairs
// in vpmaddwd.
void half_dot_q2(const uint8_t* g, int64_t, int h, const BlockQ8_K* x, int64_t nb, float* out,
                 const uint8_t* next) {
  __m256 acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kQ2_Kx16Block;
    if (h == 0) prefetch_lines<kQ2_Kx16Block, kToL1>(blk + kQ2_Kx16Prefetch);
    __m256i sc[4], mn[4];
    q2_scales_mins(blk, h, sc, mn);
    const __m256i sumi = k_low_sumi(
        x[b].qs, Q2Code{},
        [&](auto grp) {
          constexpr int gi = decltype(grp)::value;
          return dup_byte<gi % 4>(sc[gi / 4]);
        },
        [&](int i) { return blk + 320 + 64 * static_cast<size_t>(i) + 32 * h; }, nullptr,
        [&](int k) {
          if (next != nullptr)
            prefetch_lines<192, kToL2>(next + ((h * nb + b) * 4 + k) * (kQ2_Kx16Block / 8));
        });
    acc[b % 8] = _mm256_add_ps(acc[b % 8], min_step(blk, h, x[b].d, sumi, q2_mins(mn, x[b].bsums)));
  }
  _mm256_storeu_ps(out + 8 * h, fold_acc(acc));
}

// A kQ2_Kx16 group against T activation rows, both halves in turn (GEMMs; cold: the group's first
// batch, which L1-prefetches ahead as the GEMV does): k_low_sumi_chain, then half_dot_q2's steps.
template <int T>
void chain_dot_q2(const uint8_t* g, int64_t, const BlockQ8_K* const* xs, int64_t nb,
                  float* const* outs, bool cold) {
  Acc16 acc[T];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = g + b * kQ2_Kx16Block;
    if (cold) prefetch_lines<kQ2_Kx16Block, kToL1>(blk + kQ2_Kx16Prefetch);
    for (int h = 0; h < 2; ++h) {
      __m256i sc[4], mn[4];
      q2_scales_mins(blk, h, sc, mn);
      __m256i sumi[T];
      for (auto& v : sumi) v = _mm256_setzero_si256();
      k_low_sumi_chain<T, true>(
          xs, b, Q2Code{},
          [&](auto grp) {
            constexpr int gi = decltype(grp)::value;
            return dup_byte<gi % 4>(sc[gi / 4]);
          },
          [&](int i) { return blk + 320 + 64 * static_cast<size_t>(i) + 32 * h; }, nullptr, sumi);
      for (int t = 0; t < T; ++t)
        acc[t].add(b, h, min_step(blk, h, xs[t][b].d, sumi[t], q2_mins(mn, xs[t][b].bsums)));
    }
  }
  for (int t = 0; t < T; ++t) acc[t].store(outs[t]);
}

// kQ3_Kx16's 3-bit codes: field j of a code line (2 bits) with bit 4hh + j of its hmask line's
// bytes as bit 2.
struct Q3Code {
  __m256i m3 = _mm256_set1_epi8(3);
  __m256i bit2 = _mm256_set1_epi8(4);
  __m256i operator()(__m256i v, __m256i hm, int hh, int j) const {
    const __m256i low = _mm256_and_si256(j == 0 ? v : _mm256_srli_epi16(v, 2 * j), m3);
    const int sh = 2 - (4 * hh + j);  // bit 4hh + j of each hmask byte to bit 2
    const __m256i hs = sh > 0   ? _mm256_slli_epi16(hm, sh)
                       : sh < 0 ? _mm256_srli_epi16(hm, -sh)
                                : hm;
    return _mm256_or_si256(low, _mm256_and_si256(hs, bit2));
  }
};

// The rows' sixteen Q3_K scales less 32 as signed bytes, scale g in byte g % 4 of u[g / 4], for
// rows 8h..8h+7 of the super-block whose parts are p.
inline void q3_scales(const uint8_t* g, const Q3KParts& p, int h, __m256i* u) {
  const __m256i lo4 = _mm256_set1_epi32(0x0F0F0F0F);
  const __m256i lo2 = _mm256_set1_epi32(0x03030303);
  const auto load = [&](size_t off) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + off + 32 * h));
  };
  const __m256i a0 = load(p.scales), a1 = load(p.scales + 64), a2 = load(p.scales + 128);
  const auto word = [&](__m256i low, int low_shift, int high_shift) {
    const __m256i l = _mm256_and_si256(_mm256_srli_epi32(low, low_shift), lo4);
    const __m256i hb =
        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a2, high_shift), lo2), 4);
    return _mm256_sub_epi8(_mm256_or_si256(l, hb), _mm256_set1_epi8(32));
  };
  u[0] = word(a0, 0, 0);
  u[1] = word(a1, 0, 2);
  u[2] = word(a0, 4, 4);
  u[3] = word(a1, 4, 6);
}

// The float step of rows 8h..8h+7: the 4 (codes are value + 4) comes off as 4 x sum_g sc_g x
// bsums_g, the scales as signed int16 pairs (g, g + 1) against the bsum pairs in vpmaddwd.
inline __m256 q3_step(const uint8_t* g, const Q3KParts& p, int h, const __m256i* u,
                      const BlockQ8_K& x, __m256i sumi) {
  __m256i sb = _mm256_setzero_si256();
  for (int k = 0; k < 4; ++k) {
    const __m256i b01 = bcast4(x.bsums + 4 * k);
    const __m256i b23 = bcast4(x.bsums + 4 * k + 2);
    sb = _mm256_add_epi32(sb, _mm256_add_epi32(_mm256_madd_epi16(pair_bytes_signed<0>(u[k]), b01),
                                               _mm256_madd_epi16(pair_bytes_signed<2>(u[k]), b23)));
  }
  const __m256i centred = _mm256_sub_epi32(sumi, _mm256_slli_epi32(sb, 2));
  const __m256 dd = _mm256_mul_ps(
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + p.d + 16 * h))),
      _mm256_set1_ps(x.d));
  return _mm256_mul_ps(dd, _mm256_cvtepi32_ps(centred));
}

// Rows 8h..8h+7 of one kQ3_Kx16 group (its first row r0: the parity) against one activation row.
// Codes unsigned 0..7 (value + 4); the 4 comes off through the bsums (q3_step).
void half_dot_q3(const uint8_t* g, int64_t r0, int h, const BlockQ8_K* x, int64_t nb, float* out,
                 const uint8_t* next) {
  const bool odd = q3_kx16_group_odd(r0, nb);
  __m256 acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Q3KParts p = q3_kx16_parts(b, odd);
    if (h == 0) prefetch_lines<kQ3_Kx16Block + 32, kToL1>(g + b * kQ3_Kx16Block + kQ3_Kx16Prefetch);
    __m256i u[4];
    q3_scales(g, p, h, u);
    const __m256i sumi = k_low_sumi(
        x[b].qs, Q3Code{},
        [&](auto grp) {
          constexpr int gi = decltype(grp)::value;
          return dup_byte_signed<gi % 4>(u[gi / 4]);
        },
        [&](int i) { return g + p.qs(i) + 32 * h; }, [&](int m) { return g + p.hmask(m) + 32 * h; },
        [&](int k) {
          if (next != nullptr)
            prefetch_lines<256, kToL2>(next + ((h * nb + b) * 4 + k) * (kQ3_Kx16Block / 8));
        });
    acc[b % 8] = _mm256_add_ps(acc[b % 8], q3_step(g, p, h, u, x[b], sumi));
  }
  _mm256_storeu_ps(out + 8 * h, fold_acc(acc));
}

// A kQ3_Kx16 group (first row r0) against T activation rows, both halves in turn, as chain_dot_q2.
template <int T>
void chain_dot_q3(const uint8_t* g, int64_t r0, const BlockQ8_K* const* xs, int64_t nb,
                  float* const* outs, bool cold) {
  const bool odd = q3_kx16_group_odd(r0, nb);
  Acc16 acc[T];
  for (int64_t b = 0; b < nb; ++b) {
    const Q3KParts p = q3_kx16_parts(b, odd);
    if (cold) prefetch_lines<kQ3_Kx16Block + 32, kToL1>(g + b * kQ3_Kx16Block + kQ3_Kx16Prefetch);
    for (int h = 0; h < 2; ++h) {
      __m256i u[4];
      q3_scales(g, p, h, u);
      __m256i sumi[T];
      for (auto& v : sumi) v = _mm256_setzero_si256();
      k_low_sumi_chain<T, false>(
          xs, b, Q3Code{},
          [&](auto grp) {
            constexpr int gi = decltype(grp)::value;
            return dup_byte_signed<gi % 4>(u[gi / 4]);
          },
          [&](int i) { return g + p.qs(i) + 32 * h; },
          [&](int m) { return g + p.hmask(m) + 32 * h; }, sumi);
      for (int t = 0; t < T; ++t) acc[t].add(b, h, q3_step(g, p, h, u, *(xs[t] + b), sumi[t]));
    }
  }
  for (int t = 0; t < T; ++t) acc[t].store(outs[t]);
}

// The chain families of the kernels above, for gemm_chain.
struct ChainQ6 {
  template <int T>
  static constexpr ChainFn fn = &chain_dot_q6<T>;
};
struct ChainIQ4 {
  template <int T>
  static constexpr ChainFn fn = &chain_dot_iq4<T>;
};
struct ChainQ2 {
  template <int T>
  static constexpr ChainFn fn = &chain_dot_q2<T>;
};
struct ChainQ3 {
  template <int T>
  static constexpr ChainFn fn = &chain_dot_q3<T>;
};

// The GEMV over a super-block layout from its half pass HalfDot (rows 8h..8h+7 of the group whose
// first row is r); their GEMMs run in chain order (gemm_chain).
using HalfDotFn = void (*)(const uint8_t* g, int64_t r, int h, const BlockQ8_K* x, int64_t nb,
                           float* out, const uint8_t* next);

template <HalfDotFn HalfDot>
void gemv_halves(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
                 int64_t row_end, int64_t n_cols) {
  const int64_t nb = n_cols / kQK_K;
  const auto* x = static_cast<const BlockQ8_K*>(xq);
  const size_t group_bytes = 16 * row_stride;
  for_groups(w, row_stride, row_begin, row_end, [&](const uint8_t* g, int64_t r) {
    const uint8_t* next =
        r + 16 < row_end ? g + group_bytes : static_cast<const uint8_t*>(take_gemv_tail());
    HalfDot(g, r, 0, x, nb, y + r, next);
    HalfDot(g, r, 1, x, nb, y + r, next);
  });
}

// The kernels of the layouts of 32-element blocks with Q8_0 activations: the GEMVs one half pass
// each, the GEMMs interleave_onepass.h's chain GEMM with vpmaddubsw (kQ4_0x16, kMXFP4x16: prefill
// 1.2-1.3x the two-half GEMM, bench/RESULTS.md session 24, then 1.1-1.27x in chain order, session
// 35, then 1.5x with int16 sums, session 42; kQ5_0x16 / kQ4_1x16 / kQ5_1x16 about 2x and
// kIQ4_NLx16, its codes signed, 1.1x, session 36).
template <WeightLayout kLayout>
GemvKernels b32_kernels() {
  return GemvKernels{&gemv_q4_0x16<kLayout>, &gemm_x16_chain<kLayout, false>};
}

}  // namespace

GemvKernels interleaved_kernels_avx2(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::kQ4_0x16:
      return b32_kernels<WeightLayout::kQ4_0x16>();
    case WeightLayout::kIQ4_NLx16:
      return b32_kernels<WeightLayout::kIQ4_NLx16>();
    case WeightLayout::kMXFP4x16:
      return b32_kernels<WeightLayout::kMXFP4x16>();
    case WeightLayout::kQ5_0x16:
      return b32_kernels<WeightLayout::kQ5_0x16>();
    case WeightLayout::kQ4_1x16:
      return b32_kernels<WeightLayout::kQ4_1x16>();
    case WeightLayout::kQ5_1x16:
      return b32_kernels<WeightLayout::kQ5_1x16>();
    case WeightLayout::kQ8_0x16:
      return GemvKernels{&gemv_q8_0x16<false>, &gemm_x16_chain<WeightLayout::kQ8_0x16, false>};
    default:
      break;
  }
  if (layout == WeightLayout::kQ4_Kx16)
    // Chain GEMM: 1.6x the two-half one's once GCC no longer spilled its products (session 42;
    // before, it measured no faster).
    return GemvKernels{&gemv_halves<&half_dot_k<false>>, &gemm_chain<ChainK<false, false>>};
  if (layout == WeightLayout::kQ5_Kx16)  // chain GEMM: 1.3-1.45x the two-half one's (session 35)
    return GemvKernels{&gemv_halves<&half_dot_k<true>>, &gemm_chain<ChainK<true, false>>};
  if (layout == WeightLayout::kQ6_Kx16)
    return GemvKernels{&gemv_halves<&half_dot_q6>, &gemm_chain<ChainQ6>};
  if (layout == WeightLayout::kIQ4_XSx16)
    return GemvKernels{&gemv_halves<&half_dot_iq4>, &gemm_chain<ChainIQ4>};
  if (layout == WeightLayout::kQ2_Kx16)
    return GemvKernels{&gemv_halves<&half_dot_q2>, &gemm_chain<ChainQ2>};
  if (layout == WeightLayout::kQ3_Kx16)
    return GemvKernels{&gemv_halves<&half_dot_q3>, &gemm_chain<ChainQ3>};
  return GemvKernels{nullptr, nullptr};
}

}  // namespace strata::kernels::detail
