// GEMV/GEMM kernels (kernels/gemv*.cpp): every ISA variant against the scalar _ref twin (bit for
// bit) and against a double-precision dot of the dequantized operands, at awkward sizes with
// fresh random blocks (negative, zero and subnormal scales), GEMM == GEMV per element, guard
// values around every output, thread-count independence, and the canonical order itself.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "io/check.h"
#include "kernels/gemv.h"
#include "kernels/gemv_internal.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"

namespace strata::kernels {
namespace {

constexpr uint32_t kGuardBits = 0x7FC0DEAD;  // a NaN payload no kernel produces

float guard_value() {
  return std::bit_cast<float>(kGuardBits);
}
bool is_guard(float f) {
  return std::bit_cast<uint32_t>(f) == kGuardBits;
}

// ---- random operands ----

// An fp16 scale: zero, negative zero, subnormal, or +-2^[-8, 2) with a random mantissa.
uint16_t random_fp16_scale(std::mt19937_64& rng) {
  const int kind = static_cast<int>(rng() % 100);
  if (kind < 6) return 0x0000;
  if (kind < 9) return 0x8000;
  if (kind < 11) return static_cast<uint16_t>((rng() % 0x3FF + 1) | (rng() % 2 ? 0x8000 : 0));
  std::uniform_real_distribution<float> mag(-8.0f, 2.0f);
  const float v = std::exp2(mag(rng)) * (rng() % 2 ? -1.0f : 1.0f);
  return f32_to_fp16(v);
}

// n_rows rows of random blocks, row_stride bytes apart (the gap is filled with garbage too).
std::vector<uint8_t> random_weights(GgmlType t, int64_t n_rows, int64_t n_cols, size_t row_stride,
                                    std::mt19937_64& rng) {
  std::vector<uint8_t> w(static_cast<size_t>(n_rows) * row_stride);
  for (auto& byte : w) byte = static_cast<uint8_t>(rng());
  const auto info = ggml_type_info(t);
  const int64_t nb = n_cols / info.block_size;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r = 0; r < n_rows; ++r) {
    uint8_t* row = w.data() + r * row_stride;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = row + b * info.type_size;
      auto put16 = [](uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); };
      switch (t) {
        case GgmlType::F32: {
          const float v = normal(rng) * std::exp2(static_cast<float>(rng() % 9) - 4.0f);
          std::memcpy(blk, &v, 4);
          break;
        }
        case GgmlType::F16:
          put16(blk, f32_to_fp16(normal(rng)));
          break;
        case GgmlType::BF16:
          put16(blk, f32_to_bf16(normal(rng) * 3.0f));
          break;
        case GgmlType::Q4_0:
        case GgmlType::Q5_0:
        case GgmlType::Q8_0:
        case GgmlType::IQ4_NL:
        case GgmlType::IQ4_XS:  // d first; the scale fields stay random bytes
          put16(blk, random_fp16_scale(rng));
          break;
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
          put16(blk, random_fp16_scale(rng));
          put16(blk + 2, random_fp16_scale(rng));
          break;
        case GgmlType::Q6_K:
          put16(blk + offsetof(BlockQ6_K, d), random_fp16_scale(rng));
          break;
        case GgmlType::Q3_K:
          put16(blk + offsetof(BlockQ3_K, d), random_fp16_scale(rng));
          break;
        case GgmlType::Q4_1:
        case GgmlType::Q5_1:  // d, then m
          put16(blk, random_fp16_scale(rng));
          put16(blk + 2, random_fp16_scale(rng));
          break;
        case GgmlType::Q2_K:
          put16(blk + offsetof(BlockQ2_K, d), random_fp16_scale(rng));
          put16(blk + offsetof(BlockQ2_K, dmin), random_fp16_scale(rng));
          break;
        case GgmlType::MXFP4: {
          const int kind = static_cast<int>(rng() % 20);
          blk[0] = static_cast<uint8_t>(kind == 0 ? rng() % 3 : 110 + rng() % 30);
          break;
        }
        default:
          ADD_FAILURE() << "no generator for " << ggml_type_name(t);
      }
    }
  }
  return w;
}

