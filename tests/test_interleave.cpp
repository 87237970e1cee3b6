// Interleaved weight layouts (kernels/interleave.h): the repack round-trips, and the kernels over
// it equal the GGUF layout's reference kernels bit for bit (every ISA this CPU runs), for GEMV,
// GEMM (several token counts), partial row ranges and the pool's row split, at awkward shapes
// with random blocks (zero, negative, subnormal scales; extreme codes).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/gemv.h"
#include "kernels/interleave.h"
#include "kernels/interleave_internal.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"

namespace strata::kernels {
namespace {

constexpr uint32_t kGuardBits = 0x7FC0DEAD;

uint16_t random_scale(std::mt19937_64& rng) {
  const int kind = static_cast<int>(rng() % 100);
  if (kind < 5) return 0x0000;
  if (kind < 8) return 0x8000;
  if (kind < 10) return static_cast<uint16_t>((rng() % 0x3FF + 1) | (rng() % 2 ? 0x8000 : 0));
  std::uniform_real_distribution<float> mag(-8.0f, 2.0f);
  return f32_to_fp16(std::exp2(mag(rng)) * (rng() % 2 ? -1.0f : 1.0f));
}

std::vector<uint8_t> random_q4_0(int64_t n_rows, int64_t n_cols, std::mt19937_64& rng) {
  const int64_t nb = n_cols / kQK;
  std::vector<uint8_t> w(static_cast<size_t>(n_rows * nb) * sizeof(BlockQ4_0));
  auto* blocks = reinterpret_cast<BlockQ4_0*>(w.data());
  for (int64_t i = 0; i < n_rows * nb; ++i) {
    blocks[i].d = random_scale(rng);
    for (auto& q : blocks[i].qs) q = static_cast<uint8_t>(rng());
    // The extremes of the AVX2 GEMM's int16 sums: every code 15 (every seventh block), 0.
    if (i % 7 == 0 || i % 11 == 0) std::memset(blocks[i].qs, i % 7 == 0 ? 0xFF : 0, 16);
  }
  return w;
}

// Q5_0, Q4_1 or Q5_1 blocks: codes and 5th bits any bits, finite d and m; every seventh block every
// code 31 / 15 (the AVX2 kernels' int16 bound), every eleventh every code 0.
template <typename Block>
std::vector<uint8_t> random_b32(int64_t n_rows, int64_t n_cols, std::mt19937_64& rng) {
  const int64_t nb = n_cols / kQK;
  std::vector<uint8_t> w(static_cast<size_t>(n_rows * nb) * sizeof(Block));
  for (auto& byte : w) byte = static_cast<uint8_t>(rng());
  auto* blocks = reinterpret_cast<Block*>(w.data());
  for (int64_t i = 0; i < n_rows * nb; ++i) {
    Block& b = blocks[i];
    b.d = random_scale(rng);
    if constexpr (!std::is_same_v<Block, BlockQ5_0>) b.m = random_scale(rng);
    const int fill = i % 7 == 0 ? 0xFF : i % 11 == 0 ? 0 : -1;
    if (fill >= 0) {
      std::memset(b.qs, fill, sizeof(b.qs));
      if constexpr (!std::is_same_v<Block, BlockQ4_1>) std::memset(b.qh, fill, sizeof(b.qh));
    }
  }
  return w;
}

// Q4_K or Q5_K blocks: codes, 5th bits, scales and mins any bits; every seventh block the extremes
// (every code 15 / 31, every scale and min 63).
template <typename Block>
std::vector<uint8_t> random_k_min(int64_t n_rows, int64_t n_cols, std::mt19937_64& rng) {
  const int64_t nb = n_cols / kQK_K;
  std::vector<uint8_t> w(static_cast<size_t>(n_rows * nb) * sizeof(Block));
  for (auto& byte : w) byte = static_cast<uint8_t>(rng());
  auto* blocks = reinterpret_cast<Block*>(w.data());
  for (int64_t i = 0; i < n_rows * nb; ++i) {
    blocks[i].d = random_scale(rng);
    blocks[i].dmin = random_scale(rng);
    if (i % 7 == 0) {
      std::memset(blocks[i].qs, 0xFF, sizeof(blocks[i].qs));
      if constexpr (requires { blocks[i].qh; })
        std::memset(blocks[i].qh, 0xFF, sizeof(blocks[i].qh));
      std::memset(blocks[i].scales, 0xFF, sizeof(blocks[i].scales));
    }
  }
  return w;
}

// Q2_K blocks: codes, scales and mins any bits; every seventh block the extremes (every code 3,
// every scale and min 15).
std::vector<uint8_t> random_q2_k(int64_t n_rows, int64_t n_cols, std::mt19937_64& rng) {
  const int64_t nb = n_cols / kQK_K;
  std::vector<uint8_t> w(static_cast<size_t>(n_rows * nb) * sizeof(BlockQ2_K));
  for (auto& byte : w) byte = static_cast<uint8_t>(rng());
  auto* blocks = reinterpret_cast<BlockQ2_K*>(w.data());
  for (int64_t i = 0; i < n_rows * nb; ++i) {
    blocks[i].d = random_scale(rng);
    blocks[i].dmin = random_scale(rng);
    if (i % 7 == 0) {
      std::memset(blocks[i].qs, 0xFF, sizeof(blocks[i].qs));
      std::memset(blocks[i].scales, 0xFF, sizeof(blocks[i].scales));
    }
  }
  return w;
}

// Q3_K blocks: codes, 3rd bits and scales any bits; every seventh block one extreme (every value
// -4, every scale -32), every eleventh the other (every value 3, every scale 31).
std::vector<uint8_t> random_q3_k(int64_t n_rows, int64_t n_cols, std::mt19937_64& rng) {
  const int64_t nb = n_cols / kQK_K;
  std::vector<uint8_t> w(static_cast<size_t>(n_rows * nb) * sizeof(BlockQ3_K));
  for (auto& byte : w) byte = static_cast<uint8_t>(rng());
  auto* blocks = reinterpret_cast<BlockQ3_K*>(w.data());
  for (int64_t i = 0; i < n_rows * nb; ++i) {
    blocks[i].d = random_scale(rng);
    const int fill = i % 7 == 0 ? 0x00 : i % 11 == 0 ? 0xFF : -1;
    if (fill >= 0) {
      std::memset(blocks[i].qs, fill, sizeof(blocks[i].qs));
      std::memset(blocks[i].hmask, fill, sizeof(blocks[i].hmask));
      std::memset(blocks[i].scales, fill, sizeof(blocks[i].scales));
    }
  }
  return w;
}

std::vector<uint8_t> random_q6_k(int64_t n_rows, int64_t n_cols, std::mt19937_64& rng) {
  const int64_t nb = n_cols / kQK_K;
  std::vector<uint8_t> w(static_cast<size_t>(n_rows * nb) * sizeof(BlockQ6_K));
  for (auto& byte : w) byte = static_cast<uint8_t>(rng());  // codes and int8 scales: any bits
  auto* blocks = reinterpret_cast<BlockQ6_K*>(w.data());
  for (int64_t i = 0; i < n_rows * nb; ++i) {
    blocks[i].d = random_scale(rng);
    if (i % 5 == 0) blocks[i].scales[i % 16] = static_cast<int8_t>(-128);  // the extremes
    if (i % 7 == 0) std::memset(blocks[i].ql, 0xFF, sizeof(blocks[i].ql));
  }
  return w;
}

std::vector<uint8_t> random_iq4_xs(int64_t n_rows, int64_t n_cols, std::mt19937_64& rng) {
  const int64_t nb = n_cols / kQK_K;
  std::vector<uint8_t> w(static_cast<size_t>(n_rows * nb) * sizeof(BlockIQ4_XS));
  for (auto& byte : w) byte = static_cast<uint8_t>(rng());  // codes and scales: any bits
  auto* blocks = reinterpret_cast<BlockIQ4_XS*>(w.data());
  for (int64_t i = 0; i < n_rows * nb; ++i) {
    blocks[i].d = random_scale(rng);
    if (i % 7 == 0) {  // the extremes: every code 0 (-127), every scale -32
      std::memset(blocks[i].qs, 0, sizeof(blocks[i].qs));
      std::memset(blocks[i].scales_l, 0, sizeof(blocks[i].scales_l));
      blocks[i].scales_h = 0;
    }
  }
  return w;
}

std::vector<uint8_t> random_mxfp4(int64_t n_rows, int64_t n_cols, std::mt19937_64& rng) {
  const int64_t nb = n_cols / kQK;
  std::vector<uint8_t> w(static_cast<size_t>(n_rows * nb) * sizeof(BlockMXFP4));
  for (auto& byte : w) byte = static_cast<uint8_t>(rng());  // codes: any bits
  auto* blocks = reinterpret_cast<BlockMXFP4*>(w.data());
  for (int64_t i = 0; i < n_rows * nb; ++i) {
    // Exponents 2^-28..2^7 (no overflow against any activation), and the subnormal scales 2^-128,
    // 2^-127 (e = 0, 1) and the smallest normal (e = 2).
    const int kind = static_cast<int>(rng() % 20);
    blocks[i].e = static_cast<uint8_t>(kind < 3 ? kind : 100 + static_cast<int>(rng() % 36));
    if (i % 7 == 0) std::memset(blocks[i].qs, 0x77, sizeof(blocks[i].qs));  // every code 12
  }
  return w;
}

std::vector<uint8_t> random_q8_0(int64_t n_rows, int64_t n_cols, std::mt19937_64& rng) {
  const int64_t nb = n_cols / kQK;
  std::vector<uint8_t> w(static_cast<size_t>(n_rows * nb) * sizeof(BlockQ8_0));
  for (auto& byte : w) byte = static_cast<uint8_t>(rng());  // codes: any bits, -128 included
  auto* blocks = reinterpret_cast<BlockQ8_0*>(w.data());
  for (int64_t i = 0; i < n_rows * nb; ++i) {
    blocks[i].d = random_scale(rng);
    if (i % 7 == 0) std::memset(blocks[i].qs, 0x80, sizeof(blocks[i].qs));  // every code -128
  }
  return w;
}

std::vector<uint8_t> random_weights(GgmlType t, int64_t n_rows, int64_t n_cols,
                                    std::mt19937_64& rng) {
  if (t == GgmlType::Q6_K) return random_q6_k(n_rows, n_cols, rng);
  if (t == GgmlType::IQ4_XS) return random_iq4_xs(n_rows, n_cols, rng);
  if (t == GgmlType::MXFP4) return random_mxfp4(n_rows, n_cols, rng);
  if (t == GgmlType::Q8_0) return random_q8_0(n_rows, n_cols, rng);
  if (t == GgmlType::Q5_K) return random_k_min<BlockQ5_K>(n_rows, n_cols, rng);
  if (t == GgmlType::Q2_K) return random_q2_k(n_rows, n_cols, rng);
  if (t == GgmlType::Q3_K) return random_q3_k(n_rows, n_cols, rng);
  if (t == GgmlType::Q5_0) return random_b32<BlockQ5_0>(n_rows, n_cols, rng);
  if (t == GgmlType::Q4_1) return random_b32<BlockQ4_1>(n_rows, n_cols, rng);
  if (t == GgmlType::Q5_1) return random_b32<BlockQ5_1>(n_rows, n_cols, rng);
  // Q4_0, and IQ4_NL (its blocks have Q4_0's shape: fp16 d, 16 code bytes of any bits).
  return t == GgmlType::Q4_K ? random_k_min<BlockQ4_K>(n_rows, n_cols, rng)
                             : random_q4_0(n_rows, n_cols, rng);
}

GgmlType layout_type(WeightLayout layout) {
  if (layout == WeightLayout::kQ6_Kx16) return GgmlType::Q6_K;
  if (layout == WeightLayout::kIQ4_XSx16) return GgmlType::IQ4_XS;
  if (layout == WeightLayout::kIQ4_NLx16) return GgmlType::IQ4_NL;
  if (layout == WeightLayout::kMXFP4x16) return GgmlType::MXFP4;
  if (layout == WeightLayout::kQ8_0x16) return GgmlType::Q8_0;
  if (layout == WeightLayout::kQ5_Kx16) return GgmlType::Q5_K;
  if (layout == WeightLayout::kQ2_Kx16) return GgmlType::Q2_K;
  if (layout == WeightLayout::kQ3_Kx16) return GgmlType::Q3_K;
  if (layout == WeightLayout::kQ5_0x16) return GgmlType::Q5_0;
  if (layout == WeightLayout::kQ4_1x16) return GgmlType::Q4_1;
  if (layout == WeightLayout::kQ5_1x16) return GgmlType::Q5_1;
  return layout == WeightLayout::kQ4_Kx16 ? GgmlType::Q4_K : GgmlType::Q4_0;
}

// Q8_K activations: mostly from the engine's quantizer; row 1 all -128 (the extremes of the AVX2
// kernel's int16 sums) and one in four raw random codes, with the bsums they imply (the kernels
// trust the bsums, as only the quantizer makes them).
std::vector<uint8_t> random_acts_k(int64_t n_tokens, int64_t n_cols, std::mt19937_64& rng) {
  const size_t stride = ggml_row_bytes(GgmlType::Q8_K, static_cast<uint64_t>(n_cols));
  std::vector<uint8_t> x(static_cast<size_t>(n_tokens) * stride);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(n_cols));
  for (int64_t t = 0; t < n_tokens; ++t) {
    uint8_t* row = x.data() + t * stride;
    const bool extreme = t == 1;
    if (extreme || rng() % 4 == 0) {
      auto* b = reinterpret_cast<BlockQ8_K*>(row);
      for (int64_t i = 0; i < n_cols / kQK_K; ++i) {
        b[i].d = std::exp2(static_cast<float>(rng() % 12) - 6.0f);
        for (auto& q : b[i].qs) q = static_cast<int8_t>(extreme ? -128 : static_cast<int>(rng()));
        for (int g = 0; g < kQK_K / 16; ++g) {
          int sum = 0;
          for (int k = 0; k < 16; ++k) sum += b[i].qs[16 * g + k];
          b[i].bsums[g] = static_cast<int16_t>(sum);
        }
      }
      continue;
    }
    const float scale = std::exp2(static_cast<float>(rng() % 12) - 6.0f);
    for (auto& v : f) v = normal(rng) * scale;
    quantize_activation_row(GgmlType::Q8_K, f.data(), row, n_cols);
  }
  return x;
}

// Activation rows: mostly from the engine's quantizer; row 1 all `lowest` and one in four raw
// random codes in [lowest, 127] (the extremes of the int16 bound in the AVX2 kernels). lowest is
// -128, or -127 against Q8_0 weights: the engine's quantizer never writes -128 (127 / amax), and
// the AVX2 Q8_0 kernels, row and interleaved, move the weights' signs onto the activations.
std::vector<uint8_t> random_acts(int64_t n_tokens, int64_t n_cols, std::mt19937_64& rng,
                                 int lowest = -128) {
  const size_t stride = ggml_row_bytes(GgmlType::Q8_0, static_cast<uint64_t>(n_cols));
  std::vector<uint8_t> x(static_cast<size_t>(n_tokens) * stride);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(n_cols));
  for (int64_t t = 0; t < n_tokens; ++t) {
    uint8_t* row = x.data() + t * stride;
    if (t == 1 || rng() % 4 == 0) {
      auto* b = reinterpret_cast<BlockQ8_0*>(row);
      for (int64_t i = 0; i < n_cols / kQK; ++i) {
        b[i].d = random_scale(rng);
        for (auto& q : b[i].qs)
          q = static_cast<int8_t>(t == 1 ? lowest : std::max(lowest, int(int8_t(rng()))));
      }
    } else {
      for (auto& v : f) v = normal(rng);
      quantize_activation_row(GgmlType::Q8_0, f.data(), row, n_cols);
    }
  }
  return x;
}

