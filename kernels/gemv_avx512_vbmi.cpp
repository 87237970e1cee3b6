// Q4_0 x Q8_0 GEMV/GEMM with 512-bit integer work (AVX-512 VNNI + VBMI byte permutes + GFNI),
// used by gemv_avx512.cpp's table when the CPU has VBMI and GFNI. Per chunk of 8 blocks (144
// weight bytes per row): three loads, and two vpermt2b put the 8 blocks' 128 nibble bytes into
// two registers (4 blocks each, one block per 128-bit lane); a GFNI affine op takes the high
// nibbles in one instruction; one more vpermt2b pulls the 8 scales out of the same loads. The
// activation chunk is permuted the same way once for all R rows of a pass. Codes are used
// unsigned (nibble, 0..15) and -8 * sum(x) per block is added back, so every block's integer
// sum is exact. The per-block sums of a row pair are gathered into one register (lane 4i+0 =
// row 0 block i, 4i+1 = row 0 block 4+i, 4i+2 = row 1 block i, 4i+3 = row 1 block 4+i), and
// each lane keeps the float accumulator acc[b % 8] of its row: the float steps are exactly the
// canonical ones of gemv.cpp, so results equal gemv_ref.cpp bit for bit. Tested by
// tests/test_gemv.cpp; measured by bench/bench_gemv.cpp and bench/bench_moe.cpp.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "kernels/gemv_internal.h"
#include "kernels/gemv_rows_internal.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

// GCC 12 reports the _mm512_undefined_*() pass-through operands inside its own insert / extract /
// broadcast intrinsics as uninitialized (GCC bug 105593); nothing in this file reads them.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::kernels::detail {
namespace {

// ---- permute tables (built at compile time) ----

template <typename T, size_t N, typename F>
constexpr std::array<T, N> make_table(F f) {
  std::array<T, N> a{};
  for (size_t i = 0; i < N; ++i) a[i] = static_cast<T>(f(static_cast<int>(i)));
  return a;
}

// Weight qs bytes: block i < 4 at 18i+2.. of (A = bytes 0-63, B = 64-127); blocks 4-7 at 74+18i..
// of (B, C = 128-191), i.e. index = byte offset - 64.
alignas(64) constexpr auto kWq0 = make_table<uint8_t, 64>([](int e) {
  return 18 * (e / 16) + 2 + e % 16;
});
alignas(64) constexpr auto kWq1 = make_table<uint8_t, 64>([](int e) {
  return 18 * (e / 16) + 10 + e % 16;
});
// Weight scales of a row pair's layout: word 4i+{0,2} = block i (word 9i of A:B), 4i+{1,3} =
// block 4+i.
alignas(64) constexpr auto kWd = make_table<uint8_t, 64>([](int e) {
  const int i = (e % 32) / 8, k = (e / 2) % 2;
  return 18 * (i + 4 * k) + e % 2;
});
// Activation chunk (8 x 34 bytes): XL0 / XH0 / XL1 from tables starting at byte 0 / 16 / 136
// (index 34i+2+j), XH1 from the table at byte 144 (index 34i+10+j), j < 16.
alignas(64) constexpr auto kXq = make_table<uint8_t, 64>([](int e) {
  return 34 * (e / 16) + 2 + e % 16;
});
alignas(64) constexpr auto kXq1 = make_table<uint8_t, 64>([](int e) {
  return 34 * (e / 16) + 10 + e % 16;
});
// Activation scales: word 4i+{0,2} = d of block i (word 17i of the tables at byte 0 / 136).
alignas(64) constexpr auto kXd = make_table<uint8_t, 64>([](int e) {
  return 34 * ((e % 32) / 8) + e % 2;
});

inline __m512i load64(const void* p) {
  return _mm512_loadu_si512(p);
}

// Per-block sums of P0 (blocks 0-3, 4 lanes each) and P1 (blocks 4-7), halfway: lane 4i+{0,2} =
// two partial sums of block i, 4i+{1,3} of block 4+i.
inline __m512i half_sums(__m512i p0, __m512i p1) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(p0, p1), _mm512_unpackhi_epi32(p0, p1));
}

