// DenseGemv (see dense.h): the resident matrices and the emulated path; the device side is
// detail::DenseDevice in grouped.cpp. Tested by tests/test_cuda_grouped.cpp.
#include "cuda/dense.h"

#include <cstring>

#include "cuda/grouped.h"
#include "io/check.h"

namespace strata::cuda {

bool dense_gemv_supported(GgmlType t, int64_t n_cols) {
  if (!grouped_supported(t)) return false;
  const int64_t block = ggml_type_info(t).block_size;
  return n_cols > 0 && n_cols % block == 0;
}

// The device dequantizer covers every grouped type (test_cuda_dequant checks it); the emulation
// dequantizes with the CPU's kernels::dequantize_row.
bool dense_gemm_supported(GgmlType t) {
  return grouped_supported(t);
}

DenseGemv::DenseGemv(int device, bool emulate, int64_t max_cols, int64_t max_out)
    : emulate_(emulate), max_cols_(max_cols), max_out_(max_out) {
  STRATA_ASSERT(max_cols > 0 && max_out > 0, "dense GEMV: empty limits");
  if (!emulate_) dev_ = detail::DenseDevice::create(device, max_cols, max_out);
  call_.reserve(8);
}

DenseGemv::~DenseGemv() = default;

int32_t DenseGemv::add(const DenseMatrix& m) {
  if (!dense_gemv_supported(m.type, m.n_cols)) return -1;
  STRATA_ASSERT(m.n_cols <= max_cols_ && m.n_rows <= max_out_,
                "dense GEMV: a {}x{} matrix exceeds the limits {}x{}", m.n_rows, m.n_cols, max_out_,
                max_cols_);
  const size_t bytes = ggml_row_bytes(m.type, m.n_cols) * static_cast<size_t>(m.n_rows);
  DenseMatrix d = m;
  if (emulate_) {
    copies_.emplace_back(bytes / 8 + 2);
    std::memcpy(copies_.back().data(), m.data, bytes);
    d.data = copies_.back().data();
  } else {
    d.data = dev_->upload(m.data, bytes);
  }
  mats_.push_back(d);
  bytes_ += bytes;
  return static_cast<int32_t>(mats_.size() - 1);
}

void DenseGemv::gemv(std::span<const int32_t> ids, const float* x, float* const* ys) {
  call_.clear();
  int64_t out = 0;
  for (int32_t id : ids) {
    STRATA_ASSERT(id >= 0 && static_cast<size_t>(id) < mats_.size(), "dense GEMV: id {}", id);
    STRATA_ASSERT(mats_[id].n_cols == mats_[ids[0]].n_cols, "dense GEMV: one x, several widths");
    call_.push_back(mats_[id]);
    out += mats_[id].n_rows;
  }
  STRATA_ASSERT(out <= max_out_, "dense GEMV: {} output rows > {}", out, max_out_);
  if (emulate_) {
    for (size_t i = 0; i < call_.size(); ++i) dense_gemv_emulated(call_[i], x, ys[i]);
    return;
  }
  dev_->gemv(call_, x, ys);
}

bool DenseGemv::gemm(std::span<const int32_t> ids, const float* x, uint32_t n_tokens,
                     float* const* ys) {
  call_.clear();
  for (int32_t id : ids) {
    STRATA_ASSERT(id >= 0 && static_cast<size_t>(id) < mats_.size(), "dense GEMM: id {}", id);
    STRATA_ASSERT(mats_[id].n_cols == mats_[ids[0]].n_cols, "dense GEMM: one x, several widths");
    if (!dense_gemm_supported(mats_[id].type)) return false;
    call_.push_back(mats_[id]);
  }
  if (emulate_) {
    for (size_t i = 0; i < call_.size(); ++i) dense_gemm_emulated(call_[i], x, n_tokens, ys[i]);
    return true;
  }
  dev_->gemm(call_, x, n_tokens, ys);
  return true;
}

}  // namespace strata::cuda
