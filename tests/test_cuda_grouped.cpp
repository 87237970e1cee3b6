// Tests for the grouped expert kernel (cuda/grouped.h) and VRAM expert slots (cuda/vram_store.h).
// GroupedHost.* (label unit, no GPU): the kernel's element functions run on the host against the
// CPU path bit for bit — activation quantization vs kernels::quantize_activation_row, per-row dots
// vs the kernels' GEMV (every ISA), whole experts vs kernels::expert_forward_ref — at awkward sizes
// with fresh random data, Q4_0 / Q5_0 / Q8_0 / Q4_K / Q6_K / MXFP4 / Q4_1 / Q5_1 / IQ4_NL /
// IQ4_XS / Q2_K / Q3_K / Q5_K, mixed layers, gpt-oss's
// SwiGLU-OAI with expert biases (against the engine's own swiglu_oai and add_bias_rows order,
// glibc's expf included), and the fixture models' real experts. GroupedDevice.* / VramStore.*
// (label gpu): the real launches vs expert_forward_ref bit for bit, and the store's slots; they
// GTEST_SKIP without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cuda/dense.h"
#include "cuda/expert_math.h"
#include "cuda/grouped.h"
#include "cuda/runtime.h"
#include "cuda/vram_store.h"
#include "engine/ops.h"
#include "io/check.h"
#include "io/ggml_type.h"
#include "io/gguf.h"
#include "kernels/expert_ref.h"
#include "kernels/gelu.h"
#include "kernels/gemv.h"
#include "kernels/portable_math.h"
#include "kernels/quant.h"

namespace strata::cuda {
namespace {

constexpr uint32_t kGuardBits = 0x7FC0DEAD;  // a NaN payload no kernel produces

float guard_value() {
  return std::bit_cast<float>(kGuardBits);
}

// got == want bit for bit; prints the first few mismatches.
::testing::AssertionResult same_bits(const float* got, const float* want, int64_t n) {
  int64_t bad = 0;
  std::string msg;
  for (int64_t i = 0; i < n; ++i) {
    if (std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i])) continue;
    if (++bad <= 5)
      msg += "\n  [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " (0x" +
             fmt::format("{:08x}", std::bit_cast<uint32_t>(got[i])) + ") want " +
             std::to_string(want[i]) + " (0x" +
             fmt::format("{:08x}", std::bit_cast<uint32_t>(want[i])) + ")";
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << n << " differ:" << msg;
}

std::vector<float> normal_floats(int64_t n, float sigma, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& f : v) f = normal(rng);
  return v;
}

// ---- random weights ----

// An fp16 scale: zero, negative zero, subnormal, or +-2^[-12, -4) (harsh: for single-row dots).
uint16_t harsh_fp16_scale(std::mt19937_64& rng) {
  const int kind = static_cast<int>(rng() % 100);
  if (kind < 5) return 0x0000;
  if (kind < 8) return 0x8000;
  if (kind < 11) return static_cast<uint16_t>((rng() % 0x3FF + 1) | (rng() % 2 ? 0x8000 : 0));
  std::uniform_real_distribution<float> mag(-12.0f, -4.0f);
  return kernels::f32_to_fp16(std::exp2(mag(rng)) * (rng() % 2 ? -1.0f : 1.0f));
}

// Random code bytes with the scale fields set by `scale` (every byte of the matrix random first).
template <typename Scale>
std::vector<uint8_t> random_blocks(GgmlType t, int64_t rows, int64_t cols, std::mt19937_64& rng,
                                   Scale scale) {
  const auto info = ggml_type_info(t);
  const int64_t nb = rows * (cols / info.block_size);
  std::vector<uint8_t> w(static_cast<size_t>(nb) * info.type_size);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  auto put16 = [](uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); };
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = w.data() + b * info.type_size;
    switch (t) {
      case GgmlType::Q4_0:
      case GgmlType::Q5_0:
      case GgmlType::Q8_0:
      case GgmlType::IQ4_NL:
      case GgmlType::IQ4_XS:  // d; the scale fields' bits stay random
        put16(blk, scale(rng));
        break;
      case GgmlType::Q4_1:  // d, m
      case GgmlType::Q5_1:
      case GgmlType::Q4_K:  // d, dmin
      case GgmlType::Q5_K:
        put16(blk, scale(rng));
        put16(blk + 2, scale(rng));
        break;
      case GgmlType::Q2_K:
        put16(blk + 80, scale(rng));
        put16(blk + 82, scale(rng));
        break;
      case GgmlType::Q3_K:
        put16(blk + 108, scale(rng));
        break;
      case GgmlType::Q6_K:
        put16(blk + 208, scale(rng));
        break;
      case GgmlType::MXFP4:  // E8M0 exponent 2^[-28, 12) (zero and subnormal scales included)
        blk[0] = static_cast<uint8_t>(rng() % 8 == 0 ? rng() % 3 : 100 + rng() % 40);
        break;
      default:
        ADD_FAILURE() << "no random blocks for " << ggml_type_name(t);
    }
  }
  return w;
}

// Weights quantized from normal floats, as a model file holds them.
std::vector<uint8_t> quantized_matrix(GgmlType t, int64_t rows, int64_t cols,
                                      std::mt19937_64& rng) {
  const std::vector<float> f = normal_floats(rows * cols, 0.05f, rng);
  std::vector<uint8_t> w(ggml_row_bytes(t, cols) * rows);
  for (int64_t r = 0; r < rows; ++r)
    kernels::quantize_row(t, f.data() + r * cols, w.data() + r * ggml_row_bytes(t, cols), cols);
  return w;
}

// ---- activation quantization ----

// Rows that stress the scale rules: ties of the largest magnitude with both signs, all-zero and
// -0 blocks, subnormal and huge blocks, halfway codes.
std::vector<float> awkward_activations(int64_t n, std::mt19937_64& rng) {
  std::vector<float> x = normal_floats(n, 1.0f, rng);
  for (int64_t base = 0; base < n; base += 32) {
    const int kind = static_cast<int>(rng() % 8);
    float* b = x.data() + base;
    switch (kind) {
      case 0:
        for (int i = 0; i < 32; ++i) b[i] = 0.0f;
        break;
      case 1:
        for (int i = 0; i < 32; ++i) b[i] = -0.0f;
        break;
      case 2:  // a tie: +m and -m
        b[rng() % 32] = 7.0f;
        b[rng() % 32] = -7.0f;
        break;
      case 3:
        for (int i = 0; i < 32; ++i) b[i] *= 1e-30f;
        break;
      case 4:
        for (int i = 0; i < 32; ++i) b[i] *= 1e30f;
        break;
      case 5:  // scale 1 (|max| = 127) and codes exactly halfway: the rounding rule shows
        for (int i = 0; i < 32; ++i)
          b[i] = static_cast<float>(static_cast<int>(rng() % 253) - 126) + 0.5f;
        b[rng() % 32] = rng() % 2 ? 127.0f : -127.0f;
        break;
      default:
        break;
    }
  }
  return x;
}

