// The shared expert (see shared_expert.h). Exercised by tests/test_arch_forward.cpp.
#include "engine/shared_expert.h"

#include <cmath>
#include <numeric>

#include "engine/gpu_lane.h"
#include "io/check.h"

namespace strata::engine {

SharedExpert::SharedExpert(const ModelConfig& cfg, uint32_t n_ubatch)
    : row_token_(cfg.n_ff_shexp > 0 ? n_ubatch : 0),
      y_(cfg.n_ff_shexp > 0 ? size_t{n_ubatch} * cfg.n_embd : 0) {
  std::iota(row_token_.begin(), row_token_.end(), 0);
}

uint64_t SharedExpert::add(uint32_t il, const ExpertStack& shared, uint32_t n, const float* x,
                           ExpertExecutor& cpu, float* out, const float* gate_logits) {
  STRATA_ASSERT(shared.n_expert == 1 && n <= row_token_.size(), "shared expert: {} rows of {}", n,
                row_token_.size());
  uint64_t cpu_bytes = 0;
  if (dense_ == nullptr || !dense_->ffn(il, GpuDense::kSharedFfn, x, n, y_.data())) {
    const ExpertJob job{0, 0, n, shared.expert_slice(0)};
    cpu.compute(shared, {&job, 1}, row_token_.data(), x, y_.data());
    cpu_bytes = job.slice.n_bytes();
  }
  const size_t n_embd = size_t(shared.n_embd);
  if (gate_logits) {
    for (size_t t = 0; t < n; ++t) {
      const float g = 1.0f / (1.0f + std::exp(-gate_logits[t]));
      const float* y = y_.data() + t * n_embd;
      float* o = out + t * n_embd;
      for (size_t i = 0; i < n_embd; ++i) o[i] += y[i] * g;
    }
    return cpu_bytes;
  }
  for (size_t i = 0; i < n * n_embd; ++i) out[i] += y_[i];
  return cpu_bytes;
}

}  // namespace strata::engine
