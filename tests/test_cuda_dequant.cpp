// Tests for cuda/: device dequantization bit for bit against the CPU (Q4_0, Q8_0, Q4_K, Q6_K, F32,
// F16, BF16 against an independent reference written from the ggml block layouts; Q4_1, Q5_0,
// Q5_1, MXFP4, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q5_K against the CPU's kernels::dequantize_row, which
// test_quant checks); the host emulation of the same kernels; CUDA_CHECK errors; cuBLASLt F32
// matmul. Device tests GTEST_SKIP without a GPU; the CudaHost.* tests need none (also registered as
// a `unit` test in tests/gpu.cmake).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/blaslt.h"
#include "cuda/cuda_check.h"
#include "cuda/dense.h"
#include "cuda/dequant.h"
#include "cuda/grouped.h"
#include "cuda/runtime.h"
#include "io/check.h"
#include "io/ggml_type.h"
#include "kernels/quant.h"

namespace strata::cuda {
namespace {

using kernels::BlockQ4_0;
using kernels::BlockQ4_K;
using kernels::BlockQ6_K;
using kernels::BlockQ8_0;

// ---- Reference: per-block loops in the order of ggml's dequantize_row_* (this file is compiled
// with -ffp-contract=off so products are rounded exactly as there).

float ref_fp16(uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    mag = mant == 0 ? INFINITY : NAN;
  } else {
    mag = std::ldexp(static_cast<float>(1024 + mant), exp - 25);
  }
  return sign ? -mag : mag;
}

float ref_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

void ref_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = ref_fp16(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[i * 32 + j] = ((x[i].qs[j] & 0x0F) - 8) * d;
      y[i * 32 + j + 16] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void ref_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = ref_fp16(x[i].d);
    for (int j = 0; j < 32; ++j) y[i * 32 + j] = x[i].qs[j] * d;
  }
}

void ref_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void ref_q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = ref_fp16(x[i].d);
    const float dmin = ref_fp16(x[i].dmin);
    for (int j = 0, is = 0; j < 256; j += 64, is += 2) {
      uint8_t sc, m;
      ref_scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ref_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
    }
  }
}

void ref_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = ref_fp16(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < 256; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = static_cast<int8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void ref_dequantize(GgmlType t, const void* src, float* y, int64_t n) {
  switch (t) {
    case GgmlType::Q4_0:
      ref_q4_0(static_cast<const BlockQ4_0*>(src), y, n / 32);
      return;
    case GgmlType::Q8_0:
      ref_q8_0(static_cast<const BlockQ8_0*>(src), y, n / 32);
      return;
    case GgmlType::Q4_K:
      ref_q4_k(static_cast<const BlockQ4_K*>(src), y, n / 256);
      return;
    case GgmlType::Q6_K:
      ref_q6_k(static_cast<const BlockQ6_K*>(src), y, n / 256);
      return;
    case GgmlType::F32:
      std::memcpy(y, src, n * sizeof(float));
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) y[i] = ref_fp16(static_cast<const uint16_t*>(src)[i]);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) y[i] = ref_bf16(static_cast<const uint16_t*>(src)[i]);
      return;
    default:
      FAIL() << "no reference for " << ggml_type_name(t);
  }
}

// ---- Random inputs: random bytes, with every fp16/bf16/f32 value finite (exponents drawn over
// the whole finite range, subnormals included).

uint16_t random_fp16(std::mt19937& rng) {
  const uint16_t sign = (rng() & 1) << 15;
  const uint16_t exp = rng() % 31;  // 0..30: zero/subnormal .. largest finite
  return sign | (exp << 10) | (rng() & 0x3FF);
}

void put_u16(uint8_t* p, uint16_t v) {
  std::memcpy(p, &v, 2);
}