std::vector<Isa> isas() {
  std::vector<Isa> v{Isa::kRef};
  if (isa_supported(Isa::kAvx2)) v.push_back(Isa::kAvx2);
  if (isa_supported(Isa::kAvx512)) v.push_back(Isa::kAvx512);
  return v;
}

// Every kernel table of a layout this CPU runs: per ISA, both AVX2 builds (with and without
// AVX-VNNI) and both AVX-512 builds (with and without GFNI) where the CPU has them.
std::vector<std::pair<std::string, GemvKernels>> variants(WeightLayout layout) {
  std::vector<std::pair<std::string, GemvKernels>> v;
  for (Isa isa : isas())
    v.emplace_back(std::string(isa_name(isa)), gemv_kernels(layout_type(layout), layout, isa));
  if (isa_supported(Isa::kAvx2)) {
    // (kQ8_0x16 has AVX-VNNI kernels only.)
    if (detail::interleaved_kernels_avx2(layout).gemv != nullptr)
      v.emplace_back("avx2-novnni", detail::interleaved_kernels_avx2(layout));
    if (__builtin_cpu_supports("avxvnni") &&
        detail::interleaved_kernels_avxvnni(layout).gemv != nullptr)
      v.emplace_back("avx2-vnni", detail::interleaved_kernels_avxvnni(layout));
  }
  if (isa_supported(Isa::kAvx512)) {
    v.emplace_back("avx512-nogfni", detail::interleaved_kernels_avx512(layout));
    if (__builtin_cpu_supports("gfni"))
      v.emplace_back("avx512-gfni", detail::interleaved_kernels_avx512_gfni(layout));
  }
  return v;
}