TEST(GroupedHost, QuantizeQ8_0MatchesQuantizeRow) {
  std::mt19937_64 rng(1);
  for (int64_t n : {32, 96, 352, 1056, 2048}) {
    for (int rep = 0; rep < 8; ++rep) {
      const std::vector<float> x = awkward_activations(n, rng);
      std::vector<uint8_t> want(ggml_row_bytes(GgmlType::Q8_0, n)), got(want.size(), 0xEE);
      kernels::quantize_activation_row(GgmlType::Q8_0, x.data(), want.data(), n);
      grouped_quantize_emulated(GgmlType::Q8_0, x.data(), got.data(), n);
      ASSERT_EQ(got, want) << "n=" << n << " rep=" << rep;
    }
  }
}

TEST(GroupedHost, QuantizeQ8_KMatchesQuantizeRow) {
  std::mt19937_64 rng(2);
  for (int64_t n : {256, 768, 2816}) {
    for (int rep = 0; rep < 8; ++rep) {
      std::vector<float> x = awkward_activations(n, rng);
      if (rep == 1) std::fill(x.begin(), x.begin() + 256, 0.0f);  // an all-zero super-block
      if (rep == 2) {  // the largest magnitude twice, negative first: the first one sets the sign
        x[17] = -50.0f;
        x[200] = 50.0f;
      }
      std::vector<uint8_t> want(ggml_row_bytes(GgmlType::Q8_K, n)), got(want.size(), 0xEE);
      kernels::quantize_row(GgmlType::Q8_K, x.data(), want.data(), n);
      grouped_quantize_emulated(GgmlType::Q8_K, x.data(), got.data(), n);
      ASSERT_EQ(got, want) << "n=" << n << " rep=" << rep;
    }
  }
}

// ---- row dots ----

struct DotCase {
  GgmlType type;
  std::vector<int64_t> cols;
};

