// GEMV/GEMM dispatch: picks the ISA once from CPUID, hands out per-type kernel tables, and splits
// whole matrices over the thread pool by rows. Tested by tests/test_gemv.cpp; measured by
// bench/bench_gemv.cpp.
//
// THE CANONICAL ORDER. Every variant (gemv_ref.cpp, gemv_avx2.cpp, gemv_avx512.cpp, and the CUDA
// kernels) computes each output element y[r] = W_r . x in exactly this float-operation sequence,
// so results are bit-identical across ISAs, thread counts and GEMV vs GEMM. Kernels are compiled
// with -ffp-contract=off; "fma" below means one fused multiply-add (std::fma / vfmadd), every
// other * + - is a separately rounded IEEE float op with round-to-nearest-even.
//
// 1. The row is cut into blocks b = 0, 1, ..., nb-1:
//      Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, IQ4_NL: 32 elements (one ggml block), activations
//                               Q8_0;
//      Q2_K .. Q6_K, IQ4_XS:    256 elements (one super-block), activations Q8_K;
//      F32, F16, BF16:          32 elements, activations of the same type, the last block
//                               zero-padded when n_cols % 32 != 0.
// 2. Each block gives one float r_b (integer sums are exact int32; (float)i rounds to nearest):
//      Q4_0/Q5_0/Q8_0/IQ4_NL: isum = sum_j q_w[j] * q_x[j], q_w the signed value (Q4_0
//                      nibble-8, Q5_0 5-bit-16, Q8_0 int8, IQ4_NL kIq4nlValues[nibble]);
//                      r_b = (float)isum * (fp16(d_w) * fp16(d_x))
//      Q4_1/Q5_1:      isum = sum_j c_w[j] * q_x[j] (c_w the unsigned code), xsum = sum_j q_x[j];
//                      r_b = (float)isum * (fp16(d_w) * fp16(d_x))
//                            + fp16(m_w) * (fp16(d_x) * (float)xsum)
//      MXFP4:          isum = sum_j kv[code_j] * q_x[j] (kv = doubled E2M1, integers in
//                      [-12, 12]);  r_b = (float)isum * (e8m0_half(e_w) * fp16(d_x)),
//                      e8m0_half(e) = 2^(e-128)
//      Q4_K, Q5_K:     sumi = sum_{s<8} sc_s * (sum_{l<32} q[32s+l] * q8[32s+l]), q the 4-bit
//                      (Q4_K) or 5-bit (Q5_K) unsigned code
//                      summ = sum_{s<8} m_s * (bsums[2s] + bsums[2s+1])
//                      dd = fp16(d_w) * d_x;  dm = fp16(dmin_w) * d_x
//                      r_b = dd * (float)sumi - dm * (float)summ
//      Q2_K:           sumi = sum_{g<16} sc_g * (sum_{l<16} q2[16g+l] * q8[16g+l]), q2 in [0,3]
//                      summ = sum_{g<16} m_g * bsums[g] (sc_g, m_g: the group's 4-bit fields)
//                      r_b = dd * (float)sumi - dm * (float)summ, dd and dm as for Q4_K
//      Q3_K, Q6_K:     sumi = sum_{g<16} sc_g * (sum_{l<16} q[16g+l] * q8[16g+l]), q the signed
//                      value (Q3_K in [-4,3], Q6_K in [-32,31]), sc_g the signed group scale
//                      (Q3_K: its 6-bit field - 32);  r_b = (fp16(d_w) * d_x) * (float)sumi
//      IQ4_XS:         sumi = sum_{s<8} sc_s * (sum_{l<32} v[32s+l] * q8[32s+l]), v the table
//                      value of the code, sc_s the 6-bit field - 32;
//                      r_b = (fp16(d_w) * d_x) * (float)sumi
//      F32/F16/BF16:   not folded: the block gives 8 lane values p_l, l < 8 (values converted
//                      to float exactly):
//                        a = w[l]*x[l];      a = fma(w[l+16], x[l+16], a)
//                        c = w[l+8]*x[l+8];  c = fma(w[l+24], x[l+24], c)
//                        p_l = a + c
// 3. Eight float accumulators acc[0..7] start at +0. For b = 0, 1, ..., nb-1 in order:
//      quantized: acc[b % 8] = acc[b % 8] + r_b        (plain add, no fma)
//      float:     acc[l] = acc[l] + p_l for every l    (the block's lanes, in lane order)
// 4. y = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
//
// Consequences for fast variants: a SIMD kernel may sum integers in any order (they are exact)
// and may pad a partial group of 8 blocks with r = +0 (acc never holds -0, so +0 is an
// identity); it must keep exactly 8 float accumulators, so AVX-512 kernels widen only the
// integer work. Q8_K activations must come from quantize_row (the kernels trust bsums).
#include "kernels/gemv.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "io/check.h"
#include "kernels/cpu_features.h"
#include "kernels/gemv_internal.h"
#include "kernels/interleave.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"

