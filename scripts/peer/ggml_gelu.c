// The digest tests/test_gelu.cpp holds: llama.cpp's ggml_gelu (CPU backend) over every IEEE half,
// NaNs made one quiet NaN, FNV-1a 64 of the floats' little-endian bytes. Build against a
// llama.cpp checkout built on the CPU with static libraries (as scripts/peer/synth_refs.sh):
//   L=$LLAMA_DIR/build; gcc -O2 scripts/peer/ggml_gelu.c -I$LLAMA_DIR/ggml/include \
//     $L/ggml/src/libggml.a $L/ggml/src/libggml-cpu.a $L/ggml/src/libggml-base.a \
//     -lm -lpthread -lgomp -lstdc++ -o ggml_gelu && ./ggml_gelu
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"

int main(void) {
  struct ggml_init_params ip = {64u << 20, NULL, false};
  struct ggml_context* ctx = ggml_init(ip);
  struct ggml_tensor* x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 65536);
  float* xd = (float*)x->data;
  for (int i = 0; i < 65536; ++i) xd[i] = ggml_fp16_to_fp32((ggml_fp16_t)i);
  struct ggml_tensor* y = ggml_gelu(ctx, x);
  struct ggml_cgraph* gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, y);
  ggml_graph_compute_with_ctx(ctx, gf, 1);
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < 65536; ++i) {
    uint32_t u;
    memcpy(&u, (const float*)y->data + i, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu)) u = 0x7FC00000u;  // NaN
    for (int b = 0; b < 4; ++b) h = (h ^ ((u >> (8 * b)) & 0xFFu)) * 0x100000001b3ull;
  }
  printf("%016llx\n", (unsigned long long)h);
  ggml_free(ctx);
  return 0;
}
