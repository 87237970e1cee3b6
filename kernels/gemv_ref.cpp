// Scalar reference GEMV/GEMM kernels: the canonical reduction order of gemv.cpp written out
// literally, one block at a time. The ISA variants must match these bit for bit.
// Tested by tests/test_gemv.cpp (every ISA vs these, and these vs a double-precision dot).
#include <cmath>
#include <cstring>

#include "kernels/gemv_internal.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"

namespace strata::kernels::detail {
namespace {

// The 8 float accumulators of the canonical order: block b adds its result to lane b % 8.
struct Lanes8 {
  float lane[8] = {};

  void add(int64_t b, float r) { lane[b % 8] = lane[b % 8] + r; }
  float fold() const {
    return ((lane[0] + lane[4]) + (lane[2] + lane[6])) +
           ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  }
};

// ---- quantized weights x Q8_0 activations: r_b = (float)isum_b * (d_w * d_x) ----

template <typename Block, int (*Value)(const Block&, int), float (*Scale)(const Block&)>
float dot_q8_0_acts(const void* w_row, const void* x_row, int64_t n_cols) {
  const auto* w = static_cast<const Block*>(w_row);
  const auto* x = static_cast<const BlockQ8_0*>(x_row);
  Lanes8 acc;
  for (int64_t b = 0; b < n_cols / kQK; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < kQK; ++j) isum += Value(w[b], j) * x[b].qs[j];
    const float d = Scale(w[b]) * fp16_to_f32(x[b].d);
    acc.add(b, static_cast<float>(isum) * d);
  }
  return acc.fold();
}

// Q4_1, Q5_1 (element = d_w * code + m_w):
//   r_b = (float)isum_b * (d_w * d_x) + m_w * (d_x * (float)xsum_b), xsum_b = sum_j q_x[j]
template <typename Block, int (*Code)(const Block&, int)>
float dot_q_1(const void* w_row, const void* x_row, int64_t n_cols) {
  const auto* w = static_cast<const Block*>(w_row);
  const auto* x = static_cast<const BlockQ8_0*>(x_row);
  Lanes8 acc;
  for (int64_t b = 0; b < n_cols / kQK; ++b) {
    int32_t isum = 0, xsum = 0;
    for (int j = 0; j < kQK; ++j) {
      isum += Code(w[b], j) * x[b].qs[j];
      xsum += x[b].qs[j];
    }
    const float dx = fp16_to_f32(x[b].d);
    acc.add(b, static_cast<float>(isum) * (fp16_to_f32(w[b].d) * dx) +
                   fp16_to_f32(w[b].m) * (dx * static_cast<float>(xsum)));
  }
  return acc.fold();
}

int q8_0_value(const BlockQ8_0& b, int j) {
  return b.qs[j];
}
template <typename Block>
float fp16_scale(const Block& b) {
  return fp16_to_f32(b.d);
}
float mxfp4_scale(const BlockMXFP4& b) {
  return e8m0_to_f32_half(b.e);
}

// ---- K-quant weights x Q8_K activations: one 256-element super-block is one block ----

// Q4_K, Q5_K: r_b = (d_w * d_x) * (float)sum_s(sc_s * isum_s)
//                   - (dmin_w * d_x) * (float)sum_s(m_s * xsum_s)
template <typename Block, int (*code)(const Block&, int)>
float dot_k_min(const void* w_row, const void* x_row, int64_t n_cols) {
  const auto* w = static_cast<const Block*>(w_row);
  const auto* x = static_cast<const BlockQ8_K*>(x_row);
  Lanes8 acc;
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    int32_t sumi = 0, summ = 0;
    for (int s = 0; s < kQK_K / 32; ++s) {
      uint8_t sc, mn;
      q4_k_scale_min(w[b].scales, s, &sc, &mn);
      int32_t isum = 0;
      for (int l = 0; l < 32; ++l) isum += code(w[b], 32 * s + l) * x[b].qs[32 * s + l];
      sumi += sc * isum;
      summ += mn * (x[b].bsums[2 * s] + x[b].bsums[2 * s + 1]);
    }
    const float dd = fp16_to_f32(w[b].d) * x[b].d;
    const float dm = fp16_to_f32(w[b].dmin) * x[b].d;
    acc.add(b, dd * static_cast<float>(sumi) - dm * static_cast<float>(summ));
  }
  return acc.fold();
}

