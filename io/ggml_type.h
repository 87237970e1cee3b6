// ggml tensor element types as GGUF stores them, with their block geometry.
// Values and layouts follow llama.cpp's ggml.h exactly (a file written by llama.cpp reads here).
// Exercised by tests/test_gguf.cpp and tests/test_quant.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct GgmlTypeInfo {
  std::string_view name;
  uint32_t block_size;  // elements per block (1 for plain types)
  uint32_t type_size;   // bytes per block
};

// nullopt for values that are not a known ggml type (a corrupt file).
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t raw);
GgmlTypeInfo ggml_type_info(GgmlType t);
std::string_view ggml_type_name(GgmlType t);
// Parse "Q4_0", "f32", ... (case-insensitive); nullopt if unknown.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

// Bytes of one row of n elements; n must be a multiple of the block size.
uint64_t ggml_row_bytes(GgmlType t, uint64_t n);

}  // namespace strata