void expect_same_bits(const std::vector<float>& want, const std::vector<float>& got,
                      const char* what) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(want[i]), std::bit_cast<uint32_t>(got[i]))
        << what << " element " << i << ": " << want[i] << " vs " << got[i];
}

TEST(Interleave, LayoutsCoverTheirTypesInWholeGroups) {
  // Q4_0: pairs of groups where the best ISA is AVX-512 and the rows make whole pairs.
  const WeightLayout q4_0_pairs =
      best_isa() == Isa::kAvx512 ? WeightLayout::kQ4_0x32 : WeightLayout::kQ4_0x16;
  EXPECT_EQ(interleaved_layout(GgmlType::Q4_0, 768, 2048), q4_0_pairs);
  EXPECT_EQ(interleaved_layout(GgmlType::Q4_0, 32, 64), q4_0_pairs);
  EXPECT_EQ(interleaved_layout(GgmlType::Q4_0, 16, 64), WeightLayout::kQ4_0x16);
  EXPECT_EQ(interleaved_layout(GgmlType::Q4_0, 48, 64), WeightLayout::kQ4_0x16);
  EXPECT_EQ(interleaved_layout(GgmlType::Q4_0, 24, 64), WeightLayout::kRows);  // rows % 16
  EXPECT_EQ(interleaved_layout(GgmlType::Q4_0, 16, 96), WeightLayout::kRows);  // odd blocks
  EXPECT_EQ(interleaved_layout(GgmlType::Q8_0, 768, 2048), WeightLayout::kQ8_0x16);
  EXPECT_EQ(interleaved_layout(GgmlType::Q8_0, 16, 96), WeightLayout::kQ8_0x16);
  EXPECT_EQ(interleaved_layout(GgmlType::Q8_0, 40, 64), WeightLayout::kRows);
  EXPECT_EQ(interleaved_layout(GgmlType::Q4_K, 768, 2048), WeightLayout::kQ4_Kx16);
  EXPECT_EQ(interleaved_layout(GgmlType::Q4_K, 2048, 768), WeightLayout::kQ4_Kx16);
  EXPECT_EQ(interleaved_layout(GgmlType::Q4_K, 40, 256), WeightLayout::kRows);
  EXPECT_EQ(interleaved_layout(GgmlType::Q6_K, 151936, 2048), WeightLayout::kQ6_Kx16);
  EXPECT_EQ(interleaved_layout(GgmlType::Q6_K, 2048, 768), WeightLayout::kQ6_Kx16);
  EXPECT_EQ(interleaved_layout(GgmlType::Q6_K, 40, 256), WeightLayout::kRows);
  EXPECT_EQ(interleaved_layout(GgmlType::Q5_K, 768, 2048), WeightLayout::kQ5_Kx16);
  EXPECT_EQ(interleaved_layout(GgmlType::Q5_K, 40, 256), WeightLayout::kRows);
  EXPECT_EQ(interleaved_layout(GgmlType::Q2_K, 768, 2048), WeightLayout::kQ2_Kx16);
  EXPECT_EQ(interleaved_layout(GgmlType::Q2_K, 40, 256), WeightLayout::kRows);
  EXPECT_EQ(interleaved_layout(GgmlType::Q3_K, 2048, 768), WeightLayout::kQ3_Kx16);
  EXPECT_EQ(interleaved_layout(GgmlType::Q3_K, 16, 320), WeightLayout::kRows);
  EXPECT_EQ(interleaved_layout(GgmlType::Q6_K), WeightLayout::kQ6_Kx16);
  EXPECT_EQ(interleaved_layout(GgmlType::IQ4_XS, 768, 2048), WeightLayout::kIQ4_XSx16);
  EXPECT_EQ(interleaved_layout(GgmlType::IQ4_XS, 40, 256), WeightLayout::kRows);
  EXPECT_EQ(interleaved_layout(GgmlType::IQ4_NL, 768, 2048), WeightLayout::kIQ4_NLx16);
  EXPECT_EQ(interleaved_layout(GgmlType::IQ4_NL, 2048, 1408), WeightLayout::kIQ4_NLx16);
  EXPECT_EQ(interleaved_layout(GgmlType::IQ4_NL, 16, 96), WeightLayout::kRows);
  EXPECT_EQ(interleaved_layout(GgmlType::MXFP4, 2880, 2880), WeightLayout::kMXFP4x16);
  EXPECT_EQ(interleaved_layout(GgmlType::MXFP4, 16, 96), WeightLayout::kRows);
  EXPECT_EQ(interleaved_layout(GgmlType::MXFP4, 40, 64), WeightLayout::kRows);
  EXPECT_EQ(interleaved_layout(GgmlType::Q4_0), WeightLayout::kQ4_0x16);
  EXPECT_EQ(interleaved_layout(GgmlType::Q4_K), WeightLayout::kQ4_Kx16);
  EXPECT_EQ(interleaved_layout(GgmlType::Q8_0), WeightLayout::kQ8_0x16);
  EXPECT_EQ(interleaved_layout(GgmlType::F16), WeightLayout::kRows);
  EXPECT_EQ(layout_rows(WeightLayout::kRows), 1);
  EXPECT_EQ(layout_rows(WeightLayout::kQ4_0x16), 16);
  EXPECT_EQ(layout_rows(WeightLayout::kQ4_0x32), 16);
  EXPECT_EQ(layout_rows(WeightLayout::kQ4_Kx16), 16);
  EXPECT_EQ(layout_rows(WeightLayout::kQ6_Kx16), 16);
  EXPECT_EQ(layout_rows(WeightLayout::kIQ4_XSx16), 16);
  EXPECT_EQ(layout_rows(WeightLayout::kIQ4_NLx16), 16);
  EXPECT_EQ(layout_rows(WeightLayout::kMXFP4x16), 16);
  EXPECT_EQ(layout_rows(WeightLayout::kQ8_0x16), 16);
  EXPECT_EQ(layout_rows(WeightLayout::kQ5_Kx16), 16);
  EXPECT_EQ(layout_rows(WeightLayout::kQ2_Kx16), 16);
  EXPECT_EQ(layout_rows(WeightLayout::kQ3_Kx16), 16);
}