// Q2_K: r_b = (d_w * d_x) * (float)sum_g(sc_g * isum_g) - (dmin_w * d_x) * (float)sum_g(m_g *
// bsums_g), groups of 16 with 4-bit scales sc_g and mins m_g, codes 0..3.
float dot_q2_k(const void* w_row, const void* x_row, int64_t n_cols) {
  const auto* w = static_cast<const BlockQ2_K*>(w_row);
  const auto* x = static_cast<const BlockQ8_K*>(x_row);
  Lanes8 acc;
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    int32_t sumi = 0, summ = 0;
    for (int g = 0; g < kQK_K / 16; ++g) {
      int32_t isum = 0;
      for (int l = 0; l < 16; ++l) isum += q2_k_code(w[b], 16 * g + l) * x[b].qs[16 * g + l];
      sumi += (w[b].scales[g] & 0xF) * isum;
      summ += (w[b].scales[g] >> 4) * x[b].bsums[g];
    }
    const float dd = fp16_to_f32(w[b].d) * x[b].d;
    const float dm = fp16_to_f32(w[b].dmin) * x[b].d;
    acc.add(b, dd * static_cast<float>(sumi) - dm * static_cast<float>(summ));
  }
  return acc.fold();
}

// Q3_K, Q6_K: r_b = (d_w * d_x) * (float)sum_g(sc_g * isum_g), groups of 16, signed values
// (Q3_K in [-4, 3], Q6_K in [-32, 31]) and signed scales.
void q3_k_group_scales(const BlockQ3_K& b, int8_t* out) {
  q3_k_scales(b.scales, out);
}
void q6_k_group_scales(const BlockQ6_K& b, int8_t* out) {
  std::memcpy(out, b.scales, 16);
}
template <typename Block, int (*value)(const Block&, int), void (*scales)(const Block&, int8_t*)>
float dot_k_sym(const void* w_row, const void* x_row, int64_t n_cols) {
  const auto* w = static_cast<const Block*>(w_row);
  const auto* x = static_cast<const BlockQ8_K*>(x_row);
  Lanes8 acc;
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    int8_t sc[16];
    scales(w[b], sc);
    int32_t sumi = 0;
    for (int g = 0; g < kQK_K / 16; ++g) {
      int32_t isum = 0;
      for (int l = 0; l < 16; ++l) isum += value(w[b], 16 * g + l) * x[b].qs[16 * g + l];
      sumi += sc[g] * isum;
    }
    const float d = fp16_to_f32(w[b].d) * x[b].d;
    acc.add(b, d * static_cast<float>(sumi));
  }
  return acc.fold();
}

// IQ4_XS: r_b = (d_w * d_x) * (float)sum_s(sc_s * isum_s), sub-blocks of 32, table values and
// signed 6-bit scales (the field - 32).
float dot_iq4_xs(const void* w_row, const void* x_row, int64_t n_cols) {
  const auto* w = static_cast<const BlockIQ4_XS*>(w_row);
  const auto* x = static_cast<const BlockQ8_K*>(x_row);
  Lanes8 acc;
  for (int64_t b = 0; b < n_cols / kQK_K; ++b) {
    const float d = fp16_to_f32(w[b].d) * x[b].d;
    acc.add(b, d * static_cast<float>(iq4_xs_sumi(w[b], x[b])));
  }
  return acc.fold();
}

