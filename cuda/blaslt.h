// RAII cuBLASLt handle with its workspace, and an F32 matmul for dense layers (plain C++ header:
// the handle is forward-declared, no CUDA headers). Exercised by tests/test_cuda_dequant.cpp
// (CudaBlasLt.*).
#pragma once

#include <cstddef>
#include <cstdint>

struct cublasLtContext;  // cublasLtHandle_t is cublasLtContext*

namespace strata::cuda {

class BlasLt {
 public:
  // Creates the handle and a workspace of workspace_bytes on the current device. Throws
  // Error(kCuda) on failure, Error(kUnsupported) in a build without CUDA.
  explicit BlasLt(size_t workspace_bytes = size_t{32} << 20);
  ~BlasLt();
  BlasLt(const BlasLt&) = delete;
  BlasLt& operator=(const BlasLt&) = delete;

  cublasLtContext* handle() const { return handle_; }

  // y = x · wᵀ with row-major device arrays w [n_out, n_in], x [n_tokens, n_in], y [n_tokens,
  // n_out] (ggml's weight layout: one row per output feature), FP32 compute without TF32,
  // enqueued on `stream` (a cudaStream_t, nullptr = default stream).
  void matmul_f32(const float* dev_w, const float* dev_x, float* dev_y, int64_t n_out, int64_t n_in,
                  int64_t n_tokens, void* stream);

 private:
  cublasLtContext* handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace strata::cuda