std::vector<uint8_t> random_row(GgmlType t, int64_t n, std::mt19937& rng) {
  const GgmlTypeInfo info = ggml_type_info(t);
  const int64_t n_blocks = n / info.block_size;
  std::vector<uint8_t> bytes(n_blocks * info.type_size);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* blk = bytes.data() + i * info.type_size;
    switch (t) {
      case GgmlType::Q4_0:
        put_u16(blk + offsetof(BlockQ4_0, d), random_fp16(rng));
        break;
      case GgmlType::Q8_0:
        put_u16(blk + offsetof(BlockQ8_0, d), random_fp16(rng));
        break;
      case GgmlType::Q4_K:
        put_u16(blk + offsetof(BlockQ4_K, d), random_fp16(rng));
        put_u16(blk + offsetof(BlockQ4_K, dmin), random_fp16(rng));
        break;
      case GgmlType::Q5_K:
        put_u16(blk + offsetof(kernels::BlockQ5_K, d), random_fp16(rng));
        put_u16(blk + offsetof(kernels::BlockQ5_K, dmin), random_fp16(rng));
        break;
      case GgmlType::Q2_K:
        put_u16(blk + offsetof(kernels::BlockQ2_K, d), random_fp16(rng));
        put_u16(blk + offsetof(kernels::BlockQ2_K, dmin), random_fp16(rng));
        break;
      case GgmlType::Q3_K:
        put_u16(blk + offsetof(kernels::BlockQ3_K, d), random_fp16(rng));
        break;
      case GgmlType::Q4_1:
        put_u16(blk + offsetof(kernels::BlockQ4_1, d), random_fp16(rng));
        put_u16(blk + offsetof(kernels::BlockQ4_1, m), random_fp16(rng));
        break;
      case GgmlType::Q5_1:
        put_u16(blk + offsetof(kernels::BlockQ5_1, d), random_fp16(rng));
        put_u16(blk + offsetof(kernels::BlockQ5_1, m), random_fp16(rng));
        break;
      case GgmlType::Q5_0:
        put_u16(blk + offsetof(kernels::BlockQ5_0, d), random_fp16(rng));
        break;
      case GgmlType::IQ4_NL:
        put_u16(blk + offsetof(kernels::BlockIQ4_NL, d), random_fp16(rng));
        break;
      case GgmlType::IQ4_XS:
        put_u16(blk + offsetof(kernels::BlockIQ4_XS, d), random_fp16(rng));
        break;
      case GgmlType::MXFP4:  // any exponent byte is a finite power of two
        break;
      case GgmlType::Q6_K:
        put_u16(blk + offsetof(BlockQ6_K, d), random_fp16(rng));
        break;
      case GgmlType::F16:
        put_u16(blk, random_fp16(rng));
        break;
      case GgmlType::BF16: {
        const uint16_t exp = rng() % 255;  // not 255: no Inf/NaN
        put_u16(blk, static_cast<uint16_t>(((rng() & 1) << 15) | (exp << 7) | (rng() & 0x7F)));
        break;
      }
      case GgmlType::F32: {
        const float f = std::ldexp(static_cast<float>(static_cast<int32_t>(rng())),
                                   static_cast<int>(rng() % 60) - 60);
        std::memcpy(blk, &f, 4);
        break;
      }
      default:
        break;
    }
  }
  return bytes;
}

// Types with an independent reference above, and those checked against the CPU's dequantize_row.
const GgmlType kRefTypes[] = {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K,
                              GgmlType::F32,  GgmlType::F16,  GgmlType::BF16};
const GgmlType kCpuPeerTypes[] = {GgmlType::Q4_1,  GgmlType::Q5_0,   GgmlType::Q5_1,
                                  GgmlType::MXFP4, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                                  GgmlType::Q2_K,  GgmlType::Q3_K,   GgmlType::Q5_K};

std::vector<GgmlType> all_types() {
  std::vector<GgmlType> v(std::begin(kRefTypes), std::end(kRefTypes));
  v.insert(v.end(), std::begin(kCpuPeerTypes), std::end(kCpuPeerTypes));
  return v;
}

// What the device must produce: the independent reference where there is one, else the CPU's.
void want_dequantize(GgmlType t, const void* src, float* y, int64_t n) {
  for (GgmlType r : kRefTypes)
    if (r == t) return ref_dequantize(t, src, y, n);
  kernels::dequantize_row(t, src, y, n);
}
const int64_t kBlockCounts[] = {1, 3, 31, 33, 511, 1023};

// Bitwise comparison (the kernels promise the CPU's exact bits); prints the first mismatches.
void expect_same_bits(const float* got, const float* want, int64_t n, const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 || std::isnan(got[i])) {
      if (++bad <= 5)
        ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " elements differ";
}

std::string case_name(GgmlType t, int64_t n) {
  return std::string(ggml_type_name(t)) + " n=" + std::to_string(n);
}

// ---- Host-only tests (no GPU needed).