TEST(GroupedHost, RowDotMatchesGemvEveryIsa) {
  std::mt19937_64 rng(3);
  const DotCase cases[] = {
      {GgmlType::Q4_0, {32, 96, 288, 1056, 2048}}, {GgmlType::Q5_0, {32, 96, 288, 1056, 2048}},
      {GgmlType::Q8_0, {32, 96, 288, 1056, 2048}}, {GgmlType::Q4_K, {256, 768, 2304, 4352}},
      {GgmlType::Q6_K, {256, 768, 2304, 4352}},    {GgmlType::MXFP4, {32, 96, 288, 1056, 2880}},
      {GgmlType::Q4_1, {32, 96, 288, 1056, 2048}}, {GgmlType::Q5_1, {32, 96, 288, 1056, 2048}},
      {GgmlType::IQ4_NL, {32, 96, 288, 1056}},     {GgmlType::IQ4_XS, {256, 768, 2304, 4352}},
      {GgmlType::Q5_K, {256, 768, 2304, 4352}},    {GgmlType::Q2_K, {256, 768, 2304, 4352}},
      {GgmlType::Q3_K, {256, 768, 2304, 4352}},
  };
  for (const DotCase& c : cases) {
    const GgmlType vdt = kernels::vec_dot_type(c.type);
    for (int64_t n : c.cols) {
      for (int64_t rows : {1, 3, 31, 33}) {
        const std::vector<uint8_t> w = random_blocks(c.type, rows, n, rng, harsh_fp16_scale);
        const std::vector<float> x = awkward_activations(n, rng);
        std::vector<uint8_t> xq(ggml_row_bytes(vdt, n));
        kernels::quantize_activation_row(vdt, x.data(), xq.data(), n);
        const size_t row_bytes = ggml_row_bytes(c.type, n);
        std::vector<float> got(rows);
        for (int64_t r = 0; r < rows; ++r)
          got[r] = grouped_row_dot_emulated(c.type, w.data() + r * row_bytes, xq.data(), n);
        for (kernels::Isa isa : {kernels::Isa::kRef, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
          std::vector<float> want(rows + 2, guard_value());
          kernels::gemv_kernels(c.type, isa)
              .gemv(w.data(), row_bytes, xq.data(), want.data() + 1, 0, rows, n);
          ASSERT_TRUE(same_bits(got.data(), want.data() + 1, rows))
              << ggml_type_name(c.type) << " n=" << n << " rows=" << rows << " isa "
              << kernels::isa_name(kernels::gemv_kernel_isa(c.type, isa));
        }
      }
    }
  }
}

TEST(GroupedHost, UnsupportedTypeThrows) {
  const float w[32] = {}, x[32] = {};
  try {
    grouped_row_dot_emulated(GgmlType::F32, w, x, 32);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("F32"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(grouped_supported(GgmlType::Q4_0));
  EXPECT_TRUE(grouped_supported(GgmlType::Q6_K));
  EXPECT_TRUE(grouped_supported(GgmlType::Q5_0));
  EXPECT_TRUE(grouped_supported(GgmlType::MXFP4));
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                     GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K})
    EXPECT_TRUE(grouped_supported(t)) << ggml_type_name(t);
  EXPECT_FALSE(grouped_supported(GgmlType::F16));
  EXPECT_FALSE(grouped_supported(GgmlType::IQ2_XXS));
}

// ---- whole experts ----

struct LayerCase {
  const char* name;
  ExpertShape shape;
  uint32_t n_experts;  // experts with weights; jobs use the first ones
  uint32_t n_tokens;
  uint32_t k;  // experts per token; 0: expert e takes token e % n_tokens (every job non-empty)
  bool biases = false;  // random per-expert gate / up / down biases
  float x_sigma = 1.0f;
};

// A layer's weights (host), x, the routing and the jobs in dispatch order.
struct TestLayer {
  ExpertShape shape;
  std::vector<std::vector<uint8_t>> gate, up, down;  // [n_experts]
  std::vector<float> x;                              // [n_tokens, n_embd]
  std::vector<int32_t> row_token;                    // [n_rows]
  std::vector<uint32_t> job_expert;                  // [n_jobs]
  std::vector<GroupedJob> jobs;                      // host weight pointers
  uint32_t n_tokens = 0;
  // Per-expert F32 biases ([n_experts][n_ff / n_embd]; empty: none), set into the jobs by
  // route().
  std::vector<std::vector<float>> gate_bias, up_bias, down_bias;

  GroupedLayer layer() const {
    GroupedLayer l;
    l.shape = shape;
    l.jobs = jobs.data();
    l.n_jobs = static_cast<uint32_t>(jobs.size());
    l.row_token = row_token.data();
    l.n_rows = static_cast<uint32_t>(row_token.size());
    l.n_tokens = n_tokens;
    return l;
  }
  kernels::ExpertMatrices matrices(uint32_t e) const {
    return kernels::ExpertMatrices{shape.gate_type, shape.up_type, shape.down_type,
                                   gate[e].data(),  up[e].data(),  down[e].data()};
  }
  // y [n_rows, n_embd] from expert_forward_ref, row by row; layers with biases or SwiGLU-OAI from
  // the engine's CPU path (cpu_reference).
  std::vector<float> reference() const {
    if (shape.activation != GroupedActivation::kSiluGlu || !gate_bias.empty() || !up_bias.empty() ||
        !down_bias.empty())
      return cpu_reference();
    std::vector<float> y(row_token.size() * shape.n_embd, guard_value());
    for (size_t j = 0; j < jobs.size(); ++j)
      for (uint32_t r = jobs[j].row_begin; r < jobs[j].row_end; ++r)
        kernels::expert_forward_ref(matrices(job_expert[j]), shape.n_embd, shape.n_ff,
                                    x.data() + row_token[r] * shape.n_embd, 1,
                                    y.data() + r * shape.n_embd);
    return y;
  }
  // engine/moe.cpp's steps for one row at a time: quantize x for gate / up, GEMV (the CPU's
  // dispatched ISA), add_bias_rows, engine::glu, quantize for down, GEMV, add_bias_rows.
  std::vector<float> cpu_reference() const {
    const int64_t ne = shape.n_embd, nf = shape.n_ff;
    std::vector<float> y(row_token.size() * ne, guard_value());
    std::vector<float> g(nf), u(nf);
    const auto mv = [](GgmlType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                       const float* x, float* out) {
      const GgmlType vdt = kernels::vec_dot_type(t);
      std::vector<uint8_t> xq(ggml_row_bytes(vdt, cols));
      kernels::quantize_activation_row(vdt, x, xq.data(), cols);
      kernels::gemv_kernels(t).gemv(w.data(), ggml_row_bytes(t, cols), xq.data(), out, 0, rows,
                                    cols);
    };
    const auto bias = [](const std::vector<std::vector<float>>& b, uint32_t e, float* out,
                         int64_t n) {
      if (!b.empty()) engine::add_bias_rows(b[e].data(), out, static_cast<size_t>(n), 1, 0, n);
    };
    for (size_t j = 0; j < jobs.size(); ++j) {
      const uint32_t e = job_expert[j];
      for (uint32_t r = jobs[j].row_begin; r < jobs[j].row_end; ++r) {
        const float* xr = x.data() + row_token[r] * ne;
        mv(shape.gate_type, gate[e], nf, ne, xr, g.data());
        mv(shape.up_type, up[e], nf, ne, xr, u.data());
        bias(gate_bias, e, g.data(), nf);
        bias(up_bias, e, u.data(), nf);
        engine::glu(
            shape.activation == GroupedActivation::kSwigluOai ? engine::FfnActivation::kSwigluOai
            : shape.activation == GroupedActivation::kGeluGlu ? engine::FfnActivation::kGeluGlu
                                                              : engine::FfnActivation::kSiluGlu,
            g.data(), u.data(), g.data(), nf);
        float* yr = y.data() + r * ne;
        mv(shape.down_type, down[e], ne, nf, g.data(), yr);
        bias(down_bias, e, yr, ne);
      }
    }
    return y;
  }
};

// Tokens route to k distinct experts each; rows are grouped by expert (dispatch order). An expert
// with no tokens still gets an (empty) job; expert 0 also takes every token (a long job).
void route(const LayerCase& c, TestLayer* t) {
  std::vector<std::vector<int32_t>> tokens_of(c.n_experts);
  if (c.k == 0)
    for (uint32_t e = 0; e < c.n_experts; ++e)
      tokens_of[e].push_back(static_cast<int32_t>(e % c.n_tokens));
  for (uint32_t tok = 0; c.k > 0 && tok < c.n_tokens; ++tok) {
    tokens_of[0].push_back(static_cast<int32_t>(tok));
    for (uint32_t i = 1; i < c.k; ++i) {
      const uint32_t e = 1 + (tok * 7 + i * 3) % (c.n_experts - 1);
      if (std::find(tokens_of[e].begin(), tokens_of[e].end(), static_cast<int32_t>(tok)) ==
          tokens_of[e].end())
        tokens_of[e].push_back(static_cast<int32_t>(tok));
    }
  }
  for (uint32_t e = 0; e < c.n_experts; ++e) {
    GroupedJob job;
    job.w = ExpertWeights{t->gate[e].data(), t->up[e].data(), t->down[e].data()};
    if (!t->gate_bias.empty()) job.gate_bias = t->gate_bias[e].data();
    if (!t->up_bias.empty()) job.up_bias = t->up_bias[e].data();
    if (!t->down_bias.empty()) job.down_bias = t->down_bias[e].data();
    job.row_begin = static_cast<uint32_t>(t->row_token.size());
    for (int32_t tok : tokens_of[e]) t->row_token.push_back(tok);
    job.row_end = static_cast<uint32_t>(t->row_token.size());
    t->jobs.push_back(job);
    t->job_expert.push_back(e);
  }
}

TestLayer make_layer(const LayerCase& c, std::mt19937_64& rng) {
  TestLayer t;
  t.shape = c.shape;
  t.n_tokens = c.n_tokens;
  for (uint32_t e = 0; e < c.n_experts; ++e) {
    t.gate.push_back(quantized_matrix(c.shape.gate_type, c.shape.n_ff, c.shape.n_embd, rng));
    t.up.push_back(quantized_matrix(c.shape.up_type, c.shape.n_ff, c.shape.n_embd, rng));
    t.down.push_back(quantized_matrix(c.shape.down_type, c.shape.n_embd, c.shape.n_ff, rng));
  }
  if (c.biases)
    for (uint32_t e = 0; e < c.n_experts; ++e) {
      t.gate_bias.push_back(normal_floats(c.shape.n_ff, 1.0f, rng));
      t.up_bias.push_back(normal_floats(c.shape.n_ff, 4.0f, rng));  // past the clamp too
      t.down_bias.push_back(normal_floats(c.shape.n_embd, 0.5f, rng));
    }
  t.x = normal_floats(int64_t{c.n_tokens} * c.shape.n_embd, c.x_sigma, rng);
  route(c, &t);
  return t;
}

// ---- fixture models: the experts of a llama.cpp-quantized GGUF ----

struct FixtureVariant {
  const char* file;  // under STRATA_FIXTURES_DIR
  uint32_t k;        // experts used per token
};
const FixtureVariant kFixtures[] = {
    {"tiny-qwen3moe/tiny-qwen3moe-Q8_0.gguf", 4},   {"tiny-qwen3moe/tiny-qwen3moe-Q4_0.gguf", 4},
    {"tiny-qwen3moe/tiny-qwen3moe-Q4_K_M.gguf", 4}, {"tiny-mixtral/tiny-mixtral-Q4_0.gguf", 2},
    {"tiny-gpt-oss/tiny-gpt-oss-MXFP4.gguf", 4},  // SwiGLU-OAI, biases
    {"tiny-gpt-oss/tiny-gpt-oss-Q4_0.gguf", 4},
};

std::string fixture_path(const char* rel) {
  return std::string(STRATA_FIXTURES_DIR) + "/" + rel;
}

// Layer `layer`'s stacked experts ([n_expert, rows, cols] tensors) copied out per expert, with
// random x and 5 tokens routed as route() does.
TestLayer fixture_layer(const io::GgufFile& f, int layer, uint32_t k, std::mt19937_64& rng) {
  TestLayer t;
  const std::string prefix = "blk." + std::to_string(layer) + ".ffn_";
  const io::GgufTensorInfo* g = f.find_tensor(prefix + "gate_exps.weight");
  const io::GgufTensorInfo* u = f.find_tensor(prefix + "up_exps.weight");
  const io::GgufTensorInfo* d = f.find_tensor(prefix + "down_exps.weight");
  EXPECT_TRUE(g != nullptr && u != nullptr && d != nullptr) << f.path() << " layer " << layer;
  if (g == nullptr || u == nullptr || d == nullptr) return t;
  t.shape = ExpertShape{static_cast<int64_t>(g->ne[0]), static_cast<int64_t>(g->ne[1]), g->type,
                        u->type, d->type};
  const auto n_expert = static_cast<uint32_t>(g->ne[2]);
  auto slices = [&](const io::GgufTensorInfo* ti, std::vector<std::vector<uint8_t>>* out) {
    const size_t bytes = ti->row_bytes() * ti->ne[1];
    const auto* base = reinterpret_cast<const uint8_t*>(f.tensor_data(*ti));
    for (uint32_t e = 0; e < n_expert; ++e)
      out->emplace_back(base + e * bytes, base + (e + 1) * bytes);
  };
  slices(g, &t.gate);
  slices(u, &t.up);
  slices(d, &t.down);
  // gpt-oss: SwiGLU-OAI and F32 biases [n_expert, n].
  if (f.get_string("general.architecture") == "gpt-oss")
    t.shape.activation = GroupedActivation::kSwigluOai;
  auto biases = [&](const char* name, std::vector<std::vector<float>>* out) {
    const io::GgufTensorInfo* b = f.find_tensor(prefix + name);
    if (b == nullptr) return;
    EXPECT_EQ(b->type, GgmlType::F32) << name;
    const auto* base = reinterpret_cast<const float*>(f.tensor_data(*b));
    const auto n = static_cast<size_t>(b->ne[0]);
    for (uint32_t e = 0; e < n_expert; ++e) out->emplace_back(base + e * n, base + (e + 1) * n);
  };
  biases("gate_exps.bias", &t.gate_bias);
  biases("up_exps.bias", &t.up_bias);
  biases("down_exps.bias", &t.down_bias);
  t.n_tokens = 5;
  t.x = normal_floats(int64_t{t.n_tokens} * t.shape.n_embd, 1.0f, rng);
  route(LayerCase{"fixture", t.shape, n_expert, t.n_tokens, k}, &t);
  return t;
}

ExpertShape shape(int64_t n_embd, int64_t n_ff, GgmlType g, GgmlType u, GgmlType d,
                  GroupedActivation act = GroupedActivation::kSiluGlu) {
  ExpertShape s;
  s.n_embd = n_embd;
  s.n_ff = n_ff;
  s.gate_type = g;
  s.up_type = u;
  s.down_type = d;
  s.activation = act;
  return s;
}
constexpr auto kOai = GroupedActivation::kSwigluOai;
constexpr auto kGelu = GroupedActivation::kGeluGlu;

const LayerCase kLayerCases[] = {
    {"q4_0", shape(288, 96, GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0), 5, 11, 2},
    {"q8_0", shape(96, 160, GgmlType::Q8_0, GgmlType::Q8_0, GgmlType::Q8_0), 5, 11, 2},
    {"q4_k", shape(512, 768, GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q4_K), 4, 10, 2},
    {"q6_k", shape(768, 256, GgmlType::Q6_K, GgmlType::Q6_K, GgmlType::Q6_K), 4, 10, 2},
    {"q4_k+q6_k down", shape(512, 256, GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K), 4, 3, 3},
    {"q4_k+q5_0 down (fixture Q4_K_M)",
     shape(256, 128, GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q5_0), 4, 3, 2},
    {"q4_0 gate, q8_0 up, q4_k down",
     shape(256, 512, GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K), 4, 3, 2},
    {"mxfp4", shape(288, 96, GgmlType::MXFP4, GgmlType::MXFP4, GgmlType::MXFP4), 5, 11, 2},
    // gpt-oss's layer kind: MXFP4, SwiGLU-OAI, biases; x large enough that gates pass the clamp
    // and exp's argument spans its range.
    {"gpt-oss: mxfp4 + swiglu-oai + biases",
     shape(192, 64, GgmlType::MXFP4, GgmlType::MXFP4, GgmlType::MXFP4, kOai), 6, 9, 4, true, 8.0f},
    {"swiglu-oai q4_0 + biases",
     shape(256, 96, GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q8_0, kOai), 4, 5, 2, true, 4.0f},
    {"biases, silu, q4_k", shape(512, 256, GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K), 4, 3, 2,
     true},
    // llama.cpp's Q5_K_M, Q3_K_M and Q2_K mixes, Q4_1 / Q5_1, and the IQ4 files' experts.
    {"q5_k+q6_k down (Q5_K_M)", shape(512, 256, GgmlType::Q5_K, GgmlType::Q5_K, GgmlType::Q6_K), 4,
     10, 2},
    {"q3_k+q5_k down (Q3_K_M)", shape(512, 768, GgmlType::Q3_K, GgmlType::Q3_K, GgmlType::Q5_K), 4,
     10, 2},
    {"q2_k+q3_k down (Q2_K)", shape(768, 256, GgmlType::Q2_K, GgmlType::Q2_K, GgmlType::Q3_K), 4,
     10, 2},
    {"q4_1 gate, q5_1 up, q4_1 down",
     shape(288, 96, GgmlType::Q4_1, GgmlType::Q5_1, GgmlType::Q4_1), 5, 11, 2},
    {"iq4_xs+iq4_nl down", shape(512, 288, GgmlType::IQ4_XS, GgmlType::IQ4_XS, GgmlType::IQ4_NL), 4,
     10, 2},
    {"iq4_xs, swiglu-oai + biases",
     shape(256, 512, GgmlType::IQ4_XS, GgmlType::IQ4_XS, GgmlType::IQ4_XS, kOai), 4, 5, 2, true,
     4.0f},
    // grok's layer kind: GELU-GLU through the half table; x large enough that gates pass ±10.
    {"grok: q4_0 + gelu", shape(256, 96, GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0, kGelu), 4,
     8, 2, false, 6.0f},
    {"gelu, q4_k + q6_k down",
     shape(512, 256, GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K, kGelu), 4, 3, 2, false, 6.0f},
};

TEST(GroupedHost, EmulatedExpertsMatchExpertForwardRef) {
  std::mt19937_64 rng(4);
  for (const LayerCase& c : kLayerCases) {
    const TestLayer t = make_layer(c, rng);
    const std::vector<float> want = t.reference();
    std::vector<float> got(want.size(), guard_value());
    grouped_forward_emulated(t.layer(), t.x.data(), got.data());
    EXPECT_TRUE(same_bits(got.data(), want.data(), static_cast<int64_t>(got.size()))) << c.name;
  }
}

TEST(GroupedHost, FixtureExpertsEmulatedMatchExpertForwardRef) {
  if (!std::filesystem::exists(STRATA_FIXTURES_DIR))
    GTEST_SKIP() << "no fixtures at " << STRATA_FIXTURES_DIR;
  std::mt19937_64 rng(10);
  for (const FixtureVariant& v : kFixtures) {
    const io::GgufFile f = io::GgufFile::open(fixture_path(v.file));
    for (int layer = 0; layer < 4; ++layer) {
      const TestLayer t = fixture_layer(f, layer, v.k, rng);
      if (!grouped_supported(t.shape.down_type)) {
        ADD_FAILURE() << v.file << " layer " << layer << ": down type "
                      << ggml_type_name(t.shape.down_type);
        continue;
      }
      const std::vector<float> want = t.reference();
      std::vector<float> got(want.size(), guard_value());
      grouped_forward_emulated(t.layer(), t.x.data(), got.data());
      EXPECT_TRUE(same_bits(got.data(), want.data(), static_cast<int64_t>(got.size())))
          << v.file << " layer " << layer << " (" << ggml_type_name(t.shape.gate_type) << "/"
          << ggml_type_name(t.shape.down_type) << ")";
    }
  }
}

TEST(GroupedHost, SwigluRowIsThePortableSilu) {
  // swiglu_row (the CPU executors' SwiGLU) against a plain double evaluation: close, and finite.
  std::mt19937_64 rng(5);
  const std::vector<float> g = normal_floats(4096, 4.0f, rng), u = normal_floats(4096, 1.0f, rng);
  std::vector<float> out(g.size());
  kernels::swiglu_row(g.data(), u.data(), out.data(), static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    const double want =
        static_cast<double>(g[i]) / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
    EXPECT_NEAR(out[i], want, 6e-7 * std::fabs(want) + 1e-30) << "g=" << g[i] << " u=" << u[i];
  }
}

// The kernels' copy of glibc's expf (cuda/expert_math.h oai_expf) against this host's std::exp
// on a sweep of every 61st float of exp's finite range plus the inputs where an unfused port
// would differ, then whole SwiGLU-OAI elements against engine::swiglu_oai (clamps, NaN,
// infinities).
TEST(GroupedHost, SwigluOaiIsTheEnginesBitForBit) {
  int64_t bad = 0, n = 0;
  const auto check = [&](float x) {
    const float want = std::exp(x), got = detail::oai_expf(x);
    ++n;
    if (std::bit_cast<uint32_t>(want) != std::bit_cast<uint32_t>(got) &&
        !(std::isnan(want) && std::isnan(got)) && ++bad <= 5)
      ADD_FAILURE() << fmt::format("expf({:a}): got {:a} want {:a}", x, got, want);
  };
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 61) check(std::bit_cast<float>(uint32_t(b)));
  for (float x :
       {0x1.04845ep+5f, -0x1.f8cbb2p+5f, 88.0f, 88.72f, 0x1.62e42ep6f, 0x1.62e430p6f,
        -0x1.9fe368p6f, -0x1.9fe36ap6f, -88.0f, -103.0f, 0.0f, -0.0f,
        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min()})
    check(x);
  EXPECT_EQ(bad, 0) << "of " << n;

  std::mt19937_64 rng(12);
  std::vector<float> g = normal_floats(1 << 16, 8.0f, rng), u = normal_floats(1 << 16, 8.0f, rng);
  const float specials[] = {7.0f,
                            -7.0f,
                            7.000001f,
                            -7.000001f,
                            0.0f,
                            -0.0f,
                            60.0f,
                            -60.0f,
                            1e30f,
                            -1e30f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (size_t i = 0; i < std::size(specials); ++i)
    for (size_t j = 0; j < std::size(specials); ++j) {
      g[i * std::size(specials) + j] = specials[i];
      u[i * std::size(specials) + j] = specials[j];
    }
  std::vector<float> want(g.size()), got(g.size());
  engine::swiglu_oai(g.data(), u.data(), want.data(), static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    got[i] = detail::glu_elem(1, g[i], u[i], nullptr);
    if (std::isnan(got[i]) && std::isnan(want[i])) got[i] = want[i];
  }
  EXPECT_TRUE(same_bits(got.data(), want.data(), static_cast<int64_t>(g.size())));
}

// grok's GELU-GLU element as the kernels compute it (the half table, f32_to_half_bits) against
// engine::glu's (kernels::gelu_glu_row): every half as the gate, the ±10 branches, NaN, infinities.
TEST(GroupedHost, GeluGluIsTheEnginesBitForBit) {
  std::mt19937_64 rng(13);
  std::vector<float> g = normal_floats(1 << 16, 1.0f, rng), u = normal_floats(1 << 16, 2.0f, rng);
  for (size_t i = 0; i < g.size(); ++i) g[i] = kernels::fp16_to_f32(static_cast<uint16_t>(i));
  for (float x : {-10.0f, 10.0f, std::nextafter(-10.0f, 0.0f), std::nextafter(10.0f, 0.0f),
                  9.99999f, -9.99999f, 1e30f, -1e30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  0.30001f, -2.5e-8f})
    g.push_back(x), u.push_back(-1.5f);
  std::vector<float> want(g.size()), got(g.size());
  engine::glu(engine::FfnActivation::kGeluGlu, g.data(), u.data(), want.data(),
              static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    got[i] = detail::glu_elem(static_cast<int>(GroupedActivation::kGeluGlu), g[i], u[i],
                              kernels::gelu_table());
    if (std::isnan(got[i]) && std::isnan(want[i])) got[i] = want[i];
  }
  EXPECT_TRUE(same_bits(got.data(), want.data(), static_cast<int64_t>(g.size())));
}

// ---- CUDA_DENSE: dense decode GEMVs ----

// Matrices of every type DenseGemv takes, at awkward shapes (a head-sized one too); the reference
// is the CPU's kernels::gemv after quantize_activation_row.
struct DenseCase {
  GgmlType type;
  int64_t n_rows, n_cols;
};
const DenseCase kDenseCases[] = {
    {GgmlType::Q4_0, 96, 288},   {GgmlType::Q4_0, 1000, 512},  {GgmlType::Q5_0, 33, 96},
    {GgmlType::Q8_0, 200, 160},  {GgmlType::Q4_K, 77, 512},    {GgmlType::Q6_K, 130, 768},
    {GgmlType::MXFP4, 64, 2880}, {GgmlType::Q5_K, 45, 768},    {GgmlType::Q3_K, 70, 512},
    {GgmlType::Q2_K, 33, 256},   {GgmlType::IQ4_XS, 50, 1024}, {GgmlType::IQ4_NL, 31, 96},
    {GgmlType::Q4_1, 40, 160},   {GgmlType::Q5_1, 40, 160},
};

std::vector<float> cpu_gemv(GgmlType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                            const std::vector<float>& x) {
  const GgmlType vdt = kernels::vec_dot_type(t);
  std::vector<uint8_t> xq(ggml_row_bytes(vdt, cols));
  kernels::quantize_activation_row(vdt, x.data(), xq.data(), cols);
  std::vector<float> y(rows);
  kernels::gemv_kernels(t).gemv(w.data(), ggml_row_bytes(t, cols), xq.data(), y.data(), 0, rows,
                                cols);
  return y;
}

void check_dense(bool emulate) {
  std::mt19937_64 rng(13);
  DenseGemv g(0, emulate, 2880, 2000);
  std::vector<std::vector<uint8_t>> ws;
  std::vector<int32_t> ids;
  for (const DenseCase& c : kDenseCases) {
    ws.push_back(quantized_matrix(c.type, c.n_rows, c.n_cols, rng));
    ids.push_back(g.add(DenseMatrix{c.type, ws.back().data(), c.n_rows, c.n_cols}));
    ASSERT_GE(ids.back(), 0) << ggml_type_name(c.type);
  }
  EXPECT_EQ(g.add(DenseMatrix{GgmlType::F32, ws[0].data(), 4, 32}), -1);  // stays on the CPU
  for (size_t i = 0; i < std::size(kDenseCases); ++i) {
    const DenseCase& c = kDenseCases[i];
    for (int rep = 0; rep < 2; ++rep) {
      const std::vector<float> x =
          rep == 0 ? normal_floats(c.n_cols, 1.0f, rng) : awkward_activations(c.n_cols, rng);
      const std::vector<float> want = cpu_gemv(c.type, ws[i], c.n_rows, c.n_cols, x);
      std::vector<float> got(c.n_rows, guard_value());
      float* y = got.data();
      g.gemv({&ids[i], 1}, x.data(), &y);
      EXPECT_TRUE(same_bits(got.data(), want.data(), c.n_rows))
          << ggml_type_name(c.type) << " " << c.n_rows << "x" << c.n_cols;
    }
  }
  // Several matrices that read one x (q, k, v).
  const std::vector<float> x = normal_floats(512, 1.0f, rng);
  const int32_t two[] = {ids[1], ids[4]};
  std::vector<float> a(1000, guard_value()), b(77, guard_value());
  float* ys[] = {a.data(), b.data()};
  g.gemv(two, x.data(), ys);
  EXPECT_TRUE(same_bits(a.data(), cpu_gemv(GgmlType::Q4_0, ws[1], 1000, 512, x).data(), 1000));
  EXPECT_TRUE(same_bits(b.data(), cpu_gemv(GgmlType::Q4_K, ws[4], 77, 512, x).data(), 77));
}

TEST(GroupedHost, DenseGemvEmulatedMatchesCpuGemv) {
  check_dense(/*emulate=*/true);
}

// CUDA_DENSE=2's GEMMs (F32 on dequantized weights): within 1e-5 of sum |w·x| of a double
// evaluation, for the types with a device dequantizer; other types are refused (CPU).
void check_dense_gemm(bool emulate) {
  std::mt19937_64 rng(14);
  DenseGemv g(0, emulate, 2880, 2000);
  for (const DenseCase& c : kDenseCases) {
    const std::vector<uint8_t> w = quantized_matrix(c.type, c.n_rows, c.n_cols, rng);
    const int32_t id = g.add(DenseMatrix{c.type, w.data(), c.n_rows, c.n_cols});
    ASSERT_GE(id, 0) << ggml_type_name(c.type);
    constexpr uint32_t kTokens = 5;
    const std::vector<float> x = normal_floats(int64_t{kTokens} * c.n_cols, 1.0f, rng);
    std::vector<float> y(size_t{kTokens} * c.n_rows, guard_value());
    float* ys = y.data();
    const bool ok = g.gemm({&id, 1}, x.data(), kTokens, &ys);
    EXPECT_EQ(ok, dense_gemm_supported(c.type)) << ggml_type_name(c.type);
    if (!ok) continue;
    std::vector<float> row(c.n_cols);
    const size_t row_bytes = ggml_row_bytes(c.type, c.n_cols);
    for (int64_t r = 0; r < c.n_rows; ++r) {
      kernels::dequantize_row(c.type, w.data() + r * row_bytes, row.data(), c.n_cols);
      for (uint32_t t = 0; t < kTokens; ++t) {
        double want = 0, mag = 0;
        for (int64_t i = 0; i < c.n_cols; ++i) {
          want += double(row[i]) * x[t * c.n_cols + i];
          mag += std::fabs(double(row[i]) * x[t * c.n_cols + i]);
        }
        ASSERT_NEAR(y[t * c.n_rows + r], want, 1e-5 * mag + 1e-30)
            << ggml_type_name(c.type) << " row " << r << " token " << t;
      }
    }
  }
}

TEST(GroupedHost, DenseGemmEmulatedIsAnF32Product) {
  check_dense_gemm(/*emulate=*/true);
}

TEST(GroupedHost, WithoutADeviceTheExecutorThrowsCleanly) {
  if (cuda_device_count() > 0) return;  // the GroupedDevice tests cover that case
  try {
    GroupedExperts g(GroupedLimits{0, 256, 256, 1, 8});
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_TRUE(e.kind() == ErrorKind::kUnsupported || e.kind() == ErrorKind::kCuda) << e.what();
  }
}

// ---- on the device ----

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_describe()

// The layer's experts uploaded into a VramStore; jobs rewritten to the device pointers.
struct DeviceLayer {
  VramStore store;
  std::vector<GroupedJob> jobs;
  std::vector<DeviceBuffer> biases;  // one per expert and matrix that has one

  DeviceLayer(const TestLayer& t, uint64_t budget) : store(0, budget) {
    std::vector<int32_t> slot;
    for (size_t e = 0; e < t.gate.size(); ++e) {
      slot.push_back(store.put(HostExpert{t.gate[e].data(), t.gate[e].size(), t.up[e].data(),
                                          t.up[e].size(), t.down[e].data(), t.down[e].size()}));
      EXPECT_NE(slot.back(), VramStore::kNoSlot);
    }
    store.sync();
    const auto upload = [&](const std::vector<std::vector<float>>& b, uint32_t e) -> const float* {
      if (b.empty()) return nullptr;
      biases.emplace_back(b[e].size() * sizeof(float));
      copy_to_device(biases.back().data(), b[e].data(), biases.back().bytes());
      return biases.back().as<float>();
    };
    for (size_t j = 0; j < t.jobs.size(); ++j) {
      GroupedJob job = t.jobs[j];
      job.w = store.weights(slot[t.job_expert[j]]);
      job.gate_bias = upload(t.gate_bias, t.job_expert[j]);
      job.up_bias = upload(t.up_bias, t.job_expert[j]);
      job.down_bias = upload(t.down_bias, t.job_expert[j]);
      jobs.push_back(job);
    }
  }
  GroupedLayer layer(const TestLayer& t) const {
    GroupedLayer l = t.layer();
    l.jobs = jobs.data();
    return l;
  }
};

uint64_t total_footprint(const TestLayer& t) {
  uint64_t bytes = 0;
  for (size_t e = 0; e < t.gate.size(); ++e)
    bytes += VramStore::footprint(
        HostExpert{nullptr, t.gate[e].size(), nullptr, t.up[e].size(), nullptr, t.down[e].size()});
  return bytes;
}

TEST(GroupedDevice, LaunchMatchesExpertForwardRefBitForBit) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(6);
  for (const LayerCase& c : kLayerCases) {
    const TestLayer t = make_layer(c, rng);
    const std::vector<float> want = t.reference();
    DeviceLayer d(t, total_footprint(t));
    for (bool overlap : {true, false}) {
      GroupedExperts g(GroupedLimits{0, c.shape.n_embd, c.shape.n_ff, c.n_tokens,
                                     static_cast<uint32_t>(t.row_token.size()), overlap});
      std::copy(t.x.begin(), t.x.end(), g.x_host());
      g.launch(d.layer(t));
      g.wait();
      EXPECT_TRUE(same_bits(g.y_host(), want.data(), static_cast<int64_t>(want.size())))
          << c.name << (overlap ? " (overlapped launches)" : "");
      // Again: a second launch on the same context gives the same bits.
      g.launch(d.layer(t));
      g.wait();
      EXPECT_TRUE(same_bits(g.y_host(), want.data(), static_cast<int64_t>(want.size())))
          << c.name << " (second launch)";
    }
  }
}