// The row pair layout from two half_sums results.
inline __m512i pair_sums(__m512i s0, __m512i s1) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(s0, s1), _mm512_unpackhi_epi64(s0, s1));
}

// One chunk of 8 activation blocks, permuted to the weights' nibble order.
struct XChunk {
  __m512i lo0, hi0, lo1, hi1;  // x[0..15] / x[16..31] of blocks 0-3 and 4-7, one per lane
  __m512i neg;                 // -8 * sum(x) per block, row pair layout
  __m512 d;                    // fp16(d_x) per block, row pair layout
};

inline XChunk prep_x(const uint8_t* x) {
  const __m512i iq = _mm512_load_si512(kXq.data());
  const __m512i iq1 = _mm512_load_si512(kXq1.data());
  const __m512i id = _mm512_load_si512(kXd.data());
  XChunk c;
  const __m512i x0 = load64(x), x64 = load64(x + 64);
  const __m512i x136 = load64(x + 136), x200 = load64(x + 200);
  c.lo0 = _mm512_permutex2var_epi8(x0, iq, x64);
  c.hi0 = _mm512_permutex2var_epi8(load64(x + 16), iq, load64(x + 80));
  c.lo1 = _mm512_permutex2var_epi8(x136, iq, x200);
  c.hi1 = _mm512_permutex2var_epi8(load64(x + 144), iq1, load64(x + 208));
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i s0 =
      _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, c.lo0), ones, c.hi0);
  const __m512i s1 =
      _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, c.lo1), ones, c.hi1);
  const __m512i h = half_sums(s0, s1);
  const __m512i sums = pair_sums(h, h);
  c.neg = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, 3));
  const __m512i d0 = _mm512_permutex2var_epi8(x0, id, x64);
  const __m512i d1 = _mm512_permutex2var_epi8(x136, id, x200);
  c.d = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_mask_blend_epi16(0xAAAAAAAA, d0, d1)));
  return c;
}

// One row's chunk of 8 blocks: its codes as two registers of low and two of high nibbles (one
// block per 128-bit lane), and its scales (words of kWd).
struct WChunk {
  __m512i l0, h0, l1, h1, dw;
};

inline WChunk unpack_w(const uint8_t* w, __m512i iw0, __m512i iw1, __m512i iwd) {
  const __m512i a = load64(w), b = load64(w + 64);
  const __m512i cc =
      _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 128)));
  const __m512i q0 = _mm512_permutex2var_epi8(a, iw0, b);
  const __m512i q1 = _mm512_permutex2var_epi8(b, iw1, cc);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // GF(2) affine map = a per-byte shift right by 4 (the high nibble), one instruction.
  const __m512i shr4 = _mm512_set1_epi64(0x1020408000000000);
  WChunk q;
  q.l0 = _mm512_and_si512(q0, m4);
  q.h0 = _mm512_gf2p8affine_epi64_epi8(q0, shr4, 0);
  q.l1 = _mm512_and_si512(q1, m4);
  q.h1 = _mm512_gf2p8affine_epi64_epi8(q1, shr4, 0);
  q.dw = _mm512_permutex2var_epi8(a, iwd, b);
  return q;
}

// Half sums of the row chunk's 8 blocks against one activation chunk.
inline __m512i w_dot(const WChunk& q, const XChunk& c) {
  const __m512i z = _mm512_setzero_si512();
  const __m512i p0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, q.l0, c.lo0), q.h0, c.hi0);
  const __m512i p1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, q.l1, c.lo1), q.h1, c.hi1);
  return half_sums(p0, p1);
}