// One activation row in vec_dot_type(t): random floats, one 32-block in 10 all zero, scales
// varying per block; quantized by quantize_row as the engine does.
std::vector<uint8_t> random_acts(GgmlType t, int64_t n_cols, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n_cols);
  for (int64_t i = 0; i < n_cols; i += 32) {
    const bool zero = rng() % 10 == 0;
    const float s = std::exp2(static_cast<float>(rng() % 9) - 4.0f);
    for (int64_t j = i; j < std::min(i + 32, n_cols); ++j) x[j] = zero ? 0.0f : normal(rng) * s;
  }
  const GgmlType at = vec_dot_type(t);
  std::vector<uint8_t> q(ggml_row_bytes(at, n_cols));
  quantize_row(at, x.data(), q.data(), n_cols);
  return q;
}

// Double dot of the dequantized row and activations, and the magnitude bound sum |w_i x_i| (for
// Q2_K, Q4_K, Q5_K: sum (|d sc q| + |dmin m|)|x_i|, since the kernel's float steps see both
// terms).
struct Reference {
  double dot = 0;
  double magnitude = 0;
};

Reference reference_dot(GgmlType t, const uint8_t* w_row, const uint8_t* xq, int64_t n_cols) {
  std::vector<float> w(n_cols), x(n_cols), w_mag(n_cols);
  dequantize_row(t, w_row, w.data(), n_cols);
  dequantize_row(vec_dot_type(t), xq, x.data(), n_cols);
  if (t == GgmlType::Q2_K || t == GgmlType::Q4_K || t == GgmlType::Q5_K) {
    // d*sc*q - (-|dmin|)*m = |d sc q| + |dmin m|: clear d's sign bit, set dmin's (fp16, little
    // endian: the sign in the second byte; Q4_K and Q5_K lead with d and dmin, Q2_K ends with them)
    std::vector<uint8_t> mag(w_row, w_row + ggml_row_bytes(t, n_cols));
    const size_t block = ggml_type_info(t).type_size;
    const size_t d_at = t == GgmlType::Q2_K ? offsetof(BlockQ2_K, d) : 0;
    for (size_t at = 0; at < mag.size(); at += block) {
      mag[at + d_at + 1] &= 0x7F;
      mag[at + d_at + 3] |= 0x80;
    }
    dequantize_row(t, mag.data(), w_mag.data(), n_cols);
  } else if (t == GgmlType::Q4_1 || t == GgmlType::Q5_1) {
    // d*q + m with both signs cleared: |d q| + |m|
    std::vector<uint8_t> mag(w_row, w_row + ggml_row_bytes(t, n_cols));
    for (size_t at = 0; at < mag.size(); at += ggml_type_info(t).type_size) {
      mag[at + 1] &= 0x7F;
      mag[at + 3] &= 0x7F;
    }
    dequantize_row(t, mag.data(), w_mag.data(), n_cols);
  } else {
    w_mag = w;
  }
  Reference ref;
  for (int64_t i = 0; i < n_cols; ++i) {
    ref.dot += double(w[i]) * x[i];
    ref.magnitude += std::fabs(double(w_mag[i]) * x[i]);
  }
  return ref;
}

// ---- every ISA vs _ref and vs double ----

struct GemvCase {
  GgmlType type;
  Isa isa;
};

std::string case_name(const ::testing::TestParamInfo<GemvCase>& info) {
  return std::string(ggml_type_name(info.param.type)) + "_" + std::string(isa_name(info.param.isa));
}

std::vector<int64_t> col_sizes(GgmlType t) {
  switch (ggml_type_info(t).block_size) {
    case 1:
      return {1, 31, 33, 96, 768, 2816};
    case 32:
      return {32, 96, 768, 2816};
    default:
      return {256, 768, 2816};
  }
}