namespace strata::kernels {
namespace {

std::atomic<Isa> g_isa_cap{Isa::kAvx512};

// What the CPU itself can run, without the cap.
bool cpu_supports(Isa isa) {
  switch (isa) {
    case Isa::kRef:
      return true;
    case Isa::kAvx2:
      return cpu_has(CpuFeature::kAvx2) && cpu_has(CpuFeature::kFma) &&
             cpu_has(CpuFeature::kF16c) && cpu_has(CpuFeature::kBmi2);
    case Isa::kAvx512:
      return cpu_supports(Isa::kAvx2) && cpu_has(CpuFeature::kAvx512f) &&
             cpu_has(CpuFeature::kAvx512bw) && cpu_has(CpuFeature::kAvx512vl) &&
             cpu_has(CpuFeature::kAvx512dq) && cpu_has(CpuFeature::kAvx512vnni);
  }
  return false;
}

bool cpu_has(Isa isa) {
  return isa <= g_isa_cap.load(std::memory_order_relaxed) && cpu_supports(isa);
}

GemvKernels table_entry(GgmlType type, Isa isa) {
  switch (isa) {
    case Isa::kRef:
      return detail::gemv_kernels_ref(type);
    case Isa::kAvx2:
      return detail::gemv_kernels_avx2(type);
    case Isa::kAvx512:
      return detail::gemv_kernels_avx512(type);
  }
  return GemvKernels{nullptr, nullptr};
}

Isa isa_below(Isa isa) {
  return isa == Isa::kAvx512 ? Isa::kAvx2 : Isa::kRef;
}

// The ISA that actually serves (type, isa): isa itself when compiled for the type and supported
// by this CPU, else the next one below.
Isa resolve(GgmlType type, Isa isa, GemvKernels* out) {
  if (!gemv_supported(type))
    fail(ErrorKind::kUnsupported, "no CPU matmul kernel for weight type {}", ggml_type_name(type));
  for (;;) {
    if (cpu_has(isa)) {
      *out = table_entry(type, isa);
      if (out->gemv != nullptr) return isa;
    }
    STRATA_ASSERT(isa != Isa::kRef, "no reference kernel for {}", ggml_type_name(type));
    isa = isa_below(isa);
  }
}

void check_shape(GgmlType type, int64_t n_cols) {
  const int64_t block = ggml_type_info(type).block_size;
  STRATA_ASSERT(n_cols >= 0 && n_cols % block == 0, "gemv {}: n_cols {} is not a multiple of {}",
                ggml_type_name(type), n_cols, block);
}

}  // namespace

Isa best_isa() {
  static const Isa cpu_best = cpu_supports(Isa::kAvx512) ? Isa::kAvx512
                              : cpu_supports(Isa::kAvx2) ? Isa::kAvx2
                                                         : Isa::kRef;
  return std::min(cpu_best, g_isa_cap.load(std::memory_order_relaxed));
}

void set_isa_cap(Isa cap) {
  g_isa_cap.store(cap, std::memory_order_relaxed);
}

Isa isa_cap() {
  return g_isa_cap.load(std::memory_order_relaxed);
}

namespace {
std::atomic<bool> g_avxvnni_allowed{true};
}  // namespace

void set_avxvnni_allowed(bool allowed) {
  g_avxvnni_allowed.store(allowed, std::memory_order_relaxed);
}

bool avxvnni_in_use() {
  static const bool cpu = cpu_has(CpuFeature::kAvxVnni);
  return cpu && g_avxvnni_allowed.load(std::memory_order_relaxed);
}

namespace {
thread_local const void* t_gemv_tail = nullptr;
}  // namespace

void set_gemv_tail(const void* first_group) {
  t_gemv_tail = first_group;
}

const void* detail::take_gemv_tail() {
  return std::exchange(t_gemv_tail, nullptr);
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kRef:
      return "ref";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  return cpu_has(isa);
}

GemvKernels gemv_kernels(GgmlType type, Isa isa) {
  GemvKernels k;
  resolve(type, isa, &k);
  return k;
}

Isa gemv_kernel_isa(GgmlType type, Isa isa) {
  GemvKernels k;
  return resolve(type, isa, &k);
}

// Rows are handed to threads in groups of kRowGroup so that every thread runs the 16-row kernels
// on whole groups; the split never changes a result (each row is computed on its own).
constexpr int64_t kRowGroup = 16;

void gemv(ThreadPool* pool, GgmlType type, const void* w, size_t row_stride, const void* xq,
          float* y, int64_t n_rows, int64_t n_cols) {
  gemv(pool, type, WeightLayout::kRows, w, row_stride, xq, y, n_rows, n_cols);
}

void gemv(ThreadPool* pool, GgmlType type, WeightLayout layout, const void* w, size_t row_stride,
          const void* xq, float* y, int64_t n_rows, int64_t n_cols) {
  check_shape(type, n_cols);
  const GemvFn fn = gemv_kernels(type, layout).gemv;
  if (pool == nullptr || pool->size() == 1 || n_rows <= kRowGroup) {
    fn(w, row_stride, xq, y, 0, n_rows, n_cols);
    return;
  }
  const int64_t n_groups = (n_rows + kRowGroup - 1) / kRowGroup;
  pool->parallel_for(n_groups, {}, [&](int64_t begin, int64_t end, int) {
    fn(w, row_stride, xq, y, begin * kRowGroup, std::min(end * kRowGroup, n_rows), n_cols);
  });
}

void gemm(ThreadPool* pool, GgmlType type, const void* w, size_t row_stride, const void* xq,
          size_t xq_stride, float* y, size_t y_stride, int64_t n_tokens, int64_t n_rows,
          int64_t n_cols) {
  gemm(pool, type, WeightLayout::kRows, w, row_stride, xq, xq_stride, y, y_stride, n_tokens, n_rows,
       n_cols);
}

void gemm(ThreadPool* pool, GgmlType type, WeightLayout layout, const void* w, size_t row_stride,
          const void* xq, size_t xq_stride, float* y, size_t y_stride, int64_t n_tokens,
          int64_t n_rows, int64_t n_cols) {
  check_shape(type, n_cols);
  const GemmFn fn = gemv_kernels(type, layout).gemm;
  if (pool == nullptr || pool->size() == 1 || n_rows <= kRowGroup) {
    fn(w, row_stride, xq, xq_stride, y, y_stride, n_tokens, 0, n_rows, n_cols);
    return;
  }
  const int64_t n_groups = (n_rows + kRowGroup - 1) / kRowGroup;
  pool->parallel_for(n_groups, {}, [&](int64_t begin, int64_t end, int) {
    fn(w, row_stride, xq, xq_stride, y, y_stride, n_tokens, begin * kRowGroup,
       std::min(end * kRowGroup, n_rows), n_cols);
  });
}

}  // namespace strata::kernels
