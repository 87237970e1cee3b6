// cuBLASLt handle wrapper and F32 matmul (g++ with the CUDA headers). The row-major problem
// y[n_tokens, n_out] = x[n_tokens, n_in] · w[n_out, n_in]ᵀ is, in cuBLAS's column-major terms,
// C (n_out × n_tokens) = Aᵀ · B with A = w viewed as (n_in × n_out) and B = x as (n_in × n_tokens).
// Tested by tests/test_cuda_dequant.cpp (CudaBlasLt.*).
#include "cuda/blaslt.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "cuda/cuda_check.h"
#include "io/check.h"

namespace strata::cuda {
namespace {

const char* short_path(const char* file) {
  const char* p = std::strstr(file, "cuda/");
  return p != nullptr ? p : file;
}

// Owns one cuBLASLt descriptor; Destroy is its cublasLt*Destroy function.
template <typename T, cublasStatus_t (*Destroy)(T)>
struct LtOwned {
  T v = nullptr;
  LtOwned() = default;
  ~LtOwned() {
    if (v != nullptr) Destroy(v);
  }
  LtOwned(const LtOwned&) = delete;
  LtOwned& operator=(const LtOwned&) = delete;
};

using MatmulDesc = LtOwned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using Layout = LtOwned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Preference = LtOwned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

}  // namespace

void throw_cublas_error(int status, const char* call, const char* file, int line) {
  throw Error(ErrorKind::kCuda,
              fmt::format("{} failed: {} ({}:{})", call,
                          cublasLtGetStatusString(static_cast<cublasStatus_t>(status)),
                          short_path(file), line));
}

BlasLt::BlasLt(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  cublasLtHandle_t h = nullptr;
  CUBLAS_CHECK(cublasLtCreate(&h));
  handle_ = h;
  if (workspace_bytes_ > 0) {
    const cudaError_t e = cudaMalloc(&workspace_, workspace_bytes_);
    if (e != cudaSuccess) {
      cublasLtDestroy(handle_);
      throw_cuda_error(static_cast<int>(e), "cudaMalloc(cuBLASLt workspace)", __FILE__, __LINE__);
    }
  }
}

BlasLt::~BlasLt() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

void BlasLt::matmul_f32(const float* dev_w, const float* dev_x, float* dev_y, int64_t n_out,
                        int64_t n_in, int64_t n_tokens, void* stream) {
  STRATA_ASSERT(n_out > 0 && n_in > 0 && n_tokens > 0, "n_out={} n_in={} n_tokens={}", n_out, n_in,
                n_tokens);
  MatmulDesc op;
  // FP32 compute and scale: no TF32, so results stay comparable with the CPU path.
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op.v, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T;
  const cublasOperation_t trans_b = CUBLAS_OP_N;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(op.v, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(op.v, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  Layout a, b, c;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a.v, CUDA_R_32F, n_in, n_out, n_in));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b.v, CUDA_R_32F, n_in, n_tokens, n_in));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c.v, CUDA_R_32F, n_out, n_tokens, n_out));
  Preference pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.v));
  const uint64_t ws = workspace_bytes_;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.v, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t heuristic;
  std::memset(&heuristic, 0, sizeof(heuristic));
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, op.v, a.v, b.v, c.v, c.v, pref.v, 1,
                                              &heuristic, &found));
  if (found == 0)
    fail(ErrorKind::kCuda,
         "cublasLtMatmulAlgoGetHeuristic: no F32 algorithm for n_out={} n_in={} "
         "n_tokens={}",
         n_out, n_in, n_tokens);
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, op.v, &alpha, dev_w, a.v, dev_x, b.v, &beta, dev_y, c.v,
                              dev_y, c.v, &heuristic.algo, workspace_, workspace_bytes_,
                              static_cast<cudaStream_t>(stream)));
}

}  // namespace strata::cuda