class GemvIsa : public ::testing::TestWithParam<GemvCase> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam().isa)) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam().isa);
  }
};

TEST_P(GemvIsa, BitIdenticalToRefAndCloseToDouble) {
  const auto [type, isa] = GetParam();
  if (gemv_kernel_isa(type, isa) != isa)
    GTEST_SKIP() << "no " << isa_name(isa) << " kernel for " << ggml_type_name(type)
                 << ", served by " << isa_name(gemv_kernel_isa(type, isa)) << " (tested there)";
  const GemvKernels fast = gemv_kernels(type, isa);
  const GemvKernels ref = gemv_kernels(type, Isa::kRef);
  constexpr int64_t kGuard = 16;
  for (int64_t n_cols : col_sizes(type)) {
    for (int64_t n_rows : {1, 3, 31, 33, 511}) {
      const uint64_t seed = (static_cast<uint64_t>(type) << 40) ^ (uint64_t(isa) << 32) ^
                            (uint64_t(n_cols) << 12) ^ uint64_t(n_rows);
      SCOPED_TRACE("n_cols " + std::to_string(n_cols) + " n_rows " + std::to_string(n_rows) +
                   " seed " + std::to_string(seed));
      std::mt19937_64 rng(seed);
      const size_t row_bytes = ggml_row_bytes(type, n_cols);
      const size_t row_stride = row_bytes + (n_rows % 2 ? 0 : 40);  // padded rows sometimes
      const auto w = random_weights(type, n_rows, n_cols, row_stride, rng);
      const auto xq = random_acts(type, n_cols, rng);

      std::vector<float> y_ref(n_rows + 2 * kGuard, guard_value());
      std::vector<float> y_fast(n_rows + 2 * kGuard, guard_value());
      ref.gemv(w.data(), row_stride, xq.data(), y_ref.data() + kGuard, 0, n_rows, n_cols);
      fast.gemv(w.data(), row_stride, xq.data(), y_fast.data() + kGuard, 0, n_rows, n_cols);
      for (int64_t g = 0; g < kGuard; ++g) {
        ASSERT_TRUE(is_guard(y_fast[g]) && is_guard(y_fast[kGuard + n_rows + g])) << "guard " << g;
        ASSERT_TRUE(is_guard(y_ref[g]) && is_guard(y_ref[kGuard + n_rows + g])) << "guard " << g;
      }
      int mismatches = 0;
      for (int64_t r = 0; r < n_rows; ++r) {
        const float got = y_fast[kGuard + r], want = y_ref[kGuard + r];
        ASSERT_FALSE(std::isnan(want)) << "ref row " << r;
        ASSERT_FALSE(std::isnan(got)) << "row " << r;
        if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want) && ++mismatches <= 5)
          ADD_FAILURE() << "row " << r << ": " << isa_name(isa) << " " << got << " != ref " << want
                        << " (bits " << std::hex << std::bit_cast<uint32_t>(got) << " vs "
                        << std::bit_cast<uint32_t>(want) << ")";
        const Reference d = reference_dot(type, w.data() + r * row_stride, xq.data(), n_cols);
        const double tol = 1e-30 + 1e-5 * d.magnitude;
        if (std::fabs(double(want) - d.dot) > tol && ++mismatches <= 5)
          ADD_FAILURE() << "row " << r << ": ref " << want << " vs double " << d.dot
                        << " (magnitude " << d.magnitude << ")";
      }
      ASSERT_EQ(mismatches, 0);

      // A row sub-range writes exactly that range.
      if (n_rows >= 3) {
        std::vector<float> y_part(n_rows, guard_value());
        fast.gemv(w.data(), row_stride, xq.data(), y_part.data(), 1, n_rows - 1, n_cols);
        ASSERT_TRUE(is_guard(y_part[0]) && is_guard(y_part[n_rows - 1]));
        ASSERT_EQ(std::memcmp(y_part.data() + 1, y_fast.data() + kGuard + 1,
                              (n_rows - 2) * sizeof(float)),
                  0);
      }
    }
  }
}

