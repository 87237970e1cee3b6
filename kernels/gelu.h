// GELU as llama.cpp's CPU backend computes it (ggml_gelu with GGML_GELU_FP16, the default): the
// tanh approximation 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²))) evaluated once per IEEE half
// and kept in a 64 Ki-entry table; x is rounded to a half to look it up, x <= -10 gives 0 and
// x >= 10 gives x. grok's experts use it (down(gelu(gate x) · up x)). The table is the one thing
// both lanes share: the CUDA grouped kernel indexes a device copy of it with the same rounding,
// so a GELU expert gives the same bits on either home. Tested by tests/test_gelu.cpp (the table
// against a digest of ggml's own, the element against it, edge values).
#pragma once

#include <cstdint>

namespace strata::kernels {

inline constexpr int kGeluTableSize = 1 << 16;

// ggml's gelu_f32 in float with glibc's tanhf, 1 + 0.044715·x·x fused as gcc fuses it for an FMA
// CPU (the table's entries before rounding to a half).
float gelu_tanh_f32(float x);

// table[h] = the half nearest gelu_tanh_f32(value of half h), widened to float; built once,
// thread-safe, never freed.
const float* gelu_table();

// out[i] = gelu(gate[i]) · up[i] (ggml_gelu then ggml_mul); out may alias gate or up.
void gelu_glu_row(const float* gate, const float* up, float* out, int64_t n);

}  // namespace strata::kernels