// Qwen3-30B-A3B's expert shape at decode: 8 experts, one token each, Q4_0 and Q4_K, through
// launch_device (the bench's path).
TEST(GroupedDevice, DecodeShapeLaunchDeviceMatchesReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(7);
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_K}) {
    const LayerCase c{"decode", shape(2048, 768, type, type, type), 8, 1, 8};
    TestLayer t;
    t.shape = c.shape;
    t.n_tokens = 1;
    const auto sane = [](std::mt19937_64& r) {
      return kernels::f32_to_fp16(std::ldexp(1.0f + static_cast<float>(r() % 1024) / 1024.0f, -9) *
                                  (r() % 2 ? -1.0f : 1.0f));
    };
    for (uint32_t e = 0; e < 8; ++e) {
      t.gate.push_back(random_blocks(type, 768, 2048, rng, sane));
      t.up.push_back(random_blocks(type, 768, 2048, rng, sane));
      t.down.push_back(random_blocks(type, 2048, 768, rng, sane));
      GroupedJob job;
      job.w = ExpertWeights{t.gate[e].data(), t.up[e].data(), t.down[e].data()};
      job.row_begin = e;
      job.row_end = e + 1;
      t.jobs.push_back(job);
      t.job_expert.push_back(e);
      t.row_token.push_back(0);
    }
    t.x = normal_floats(2048, 1.0f, rng);
    const std::vector<float> want = t.reference();
    DeviceLayer d(t, total_footprint(t));
    GroupedExperts g(GroupedLimits{0, 2048, 768, 1, 8});
    DeviceBuffer x(t.x.size() * 4), rows(t.row_token.size() * 4), y(want.size() * 4);
    copy_to_device(x.data(), t.x.data(), x.bytes());
    copy_to_device(rows.data(), t.row_token.data(), rows.bytes());
    // Queued back to back (the bench's pattern): gate+up only, then full launches.
    g.launch_device(d.layer(t), x.as<float>(), rows.as<int32_t>(), y.as<float>(), nullptr,
                    GroupedExperts::Stages::kGateUp);
    for (int i = 0; i < 3; ++i)
      g.launch_device(d.layer(t), x.as<float>(), rows.as<int32_t>(), y.as<float>());
    g.wait();
    std::vector<float> got(want.size());
    copy_to_host(got.data(), y.data(), y.bytes());
    EXPECT_TRUE(same_bits(got.data(), want.data(), static_cast<int64_t>(got.size())))
        << ggml_type_name(type);
  }
}

