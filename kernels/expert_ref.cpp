// The CPU definition of one expert (kernels/expert_ref.h). Built with -ffp-contract=off like the
// rest of strata_kernels, so portable_silu keeps its separately rounded operations.
// Tested by tests/test_cuda_grouped.cpp.
#include "kernels/expert_ref.h"

#include <vector>

#include "kernels/attention_core.h"
#include "kernels/gemv.h"
#include "kernels/portable_math.h"
#include "kernels/quant.h"

namespace strata::kernels {

void swiglu_row(const float* gate, const float* up, float* out, int64_t n) {
  if (attention_avx2_supported()) return swiglu_row_avx2(gate, up, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = portable_swiglu(gate[i], up[i]);
}

void expert_forward_ref(const ExpertMatrices& w, int64_t n_embd, int64_t n_ff, const float* x,
                        int64_t n_tokens, float* y) {
  const GgmlType gate_vdt = vec_dot_type(w.gate_type);
  const GgmlType up_vdt = vec_dot_type(w.up_type);
  const GgmlType down_vdt = vec_dot_type(w.down_type);
  std::vector<uint8_t> xq_gate(ggml_row_bytes(gate_vdt, n_embd));
  std::vector<uint8_t> xq_up(ggml_row_bytes(up_vdt, n_embd));
  std::vector<uint8_t> hq(ggml_row_bytes(down_vdt, n_ff));
  std::vector<float> g(n_ff), u(n_ff);  // [n_ff]
  const GemvFn gate = gemv_kernels(w.gate_type).gemv;
  const GemvFn up = gemv_kernels(w.up_type).gemv;
  const GemvFn down = gemv_kernels(w.down_type).gemv;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * n_embd;
    quantize_activation_row(gate_vdt, xt, xq_gate.data(), n_embd);
    quantize_activation_row(up_vdt, xt, xq_up.data(), n_embd);
    gate(w.gate, ggml_row_bytes(w.gate_type, n_embd), xq_gate.data(), g.data(), 0, n_ff, n_embd);
    up(w.up, ggml_row_bytes(w.up_type, n_embd), xq_up.data(), u.data(), 0, n_ff, n_embd);
    swiglu_row(g.data(), u.data(), g.data(), n_ff);
    quantize_activation_row(down_vdt, g.data(), hq.data(), n_ff);
    down(w.down, ggml_row_bytes(w.down_type, n_ff), hq.data(), y + t * n_embd, 0, n_embd, n_ff);
  }
}

}  // namespace strata::kernels