TEST(CudaHost, EmulatedKernelsMatchReference) {
  std::mt19937 rng(1234);
  for (GgmlType t : all_types()) {
    ASSERT_TRUE(cuda_dequantize_supported(t)) << ggml_type_name(t);
    for (int64_t nb : kBlockCounts) {
      const int64_t n = nb * ggml_type_info(t).block_size;
      const std::vector<uint8_t> src = random_row(t, n, rng);
      std::vector<float> want(n), got(n + 8, -7.0f);
      want_dequantize(t, src.data(), want.data(), n);
      cuda_dequantize_emulated(t, src.data(), got.data(), n);
      expect_same_bits(got.data(), want.data(), n, case_name(t, n));
      for (int k = 0; k < 8; ++k) EXPECT_EQ(got[n + k], -7.0f) << "wrote past the end";
    }
  }
}

// Invariant 1 across folders: the CPU's kernels::dequantize_row gives the same bits, so the device
// kernels (checked against the same reference below) agree with the CPU path.
TEST(CudaHost, CpuDequantizeRowMatchesReference) {
  std::mt19937 rng(4321);
  for (GgmlType t : kRefTypes) {
    for (int64_t nb : kBlockCounts) {
      const int64_t n = nb * ggml_type_info(t).block_size;
      const std::vector<uint8_t> src = random_row(t, n, rng);
      std::vector<float> want(n), got(n);
      ref_dequantize(t, src.data(), want.data(), n);
      kernels::dequantize_row(t, src.data(), got.data(), n);
      expect_same_bits(got.data(), want.data(), n, "kernels::dequantize_row " + case_name(t, n));
    }
  }
}

TEST(CudaHost, Fp16SpecialValues) {
  const uint16_t h[] = {0x0000, 0x8000, 0x0001, 0x83FF, 0x0400,
                        0x3C00, 0xC000, 0x7BFF, 0x7C00, 0xFC00};
  const float want[] = {0.0f, -0.0f, 0x1p-24f, -0x3FFp-24f, 0x1p-14f,
                        1.0f, -2.0f, 65504.0f, INFINITY,    -INFINITY};
  float got[10];
  cuda_dequantize_emulated(GgmlType::F16, h, got, 10);
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << i << ": " << got[i] << " vs " << want[i];
  const uint16_t nan = 0x7E00;
  cuda_dequantize_emulated(GgmlType::F16, &nan, got, 1);
  EXPECT_TRUE(std::isnan(got[0]));
}

// CUDA_DENSE=2 dequantizes any matrix the dense GEMV holds: every grouped type has a kernel.
TEST(CudaHost, EveryGroupedTypeHasADequantizer) {
  for (int v = 0; v < 64; ++v) {
    const auto t = static_cast<GgmlType>(v);
    if (grouped_supported(t)) {
      EXPECT_TRUE(cuda_dequantize_supported(t)) << ggml_type_name(t);
      EXPECT_TRUE(dense_gemm_supported(t)) << ggml_type_name(t);
    }
  }
}

TEST(CudaHost, UnsupportedTypeThrows) {
  EXPECT_FALSE(cuda_dequantize_supported(GgmlType::Q8_K));
  EXPECT_FALSE(cuda_dequantize_supported(GgmlType::IQ2_XXS));
  std::vector<uint8_t> src(1024);
  std::vector<float> dst(256);
  try {
    cuda_dequantize_emulated(GgmlType::IQ2_XXS, src.data(), dst.data(), 256);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("IQ2_XXS"), std::string::npos) << e.what();
  }
}

TEST(CudaHost, CheckMacroThrowsNamingTheCall) {
  try {
    CUDA_CHECK(static_cast<cudaError_t>(cudaErrorInvalidValue));
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCuda);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cudaErrorInvalidValue"), std::string::npos) << msg;
    EXPECT_NE(msg.find("failed"), std::string::npos) << msg;
  }
  try {
    CUBLAS_CHECK(7 /* CUBLAS_STATUS_INVALID_VALUE */);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCuda);
  }
}

TEST(CudaHost, DeviceCountIsNeverAnError) {
  int n = -1;
  EXPECT_NO_THROW(n = cuda_device_count());
  EXPECT_GE(n, 0);
  const std::string line = cuda_describe();
  EXPECT_NE(line.find("CUDA"), std::string::npos) << line;
  std::printf("%s\n", line.c_str());
}

// ---- Device tests.

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_describe()

