// CUDA_CHECK / CUBLAS_CHECK: every CUDA runtime and cuBLASLt call goes through one, and a failure
// throws strata::Error(ErrorKind::kCuda) naming the call. CUDA-typed: include only from .cu files
// and from cuda/*.cpp. Exercised by tests/test_cuda_dequant.cpp (CudaHost.CheckMacro*).
#pragma once

#include <cuda_runtime_api.h>

namespace strata::cuda {

// Throw strata::Error(kCuda) with "<call> failed: <error name>: <description> (<file>:<line>)".
// Defined in runtime.cpp / blaslt.cpp (g++), so .cu files never include fmt.
[[noreturn]] void throw_cuda_error(int err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);

}  // namespace strata::cuda

#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    const cudaError_t strata_cuda_err_ = (call);                                            \
    if (strata_cuda_err_ != cudaSuccess)                                                    \
      ::strata::cuda::throw_cuda_error(static_cast<int>(strata_cuda_err_), #call, __FILE__, \
                                       __LINE__);                                           \
  } while (0)

// cublasStatus_t is compared as an int (CUBLAS_STATUS_SUCCESS == 0) so this header does not need
// cublasLt.h.
#define CUBLAS_CHECK(call)                                                                  \
  do {                                                                                      \
    const int strata_cublas_status_ = static_cast<int>(call);                               \
    if (strata_cublas_status_ != 0)                                                         \
      ::strata::cuda::throw_cublas_error(strata_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)
