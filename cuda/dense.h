// Dense matrices resident on one GPU for decode GEMVs (CUDA_DENSE=1): the attention projections
// and the output head, uploaded once at load in the file's block layout; y = W·x for one token
// with x quantized on the device exactly as kernels::quantize_activation_row does and the
// grouped expert kernel's canonical-order row dots (a one-matrix, one-row stage of
// cuda/grouped.cu), so every y is bit-identical to kernels::gemv on the CPU. Types: the grouped
// kernel's (the quantized types, cuda::grouped_supported); the caller keeps F32 / F16 / BF16
// matrices on the CPU.
// emulate: private host copies and the kernels' element functions on the calling thread (the
// VRAM_EMULATE knob), the same numbers without a device. Plain C++ header, no CUDA types.
// Tested by tests/test_cuda_grouped.cpp (emulated vs kernels::gemv; the device when there is one)
// and end to end by tests/test_gpu_lane.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "io/ggml_type.h"

namespace strata::cuda {

// A row-major quantized matrix in host memory: n_rows rows of ggml_row_bytes(type, n_cols).
struct DenseMatrix {
  GgmlType type = GgmlType::Q4_0;
  const void* data = nullptr;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
};

// Whether DenseGemv takes matrices of type t with n_cols columns.
bool dense_gemv_supported(GgmlType t, int64_t n_cols);
// Whether gemm() takes type t: the types the device dequantizer has (all of the GEMV's).
bool dense_gemm_supported(GgmlType t);

// y = W·x as the device computes it, on the host (the emulation's arithmetic).
void dense_gemv_emulated(const DenseMatrix& w, const float* x, float* y);
// y [n_tokens, n_rows] = x [n_tokens, n_cols] · dequant(W)ᵀ in F32 on the host: what gemm()'s
// cuBLASLt call computes, up to the order of its sums (the emulation of the plumbing, not of
// cuBLASLt's bits).
void dense_gemm_emulated(const DenseMatrix& w, const float* x, uint32_t n_tokens, float* y);

namespace detail {
// The CUDA side of DenseGemv (cuda/grouped.cpp; cuda/stub.cpp throws without CUDA).
class DenseDevice {
 public:
  static std::unique_ptr<DenseDevice> create(int device, int64_t max_cols, int64_t max_out);
  virtual ~DenseDevice() = default;
  // A device copy of `bytes` host bytes (16-byte aligned), alive as long as this object.
  virtual const void* upload(const void* host, size_t bytes) = 0;
  // ys[i] = W_i · x for every i (weights given by their device copies), synchronous.
  virtual void gemv(std::span<const DenseMatrix> w, const float* x, float* const* ys) = 0;
  // ys[i] [n_tokens, W_i rows] = x [n_tokens, n_cols] · dequant(W_i)ᵀ: the weights dequantized to
  // F32 on the device in row chunks, then cuBLASLt (F32, no TF32). Synchronous. Buffers grow on
  // the first call with more tokens (prefill only; decode never calls it).
  virtual void gemm(std::span<const DenseMatrix> w, const float* x, uint32_t n_tokens,
                    float* const* ys) = 0;
};
}  // namespace detail

class DenseGemv {
 public:
  // max_cols: the widest x; max_out: the most output rows of one gemv() call, summed over its
  // matrices. Throws Error(kUnsupported) without CUDA unless emulate.
  DenseGemv(int device, bool emulate, int64_t max_cols, int64_t max_out);
  ~DenseGemv();
  DenseGemv(const DenseGemv&) = delete;
  DenseGemv& operator=(const DenseGemv&) = delete;

  // Uploads the matrix (emulated: copies it); returns its id, or -1 when the type is not taken.
  int32_t add(const DenseMatrix& m);
  // ys[i] = W_ids[i] · x for matrices of n_cols columns that read the same x (one token).
  void gemv(std::span<const int32_t> ids, const float* x, float* const* ys);
  // The same for n_tokens rows of x ([n_tokens, n_cols], contiguous; ys[i] [n_tokens, rows_i])
  // through cuBLASLt on dequantized weights: close to the CPU's numbers, not bit-identical (x is
  // not quantized). False, computing nothing, when a matrix's type has no device dequantizer.
  bool gemm(std::span<const int32_t> ids, const float* x, uint32_t n_tokens, float* const* ys);

  bool emulated() const { return emulate_; }
  uint64_t bytes() const { return bytes_; }  // matrix bytes resident
  size_t n_matrices() const { return mats_.size(); }

 private:
  bool emulate_;
  int64_t max_cols_, max_out_;
  std::unique_ptr<detail::DenseDevice> dev_;
  std::vector<DenseMatrix> mats_;              // device pointers (or the emulation's copies)
  std::vector<std::vector<uint64_t>> copies_;  // emulated: the private copies
  std::vector<DenseMatrix> call_;  // gemv()'s scratch (reserved: decode allocates nothing)
  uint64_t bytes_ = 0;
};

}  // namespace strata::cuda
