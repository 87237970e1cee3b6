// Per-row forward-pass operations with ggml's rounding (see ops.h). Tested by tests/test_ops.cpp.
#include "engine/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/rope.h"
#include "io/check.h"
#include "kernels/expert_ref.h"
#include "kernels/gelu.h"
#include "kernels/gemv.h"
#include "kernels/quant.h"

namespace strata::engine {

namespace {

// Eight partial sums folded in one fixed order (the same bits on every ISA).
double fold8(const double (&part)[8]) {
  return ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  // Eight double partial sums (element i into sum i % 8), folded in a fixed order: the same bits
  // on every ISA, and a decode step's norms (2 × n_embd plus the q/k heads per layer, on the
  // caller between parallel regions) no longer wait on one add chain.
  double part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) part[j] += static_cast<double>(x[i + j] * x[i + j]);
  for (int j = 0; i + j < n; ++j) part[j] += static_cast<double>(x[i + j] * x[i + j]);
  const double sum = fold8(part);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

void layer_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  // ggml_norm's order: the mean from double sums, then the variance of the float differences.
  double part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) part[j] += static_cast<double>(x[i + j]);
  for (int j = 0; i + j < n; ++j) part[j] += static_cast<double>(x[i + j]);
  double sum = fold8(part);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  for (double& p : part) p = 0;
  for (i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const float d = x[i + j] - mean;
      part[j] += static_cast<double>(d * d);
    }
  for (int j = 0; i + j < n; ++j) {
    const float d = x[i + j] - mean;
    part[j] += static_cast<double>(d * d);
  }
  sum = fold8(part);
  const float variance = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(variance + eps);
  for (int64_t k = 0; k < n; ++k) {
    const float d = (x[k] - mean) * scale;
    y[k] = w ? d * w[k] : d;
  }
}

void block_norm(const ModelConfig& cfg, const float* x, const WeightView& w, const WeightView& b,
                float* y) {
  (cfg.layer_norm ? layer_norm : rms_norm)(x, w.f32(), y, cfg.n_embd, cfg.norm_eps);
  if (!b.present()) return;
  const float* bias = b.f32();
  for (uint32_t i = 0; i < cfg.n_embd; ++i) y[i] += bias[i];
}

void idle_read_rows(kernels::ThreadPool& pool, std::span<const MatrixRef> ws) {
  constexpr int kMaxThreads = 64;
  const int n = pool.size();
  if (n == 1 || n > kMaxThreads) return;
  int64_t total = 0;
  for (const MatrixRef& w : ws) total += w.n_rows;
  kernels::ThreadPool::IdleRead reads[kMaxThreads];
  for (int t = 0; t < n; ++t) {
    int64_t row = total * t / n / 16 * 16;  // whole 16-row groups (interleaved layouts)
    for (const MatrixRef& w : ws) {
      if (row >= w.n_rows) {
        row -= w.n_rows;
        continue;
      }
      reads[t] = {w.data + static_cast<size_t>(row) * w.row_bytes,
                  static_cast<size_t>(w.n_rows - row) * w.row_bytes};
      break;
    }
  }
  pool.set_idle_reads({reads, static_cast<size_t>(n)});
}

void rope_cache(int64_t pos, int64_t n_rot, float freq_base, float* cs) {
  RopeParams p;
  p.n_rot = n_rot;
  p.freq_base = freq_base;
  rope_cache(p, pos, cs);
}

void rope_apply(RopeType type, float* x, int64_t n_head, int64_t head_dim, int64_t n_rot,
                const float* cs) {
  // One loop per pairing with the type outside it, so each vectorizes (the same float steps as
  // one pair at a time: no FMA, -ffp-contract=off).
  const int64_t half = n_rot / 2;
  for (int64_t h = 0; h < n_head; ++h) {
    float* v = x + h * head_dim;
    if (type == RopeType::kNorm) {
#pragma GCC ivdep
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[2 * i + 0];
        const float s = cs[2 * i + 1];
        const float x0 = v[2 * i];
        const float x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x0 * s + x1 * c;
      }
    } else {
#pragma GCC ivdep
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[2 * i + 0];
        const float s = cs[2 * i + 1];
        const float x0 = v[i];
        const float x1 = v[i + half];
        v[i] = x0 * c - x1 * s;
        v[i + half] = x0 * s + x1 * c;
      }
    }
  }
}

void softmax(float* x, int64_t n, float scale) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    x[i] *= scale;
    max = std::fmax(max, x[i]);
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(x[i] - max);
    x[i] = e;
    sum += static_cast<double>(e);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void softmax_with_sink(float* x, int64_t n, float scale, float sink) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    x[i] *= scale;
    max = std::fmax(max, x[i]);
  }
  max = std::fmax(max, sink);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(x[i] - max);
    x[i] = e;
    sum += static_cast<double>(e);
  }
  sum += static_cast<double>(std::exp(sink - max));
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void silu_glu(const float* gate, const float* up, float* out, int64_t n) {
  // The portable SiLU (kernels/portable_math.h, separately rounded IEEE operations): the CUDA
  // grouped kernel computes the same bits, so an expert's output does not depend on its home.
  // (std::exp differs from it by an ulp on ~0.3% of inputs.)
  kernels::swiglu_row(gate, up, out, n);
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kAlpha = 1.702f;
  constexpr float kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::min(gate[i], kLimit);
    const float u = std::clamp(up[i], -kLimit, kLimit);
    out[i] = a / (1.0f + std::exp(kAlpha * (-a))) * (u + 1.0f);
  }
}