// out[r] = W_{row r} . x for r < R (R even); rows are row_stride bytes apart, nb blocks each.
// Prefetch: one L2 prefetch kPrefetchFar ahead along each row slot's path. Measured with R = 16
// on Qwen3-30B-A3B expert shapes: without software prefetch 42% of the read probe; adding the
// L1 prefetch 768 B ahead of the older 4-row kernel cost 3-6 points here; L2 distances 2-18 KiB
// were within the noise of each other.
//
// T tokens at once (GEMM): each row chunk is unpacked once and used for all T activation rows;
// every token's float steps are exactly those of T = 1.
template <int R, int T>
void dot_rows(const uint8_t* w, size_t row_stride, const BlockQ8_0* const* xs, int64_t nb,
              float* const* outs) {
  static_assert(R % 2 == 0);
  constexpr int kPairs = R / 2;
  const size_t row_bytes = static_cast<size_t>(nb) * sizeof(BlockQ4_0);
  const __m512i iw0 = _mm512_load_si512(kWq0.data());
  const __m512i iw1 = _mm512_load_si512(kWq1.data());
  const __m512i iwd = _mm512_load_si512(kWd.data());
  __m512 acc[T][kPairs];
  for (int t = 0; t < T; ++t)
    for (int p = 0; p < kPairs; ++p) acc[t][p] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    XChunk c[T];
    for (int t = 0; t < T; ++t) c[t] = prep_x(reinterpret_cast<const uint8_t*>(xs[t] + b));
    const size_t off = static_cast<size_t>(b) * sizeof(BlockQ4_0);
    for (int p = 0; p < kPairs; ++p) {
      WChunk q[2];
      for (int k = 0; k < 2; ++k) {
        const int r = 2 * p + k;
        // Row slot r reads rows r, r+R, r+2R, ...: prefetch along that path.
        auto ahead = [&](size_t bytes) {
          const size_t at = off + bytes;
          return at < row_bytes ? w + r * row_stride + at
                                : w + (r + R) * row_stride + (at - row_bytes);
        };
        prefetch_lines<8 * sizeof(BlockQ4_0), kToL2>(ahead(kPrefetchFar));
        q[k] = unpack_w(w + r * row_stride + off, iw0, iw1, iwd);
      }
      const __m512 dwf = _mm512_cvtph_ps(
          _mm512_castsi512_si256(_mm512_mask_blend_epi16(0xCCCCCCCC, q[0].dw, q[1].dw)));
      for (int t = 0; t < T; ++t) {
        const __m512i isum =
            _mm512_add_epi32(pair_sums(w_dot(q[0], c[t]), w_dot(q[1], c[t])), c[t].neg);
        const __m512 d = _mm512_mul_ps(dwf, c[t].d);
        acc[t][p] = _mm512_add_ps(acc[t][p], _mm512_mul_ps(_mm512_cvtepi32_ps(isum), d));
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    const BlockQ8_0* x = xs[t];
    for (int p = 0; p < kPairs; ++p) {
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, acc[t][p]);
      for (int k = 0; k < 2; ++k) {
        const int r = 2 * p + k;
        float a[8];
        for (int i = 0; i < 4; ++i) {
          a[i] = lanes[4 * i + 2 * k];
          a[4 + i] = lanes[4 * i + 2 * k + 1];
        }
        if (b < nb) {  // the last nb % 8 blocks, as in rows::dot_rows
          const auto* wr = reinterpret_cast<const BlockQ4_0*>(w + r * row_stride);
          for (int64_t k2 = 0; b + k2 < nb; ++k2) {
            int32_t s = 0;
            for (int j = 0; j < kQK; ++j) s += q4_0_value(wr[b + k2], j) * x[b + k2].qs[j];
            a[k2] = a[k2] +
                    static_cast<float>(s) * (rows::fp16(wr[b + k2].d) * rows::fp16(x[b + k2].d));
          }
        }
        outs[t][r] = rows::fold8(_mm256_loadu_ps(a));
      }
    }
  }
}

template <int R>
void dot_rows(const uint8_t* w, size_t row_stride, const BlockQ8_0* x, int64_t nb, float* out) {
  dot_rows<R, 1>(w, row_stride, &x, nb, &out);
}