// More jobs than one kernel launch takes (kMaxJobsPerStage = 64): the stages split.
TEST(GroupedDevice, ManyJobsSplitAcrossLaunches) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(8);
  const LayerCase c{"many", shape(64, 32, GgmlType::Q8_0, GgmlType::Q8_0, GgmlType::Q4_0), 70, 4,
                    0};
  const TestLayer t = make_layer(c, rng);
  const std::vector<float> want = t.reference();
  DeviceLayer d(t, total_footprint(t));
  GroupedExperts g(GroupedLimits{0, 64, 32, 4, static_cast<uint32_t>(t.row_token.size())});
  std::copy(t.x.begin(), t.x.end(), g.x_host());
  g.launch(d.layer(t));
  g.wait();
  EXPECT_TRUE(same_bits(g.y_host(), want.data(), static_cast<int64_t>(want.size())));
}

// The fixtures' real experts (every layer, every variant) through the VRAM store and launch().
TEST(GroupedDevice, FixtureExpertsMatchExpertForwardRef) {
  SKIP_WITHOUT_GPU();
  if (!std::filesystem::exists(STRATA_FIXTURES_DIR))
    GTEST_SKIP() << "no fixtures at " << STRATA_FIXTURES_DIR;
  std::mt19937_64 rng(11);
  for (const FixtureVariant& v : kFixtures) {
    const io::GgufFile f = io::GgufFile::open(fixture_path(v.file));
    for (int layer = 0; layer < 4; ++layer) {
      const TestLayer t = fixture_layer(f, layer, v.k, rng);
      const std::vector<float> want = t.reference();
      DeviceLayer d(t, total_footprint(t));
      GroupedExperts g(GroupedLimits{0, t.shape.n_embd, t.shape.n_ff, t.n_tokens,
                                     static_cast<uint32_t>(t.row_token.size())});
      std::copy(t.x.begin(), t.x.end(), g.x_host());
      g.launch(d.layer(t));
      g.wait();
      EXPECT_TRUE(same_bits(g.y_host(), want.data(), static_cast<int64_t>(want.size())))
          << v.file << " layer " << layer;
    }
  }
}