void glu(FfnActivation act, const float* gate, const float* up, float* out, int64_t n) {
  switch (act) {
    case FfnActivation::kSiluGlu:
      silu_glu(gate, up, out, n);
      return;
    case FfnActivation::kSwigluOai:
      swiglu_oai(gate, up, out, n);
      return;
    case FfnActivation::kGeluGlu:
      kernels::gelu_glu_row(gate, up, out, n);
      return;
  }
}

void add_bias_rows(const float* bias, float* y, size_t y_stride, uint32_t n_tokens,
                   int64_t row_begin, int64_t row_end) {
  for (uint32_t t = 0; t < n_tokens; ++t) {
    float* yt = y + t * y_stride;
    for (int64_t r = row_begin; r < row_end; ++r) yt[r] += bias[r];
  }
}

void top_k(const float* p, int64_t n, int64_t k, int32_t* ids) {
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t e = 0; e < n; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken |= ids[i] == e;
      if (taken) continue;
      if (best < 0 || p[e] > p[best]) best = static_cast<int32_t>(e);
    }
    ids[j] = best;
  }
}

void quantize_rows(kernels::ThreadPool& pool, GgmlType w_type, const float* x, size_t x_stride,
                   uint32_t n_tokens, int64_t n_cols, std::byte* xq, size_t xq_stride) {
  const GgmlType vdt = kernels::vec_dot_type(w_type);
  auto rows = [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t)
      kernels::quantize_activation_row(vdt, x + t * x_stride, xq + t * xq_stride, n_cols);
  };
  // A fork/join costs more than quantizing a few rows.
  if (n_tokens < 8) {
    rows(0, n_tokens, 0);
  } else {
    pool.parallel_for(n_tokens, {}, rows);
  }
}

const void* ActivationRows::prepare(GgmlType w_type, size_t* xq_stride) {
  const GgmlType vdt = kernels::vec_dot_type(w_type);
  *xq_stride = x_stride_ * sizeof(float);
  if (vdt == GgmlType::F32) return x_;
  *xq_stride = ggml_row_bytes(vdt, static_cast<uint64_t>(n_cols_));
  if (!have_ || format_ != vdt) {
    quantize_rows(pool_, w_type, x_, x_stride_, n_tokens_, n_cols_, scratch_, *xq_stride);
    have_ = true;
    format_ = vdt;
  }
  return scratch_;
}

void ActivationRows::matmul(const MatrixRef& w, float* y, size_t y_stride) {
  STRATA_ASSERT(w.n_cols == n_cols_, "matmul: weight has {} columns, x rows have {}", w.n_cols,
                n_cols_);
  size_t xq_stride = 0;
  const void* xq = prepare(w.type, &xq_stride);
  if (n_tokens_ == 1) {
    kernels::gemv(&pool_, w.type, w.layout, w.data, w.row_bytes, xq, y, w.n_rows, w.n_cols);
  } else {
    kernels::gemm(&pool_, w.type, w.layout, w.data, w.row_bytes, xq, xq_stride, y, y_stride,
                  n_tokens_, w.n_rows, w.n_cols);
  }
}

void ActivationRows::matmul_many(std::span<const MatrixRef> w, float* const* y,
                                 const size_t* y_stride) {
  STRATA_ASSERT(w.size() <= kMaxMany, "matmul_many: {} weights > {}", w.size(), kMaxMany);
  bool one_type = true;
  for (const MatrixRef& m : w)
    one_type = one_type && m.type == w[0].type && m.layout == w[0].layout;
  if (!one_type || pool_.size() == 1 || w.size() < 2) {
    for (size_t i = 0; i < w.size(); ++i) matmul(w[i], y[i], y_stride[i]);
    return;
  }
  // Row groups of 16 (the kernels' rows per pass, as kernels::gemv splits them), numbered across
  // the weights in order.
  constexpr int64_t kGroup = 16;
  int64_t first_group[kMaxMany + 1] = {0};
  for (size_t i = 0; i < w.size(); ++i) {
    STRATA_ASSERT(w[i].n_cols == n_cols_, "matmul: weight has {} columns, x rows have {}",
                  w[i].n_cols, n_cols_);
    first_group[i + 1] = first_group[i] + (w[i].n_rows + kGroup - 1) / kGroup;
  }
  size_t xq_stride = 0;
  const void* xq = prepare(w[0].type, &xq_stride);
  const kernels::GemvKernels k = kernels::gemv_kernels(w[0].type, w[0].layout);
  const int64_t n_cols = n_cols_;
  const uint32_t n_tokens = n_tokens_;
  pool_.parallel_for(first_group[w.size()], {}, [&](int64_t begin, int64_t end, int) {
    for (size_t i = 0; i < w.size(); ++i) {
      const int64_t g0 = std::max(begin, first_group[i]);
      const int64_t g1 = std::min(end, first_group[i + 1]);
      if (g0 >= g1) continue;
      const int64_t r0 = (g0 - first_group[i]) * kGroup;
      const int64_t r1 = std::min((g1 - first_group[i]) * kGroup, w[i].n_rows);
      if (n_tokens == 1) {
        k.gemv(w[i].data, w[i].row_bytes, xq, y[i], r0, r1, n_cols);
      } else {
        k.gemm(w[i].data, w[i].row_bytes, xq, xq_stride, y[i], y_stride[i], n_tokens, r0, r1,
               n_cols);
      }
    }
  });
}

}  // namespace strata::engine