// kMXFP4x16's chunks and kQ8_0x16's blocks (544-byte units) alternate codes-first and
// scales-first counting from the matrix's first group, so with an odd unit count per group the
// groups alternate too: every code line of a 64-byte aligned matrix starts on a line.
TEST(Interleave, UnitLayoutsKeepCodeLinesAligned) {
  for (int64_t nb : {1, 2, 3, 26, 90}) {
    for (int64_t r = 0; r < 64; r += 16) {
      const size_t group = static_cast<size_t>(r) * static_cast<size_t>(nb) * 34;
      const bool q8_odd = detail::q8_0x16_group_odd(r, nb);
      EXPECT_EQ(group % 64, q8_odd ? 32u : 0u) << nb << " " << r;
      for (int64_t b = 0; b < nb; ++b) {
        EXPECT_EQ((group + detail::q8_0x16_code_offset(b, q8_odd)) % 64, 0u) << nb << " " << b;
        EXPECT_EQ((group + detail::q8_0x16_scale_offset(b, q8_odd)) % 32, 0u) << nb << " " << b;
      }
      // kQ3_Kx16's 1760-byte super-blocks alternate the same way: every hmask, qs and scales line
      // and the d half line start where their loads want them.
      const size_t q3_group = static_cast<size_t>(r) * static_cast<size_t>(nb) * 110;
      const bool q3_odd = detail::q3_kx16_group_odd(r, nb);
      EXPECT_EQ(q3_group % 64, q3_odd ? 32u : 0u) << nb << " " << r;
      for (int64_t b = 0; b < nb; ++b) {
        const detail::Q3KParts p = detail::q3_kx16_parts(b, q3_odd);
        for (int i = 0; i < 16; ++i) EXPECT_EQ((q3_group + p.qs(i)) % 64, 0u) << b;
        for (int m = 0; m < 8; ++m) EXPECT_EQ((q3_group + p.hmask(m)) % 64, 0u) << b;
        EXPECT_EQ((q3_group + p.scales) % 64, 0u) << nb << " " << b;
        EXPECT_EQ((q3_group + p.d) % 32, 0u) << nb << " " << b;
      }
      // kQ6_Kx16's 3360-byte super-blocks too.
      const size_t q6_group = static_cast<size_t>(r) * static_cast<size_t>(nb) * 210;
      const bool q6_odd = detail::q6_kx16_group_odd(r, nb);
      EXPECT_EQ(q6_group % 64, q6_odd ? 32u : 0u) << nb << " " << r;
      for (int64_t b = 0; b < nb; ++b) {
        const detail::Q6KParts p = detail::q6_kx16_parts(b, q6_odd);
        for (size_t part : {p.scales, p.ql, p.qh}) EXPECT_EQ((q6_group + part) % 64, 0u) << b;
        EXPECT_EQ((q6_group + p.d) % 32, 0u) << nb << " " << b;
      }
      if (nb % 2 != 0) continue;  // MXFP4: whole chunks of two blocks
      const size_t mx_group = static_cast<size_t>(r) * static_cast<size_t>(nb) * 17;
      const bool odd = detail::mxfp4x16_group_odd(r, nb);
      EXPECT_EQ(mx_group % 64, odd ? 32u : 0u) << nb << " " << r;
      for (int64_t b = 0; b < nb; ++b) {
        EXPECT_EQ((mx_group + detail::mxfp4x16_code_offset(b, odd)) % 64, 0u) << nb << " " << b;
        EXPECT_EQ((mx_group + detail::mxfp4x16_scale_offset(b, odd)) % 16, 0u) << nb << " " << b;
      }
    }
  }
}

