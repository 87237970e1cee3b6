// Matrix–vector and small matrix–matrix products over quantized weights.
//
// y = W·x where W is [n_rows, n_cols] stored row-major in a ggml type and x has already been
// quantized to vec_dot_type(W) with quantize_row(). Each variant (_ref, _avx2, _avx512) computes
// every row in the one canonical order documented in kernels/gemv.cpp, so all variants and all
// thread counts give bit-identical results (DESIGN.md invariant 1; the CUDA kernels follow it too).
// Tested by tests/test_gemv.cpp; measured by bench/bench_gemv.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/ggml_type.h"

namespace strata::kernels {

class ThreadPool;

enum class Isa { kRef, kAvx2, kAvx512 };

// Rows [row_begin, row_end) of y = W·xq, one token.
//   w:        pointer to row 0 of W; rows are row_stride bytes apart
//   xq:       the activation row, n_cols elements in vec_dot_type(type)
//   y:        [n_rows] floats; only y[row_begin..row_end) are written
using GemvFn = void (*)(const void* w, size_t row_stride, const void* xq, float* y,
                        int64_t row_begin, int64_t row_end, int64_t n_cols);

// Several tokens at once: y[t * y_stride + r] = W_r · xq_t for t < n_tokens. Each weight row is
// read once for all tokens; every element equals what GemvFn computes for that token alone.
//   xq:       n_tokens activation rows, xq_stride bytes apart
using GemmFn = void (*)(const void* w, size_t row_stride, const void* xq, size_t xq_stride,
                        float* y, size_t y_stride, int64_t n_tokens, int64_t row_begin,
                        int64_t row_end, int64_t n_cols);

struct GemvKernels {
  GemvFn gemv;
  GemmFn gemm;
};

// The best ISA this CPU supports (decided once from CPUID), at most the cap below.
Isa best_isa();
// Caps every CPU kernel dispatch in strata (GEMV/GEMM, the interleaved layouts REPACK picks,
// the activation quantizers, the attention core) at an ISA: the ISA knob, set by the CLI before
// any model loads, so one binary can run an AVX-512 host's data through the AVX2 kernels. Every
// ISA computes the same bits (invariant 1), so a cap changes speed, never the numbers. Set it
// before weights are repacked: the layouts follow best_isa(). Default: no cap (kAvx512).
void set_isa_cap(Isa cap);
Isa isa_cap();
// Whether the AVX2 level may use AVX-VNNI's vpdpbusd where the CPU has it (default true).
// ISA=avx2-plain turns it off, so an AVX-VNNI host runs the kernels a plain-AVX2 CPU (Zen 2/3,
// Intel before Alder Lake) runs. Set it with the cap, before weights are repacked.
void set_avxvnni_allowed(bool allowed);
// AVX-VNNI kernels in use at the AVX2 level: the CPU has it and it is allowed.
bool avxvnni_in_use();
std::string_view isa_name(Isa isa);
// Whether this CPU (and OS) can run an ISA's kernels, and the cap allows it.
bool isa_supported(Isa isa);
// Kernels for a weight type and ISA. ISA variants that are not compiled or not supported by the
// CPU fall back to the best available one below them.
GemvKernels gemv_kernels(GgmlType type, Isa isa);
inline GemvKernels gemv_kernels(GgmlType type) {
  return gemv_kernels(type, best_isa());
}
// The ISA whose kernels gemv_kernels(type, isa) returns (isa, or the fallback below it).
Isa gemv_kernel_isa(GgmlType type, Isa isa);

// A prefetch hint for this thread's next GEMV call: the first 16-row group of an interleaved
// matrix (kernels/interleave.h) that this thread reads after the call — another expert's gate,
// the up matrix after the gate. The interleaved kernels at the AVX2 level L2-prefetch it across
// the call's last group, as they prefetch each following group within a call, so memory keeps
// streaming from one call into the next; they take (clear) it when they use it, and other kernels
// ignore it. Only a prefetch: a stale or wrong pointer costs bandwidth, never a fault or another
// result. Set it just before the call and clear it (nullptr) after. Measured in bench/RESULTS.md
// session 41 (CpuExpertExecutor sets it per decode item).
void set_gemv_tail(const void* first_group);

// Convenience: whole-matrix GEMV/GEMM split over the pool's workers by rows (groups of 16, so
// the interleaved layouts of kernels/interleave.h work too: pass theirs).
enum class WeightLayout : uint8_t;
void gemv(ThreadPool* pool, GgmlType type, const void* w, size_t row_stride, const void* xq,
          float* y, int64_t n_rows, int64_t n_cols);
void gemm(ThreadPool* pool, GgmlType type, const void* w, size_t row_stride, const void* xq,
          size_t xq_stride, float* y, size_t y_stride, int64_t n_tokens, int64_t n_rows,
          int64_t n_cols);
void gemv(ThreadPool* pool, GgmlType type, WeightLayout layout, const void* w, size_t row_stride,
          const void* xq, float* y, int64_t n_rows, int64_t n_cols);
void gemm(ThreadPool* pool, GgmlType type, WeightLayout layout, const void* w, size_t row_stride,
          const void* xq, size_t xq_stride, float* y, size_t y_stride, int64_t n_tokens,
          int64_t n_rows, int64_t n_cols);

}  // namespace strata::kernels
