// Quantized block formats, bit-compatible with llama.cpp's ggml layouts, and the row-level
// (de)quantizers. Activations for quantized weights are quantized per row the way llama.cpp's CPU
// backend does (Q8_0 for Q4_0/Q5_0/Q8_0/MXFP4/IQ4_NL weights, Q8_K for K-quants and IQ4_XS) so
// that dots are exact integer sums per block. Tested by tests/test_quant.cpp (known answers + _ref
// twins).
#pragma once

#include <cstddef>
#include <cstdint>

#include "io/ggml_type.h"

namespace strata::kernels {

constexpr int kQK = 32;     // elements per simple block (Q4_0, Q5_0, Q8_0, MXFP4, IQ4_NL)
constexpr int kQK_K = 256;  // elements per K-quant super-block

#pragma pack(push, 1)
struct BlockQ4_0 {
  uint16_t d;           // fp16 scale
  uint8_t qs[kQK / 2];  // element j in low nibble of qs[j], element j+16 in the high nibble
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // 5th bit of each of the 32 elements
  uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {
  uint16_t d;           // scale
  uint16_t m;           // min: element = d * code + m
  uint8_t qs[kQK / 2];  // as Q4_0's
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];  // as Q5_0's
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // per group of 16: scale (low nibble) and min (high nibble)
  uint8_t qs[kQK_K / 4];  // 2-bit codes: qs[32h + l] bits 2j..2j+1 are element 128h + 32j + l's
  uint16_t d;             // super-block scale for the 4-bit scales
  uint16_t dmin;          // super-block scale for the 4-bit mins
};
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // the 3rd bit: hmask[l] bit j is element 32j + l's
  uint8_t qs[kQK_K / 4];  // the low 2 bits: qs[32h + l] bits 2j..2j+1 are element 128h + 32j + l's
  uint8_t scales[12];     // sixteen 6-bit scales (value - 32), one per group of 16
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d;     // super-block scale for the 6-bit sub-block scales
  uint16_t dmin;  // super-block scale for the 6-bit sub-block mins
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d;     // super-block scale for the 6-bit sub-block scales
  uint16_t dmin;  // super-block scale for the 6-bit sub-block mins
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];  // the 5th bit: qh[l] bit s is element 32s + l's
  uint8_t qs[kQK_K / 2];  // the low 4 bits, packed as Q4_K's
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sum of each group of 16 qs
};
struct BlockMXFP4 {
  uint8_t e;  // E8M0 shared exponent
  uint8_t qs[kQK / 2];
};
// The non-linear 4-bit formats: each 4-bit code indexes a fixed table of 16 int8 values
// (kIq4nlValues, quant_internal.h), packed as Q4_0's codes.
struct BlockIQ4_NL {
  uint16_t d;           // fp16 scale: element = d * kIq4nlValues[code]
  uint8_t qs[kQK / 2];  // element j in the low nibble of qs[j], element j + 16 in the high one
};
struct BlockIQ4_XS {
  uint16_t d;                    // super-block scale for the 6-bit sub-block scales
  uint16_t scales_h;             // bits 2s..2s+1: the top 2 bits of sub-block s's scale
  uint8_t scales_l[kQK_K / 64];  // nibble s % 2 of byte s / 2: its low 4 bits
  uint8_t qs[kQK_K / 2];         // sub-block s (32 elements) in qs[16s..16s+15], as IQ4_NL's
};
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);

// IEEE half and bfloat16 conversions (round-to-nearest-even, as ggml).
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

// Weight types the GEMV kernels accept.
bool gemv_supported(GgmlType w);

// The activation format a weight type is dotted with (ggml's vec_dot_type):
// F32→F32, F16→F16, BF16→BF16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/MXFP4/IQ4_NL→Q8_0,
// Q2_K..Q6_K/IQ4_XS→Q8_K.
GgmlType vec_dot_type(GgmlType w);

// dst[n] = dequantized src (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, IQ4_NL, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, Q8_K). n must be a multiple of the type's block size.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// Quantize n floats into blocks of type t, exactly as llama.cpp's reference quantizers
// (quantize_row_*_ref) do. Supported: F32, F16, BF16, Q8_0, Q8_K (activations) and
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, MXFP4, IQ4_NL, IQ4_XS (weights, used
// by `strata synth`). Byte-identical to llama-quantize without an importance matrix
// (tests/test_quant.cpp checks the fixtures; Q4_1, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS,
// which no fixture holds, were checked against llama-quantize: bench/RESULTS.md sessions 19, 20).
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

// Quantize an activation row for the GEMV kernels, the way llama.cpp's x86 CPU backend does (it
// made the fixtures' references): Q8_0 uses d = amax/127, codes = round-half-to-even(x ·
// (127/amax)) (its AVX2 quantize_row_q8_0), which differs from the reference quantizer (x · (1/d),
// rounded half away from zero) in the last code of some blocks; every other type is quantize_row().
// The engine, kernels/expert_ref and the CUDA grouped kernel all quantize activations with this one
// function. Q8_0 and Q8_K go through AVX2 twins where the CPU has AVX2 (same bytes as the scalar
// code: quantize_activation_row_ref, tested against it).
void quantize_activation_row(GgmlType t, const float* src, void* dst, int64_t n);
void quantize_activation_row_ref(GgmlType t, const float* src, void* dst, int64_t n);

}  // namespace strata::kernels
