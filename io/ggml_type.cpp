// ggml type table (see ggml_type.h).
#include "io/ggml_type.h"

#include <array>
#include <cctype>

#include "io/check.h"

namespace strata {
namespace {

struct Row {
  uint32_t id;
  GgmlTypeInfo info;
};

// block_size / type_size from ggml's type_traits.
constexpr std::array kTypes = {
    Row{0, {"F32", 1, 4}},         Row{1, {"F16", 1, 2}},         Row{2, {"Q4_0", 32, 18}},
    Row{3, {"Q4_1", 32, 20}},      Row{6, {"Q5_0", 32, 22}},      Row{7, {"Q5_1", 32, 24}},
    Row{8, {"Q8_0", 32, 34}},      Row{9, {"Q8_1", 32, 36}},      Row{10, {"Q2_K", 256, 84}},
    Row{11, {"Q3_K", 256, 110}},   Row{12, {"Q4_K", 256, 144}},   Row{13, {"Q5_K", 256, 176}},
    Row{14, {"Q6_K", 256, 210}},   Row{15, {"Q8_K", 256, 292}},   Row{16, {"IQ2_XXS", 256, 66}},
    Row{17, {"IQ2_XS", 256, 74}},  Row{18, {"IQ3_XXS", 256, 98}}, Row{19, {"IQ1_S", 256, 50}},
    Row{20, {"IQ4_NL", 32, 18}},   Row{21, {"IQ3_S", 256, 110}},  Row{22, {"IQ2_S", 256, 82}},
    Row{23, {"IQ4_XS", 256, 136}}, Row{24, {"I8", 1, 1}},         Row{25, {"I16", 1, 2}},
    Row{26, {"I32", 1, 4}},        Row{27, {"I64", 1, 8}},        Row{28, {"F64", 1, 8}},
    Row{29, {"IQ1_M", 256, 56}},   Row{30, {"BF16", 1, 2}},       Row{34, {"TQ1_0", 256, 54}},
    Row{35, {"TQ2_0", 256, 66}},   Row{39, {"MXFP4", 32, 17}},
};

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t raw) {
  for (const auto& r : kTypes)
    if (r.id == raw) return r.info;
  return std::nullopt;
}

GgmlTypeInfo ggml_type_info(GgmlType t) {
  auto info = ggml_type_info(static_cast<uint32_t>(t));
  STRATA_ASSERT(info.has_value(), "ggml type {}", static_cast<uint32_t>(t));
  return *info;
}

std::string_view ggml_type_name(GgmlType t) {
  return ggml_type_info(t).name;
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  for (const auto& r : kTypes) {
    if (r.info.name.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < name.size() && eq; ++i)
      eq = std::toupper(static_cast<unsigned char>(name[i])) == r.info.name[i];
    if (eq) return static_cast<GgmlType>(r.id);
  }
  return std::nullopt;
}

uint64_t ggml_row_bytes(GgmlType t, uint64_t n) {
  auto info = ggml_type_info(t);
  STRATA_ASSERT(n % info.block_size == 0, "{} elements is not a multiple of the {} block ({})", n,
                info.name, info.block_size);
  return n / info.block_size * info.type_size;
}

}  // namespace strata