TEST(GroupedDevice, DenseGemvMatchesCpuGemv) {
  SKIP_WITHOUT_GPU();
  check_dense(/*emulate=*/false);
}

TEST(GroupedDevice, DenseGemmIsAnF32Product) {
  SKIP_WITHOUT_GPU();
  check_dense_gemm(/*emulate=*/false);
}

TEST(GroupedDevice, PortableMathDeviceEqualsHost) {
  SKIP_WITHOUT_GPU();
  std::vector<float> x;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099)
    x.push_back(std::bit_cast<float>(uint32_t(b)));
  DeviceBuffer dx(x.size() * 4), dy(x.size() * 4);
  copy_to_device(dx.data(), x.data(), dx.bytes());
  std::vector<float> got(x.size()), want(x.size());
  for (PortableFn fn : {PortableFn::kExp, PortableFn::kSilu, PortableFn::kOaiExp}) {
    cuda_portable_eval(fn, dx.as<float>(), dy.as<float>(), static_cast<int64_t>(x.size()));
    copy_to_host(got.data(), dy.data(), dy.bytes());
    for (size_t i = 0; i < x.size(); ++i) {
      want[i] = fn == PortableFn::kExp    ? kernels::portable_expf(x[i])
                : fn == PortableFn::kSilu ? kernels::portable_silu(x[i])
                                          : detail::oai_expf(x[i]);
      if (std::isnan(want[i]) && std::isnan(got[i])) got[i] = want[i];  // payloads may differ
    }
    EXPECT_TRUE(same_bits(got.data(), want.data(), static_cast<int64_t>(x.size())))
        << static_cast<int>(fn);
  }
}