TEST_P(GemvIsa, GemmEqualsGemvPerToken) {
  const auto [type, isa] = GetParam();
  const GemvKernels k = gemv_kernels(type, isa);
  for (int64_t n_cols : {col_sizes(type)[1], col_sizes(type).back()}) {
    for (int64_t n_tokens : {1, 2, 5}) {
      const int64_t n_rows = 33;
      std::mt19937_64 rng(uint64_t(type) * 7919 + uint64_t(isa) * 131 + uint64_t(n_cols) +
                          uint64_t(n_tokens) * 1000003);
      const size_t row_bytes = ggml_row_bytes(type, n_cols);
      const auto w = random_weights(type, n_rows, n_cols, row_bytes, rng);
      const size_t act_bytes = ggml_row_bytes(vec_dot_type(type), n_cols);
      const size_t xq_stride = act_bytes + 64;  // rows need not be packed
      std::vector<uint8_t> xq(xq_stride * n_tokens);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const auto one = random_acts(type, n_cols, rng);
        std::memcpy(xq.data() + t * xq_stride, one.data(), act_bytes);
      }
      const size_t y_stride = n_rows + 7;
      std::vector<float> y(y_stride * n_tokens, guard_value());
      k.gemm(w.data(), row_bytes, xq.data(), xq_stride, y.data(), y_stride, n_tokens, 0, n_rows,
             n_cols);
      for (int64_t t = 0; t < n_tokens; ++t) {
        std::vector<float> y1(n_rows);
        k.gemv(w.data(), row_bytes, xq.data() + t * xq_stride, y1.data(), 0, n_rows, n_cols);
        for (int64_t r = 0; r < n_rows; ++r)
          ASSERT_EQ(std::bit_cast<uint32_t>(y[t * y_stride + r]), std::bit_cast<uint32_t>(y1[r]))
              << "token " << t << " row " << r;
        for (size_t r = n_rows; r < y_stride; ++r) ASSERT_TRUE(is_guard(y[t * y_stride + r]));
      }
    }
  }
}

std::vector<GemvCase> all_cases() {
  std::vector<GemvCase> cases;
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                     GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::MXFP4,
                     GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                     GgmlType::IQ4_NL, GgmlType::IQ4_XS})
    for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512}) cases.push_back({t, isa});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Kernels, GemvIsa, ::testing::ValuesIn(all_cases()), case_name);