TEST(Interleave, RoundTripsAndInPlaceEqualsCopy) {
  std::mt19937_64 rng(7);
  for (WeightLayout layout :
       {WeightLayout::kQ4_0x16, WeightLayout::kQ4_0x32, WeightLayout::kQ4_Kx16,
        WeightLayout::kQ6_Kx16, WeightLayout::kIQ4_XSx16, WeightLayout::kMXFP4x16,
        WeightLayout::kQ8_0x16, WeightLayout::kQ5_Kx16, WeightLayout::kQ2_Kx16,
        WeightLayout::kQ3_Kx16, WeightLayout::kQ5_0x16, WeightLayout::kQ4_1x16,
        WeightLayout::kQ5_1x16})
    // 832 columns: 13 chunks of two blocks per group (kMXFP4x16's groups alternate).
    for (auto [rows, cols] :
         {std::pair<int64_t, int64_t>{16, 256}, {48, 768}, {32, 2048}, {48, 832}, {48, 96}}) {
      if (layout == WeightLayout::kQ4_0x32) rows = 2 * rows;  // whole pairs of groups
      const GgmlType t = layout_type(layout);
      if (cols % ggml_type_info(t).block_size != 0) continue;      // super-blocks of 256
      if (t != GgmlType::Q8_0 && cols % (2 * kQK) != 0) continue;  // chunks of two blocks
      const std::vector<uint8_t> w = random_weights(t, rows, cols, rng);
      std::vector<uint8_t> packed(w.size()), back(w.size());
      interleave(layout, w.data(), packed.data(), rows, cols);
      EXPECT_NE(packed, w);
      deinterleave(layout, packed.data(), back.data(), rows, cols);
      EXPECT_EQ(back, w) << ggml_type_name(t) << " " << rows << " x " << cols;
      std::vector<uint8_t> in_place = w;
      interleave_in_place(layout, in_place.data(), rows, cols);
      EXPECT_EQ(in_place, packed);
    }
}

