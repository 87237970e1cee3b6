// Host emulation of the grouped expert kernel (cuda/grouped.h): the element functions of
// cuda/expert_math.h — the ones the device runs — driven by sequential loops in place of warps.
// Reductions the device does as trees are order-free here (integer sums, max, the absmax total
// order), so the loops give the device's bits. Built in every configuration (g++, no CUDA) with
// -ffp-contract=off. Tested by tests/test_cuda_grouped.cpp.
#include <cstring>
#include <vector>

#include "cuda/dense.h"
#include "cuda/expert_math.h"
#include "cuda/grouped.h"
#include "io/check.h"
#include "kernels/gelu.h"
#include "kernels/portable_math.h"
#include "kernels/quant.h"

namespace strata::cuda {
namespace {

using detail::ActView;
using detail::Partial;

// The device's Q8_0 quantizer for one 32-element block (a warp, lane = element).
void quantize_q8_0_block(const float* x, int8_t* qs, float* d, int32_t* sum16) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = detail::max_key(amax, detail::amax_key(x[i]));
  const detail::Q8_0Scale s = detail::q8_0_scale(amax);
  int32_t sums[2] = {0, 0};
  for (int i = 0; i < 32; ++i) {
    qs[i] = detail::q8_0_code(x[i], s.id);
    sums[i / 16] += qs[i];
  }
  *d = s.d;
  sum16[0] = sums[0];
  sum16[1] = sums[1];
}

// The device's Q8_K quantizer for one 256-element super-block (a warp, 8 elements per lane).
void quantize_q8_k_block(const float* x, int8_t* qs, float* d, int32_t* sum16) {
  detail::AbsMax best = detail::absmax_none();
  for (int i = 0; i < 256; ++i) best = detail::absmax_pick(best, detail::absmax_leaf(x[i], i));
  const detail::Q8_KScale s = detail::q8_k_scale(best.val);
  for (int g = 0; g < 16; ++g) sum16[g] = 0;
  for (int i = 0; i < 256; ++i) {
    qs[i] = detail::q8_k_code(x[i], s.iscale);
    sum16[i / 16] += qs[i];
  }
  *d = s.d;
}

// x [n] → one activation area (expert_math.h layout) quantized with blocks of act_block.
void quantize_area(int act_block, const float* x, int64_t n, uint8_t* area) {
  auto* qs = reinterpret_cast<int8_t*>(area);
  auto* d = reinterpret_cast<float*>(area + n);
  auto* sum16 = reinterpret_cast<int32_t*>(area + n + 4 * (n / act_block));
  for (int64_t b = 0; b < n / act_block; ++b) {
    if (act_block == 32)
      quantize_q8_0_block(x + 32 * b, qs + 32 * b, d + b, sum16 + 2 * b);
    else
      quantize_q8_k_block(x + 256 * b, qs + 256 * b, d + b, sum16 + 16 * b);
  }
}

// One weight row against one activation area: blocks in order, each block's partials summed over
// its kThreads, then the canonical 8-lane accumulation and fold.
template <GgmlType T>
float row_dot(const uint8_t* w_row, const ActView& x, int64_t n_in) {
  using D = detail::Dot<T>;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t b = 0; b < n_in / D::kElems; ++b) {
    const uint8_t* wb = w_row + b * D::kBytes;
    Partial total{0, 0};
    for (int k = 0; k < D::kThreads; ++k) {
      const Partial p = D::part(wb, x, b, k);
      total.a += p.a;
      total.m += p.m;
    }
    acc[b % 8] = kernels::add_rn(acc[b % 8], D::finish(wb, x, b, total));
  }
  return detail::fold8(acc);
}

int act_block_of(GgmlType w) {
  int block = 0;
  const bool ok = detail::dispatch_grouped(
      w, [&](auto tag) { block = detail::Dot<decltype(tag)::kType>::kActBlock; });
  if (!ok)
    fail(ErrorKind::kUnsupported, "grouped experts: no kernel for type {}", ggml_type_name(w));
  return block;
}

float row_dot_any(GgmlType w, const uint8_t* w_row, const ActView& x, int64_t n_in) {
  float y = 0.0f;
  detail::dispatch_grouped(w, [&](auto tag) { y = row_dot<decltype(tag)::kType>(w_row, x, n_in); });
  return y;
}

// Aligned scratch for one activation area (the 128-bit loads of the dots want 16 bytes).
struct Area {
  std::vector<uint64_t> words;
  Area(int64_t n, int act_block) : words(detail::act_area_bytes(n, act_block) / 8 + 2) {}
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words.data()); }
};

// y[n_out] = W · x for a matrix of type t (the activation quantized as the kernel does).
void matrix_emulated(GgmlType t, const void* w, int64_t n_out, int64_t n_in, const float* x,
                     float* y) {
  const int act_block = act_block_of(t);
  Area area(n_in, act_block);
  quantize_area(act_block, x, n_in, area.data());
  const ActView view = detail::act_view(area.data(), n_in, act_block);
  const auto* base = static_cast<const uint8_t*>(w);
  const int64_t row_bytes = static_cast<int64_t>(ggml_row_bytes(t, n_in));
  for (int64_t r = 0; r < n_out; ++r) y[r] = row_dot_any(t, base + r * row_bytes, view, n_in);
}