// The multi-row kernels (16/8/2/1-row passes of the AVX-512 VBMI Q4_0 kernel, 16/1 of AVX-512
// Q4_K, 16/4/1 of the others)
// at row counts and start rows that exercise every pass and every tail of 8 blocks, with rows
// packed tightly (the last row ends at the buffer's end, so an over-read would be caught by ASan)
// and as a GEMM of 7 tokens (passes of 4, 2 and 1).
TEST(GemvRows, AwkwardShapesBitIdenticalToRef) {
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                        GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K,
                        GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS}) {
    // avx512 is the VBMI/GFNI Q4_0 kernel where the CPU has them; "avx512-base" the table
    // without them, which such CPUs never get from gemv_kernels.
    for (const char* isa_label : {"avx2", "avx512", "avx512-base"}) {
      const std::string_view label = isa_label;
      const Isa isa = label == "avx2" ? Isa::kAvx2 : Isa::kAvx512;
      if (!isa_supported(isa) || gemv_kernel_isa(type, isa) != isa) continue;
      const GemvKernels fast = label == "avx512-base"
                                   ? strata::kernels::detail::gemv_kernels_avx512_base(type)
                                   : gemv_kernels(type, isa);
      if (fast.gemv == nullptr) continue;
      const GemvKernels ref = gemv_kernels(type, Isa::kRef);
      // K-quants: 1, 3, 8, 9 and 17 super-blocks (groups of 8 with every tail).
      const bool k_quant = ggml_type_info(type).block_size == kQK_K;
      // Float types: also rows that end in a partial (zero-padded) 32-element block.
      const bool unblocked = ggml_type_info(type).block_size == 1;
      const std::vector<int64_t> cols = k_quant ? std::vector<int64_t>{256, 768, 2048, 2304, 4352}
                                        : unblocked
                                            ? std::vector<int64_t>{1, 31, 32, 33, 224, 2048, 2085}
                                            : std::vector<int64_t>{32, 224, 256, 288, 2048, 2080};
      for (int64_t n_cols : cols) {
        for (int64_t n_rows : {2, 7, 8, 9, 15, 16, 17, 24, 33, 47}) {
          SCOPED_TRACE(std::string(ggml_type_name(type)) + " " + std::string(label) + " n_cols " +
                       std::to_string(n_cols) + " n_rows " + std::to_string(n_rows));
          std::mt19937_64 rng(uint64_t(type) * 31 + uint64_t(n_cols) * 1009 + uint64_t(n_rows));
          const size_t row_bytes = ggml_row_bytes(type, n_cols);
          const auto w = random_weights(type, n_rows, n_cols, row_bytes, rng);
          const int64_t n_tokens = 7;  // 4 + 2 + 1 tokens per GEMM pass
          const size_t act_bytes = ggml_row_bytes(vec_dot_type(type), n_cols);
          std::vector<uint8_t> xq(act_bytes * n_tokens);
          for (int64_t t = 0; t < n_tokens; ++t) {
            const auto one = random_acts(type, n_cols, rng);
            std::memcpy(xq.data() + t * act_bytes, one.data(), act_bytes);
          }
          for (int64_t begin : {int64_t{0}, int64_t{1}}) {
            std::vector<float> y_ref(n_rows * n_tokens, guard_value());
            std::vector<float> y_fast(n_rows * n_tokens, guard_value());
            std::vector<float> y_gemm(n_rows * n_tokens, guard_value());
            for (int64_t t = 0; t < n_tokens; ++t) {
              ref.gemv(w.data(), row_bytes, xq.data() + t * act_bytes, y_ref.data() + t * n_rows,
                       begin, n_rows, n_cols);
              fast.gemv(w.data(), row_bytes, xq.data() + t * act_bytes, y_fast.data() + t * n_rows,
                        begin, n_rows, n_cols);
            }
            fast.gemm(w.data(), row_bytes, xq.data(), act_bytes, y_gemm.data(), n_rows, n_tokens,
                      begin, n_rows, n_cols);
            for (size_t i = 0; i < y_ref.size(); ++i) {
              ASSERT_EQ(std::bit_cast<uint32_t>(y_fast[i]), std::bit_cast<uint32_t>(y_ref[i]))
                  << "gemv, begin " << begin << " element " << i;
              ASSERT_EQ(std::bit_cast<uint32_t>(y_gemm[i]), std::bit_cast<uint32_t>(y_ref[i]))
                  << "gemm, begin " << begin << " element " << i;
            }
          }
        }
      }
    }
  }
}