class InterleaveKernels : public ::testing::TestWithParam<GgmlType> {};

TEST_P(InterleaveKernels, EqualTheGgufLayoutsBitForBit) {
  const GgmlType type = GetParam();
  const bool k_quant = vec_dot_type(type) == GgmlType::Q8_K;
  std::mt19937_64 rng(11);
  const GemvKernels ref = gemv_kernels(type, Isa::kRef);
  // Q4_0 n_cols: 2 blocks, 26 (a partial group of 8), 64 (the Qwen3 expert), 24 (its down rows);
  // Q4_K, Q6_K: 1, 3, 8, 9 super-blocks (partial and whole groups of 8; odd counts start the
  // next group half a line in for Q6_K).
  // Q8_0: also odd block counts (1, 3, 65: kQ8_0x16's groups alternate).
  const std::vector<int64_t> col_set = k_quant ? std::vector<int64_t>{256, 768, 2048, 2304}
                                       : type == GgmlType::Q8_0
                                           ? std::vector<int64_t>{32, 96, 832, 2080}
                                           : std::vector<int64_t>{64, 832, 2048, 768};
  // Q4_0 in both its layouts, whatever this CPU would choose; kQ4_0x32 in whole pairs of groups
  // (the row ranges below still split pairs: a lone group's path).
  const std::vector<WeightLayout> layouts =
      type == GgmlType::Q4_0
          ? std::vector<WeightLayout>{WeightLayout::kQ4_0x16, WeightLayout::kQ4_0x32}
          : std::vector<WeightLayout>{interleaved_layout(type)};
  for (WeightLayout layout : layouts)
    for (int64_t cols : col_set)
      for (int64_t rows : layout == WeightLayout::kQ4_0x32 ? std::vector<int64_t>{32, 64, 96}
                                                           : std::vector<int64_t>{16, 48, 96}) {
        const size_t row_bytes = ggml_row_bytes(type, static_cast<uint64_t>(cols));
        const std::vector<uint8_t> w = random_weights(type, rows, cols, rng);
        std::vector<uint8_t> packed(w.size());
        interleave(layout, w.data(), packed.data(), rows, cols);
        const int64_t n_tok = 19;
        const GgmlType vdt = vec_dot_type(type);
        const size_t xs = ggml_row_bytes(vdt, static_cast<uint64_t>(cols));
        const std::vector<uint8_t> x =
            k_quant ? random_acts_k(n_tok, cols, rng)
                    : random_acts(n_tok, cols, rng, type == GgmlType::Q8_0 ? -127 : -128);
        // Reference: the GGUF layout's scalar kernel, token by token.
        std::vector<float> want(static_cast<size_t>(n_tok * rows));
        for (int64_t t = 0; t < n_tok; ++t)
          ref.gemv(w.data(), row_bytes, x.data() + t * xs, want.data() + t * rows, 0, rows, cols);
        for (const auto& [name, k] : variants(layout)) {
          SCOPED_TRACE(name + " layout " + std::to_string(static_cast<int>(layout)) + " " +
                       std::to_string(rows) + " x " + std::to_string(cols));
          std::vector<float> got(want.size(), std::bit_cast<float>(kGuardBits));
          for (int64_t t = 0; t < n_tok; ++t)
            k.gemv(packed.data(), row_bytes, x.data() + t * xs, got.data() + t * rows, 0, rows,
                   cols);
          expect_same_bits(want, got, "gemv");
          // A tail hint (set_gemv_tail: the next call's first group, prefetched across the last
          // one) is only a prefetch: the same bits, even from an unmapped address.
          std::fill(got.begin(), got.end(), std::bit_cast<float>(kGuardBits));
          for (int64_t t = 0; t < n_tok; ++t) {
            set_gemv_tail(t % 2 == 0 ? static_cast<const void*>(packed.data())
                                     : reinterpret_cast<const void*>(uintptr_t{1} << 46));
            k.gemv(packed.data(), row_bytes, x.data() + t * xs, got.data() + t * rows, 0, rows,
                   cols);
          }
          set_gemv_tail(nullptr);
          expect_same_bits(want, got, "gemv after a tail hint");
          // A partial row range writes only its rows.
          std::vector<float> part(static_cast<size_t>(rows), std::bit_cast<float>(kGuardBits));
          k.gemv(packed.data(), row_bytes, x.data(), part.data(), 16, rows, cols);
          for (int64_t r = 0; r < rows; ++r) {
            if (r < 16)
              EXPECT_EQ(std::bit_cast<uint32_t>(part[r]), kGuardBits) << r;
            else
              EXPECT_EQ(std::bit_cast<uint32_t>(part[r]), std::bit_cast<uint32_t>(want[r])) << r;
          }
          // So does one that ends a group early (inside a pair of kQ4_0x32).
          std::fill(part.begin(), part.end(), std::bit_cast<float>(kGuardBits));
          k.gemv(packed.data(), row_bytes, x.data(), part.data(), 0, rows - 16, cols);
          for (int64_t r = 0; r < rows; ++r) {
            if (r >= rows - 16)
              EXPECT_EQ(std::bit_cast<uint32_t>(part[r]), kGuardBits) << r;
            else
              EXPECT_EQ(std::bit_cast<uint32_t>(part[r]), std::bit_cast<uint32_t>(want[r])) << r;
          }
          // GEMM over 1..19 tokens (the full passes of 8 or 4 tokens, each tail) == GEMV per
          // token.
          for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 16, 19}) {
            std::vector<float> g(static_cast<size_t>(m * rows), std::bit_cast<float>(kGuardBits));
            k.gemm(packed.data(), row_bytes, x.data(), xs, g.data(), static_cast<size_t>(rows), m,
                   0, rows, cols);
            expect_same_bits(std::vector<float>(want.begin(), want.begin() + m * rows), g, "gemm");
          }
          // A GEMM over rows [16, rows): groups paired from the second one on (the MXFP4 pairs
          // whose first group's chunks start odd); the first 16 rows stay untouched.
          for (int64_t m : {4, 9}) {
            std::vector<float> g(static_cast<size_t>(m * rows), std::bit_cast<float>(kGuardBits));
            k.gemm(packed.data(), row_bytes, x.data(), xs, g.data(), static_cast<size_t>(rows), m,
                   16, rows, cols);
            for (int64_t t = 0; t < m; ++t)
              for (int64_t r = 0; r < rows; ++r)
                ASSERT_EQ(std::bit_cast<uint32_t>(g[t * rows + r]),
                          r < 16 ? kGuardBits : std::bit_cast<uint32_t>(want[t * rows + r]))
                    << "gemm from row 16, token " << t << " row " << r;
          }
        }
      }
}

