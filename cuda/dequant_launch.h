// Internal seam between dequant.cu (nvcc: kernels and launches) and dequant.cpp (g++: argument
// checks and typed errors), so the .cu files never include fmt. Not for use outside cuda/.
#pragma once

#include <cstdint>

#include "io/ggml_type.h"

namespace strata::cuda::detail {

// Both return false for a type without a kernel; arguments are already checked by the caller.
bool launch_dequantize(GgmlType t, const void* dev_src, float* dev_dst, int64_t n, void* stream);
bool emulate_dequantize(GgmlType t, const void* src, float* dst, int64_t n);

}  // namespace strata::cuda::detail
