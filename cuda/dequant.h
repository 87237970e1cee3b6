// Device dequantization of ggml blocks to F32 (plain C++ header, no CUDA types, so CPU code may
// include it). Layouts are kernels/quant.h's (= ggml's); each element is computed in the same
// float operation order as ggml's dequantize_row_* so results match the CPU bit for bit.
// Exercised by tests/test_cuda_dequant.cpp.
#pragma once

#include <cstdint>

#include "io/ggml_type.h"

namespace strata::cuda {

// Types cuda_dequantize accepts: every weight type of the grouped kernel (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, MXFP4, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and F32, F16, BF16 (false for all in
// a build without CUDA).
bool cuda_dequantize_supported(GgmlType t);

// dev_dst[n] = dequantize(dev_src), both device pointers; enqueued on `stream` (a cudaStream_t,
// nullptr = default stream) and asynchronous. n must be a multiple of t's block size. Throws
// Error(kUnsupported) for other types and Error(kCuda) if the launch fails.
void cuda_dequantize(GgmlType t, const void* dev_src, float* dev_dst, int64_t n, void* stream);

// The same per-element device functions run on the host over host pointers, so a machine without
// a GPU still tests the kernels' indexing and arithmetic.
void cuda_dequantize_emulated(GgmlType t, const void* src, float* dst, int64_t n);

}  // namespace strata::cuda