INSTANTIATE_TEST_SUITE_P(Types, InterleaveKernels,
                         ::testing::Values(GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K,
                                           GgmlType::IQ4_XS, GgmlType::IQ4_NL, GgmlType::MXFP4,
                                           GgmlType::Q8_0, GgmlType::Q5_K, GgmlType::Q2_K,
                                           GgmlType::Q3_K, GgmlType::Q5_0, GgmlType::Q4_1,
                                           GgmlType::Q5_1),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

TEST(Interleave, PoolSplitEqualsOneCall) {
  std::mt19937_64 rng(13);
  const int64_t rows = 256, cols = 2048;
  const size_t row_bytes = static_cast<size_t>(cols / kQK) * sizeof(BlockQ4_0);
  const std::vector<uint8_t> w = random_q4_0(rows, cols, rng);
  const std::vector<uint8_t> x = random_acts(3, cols, rng);
  const size_t xs = ggml_row_bytes(GgmlType::Q8_0, static_cast<uint64_t>(cols));
  std::vector<float> want(static_cast<size_t>(3 * rows));
  gemm(nullptr, GgmlType::Q4_0, w.data(), row_bytes, x.data(), xs, want.data(), rows, 3, rows,
       cols);
  // 3 threads split 256 rows at multiples of 16 that are not all multiples of 32 (kQ4_0x32's
  // lone groups).
  for (WeightLayout layout : {WeightLayout::kQ4_0x16, WeightLayout::kQ4_0x32}) {
    std::vector<uint8_t> packed(w.size());
    interleave(layout, w.data(), packed.data(), rows, cols);
    for (int threads : {1, 3}) {
      ThreadPool pool(threads, false);
      std::vector<float> y1(static_cast<size_t>(rows)), y3(want.size());
      gemv(&pool, GgmlType::Q4_0, layout, packed.data(), row_bytes, x.data(), y1.data(), rows,
           cols);
      expect_same_bits(std::vector<float>(want.begin(), want.begin() + rows), y1, "pool gemv");
      gemm(&pool, GgmlType::Q4_0, layout, packed.data(), row_bytes, x.data(), xs, y3.data(), rows,
           3, rows, cols);
      expect_same_bits(want, y3, "pool gemm");
    }
  }
}

}  // namespace
}  // namespace strata::kernels