// A GEMM over more tokens than one batch of prepared activations (AVX-512 Q4_K prepares 64 at a
// time) equals the reference GEMV per token.
TEST(GemvRows, ManyTokenGemmBitIdenticalToRef) {
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_K}) {
    const Isa isa = best_isa();
    const GemvKernels fast = gemv_kernels(type, isa);
    const GemvKernels ref = gemv_kernels(type, Isa::kRef);
    const int64_t n_rows = 19, n_tokens = 70, n_cols = 2304;
    std::mt19937_64 rng(uint64_t(type) * 977 + 5);
    const size_t row_bytes = ggml_row_bytes(type, n_cols);
    const auto w = random_weights(type, n_rows, n_cols, row_bytes, rng);
    const size_t act_bytes = ggml_row_bytes(vec_dot_type(type), n_cols);
    std::vector<uint8_t> xq(act_bytes * n_tokens);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const auto one = random_acts(type, n_cols, rng);
      std::memcpy(xq.data() + t * act_bytes, one.data(), act_bytes);
    }
    std::vector<float> y_gemm(n_rows * n_tokens, guard_value()), y_ref(n_rows, guard_value());
    fast.gemm(w.data(), row_bytes, xq.data(), act_bytes, y_gemm.data(), n_rows, n_tokens, 0, n_rows,
              n_cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      ref.gemv(w.data(), row_bytes, xq.data() + t * act_bytes, y_ref.data(), 0, n_rows, n_cols);
      for (int64_t r = 0; r < n_rows; ++r)
        ASSERT_EQ(std::bit_cast<uint32_t>(y_gemm[t * n_rows + r]),
                  std::bit_cast<uint32_t>(y_ref[r]))
            << ggml_type_name(type) << " token " << t << " row " << r;
    }
  }
}

// ---- whole-matrix entry points ----

TEST(GemvThreads, ResultIndependentOfThreadCount) {
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::F16}) {
    const int64_t n_rows = 1000, n_cols = 2048;
    std::mt19937_64 rng(uint64_t(type) + 99);
    const size_t row_bytes = ggml_row_bytes(type, n_cols);
    const auto w = random_weights(type, n_rows, n_cols, row_bytes, rng);
    const auto xq = random_acts(type, n_cols, rng);
    std::vector<float> y1(n_rows), yn(n_rows);
    gemv(nullptr, type, w.data(), row_bytes, xq.data(), y1.data(), n_rows, n_cols);
    for (int n_threads : {1, 2, 3, 7}) {
      ThreadPool pool(n_threads, /*pin=*/false);
      std::fill(yn.begin(), yn.end(), guard_value());
      gemv(&pool, type, w.data(), row_bytes, xq.data(), yn.data(), n_rows, n_cols);
      ASSERT_EQ(std::memcmp(y1.data(), yn.data(), n_rows * sizeof(float)), 0)
          << ggml_type_name(type) << " with " << n_threads << " threads";

      const int64_t n_tokens = 3;
      const size_t act_bytes = xq.size();
      std::vector<uint8_t> x3(act_bytes * n_tokens);
      for (int64_t t = 0; t < n_tokens; ++t)
        std::memcpy(x3.data() + t * act_bytes, xq.data(), act_bytes);
      std::vector<float> y3(n_rows * n_tokens, guard_value());
      gemm(&pool, type, w.data(), row_bytes, x3.data(), act_bytes, y3.data(), n_rows, n_tokens,
           n_rows, n_cols);
      for (int64_t t = 0; t < n_tokens; ++t)
        ASSERT_EQ(std::memcmp(y1.data(), y3.data() + t * n_rows, n_rows * sizeof(float)), 0)
            << "gemm token " << t << " with " << n_threads << " threads";
    }
  }
}

TEST(GemvDispatch, BestIsaIsSupportedAndUnsupportedTypesThrow) {
  EXPECT_TRUE(isa_supported(best_isa()));
  EXPECT_TRUE(isa_supported(Isa::kRef));
  EXPECT_EQ(isa_name(Isa::kAvx512), "avx512");
  EXPECT_THROW(gemv_kernels(GgmlType::IQ2_XXS, Isa::kRef), Error);
}

