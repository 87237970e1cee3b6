// ggml's table GELU (see gelu.h). kernels/ is compiled with -ffp-contract=off, so the one
// multiply-add that gcc fuses when it builds ggml for an FMA CPU (-march=native: 1 + a·x·x) is
// fused here by name; unfused, one of the 65536 entries (x = -1.999) differs by an ulp of a half.
#include "kernels/gelu.h"

#include <cmath>
#include <vector>

#include "kernels/quant.h"

namespace strata::kernels {

float gelu_tanh_f32(float x) {
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * std::fma(kCoefA * x, x, 1.0f)));
}

const float* gelu_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(kGeluTableSize);
    for (int h = 0; h < kGeluTableSize; ++h) {
      const float x = fp16_to_f32(static_cast<uint16_t>(h));
      t[h] = fp16_to_f32(f32_to_fp16(gelu_tanh_f32(x)));
    }
    return t;
  }();
  return table.data();
}

void gelu_glu_row(const float* gate, const float* up, float* out, int64_t n) {
  const float* table = gelu_table();
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float a = g <= -10.0f ? 0.0f : g >= 10.0f ? g : table[f32_to_fp16(g)];
    out[i] = up[i] * a;
  }
}

}  // namespace strata::kernels
