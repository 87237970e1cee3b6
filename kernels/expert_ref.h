// One routed expert on the CPU, written as the definition both executors follow: quantize x to
// the gate/up activation type, gate and up GEMVs in the canonical order, SwiGLU with the portable
// SiLU (kernels/portable_math.h), quantize, down GEMV. The CUDA grouped kernel (cuda/grouped.h)
// gives the same bits. Tested by tests/test_cuda_grouped.cpp.
#pragma once

#include <cstdint>

#include "io/ggml_type.h"

namespace strata::kernels {

// An expert's three matrices in host memory, row-major, rows of ggml_row_bytes(type, cols) bytes
// back to back: gate and up [n_ff, n_embd], down [n_embd, n_ff].
struct ExpertMatrices {
  GgmlType gate_type;
  GgmlType up_type;
  GgmlType down_type;
  const void* gate;
  const void* up;
  const void* down;
};

// out[i] = portable_silu(gate[i]) * up[i]: the SwiGLU every MoE executor uses (the GPU computes
// the same bits). out may alias gate or up.
void swiglu_row(const float* gate, const float* up, float* out, int64_t n);

// y[t] = W_down · q(swiglu(W_gate · q(x[t]), W_up · q(x[t]))) for t < n_tokens, where q is
// quantize_row to the weight's vec_dot_type and every product uses gemv_kernels(type).
//   x: [n_tokens, n_embd]   y: [n_tokens, n_embd]
// Allocates its scratch: a reference, not the engine's hot path.
void expert_forward_ref(const ExpertMatrices& w, int64_t n_embd, int64_t n_ff, const float* x,
                        int64_t n_tokens, float* y);

}  // namespace strata::kernels