// The ISA knob's cap: best_isa() and every dispatch stay at or below it, and lifting it restores
// the CPU's best.
TEST(GemvDispatch, IsaCapLimitsTheDispatch) {
  const Isa best = best_isa();
  for (const Isa cap : {Isa::kRef, Isa::kAvx2}) {
    set_isa_cap(cap);
    EXPECT_LE(best_isa(), cap);
    EXPECT_FALSE(isa_supported(Isa::kAvx512));
    EXPECT_LE(gemv_kernel_isa(GgmlType::Q4_0, Isa::kAvx512), cap);
    if (cap == Isa::kRef) {
      EXPECT_FALSE(isa_supported(Isa::kAvx2));
    }
  }
  set_isa_cap(Isa::kAvx512);
  EXPECT_EQ(best_isa(), best);
  EXPECT_EQ(isa_cap(), Isa::kAvx512);
}

// ---- the canonical order, written out independently ----

// Q8_0 weights with block scales spanning 2^-14..2^15, so that summing the block results in any
// other order changes the float result: the kernels must reproduce lane b%8 accumulation and the
// ((0+4)+(2+6))+((1+5)+(3+7)) fold exactly.
TEST(CanonicalOrder, Q8_0FollowsTheWrittenSpec) {
  const int64_t nb = 29, n_cols = nb * kQK;
  std::vector<BlockQ8_0> w(nb), x(nb);
  float want = 0, naive = 0;
  // Draw until the data is order-sensitive (the obvious sequential sum differs), so the test can
  // tell the canonical order from any other.
  for (uint64_t seed = 1; std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(naive); ++seed) {
    ASSERT_LT(seed, 1000u);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
    for (int64_t b = 0; b < nb; ++b) {
      w[b].d = f32_to_fp16(std::exp2(static_cast<float>(rng() % 12) - 6.0f) * mantissa(rng));
      x[b].d = f32_to_fp16((rng() % 2 ? -1.0f : 1.0f) * 0.0123f * mantissa(rng));
      for (int j = 0; j < kQK; ++j) {
        w[b].qs[j] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
        x[b].qs[j] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
      }
    }
    float acc[8] = {};
    naive = 0;
    for (int64_t b = 0; b < nb; ++b) {
      int32_t isum = 0;
      for (int j = 0; j < kQK; ++j) isum += w[b].qs[j] * x[b].qs[j];
      const float r = static_cast<float>(isum) * (fp16_to_f32(w[b].d) * fp16_to_f32(x[b].d));
      acc[b % 8] = acc[b % 8] + r;
      naive = naive + r;
    }
    want = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  }
  for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    float y = 0;
    gemv_kernels(GgmlType::Q8_0, isa).gemv(w.data(), 0, x.data(), &y, 0, 1, n_cols);
    EXPECT_EQ(std::bit_cast<uint32_t>(y), std::bit_cast<uint32_t>(want)) << isa_name(isa);
  }
}

TEST(CanonicalOrder, F32FollowsTheWrittenSpec) {
  const int64_t n_cols = 32 * 13 + 5;
  std::mt19937_64 rng(77);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(n_cols), x(n_cols);
  for (int64_t i = 0; i < n_cols; ++i) {
    w[i] = normal(rng) * std::exp2(static_cast<float>(rng() % 20) - 10.0f);
    x[i] = normal(rng);
  }
  float acc[8] = {};
  for (int64_t base = 0; base < n_cols; base += 32) {
    auto at = [&](const std::vector<float>& v, int64_t j) {
      return base + j < n_cols ? v[base + j] : 0.0f;
    };
    for (int l = 0; l < 8; ++l) {
      float a = at(w, l) * at(x, l);
      a = std::fma(at(w, l + 16), at(x, l + 16), a);
      float c = at(w, l + 8) * at(x, l + 8);
      c = std::fma(at(w, l + 24), at(x, l + 24), c);
      acc[l] = acc[l] + (a + c);
    }
  }
  const float want =
      ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    float y = 0;
    gemv_kernels(GgmlType::F32, isa).gemv(w.data(), 0, x.data(), &y, 0, 1, n_cols);
    EXPECT_EQ(std::bit_cast<uint32_t>(y), std::bit_cast<uint32_t>(want)) << isa_name(isa);
  }
}

}  // namespace
}  // namespace strata::kernels