// ---- float weights x float activations of the same type ----
// Block b = elements [32b, 32b+32), zero-padded past n_cols. For lane l:
//   a = w[l]*x[l];       a = fma(w[l+16], x[l+16], a)
//   c = w[l+8]*x[l+8];   c = fma(w[l+24], x[l+24], c)
//   acc[l] = acc[l] + (a + c)

float f32_of(const float* p, int64_t i) {
  return p[i];
}
float f32_of(const uint16_t* p, int64_t i, GgmlType t) {
  return t == GgmlType::F16 ? fp16_to_f32(p[i]) : bf16_to_f32(p[i]);
}

template <GgmlType T>
float dot_float(const void* w_row, const void* x_row, int64_t n_cols) {
  Lanes8 acc;
  for (int64_t base = 0; base < n_cols; base += 32) {
    float w[32] = {}, x[32] = {};
    for (int64_t j = 0; j < 32 && base + j < n_cols; ++j) {
      if constexpr (T == GgmlType::F32) {
        w[j] = f32_of(static_cast<const float*>(w_row), base + j);
        x[j] = f32_of(static_cast<const float*>(x_row), base + j);
      } else {
        w[j] = f32_of(static_cast<const uint16_t*>(w_row), base + j, T);
        x[j] = f32_of(static_cast<const uint16_t*>(x_row), base + j, T);
      }
    }
    for (int l = 0; l < 8; ++l) {
      float a = w[l] * x[l];
      a = std::fma(w[l + 16], x[l + 16], a);
      float c = w[l + 8] * x[l + 8];
      c = std::fma(w[l + 24], x[l + 24], c);
      acc.lane[l] = acc.lane[l] + (a + c);
    }
  }
  return acc.fold();
}

}  // namespace

GemvKernels gemv_kernels_ref(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return row_kernels<&dot_float<GgmlType::F32>>();
    case GgmlType::F16:
      return row_kernels<&dot_float<GgmlType::F16>>();
    case GgmlType::BF16:
      return row_kernels<&dot_float<GgmlType::BF16>>();
    case GgmlType::Q4_0:
      return row_kernels<&dot_q8_0_acts<BlockQ4_0, &q4_0_value, &fp16_scale<BlockQ4_0>>>();
    case GgmlType::Q5_0:
      return row_kernels<&dot_q8_0_acts<BlockQ5_0, &q5_0_value, &fp16_scale<BlockQ5_0>>>();
    case GgmlType::Q4_1:
      return row_kernels<&dot_q_1<BlockQ4_1, &q4_1_code>>();
    case GgmlType::IQ4_NL:
      return row_kernels<&dot_q8_0_acts<BlockIQ4_NL, &iq4_nl_value, &fp16_scale<BlockIQ4_NL>>>();
    case GgmlType::IQ4_XS:
      return row_kernels<&dot_iq4_xs>();
    case GgmlType::Q5_1:
      return row_kernels<&dot_q_1<BlockQ5_1, &q5_1_code>>();
    case GgmlType::Q8_0:
      return row_kernels<&dot_q8_0_acts<BlockQ8_0, &q8_0_value, &fp16_scale<BlockQ8_0>>>();
    case GgmlType::MXFP4:
      return row_kernels<&dot_q8_0_acts<BlockMXFP4, &mxfp4_value, &mxfp4_scale>>();
    case GgmlType::Q4_K:
      return row_kernels<&dot_k_min<BlockQ4_K, &q4_k_code>>();
    case GgmlType::Q5_K:
      return row_kernels<&dot_k_min<BlockQ5_K, &q5_k_code>>();
    case GgmlType::Q2_K:
      return row_kernels<&dot_q2_k>();
    case GgmlType::Q3_K:
      return row_kernels<&dot_k_sym<BlockQ3_K, &q3_k_value, &q3_k_group_scales>>();
    case GgmlType::Q6_K:
      return row_kernels<&dot_k_sym<BlockQ6_K, &q6_k_value, &q6_k_group_scales>>();
    default:
      return GemvKernels{nullptr, nullptr};
  }
}

}  // namespace strata::kernels::detail