TEST(CudaDequant, DeviceMatchesReferenceBitForBit) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(99);
  Stream stream;
  constexpr int kGuard = 64;
  const uint32_t kSentinel = 0x7FC0DEADu;  // a NaN pattern no kernel writes
  int launches = 0;
  for (GgmlType t : all_types()) {
    for (int64_t nb : kBlockCounts) {
      const int64_t n = nb * ggml_type_info(t).block_size;
      const std::vector<uint8_t> src = random_row(t, n, rng);
      std::vector<float> want(n);
      want_dequantize(t, src.data(), want.data(), n);

      DeviceBuffer d_src(src.size());
      DeviceBuffer d_dst((n + kGuard) * sizeof(float));
      std::vector<uint32_t> init(n + kGuard, kSentinel);
      copy_to_device(d_src.data(), src.data(), src.size());
      copy_to_device(d_dst.data(), init.data(), init.size() * 4);
      // Alternate the default stream and a created one.
      void* s = (++launches % 2 == 0) ? stream.handle() : nullptr;
      cuda_dequantize(t, d_src.data(), d_dst.as<float>(), n, s);
      if (s != nullptr) stream.synchronize();
      cuda_synchronize();

      std::vector<float> got(n + kGuard);
      copy_to_host(got.data(), d_dst.data(), got.size() * sizeof(float));
      expect_same_bits(got.data(), want.data(), n, case_name(t, n));
      for (int k = 0; k < kGuard; ++k) {
        uint32_t bits;
        std::memcpy(&bits, &got[n + k], 4);
        ASSERT_EQ(bits, kSentinel) << case_name(t, n) << ": wrote past the end";
      }
    }
  }
}

TEST(CudaDequant, LargeRowUsesGridStride) {
  SKIP_WITHOUT_GPU();
  // More elements than the capped grid (2^20 blocks of 256 threads) has threads: the grid-stride
  // loop must cover the tail.
  std::mt19937 rng(5);
  const int64_t n = (int64_t{1} << 28) + 3 * 32;
  const std::vector<uint8_t> src = random_row(GgmlType::Q8_0, n, rng);
  std::vector<float> want(n);
  ref_dequantize(GgmlType::Q8_0, src.data(), want.data(), n);
  DeviceBuffer d_src(src.size());
  DeviceBuffer d_dst(n * sizeof(float));
  copy_to_device(d_src.data(), src.data(), src.size());
  cuda_dequantize(GgmlType::Q8_0, d_src.data(), d_dst.as<float>(), n, nullptr);
  cuda_synchronize();
  std::vector<float> got(n);
  copy_to_host(got.data(), d_dst.data(), n * sizeof(float));
  expect_same_bits(got.data(), want.data(), n, "Q8_0 2^28 + 96");
}

TEST(CudaDequant, ZeroElementsIsANoOp) {
  SKIP_WITHOUT_GPU();
  cuda_dequantize(GgmlType::Q4_K, nullptr, nullptr, 0, nullptr);
  cuda_synchronize();
}

TEST(CudaBlasLt, MatmulF32MatchesCpu) {
  SKIP_WITHOUT_GPU();
  BlasLt lt;
  ASSERT_NE(lt.handle(), nullptr);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  struct Shape {
    int64_t n_out, n_in, n_tokens;
  };
  for (const Shape& s :
       {Shape{1, 1, 1}, Shape{33, 64, 1}, Shape{511, 96, 7}, Shape{128, 1023, 31}}) {
    std::vector<float> w(s.n_out * s.n_in), x(s.n_tokens * s.n_in), y(s.n_tokens * s.n_out);
    for (auto& v : w) v = u(rng);
    for (auto& v : x) v = u(rng);
    DeviceBuffer d_w(w.size() * 4), d_x(x.size() * 4), d_y(y.size() * 4);
    copy_to_device(d_w.data(), w.data(), w.size() * 4);
    copy_to_device(d_x.data(), x.data(), x.size() * 4);
    lt.matmul_f32(d_w.as<float>(), d_x.as<float>(), d_y.as<float>(), s.n_out, s.n_in, s.n_tokens,
                  nullptr);
    cuda_synchronize();
    copy_to_host(y.data(), d_y.data(), y.size() * 4);
    int bad = 0;
    for (int64_t t = 0; t < s.n_tokens; ++t) {
      for (int64_t o = 0; o < s.n_out; ++o) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < s.n_in; ++k) {
          ref += double{w[o * s.n_in + k]} * x[t * s.n_in + k];
          mag += std::fabs(double{w[o * s.n_in + k]} * x[t * s.n_in + k]);
        }
        const double got = y[t * s.n_out + o];
        // A loose FP32 accumulation bound (relative to sum |w·x|).
        if (!(std::fabs(got - ref) <= 1e-6 + 1e-5 * mag) && ++bad <= 5)
          ADD_FAILURE() << "y[" << t << "," << o << "] = " << got << " want " << ref
                        << " (n_out=" << s.n_out << " n_in=" << s.n_in << ")";
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

}  // namespace
}  // namespace strata::cuda