// ---- VRAM store ----

TEST(VramStore, SlotsFillTheBudgetReleaseAndCoalesce) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(9);
  std::vector<uint8_t> a(1000), b(300), c(4097);
  for (auto* v : {&a, &b, &c})
    for (auto& byte : *v) byte = static_cast<uint8_t>(rng());
  const HostExpert e{a.data(), a.size(), b.data(), b.size(), c.data(), c.size()};
  const uint64_t fp = VramStore::footprint(e);
  EXPECT_EQ(fp, 1024u + 512u + 4352u);
  VramStore store(0, 3 * fp + 100, 4096);  // small staging: many chunks per matrix
  EXPECT_EQ(store.capacity(), (3 * fp + 100) / 256 * 256);
  const int32_t s0 = store.put(e), s1 = store.put(e), s2 = store.put(e);
  ASSERT_NE(s0, VramStore::kNoSlot);
  ASSERT_NE(s1, VramStore::kNoSlot);
  ASSERT_NE(s2, VramStore::kNoSlot);
  EXPECT_EQ(store.put(e), VramStore::kNoSlot) << "the budget is hard";
  EXPECT_EQ(store.used(), 3 * fp);
  store.sync();
  for (int32_t s : {s0, s1, s2}) {
    const ExpertWeights w = store.weights(s);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(w.gate) % 256, 0u);
    std::vector<uint8_t> back(c.size());
    copy_to_host(back.data(), w.down, back.size());
    EXPECT_EQ(back, c);
    back.resize(a.size());
    copy_to_host(back.data(), w.gate, back.size());
    EXPECT_EQ(back, a);
  }
  // Free the middle, then the first: one range of 2 slots, big enough for a double expert.
  store.release(s1);
  store.release(s0);
  EXPECT_EQ(store.largest_free(), 2 * fp);
  std::vector<uint8_t> big(2 * fp - 512);
  const HostExpert e2{big.data(), big.size(), b.data(), 1, b.data(), 1};
  EXPECT_EQ(VramStore::footprint(e2), 2 * fp);
  EXPECT_NE(store.put(e2), VramStore::kNoSlot);
  EXPECT_EQ(store.largest_free(), store.capacity() - 3 * fp);
}

TEST(VramStore, ImpossibleBudgetIsAClearError) {
  SKIP_WITHOUT_GPU();
  try {
    VramStore store(0, uint64_t{1} << 50);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCuda);
    EXPECT_NE(std::string(e.what()).find("1125899906842624 bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::cuda