// y[i] += bias[i], as the kernels' store does (nothing for a null bias).
void add_bias(const float* bias, float* y, int64_t n) {
  if (bias == nullptr) return;
  for (int64_t i = 0; i < n; ++i) y[i] = kernels::add_rn(y[i], bias[i]);
}

}  // namespace

bool grouped_supported(GgmlType t) {
  return detail::dispatch_grouped(t, [](auto) {});
}

void grouped_forward_emulated(const GroupedLayer& layer, const float* x, float* y) {
  const ExpertShape& s = layer.shape;
  std::vector<float> g(s.n_ff), u(s.n_ff);  // [n_ff]
  for (uint32_t j = 0; j < layer.n_jobs; ++j) {
    const GroupedJob& job = layer.jobs[j];
    for (uint32_t r = job.row_begin; r < job.row_end; ++r) {
      const float* xr = x + static_cast<int64_t>(layer.row_token[r]) * s.n_embd;
      float* yr = y + static_cast<int64_t>(r) * s.n_embd;
      matrix_emulated(s.gate_type, job.w.gate, s.n_ff, s.n_embd, xr, g.data());
      matrix_emulated(s.up_type, job.w.up, s.n_ff, s.n_embd, xr, u.data());
      add_bias(job.gate_bias, g.data(), s.n_ff);
      add_bias(job.up_bias, u.data(), s.n_ff);
      const int act = static_cast<int>(s.activation);
      for (int64_t i = 0; i < s.n_ff; ++i)
        g[i] = detail::glu_elem(act, g[i], u[i], kernels::gelu_table());
      matrix_emulated(s.down_type, job.w.down, s.n_embd, s.n_ff, g.data(), yr);
      add_bias(job.down_bias, yr, s.n_embd);
    }
  }
}

void dense_gemv_emulated(const DenseMatrix& w, const float* x, float* y) {
  matrix_emulated(w.type, w.data, w.n_rows, w.n_cols, x, y);
}

void dense_gemm_emulated(const DenseMatrix& w, const float* x, uint32_t n_tokens, float* y) {
  std::vector<float> row(static_cast<size_t>(w.n_cols));
  const size_t row_bytes = ggml_row_bytes(w.type, w.n_cols);
  for (int64_t r = 0; r < w.n_rows; ++r) {
    kernels::dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + r * row_bytes, row.data(),
                            w.n_cols);
    for (uint32_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + static_cast<int64_t>(t) * w.n_cols;
      float acc = 0.0f;
      for (int64_t c = 0; c < w.n_cols; ++c) acc += row[c] * xt[c];
      y[static_cast<int64_t>(t) * w.n_rows + r] = acc;
    }
  }
}

void grouped_quantize_emulated(GgmlType act, const float* x, void* dst, int64_t n) {
  STRATA_ASSERT(act == GgmlType::Q8_0 || act == GgmlType::Q8_K, "activation type {}",
                ggml_type_name(act));
  const int act_block = act == GgmlType::Q8_0 ? 32 : 256;
  STRATA_ASSERT(n % act_block == 0, "n={} is not a multiple of {}", n, act_block);
  Area area(n, act_block);
  quantize_area(act_block, x, n, area.data());
  const ActView v = detail::act_view(area.data(), n, act_block);
  for (int64_t b = 0; b < n / act_block; ++b) {
    if (act == GgmlType::Q8_0) {
      auto* out = static_cast<kernels::BlockQ8_0*>(dst) + b;
      out->d = detail::f32_to_half_bits(v.d[b]);  // exact: d holds an fp16 value
      std::memcpy(out->qs, v.qs + 32 * b, 32);
    } else {
      auto* out = static_cast<kernels::BlockQ8_K*>(dst) + b;
      out->d = v.d[b];
      std::memcpy(out->qs, v.qs + 256 * b, 256);
      for (int g = 0; g < 16; ++g) out->bsums[g] = static_cast<int16_t>(v.sum16[16 * b + g]);
    }
  }
}

float grouped_row_dot_emulated(GgmlType w_type, const void* w_row, const void* xq, int64_t n) {
  const int act_block = act_block_of(w_type);
  STRATA_ASSERT(n % act_block == 0, "n={} is not a multiple of {}", n, act_block);
  // The activation blocks rewritten into the kernel's area layout.
  Area area(n, act_block);
  auto* qs = reinterpret_cast<int8_t*>(area.data());
  auto* d = reinterpret_cast<float*>(area.data() + n);
  auto* sum16 = reinterpret_cast<int32_t*>(area.data() + n + 4 * (n / act_block));
  for (int64_t b = 0; b < n / act_block; ++b) {
    if (act_block == 32) {
      const auto& in = static_cast<const kernels::BlockQ8_0*>(xq)[b];
      d[b] = kernels::fp16_to_f32(in.d);
      std::memcpy(qs + 32 * b, in.qs, 32);
    } else {
      const auto& in = static_cast<const kernels::BlockQ8_K*>(xq)[b];
      d[b] = in.d;
      std::memcpy(qs + 256 * b, in.qs, 256);
    }
  }
  for (int64_t g = 0; g < n / 16; ++g) {
    int32_t sum = 0;
    for (int i = 0; i < 16; ++i) sum += qs[16 * g + i];
    sum16[g] = sum;
  }
  return row_dot_any(w_type, static_cast<const uint8_t*>(w_row),
                     detail::act_view(area.data(), n, act_block), n);
}

}  // namespace strata::cuda