// Rows per pass: 16 amortize the activation chunk's permutes over 8 row pairs (on the machine in
// bench/RESULTS.md, L2-resident: 8 rows 23.5 GB/s, 16 rows 26 GB/s).
constexpr int kRows = 16;

// kRows rows at a time, then 8, then pairs, then the 1-row kernel of gemv_rows_internal.h
// (bit-identical).
void dot_any(const uint8_t* base, size_t row_stride, const BlockQ8_0* x, int64_t nb, float* y,
             int64_t r, int64_t n) {
  if (n == kRows) {
    dot_rows<kRows>(base + r * row_stride, row_stride, x, nb, y + r);
    return;
  }
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) dot_rows<8>(base + (r + i) * row_stride, row_stride, x, nb, y + r + i);
  for (; i + 2 <= n; i += 2) dot_rows<2>(base + (r + i) * row_stride, row_stride, x, nb, y + r + i);
  if (i < n)
    rows::dot_rows<BlockQ4_0, true, 1>(base + (r + i) * row_stride, row_stride, x, nb, y + r + i);
}

void gemv_q4_0(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
               int64_t row_end, int64_t n_cols) {
  const auto* base = static_cast<const uint8_t*>(w);
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  const int64_t nb = n_cols / kQK;
  for (int64_t r = row_begin; r < row_end; r += kRows)
    dot_any(base, row_stride, x, nb, y, r, std::min<int64_t>(kRows, row_end - r));
}

// Rows outer (kRows at a time), tokens inner: the rows stay in L1/L2 for every token, and a full
// group of rows serves 4 (then 2) tokens per pass, each row chunk unpacked once for all of them.
// 768 x 2048 weights, 32 tokens, L2-resident, on-CPU: 1 token per pass 44-50 GMAC/s, 2 tokens
// 61, 4 tokens 79 (bench/RESULTS.md "CPU speed").
void gemm_q4_0(const void* w, size_t row_stride, const void* xq, size_t xq_stride, float* y,
               size_t y_stride, int64_t n_tokens, int64_t row_begin, int64_t row_end,
               int64_t n_cols) {
  const auto* base = static_cast<const uint8_t*>(w);
  const auto* xbase = static_cast<const uint8_t*>(xq);
  const int64_t nb = n_cols / kQK;
  auto xt = [&](int64_t t) { return reinterpret_cast<const BlockQ8_0*>(xbase + t * xq_stride); };
  for (int64_t r = row_begin; r < row_end; r += kRows) {
    const int64_t n = std::min<int64_t>(kRows, row_end - r);
    int64_t t = 0;
    if (n == kRows) {
      for (; t + 4 <= n_tokens; t += 4) {
        const BlockQ8_0* xs[4] = {xt(t), xt(t + 1), xt(t + 2), xt(t + 3)};
        float* outs[4] = {y + t * y_stride + r, y + (t + 1) * y_stride + r,
                          y + (t + 2) * y_stride + r, y + (t + 3) * y_stride + r};
        dot_rows<kRows, 4>(base + r * row_stride, row_stride, xs, nb, outs);
      }
      for (; t + 2 <= n_tokens; t += 2) {
        const BlockQ8_0* xs[2] = {xt(t), xt(t + 1)};
        float* outs[2] = {y + t * y_stride + r, y + (t + 1) * y_stride + r};
        dot_rows<kRows, 2>(base + r * row_stride, row_stride, xs, nb, outs);
      }
    }
    for (; t < n_tokens; ++t) dot_any(base, row_stride, xt(t), nb, y + t * y_stride, r, n);
  }
}

}  // namespace

GemvKernels gemv_kernels_avx512_vbmi(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
      return GemvKernels{&gemv_q4_0, &gemm_q4_0};
    default:
      return GemvKernels{nullptr, nullptr};
  }
}

}  // namespace strata::kernels::detail
