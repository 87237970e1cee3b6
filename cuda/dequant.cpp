// Host side of cuda/dequant.h: argument checks and typed errors (g++, so fmt stays out of nvcc);
// the kernels are in dequant.cu. Tested by tests/test_cuda_dequant.cpp.
#include "cuda/dequant.h"

#include "cuda/dequant_launch.h"
#include "io/check.h"

namespace strata::cuda {
namespace {

void check_args(GgmlType t, const void* src, const float* dst, int64_t n) {
  const uint32_t block = ggml_type_info(t).block_size;
  STRATA_ASSERT(n >= 0 && n % block == 0, "{}: n={} is not a multiple of the block size {}",
                ggml_type_name(t), n, block);
  STRATA_ASSERT(n == 0 || (src != nullptr && dst != nullptr), "null buffer for n={}", n);
}

[[noreturn]] void fail_unsupported(GgmlType t) {
  fail(ErrorKind::kUnsupported, "cuda_dequantize: no CUDA kernel for type {}", ggml_type_name(t));
}

}  // namespace

void cuda_dequantize(GgmlType t, const void* dev_src, float* dev_dst, int64_t n, void* stream) {
  if (!cuda_dequantize_supported(t)) fail_unsupported(t);
  check_args(t, dev_src, dev_dst, n);
  detail::launch_dequantize(t, dev_src, dev_dst, n, stream);
}

void cuda_dequantize_emulated(GgmlType t, const void* src, float* dst, int64_t n) {
  if (!cuda_dequantize_supported(t)) fail_unsupported(t);
  check_args(t, src, dst, n);
  detail::emulate_dequantize(t, src, dst, n);
}

}  // namespace strata::cuda
