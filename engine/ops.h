// Small per-row operations of the forward pass: RMSNorm, RoPE, softmax, SiLU-GLU, top-k. Each one
// rounds the way ggml's CPU backend does (float products, double sums where ggml uses them), so F32
// models match llama.cpp to float rounding. Tested by tests/test_ops.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/model_config.h"
#include "engine/weights.h"
#include "kernels/threadpool.h"

namespace strata::engine {

// y[i] = x[i] / sqrt(mean(x²) + eps) * w[i]; the sum of squares is accumulated in double (eight
// partial sums, element i into i % 8, folded in a fixed order) and the scale applied before the
// weight, as ggml_rms_norm followed by ggml_mul. w may be nullptr (no weight). y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
// y = (x - mean(x)) / sqrt(var(x) + eps) * w: ggml_norm followed by ggml_mul (dbrx's LayerNorm,
// no bias). w may be nullptr. y may alias x.
void layer_norm(const float* x, const float* w, float* y, int64_t n, float eps);
// A block or output norm of cfg's model over n_embd: RMSNorm (LayerNorm when cfg.layer_norm)
// times w, then + b when b is present (phimoe's biased RMSNorm: ggml_mul, then ggml_add).
// y may alias x.
void block_norm(const ModelConfig& cfg, const float* x, const WeightView& w, const WeightView& b,
                float* y);

// cos/sin of every rotated pair at position pos: cs[2i] = cos θ_i, cs[2i+1] = sin θ_i for
// i < n_rot/2, θ_i = pos · base^(−2i/n_rot). θ is advanced by repeated multiplication in float as
// ggml's rope cache does (it differs from pow() in the last bits, which matters at 1e-5).
// Unscaled RoPE; engine/rope.h has the general (linear / YaRN) form.
void rope_cache(int64_t pos, int64_t n_rot, float freq_base, float* cs);

// Rotates the first n_rot dims of each of n_head heads (head_dim apart) in place with the cache
// from rope_cache(). NORM rotates pairs (2i, 2i+1); NEOX rotates (i, i + n_rot/2).
void rope_apply(RopeType type, float* x, int64_t n_head, int64_t head_dim, int64_t n_rot,
                const float* cs);

// In-place softmax of x[n]·scale, as ggml_soft_max_ext: max, exp, double sum, multiply by the
// float reciprocal.
void softmax(float* x, int64_t n, float scale = 1.0f);

// The same with an attention sink: a logit that joins the max and the denominator but has no
// output of its own (ggml_soft_max_add_sinks): the row sums to less than 1.
void softmax_with_sink(float* x, int64_t n, float scale, float sink);

// out[i] = silu(gate[i]) * up[i]; out may alias gate or up.
void silu_glu(const float* gate, const float* up, float* out, int64_t n);

// gpt-oss's clamped SwiGLU (ggml_swiglu_oai with alpha 1.702, limit 7): a = min(gate, 7),
// u = clamp(up, -7, 7), out = a / (1 + exp(-1.702 a)) * (u + 1). out may alias gate or up.
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n);

// The expert activation an FFN uses (one switch for every caller).
void glu(FfnActivation act, const float* gate, const float* up, float* out, int64_t n);

// Adds bias[r] to y[t * y_stride + r] for t < n_tokens, r in [row_begin, row_end): a bias on the
// rows one GEMV/GEMM work item produced.
void add_bias_rows(const float* bias, float* y, size_t y_stride, uint32_t n_tokens,
                   int64_t row_begin, int64_t row_end);

// The k largest of p[n] in descending order; equal values → lower index first. ids[k].
void top_k(const float* p, int64_t n, int64_t k, int32_t* ids);

// Bytes enough for one activation row of n floats in any vec_dot type (F32 is the widest).
inline size_t activation_row_bytes(int64_t n) {
  return static_cast<size_t>(n) * sizeof(float);
}

// Names, for each thread of pool, the first bytes of its share of the next GEMV region over the
// rows of ws (in order, as one region splits them: equal rows per thread), as the pool's idle
// reads for the next parallel region (ThreadPool::set_idle_reads): what each thread may fetch
// while it waits at that region's join and through the serial steps after it. Only a hint.
void idle_read_rows(kernels::ThreadPool& pool, std::span<const MatrixRef> ws);

// Quantizes each of n_tokens rows of x to vec_dot_type(w_type) (ggml's activation formats), rows
// xq_stride bytes apart. Parallel over rows when there are several.
void quantize_rows(kernels::ThreadPool& pool, GgmlType w_type, const float* x, size_t x_stride,
                   uint32_t n_tokens, int64_t n_cols, std::byte* xq, size_t xq_stride);

// The rows of x prepared for the GEMV/GEMM kernels: each row is quantized to the activation
// format of the weight (vec_dot_type), as llama.cpp's CPU backend does (required to match
// quantized references), once for all the weights sharing that format (q, k and v read the same x).
// F32 weights read x directly.
class ActivationRows {
 public:
  //   x:       [n_tokens, n_cols], rows x_stride floats apart
  //   scratch: at least n_tokens * activation_row_bytes(n_cols) bytes
  ActivationRows(kernels::ThreadPool& pool, const float* x, size_t x_stride, uint32_t n_tokens,
                 int64_t n_cols, std::byte* scratch)
      : pool_(pool),
        x_(x),
        x_stride_(x_stride),
        n_tokens_(n_tokens),
        n_cols_(n_cols),
        scratch_(scratch) {}

  // y[t] = W·x[t]; y: [n_tokens, w.n_rows], rows y_stride floats apart.
  void matmul(const MatrixRef& w, float* y, size_t y_stride);

  // y[i] = W[i]·x for up to kMaxMany weights that read the same x (q, k and v): one parallel
  // region over all their rows when they share a type (equal bytes per row, so an equal split of
  // row groups is an equal split of bytes), else one matmul() each. Every row is computed by the
  // same kernel call as in matmul(), so the numbers do not change.
  static constexpr size_t kMaxMany = 4;
  void matmul_many(std::span<const MatrixRef> w, float* const* y, const size_t* y_stride);

 private:
  kernels::ThreadPool& pool_;
  const float* x_;
  size_t x_stride_;
  uint32_t n_tokens_;
  int64_t n_cols_;
  std::byte* scratch_;
  // x in the weight's activation format (quantized into scratch_ once per format), its row stride.
  const void* prepare(GgmlType w_type, size_t* xq_stride);

  bool have_ = false;  // scratch_ holds x quantized to format_
  GgmlType format_ = GgmlType::F32;
};

// One-off y = W·x (see ActivationRows).
inline void matmul(kernels::ThreadPool& pool, const MatrixRef& w, const float* x, size_t x_stride,
                   uint32_t n_tokens, float* y, size_t y_stride, std::byte* xq_scratch) {
  ActivationRows(pool, x, x_stride, n_tokens, w.n_cols, xq_scratch).matmul(w, y, y_stride);
}

}  // namespace strata::engine
