// Forward-pass building blocks against plain double-precision formulas: RMSNorm, RoPE (NORM and
// NEOX pairs), softmax, SiLU-GLU, top-k order and ties; MoE dispatch/combine order; MOEL/MOER
// round trips and malformed dump files; the attention core (AVX2 == portable, exp lanes).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "engine/gating.h"
#include "engine/logit_dump.h"
#include "engine/moe.h"
#include "engine/ops.h"
#include "io/check.h"
#include "kernels/attention_core.h"
#include "kernels/expert_ref.h"
#include "kernels/portable_math.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::engine;

namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

TEST(Ops, RmsNorm) {
  for (int64_t n : {1, 3, 31, 64, 257}) {
    const auto x = random_vec(n, uint32_t(n), 3.0f);
    const auto w = random_vec(n, uint32_t(n) + 1);
    std::vector<float> y(n);
    rms_norm(x.data(), w.data(), y.data(), n, 1e-6f);
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double scale = 1.0 / std::sqrt(ss / n + 1e-6);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(y[i], x[i] * scale * w[i], 1e-5 * (1 + std::fabs(y[i])));
    // In place, no weight.
    std::vector<float> z = x;
    rms_norm(z.data(), nullptr, z.data(), n, 1e-6f);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(z[i], x[i] * scale, 1e-5 * (1 + std::fabs(z[i])));
  }
}

// dbrx's LayerNorm (no bias) against a double-precision reference, in place and without a weight.
TEST(Ops, LayerNorm) {
  for (int64_t n : {1, 3, 31, 64, 257}) {
    auto x = random_vec(n, uint32_t(n) + 7, 3.0f);
    for (float& v : x) v += 2.5f;  // a mean far from 0, which the norm must remove
    const auto w = random_vec(n, uint32_t(n) + 8);
    std::vector<float> y(n);
    layer_norm(x.data(), w.data(), y.data(), n, 1e-5f);
    double mean = 0, var = 0;
    for (float v : x) mean += v;
    mean /= double(n);
    for (float v : x) var += (v - mean) * (v - mean);
    const double scale = 1.0 / std::sqrt(var / double(n) + 1e-5);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(y[i], (x[i] - mean) * scale * w[i], 1e-5 * (1 + std::fabs(y[i])));
    std::vector<float> z = x;
    layer_norm(z.data(), nullptr, z.data(), n, 1e-5f);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(z[i], (x[i] - mean) * scale, 1e-5 * (1 + std::fabs(z[i])));
  }
}

TEST(Ops, RopePairsAndAngles) {
  const int64_t head_dim = 8, n_rot = 8, n_head = 2;
  const float base = 10000.0f;
  for (int64_t pos : {0, 1, 7, 63, 511}) {
    std::vector<float> cs(n_rot);
    rope_cache(pos, n_rot, base, cs.data());
    const auto x = random_vec(head_dim * n_head, uint32_t(pos) + 7);
    for (RopeType type : {RopeType::kNorm, RopeType::kNeox}) {
      std::vector<float> y = x;
      rope_apply(type, y.data(), n_head, head_dim, n_rot, cs.data());
      for (int64_t h = 0; h < n_head; ++h) {
        for (int64_t i = 0; i < n_rot / 2; ++i) {
          const double theta = double(pos) * std::pow(double(base), -2.0 * double(i) / n_rot);
          const int64_t a = h * head_dim + (type == RopeType::kNorm ? 2 * i : i);
          const int64_t b = h * head_dim + (type == RopeType::kNorm ? 2 * i + 1 : i + n_rot / 2);
          const double ya = x[a] * std::cos(theta) - x[b] * std::sin(theta);
          const double yb = x[a] * std::sin(theta) + x[b] * std::cos(theta);
          // θ is advanced in float like ggml: ~1e-7 relative per step of the angle.
          EXPECT_NEAR(y[a], ya, 2e-4) << "pos " << pos << " i " << i;
          EXPECT_NEAR(y[b], yb, 2e-4) << "pos " << pos << " i " << i;
        }
      }
    }
  }
  // Partial rotation leaves the dims past n_rot alone; position 0 is the identity.
  std::vector<float> cs(4);
  rope_cache(5, 4, base, cs.data());
  const auto x = random_vec(8, 99);
  std::vector<float> y = x;
  rope_apply(RopeType::kNeox, y.data(), 1, 8, 4, cs.data());
  for (int i = 4; i < 8; ++i) EXPECT_EQ(y[i], x[i]);
  rope_cache(0, 4, base, cs.data());
  y = x;
  rope_apply(RopeType::kNorm, y.data(), 1, 8, 4, cs.data());
  EXPECT_EQ(y, x);
}

TEST(Ops, Softmax) {
  for (int64_t n : {1, 2, 16, 33}) {
    auto x = random_vec(n, uint32_t(n), 4.0f);
    const auto orig = x;
    softmax(x.data(), n, 0.5f);
    double sum = 0, max = -INFINITY;
    for (float v : orig) max = std::max(max, 0.5 * v);
    for (float v : orig) sum += std::exp(0.5 * v - max);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(x[i], std::exp(0.5 * orig[i] - max) / sum, 1e-6);
  }
  std::vector<float> one = {123.0f};
  softmax(one.data(), 1);
  EXPECT_EQ(one[0], 1.0f);
}

TEST(Ops, SiluGlu) {
  const auto g = random_vec(33, 1, 3.0f), u = random_vec(33, 2);
  std::vector<float> y(33);
  silu_glu(g.data(), u.data(), y.data(), 33);
  for (int i = 0; i < 33; ++i)
    EXPECT_NEAR(y[i], g[i] / (1.0 + std::exp(-double(g[i]))) * u[i], 1e-6 * (1 + std::fabs(y[i])));
}

TEST(Ops, TopKDescendingTiesToLowerIndex) {
  const std::vector<float> p = {0.1f, 0.3f, 0.05f, 0.3f, 0.25f, 0.0f};
  int32_t ids[4];
  top_k(p.data(), 6, 4, ids);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(ids[2], 4);
  EXPECT_EQ(ids[3], 0);
  const std::vector<float> flat(5, 0.2f);
  int32_t all[5];
  top_k(flat.data(), 5, 5, all);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(all[i], i);
}

// select_experts' one-pass top-k against the repeated argmax it stands for (ties to the lower
// index), on logits with many ties, at k = 1, 8, 64 (the one-pass limit), 128 (the argmax loop),
// with a NaN (the argmax loop too), and on 16 groups of 8 (DeepSeek's group limit).
TEST(Ops, SelectExpertsIsTheRepeatedArgmax) {
  ModelConfig cfg;
  cfg.gating = GatingType::kSoftmaxTopK;  // the logits themselves are the scores
  cfg.n_expert = 128;
  const LayerWeights layer;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> level(-6, 6);
  const auto argmax_ids = [](const std::vector<float>& p, uint32_t k, uint64_t allowed,
                             uint32_t per_group) {
    std::vector<int32_t> ids;
    for (uint32_t j = 0; j < k; ++j) {
      int32_t best = -1;
      for (uint32_t e = 0; e < p.size(); ++e) {
        if (!(allowed >> (e / per_group) & 1)) continue;
        if (std::find(ids.begin(), ids.end(), int32_t(e)) != ids.end()) continue;
        if (best < 0 || p[e] > p[size_t(best)]) best = int32_t(e);
      }
      ids.push_back(best);
    }
    return ids;
  };
  for (int round = 0; round < 50; ++round) {
    std::vector<float> logits(128);
    for (float& v : logits) v = 0.5f * float(level(rng));
    if (round % 10 == 9) logits[size_t(round) % 128] = NAN;
    for (uint32_t k : {1u, 8u, 64u, 128u}) {
      SCOPED_TRACE(fmt::format("round {} k {}", round, k));
      std::vector<float> probs = logits;
      std::vector<int32_t> ids(k);
      std::vector<float> weights(k);
      cfg.n_expert_groups = 0;
      select_experts(cfg, layer, probs.data(), 128, k, ids.data(), weights.data());
      EXPECT_EQ(ids, argmax_ids(logits, k, ~uint64_t{0}, 128));
    }
  }
  // Groups: only the experts of the selected groups compete (the same mask for both).
  cfg.n_expert_groups = 16;
  cfg.n_group_used = 4;
  std::vector<float> logits(128);
  for (float& v : logits) v = 0.5f * float(level(rng));
  std::vector<float> probs = logits;
  std::vector<int32_t> ids(8);
  std::vector<float> weights(8);
  select_experts(cfg, layer, probs.data(), 128, 8, ids.data(), weights.data());
  std::vector<float> check = logits;
  const uint64_t allowed = selected_groups(cfg, layer, check.data());
  EXPECT_EQ(ids, argmax_ids(logits, 8, allowed, 8));
}

// A hand-made routing of 3 tokens over 4 experts, k = 2.
TEST(Moe, DispatchGroupsByExpertAndCombineSumsInSlotOrder) {
  std::vector<float> probs(3 * 4, 0.0f);
  std::vector<int32_t> topk = {2, 0, /**/ 0, 3, /**/ 2, 3};
  std::vector<float> weights = {0.75f, 0.25f, 0.5f, 0.5f, 0.125f, 0.875f};
  Routing r{3, 4, 2, probs.data(), topk.data(), weights.data()};
  ExpertStack stack;
  stack.n_expert = 4;
  Dispatch d(6, 4);
  dispatch(r, stack, d);
  const auto& jobs = d.jobs[size_t(ExpertHome::kRam)];
  ASSERT_EQ(jobs.size(), 3u);  // experts 0, 2, 3; expert 1 unused
  EXPECT_EQ(jobs[0].expert, 0u);
  EXPECT_EQ(jobs[0].row_begin, 0u);
  EXPECT_EQ(jobs[0].row_end, 2u);
  EXPECT_EQ(jobs[1].expert, 2u);
  EXPECT_EQ(jobs[2].expert, 3u);
  EXPECT_EQ(jobs[2].row_end, 6u);
  // Rows of expert 0: tokens 0 and 1 (ascending); expert 2: tokens 0, 2; expert 3: tokens 1, 2.
  EXPECT_EQ(d.row_token, (std::vector<int32_t>{0, 1, 0, 2, 1, 2}));
  EXPECT_EQ(d.slot_row, (std::vector<int32_t>{2, 0, 1, 4, 3, 5}));

  // y[row] = row + 1 in every dimension; out[t] = Σ_j w[t,j]·y[slot_row[t,j]].
  const uint32_t n_embd = 3;
  std::vector<float> y(6 * n_embd);
  for (int row = 0; row < 6; ++row)
    for (uint32_t i = 0; i < n_embd; ++i) y[row * n_embd + i] = float(row + 1);
  std::vector<float> out(3 * n_embd);
  kernels::ThreadPool pool(1);
  combine(pool, r, d, y.data(), n_embd, out.data());
  EXPECT_EQ(out[0], 3 * 0.75f + 1 * 0.25f);
  EXPECT_EQ(out[n_embd], 2 * 0.5f + 5 * 0.5f);
  EXPECT_EQ(out[2 * n_embd + 2], 4 * 0.125f + 6 * 0.875f);
}

class DumpFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("strata_dump_{}", ::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(DumpFiles, LogitsRoundTrip) {
  const std::vector<int32_t> tokens = {5, 0, 599};
  const auto logits = random_vec(3 * 7, 3);
  write_logit_dump(path("a.logits.bin"), tokens, logits, 7);
  EXPECT_FALSE(fs::exists(path("a.logits.bin.tmp")));
  EXPECT_EQ(fs::file_size(path("a.logits.bin")), 16 + 3 * 4 + 3 * 7 * 4u);
  const LogitDump d = read_logit_dump(path("a.logits.bin"));
  EXPECT_EQ(d.n_vocab, 7u);
  EXPECT_EQ(d.tokens, tokens);
  EXPECT_EQ(d.logits, logits);
}

TEST_F(DumpFiles, RoutingRoundTrip) {
  RoutingTrace t;
  t.reset(2, 4, 2);
  t.ensure_positions(3);
  for (uint32_t il = 0; il < 2; ++il)
    for (uint32_t p = 0; p < 3; ++p) {
      t.topk_at(il, p)[0] = int32_t(il + p);
      t.weight_at(il, p)[1] = 0.5f * float(p);
      t.prob_at(il, p)[3] = float(il);
    }
  RoutingTrace grown = t;
  grown.ensure_positions(5);  // keeps what was recorded
  EXPECT_EQ(grown.topk_at(1, 2)[0], 3);
  EXPECT_EQ(grown.topk_at(1, 4)[0], -1);
  write_routing_dump(path("r.bin"), t);
  EXPECT_EQ(fs::file_size(path("r.bin")), 24 + 2 * 3 * 2 * 8 + 2 * 3 * 4 * 4u);
  const RoutingTrace r = read_routing_dump(path("r.bin"));
  EXPECT_EQ(r.n_layer, 2u);
  EXPECT_EQ(r.n_pos, 3u);
  EXPECT_EQ(r.n_expert, 4u);
  EXPECT_EQ(r.k, 2u);
  EXPECT_TRUE(r.same_as(t));
  EXPECT_EQ(r.topk_at(1, 2)[0], 3);
  EXPECT_EQ(r.weight_at(0, 2)[1], 1.0f);
  EXPECT_EQ(r.prob_at(1, 0)[3], 1.0f);
  EXPECT_FALSE(r.same_as(grown));
  // One position at a time (decode) keeps every recorded row.
  RoutingTrace steps;
  steps.reset(2, 4, 2);
  for (uint32_t p = 0; p < 100; ++p) {
    steps.ensure_positions(p + 1);
    steps.topk_at(1, p)[1] = int32_t(p);
  }
  for (uint32_t p = 0; p < 100; ++p) EXPECT_EQ(steps.topk_at(1, p)[1], int32_t(p));
  EXPECT_EQ(steps.topk_at(0, 99)[0], -1);
}

TEST_F(DumpFiles, MalformedFilesNameTheOffset) {
  const std::vector<int32_t> tokens = {1, 2};
  const std::vector<float> logits(2 * 5, 1.0f);
  write_logit_dump(path("ok.bin"), tokens, logits, 5);
  std::ifstream in(path("ok.bin"), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  auto write = [&](const char* name, std::vector<char> b) {
    std::ofstream(path(name), std::ios::binary).write(b.data(), std::streamsize(b.size()));
    return path(name);
  };
  auto truncated = bytes;
  truncated.resize(bytes.size() - 3);
  EXPECT_THROW(read_logit_dump(write("trunc.bin", truncated)), FileError);
  auto magic = bytes;
  magic[0] = 'X';
  try {
    read_logit_dump(write("magic.bin", magic));
    ADD_FAILURE();
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("magic"), std::string::npos) << e.what();
  }
  auto huge = bytes;
  const uint32_t n = 0xFFFFFFFFu;
  std::memcpy(huge.data() + 8, &n, 4);  // n_pos
  EXPECT_THROW(read_logit_dump(write("huge.bin", huge)), FileError);
  auto extra = bytes;
  extra.push_back(0);
  EXPECT_THROW(read_logit_dump(write("extra.bin", extra)), FileError);
  EXPECT_THROW(read_routing_dump(path("ok.bin")), FileError);  // a MOEL file is not MOER
  EXPECT_THROW(read_logit_dump(path("missing.bin")), Error);
}

// matmul_many (q, k, v in one parallel region) gives the same bytes as one matmul per weight, for
// one token and several, 1-3 threads, row counts that are not multiples of the 4-row groups, and
// mixed types (the fallback).
TEST(Ops, MatmulManyMatchesMatmul) {
  const int64_t n_cols = 96;
  const int64_t rows[] = {37, 6, 13};
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::F32}) {
    std::vector<std::vector<uint8_t>> data;
    std::vector<MatrixRef> w;
    for (size_t i = 0; i < 3; ++i) {
      const size_t rb = ggml_row_bytes(type, n_cols);
      data.emplace_back(rb * size_t(rows[i]));
      for (int64_t r = 0; r < rows[i]; ++r) {
        const auto src = random_vec(size_t(n_cols), uint32_t(100 * i + r), 0.1f);
        kernels::quantize_row(type, src.data(), data.back().data() + r * rb, n_cols);
      }
    }
    for (size_t i = 0; i < 3; ++i)
      w.push_back(MatrixRef{type, rows[i], n_cols, ggml_row_bytes(type, n_cols),
                            reinterpret_cast<const std::byte*>(data[i].data())});
    // The mixed-type case: the last weight as F32.
    std::vector<uint8_t> f32(sizeof(float) * size_t(rows[2] * n_cols));
    const auto vals = random_vec(size_t(rows[2] * n_cols), 7, 0.1f);
    std::memcpy(f32.data(), vals.data(), f32.size());
    for (bool mixed : {false, true}) {
      std::vector<MatrixRef> ws = w;
      if (mixed)
        ws[2] = MatrixRef{GgmlType::F32, rows[2], n_cols, sizeof(float) * size_t(n_cols),
                          reinterpret_cast<const std::byte*>(f32.data())};
      for (uint32_t n_tok : {1u, 5u}) {
        const auto x = random_vec(size_t(n_tok * n_cols), 42);
        for (int threads : {1, 2, 3}) {
          kernels::ThreadPool pool(threads);
          std::vector<std::byte> scratch(n_tok * activation_row_bytes(n_cols));
          std::vector<std::vector<float>> want(3), got(3);
          for (size_t i = 0; i < 3; ++i) {
            want[i].assign(size_t(n_tok * ws[i].n_rows), -1.0f);
            got[i].assign(size_t(n_tok * ws[i].n_rows), -2.0f);
            matmul(pool, ws[i], x.data(), size_t(n_cols), n_tok, want[i].data(),
                   size_t(ws[i].n_rows), scratch.data());
          }
          float* ys[] = {got[0].data(), got[1].data(), got[2].data()};
          const size_t strides[] = {size_t(ws[0].n_rows), size_t(ws[1].n_rows),
                                    size_t(ws[2].n_rows)};
          ActivationRows(pool, x.data(), size_t(n_cols), n_tok, n_cols, scratch.data())
              .matmul_many(ws, ys, strides);
          for (size_t i = 0; i < 3; ++i)
            EXPECT_EQ(0, std::memcmp(want[i].data(), got[i].data(), want[i].size() * 4))
                << ggml_type_name(type) << " mixed " << mixed << " tokens " << n_tok << " threads "
                << threads << " weight " << i;
        }
      }
    }
  }
}

// The CPU executor's y rows equal expert_forward_ref (quantize, gate/up, SwiGLU, quantize, down
// for each row on its own) byte for byte, whatever the thread count and tokens: covers the
// activation done inside the gate/up items (Q8_0's 32-row blocks; Q8_K's 256 where aligned items
// still give each thread one per matrix: 1-3 threads) and between the regions (Q8_K at 4 and 7
// threads), one-token decode steps (activation quantized per token) and several-token GEMM jobs.
TEST(Ops, CpuExecutorMatchesExpertRef) {
  const int64_t n_embd = 256, n_ff = 768;
  const uint32_t n_expert = 6, k = 2;
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K}) {
    std::vector<std::vector<uint8_t>> bytes(3);
    ExpertStack stack;
    stack.n_expert = n_expert;
    stack.n_embd = n_embd;
    stack.n_ff = n_ff;
    WeightView* views[3] = {&stack.gate, &stack.up, &stack.down};
    for (int m = 0; m < 3; ++m) {
      const int64_t cols = m == 2 ? n_ff : n_embd, rows = m == 2 ? n_embd : n_ff;
      const size_t rb = ggml_row_bytes(type, uint64_t(cols));
      bytes[m].resize(rb * size_t(rows) * n_expert);
      for (int64_t r = 0; r < rows * n_expert; ++r) {
        const auto src = random_vec(size_t(cols), uint32_t(1000 * m + r), 0.05f);
        kernels::quantize_row(type, src.data(), bytes[m].data() + size_t(r) * rb, cols);
      }
      WeightView& v = *views[m];
      v.type = type;
      v.ne = {cols, rows, n_expert, 1};
      v.data = reinterpret_cast<const std::byte*>(bytes[m].data());
      v.n_bytes = bytes[m].size();
      v.row_bytes = rb;
    }
    ModelConfig cfg;
    cfg.n_embd = uint32_t(n_embd);
    cfg.n_layer = 1;
    cfg.n_expert = n_expert;
    cfg.n_expert_used = k;
    cfg.n_ff_exp = uint32_t(n_ff);
    cfg.n_ff_arr = {0};
    cfg.is_moe_arr = {1};
    for (uint32_t n_tok : {1u, 4u}) {
      const auto x = random_vec(size_t(n_tok * n_embd), 77 + n_tok);
      std::vector<float> probs(n_tok * n_expert);
      std::vector<int32_t> topk(n_tok * k);
      std::vector<float> weights(n_tok * k, 0.5f);
      for (uint32_t t = 0; t < n_tok; ++t) {  // with 4 tokens experts 0, 3 and 5 get two each
        topk[t * k] = int32_t(t % 2 ? 0 : 3);
        topk[t * k + 1] = int32_t(t % 2 ? 5 : 1 + t / 2);
      }
      Routing r{n_tok, n_expert, k, probs.data(), topk.data(), weights.data()};
      Dispatch d(n_tok * k, n_expert);
      dispatch(r, stack, d);
      const auto& jobs = d.jobs[size_t(ExpertHome::kRam)];
      // Each dispatch row computed alone by the reference.
      std::vector<float> want(n_tok * k * n_embd);
      for (const ExpertJob& j : jobs) {
        const ExpertSlice sl = stack.expert_slice(j.expert);
        const kernels::ExpertMatrices em{type, type, type, sl.gate.data, sl.up.data, sl.down.data};
        for (uint32_t row = j.row_begin; row < j.row_end; ++row)
          kernels::expert_forward_ref(em, n_embd, n_ff, x.data() + d.row_token[row] * n_embd, 1,
                                      want.data() + size_t(row) * n_embd);
      }
      for (int threads : {1, 2, 3, 4, 7}) {
        kernels::ThreadPool pool(threads);
        CpuExpertExecutor exec(pool, cfg, n_tok * k);
        std::vector<float> got(want.size(), -3.0f);
        exec.compute(stack, jobs, d.row_token.data(), x.data(), got.data());
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << ggml_type_name(type) << " tokens " << n_tok << " threads " << threads;
      }
    }
  }
}

}  // namespace

// ---- attention core (kernels/attention_core.h) ----

// The AVX2 attention row gives the portable variant's bits for odd head dims, key counts around
// the 4-key and 8-lane blocks, strided K/V rows, sinks, grok's tanh score cap, and score ranges
// that underflow exp.
TEST(AttentionCore, Avx2EqualsPortableBitForBit) {
  if (!kernels::attention_avx2_supported()) GTEST_SKIP() << "CPU lacks AVX2";
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (uint32_t dk : {1u, 7u, 8u, 64u, 72u, 128u, 131u, 192u}) {
    for (uint32_t n_kv : {1u, 3u, 4u, 5u, 8u, 9u, 31u, 33u, 200u}) {
      for (float spread : {1.0f, 40.0f}) {
        const uint32_t dv = dk == 192 ? 128 : dk;
        const size_t k_stride = dk + 5, v_stride = dv + 3;
        std::vector<float> q(dk), k(n_kv * k_stride), v(n_kv * v_stride);
        for (auto& f : q) f = normal(rng) * spread;
        for (auto& f : k) f = normal(rng);
        for (auto& f : v) f = normal(rng);
        for (int variant = 0; variant < 3; ++variant) {  // plain, sink, capped
          const bool sink = variant == 1;
          const float cap = variant == 2 ? 30.0f : 0.0f;
          kernels::AttentionRow row;
          row.q = q.data();
          row.k = k.data();
          row.k_stride = k_stride;
          row.v = v.data();
          row.v_stride = v_stride;
          row.n_kv = n_kv;
          row.head_dim_k = dk;
          row.head_dim_v = dv;
          row.scale = 1.0f / std::sqrt(float(dk)) / (cap > 0.0f ? 4.0f : 1.0f);
          row.has_sink = sink;
          row.sink = 0.7f;
          row.softcap = cap;
          std::vector<float> s1(n_kv), s2(n_kv), o1(dv, -1.0f), o2(dv, -2.0f);
          kernels::attention_row_portable(row, s1.data(), o1.data());
          kernels::attention_row_avx2(row, s2.data(), o2.data());
          ASSERT_EQ(std::memcmp(o1.data(), o2.data(), dv * sizeof(float)), 0)
              << "dk " << dk << " n_kv " << n_kv << " spread " << spread << " variant " << variant;
          // And close to the double-precision formula.
          double m = sink ? 0.7 : -1e300;
          std::vector<double> sd(n_kv);
          for (uint32_t j = 0; j < n_kv; ++j) {
            double d = 0;
            for (uint32_t i = 0; i < dk; ++i) d += double(q[i]) * k[j * k_stride + i];
            sd[j] = d * row.scale;
            if (cap > 0.0f) sd[j] = cap * std::tanh(sd[j]);
            m = std::max(m, sd[j]);
          }
          double sum = sink ? std::exp(0.7 - m) : 0.0;
          for (double& x : sd) sum += (x = std::exp(x - m));
          for (uint32_t d = 0; d < dv; ++d) {
            double o = 0, mag = 0;
            for (uint32_t j = 0; j < n_kv; ++j) {
              o += sd[j] / sum * v[j * v_stride + d];
              mag += sd[j] / sum * std::fabs(v[j * v_stride + d]);
            }
            ASSERT_NEAR(o1[d], o, 1e-5 * (mag + 1e-3)) << "dk " << dk << " n_kv " << n_kv;
          }
        }
      }
    }
  }
}

// The AVX-512 pair (two heads of a GQA group in one pass) gives each head the bits of its own
// attention_row (AVX2 and portable): head dims the pair takes (multiples of 8, MLA's 576 / 512),
// key counts around the 4-key and 8-lane blocks, strided K/V, V inside the K row, per-head sinks
// and scales, grok's tanh score cap, exp underflow; and attention_row_pair's fallback (odd dims)
// is the two calls.
TEST(AttentionCore, PairEqualsTwoRowsBitForBit) {
  if (!kernels::attention_avx2_supported()) GTEST_SKIP() << "CPU lacks AVX2";
  const bool one_pass = kernels::attention_pair_one_pass(128, 128);
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const uint32_t dims[][2] = {{8, 8},     {64, 64}, {128, 128}, {72, 136},
                              {576, 512}, {7, 7},   {131, 64}};
  for (const auto& dd : dims) {
    const uint32_t dk = dd[0], dv = dd[1];
    for (uint32_t n_kv : {1u, 3u, 4u, 5u, 8u, 9u, 33u, 200u}) {
      for (int variant = 0; variant < 4; ++variant) {  // plain, sinks + spread, V in K, capped
        const bool v_in_k = variant == 2 && dv <= dk;
        const float spread = variant == 1 || variant == 3 ? 40.0f : 1.0f;
        const size_t k_stride = dk + 8, v_stride = dv + 3;
        std::vector<float> q(2 * dk), k(n_kv * k_stride), v(n_kv * v_stride);
        for (auto& f : q) f = normal(rng) * spread;
        for (auto& f : k) f = normal(rng);
        for (auto& f : v) f = normal(rng);
        kernels::AttentionRow a;
        a.q = q.data();
        a.k = k.data();
        a.k_stride = k_stride;
        a.v = v_in_k ? k.data() : v.data();
        a.v_stride = v_in_k ? k_stride : v_stride;
        a.n_kv = n_kv;
        a.head_dim_k = dk;
        a.head_dim_v = dv;
        a.scale = variant == 3 ? 0.088f / 30.0f : 0.088f;
        a.has_sink = variant == 1;
        a.sink = 0.7f;
        a.softcap = variant == 3 ? 30.0f : 0.0f;
        kernels::AttentionRow b = a;
        b.q = q.data() + dk;
        b.sink = -1.3f;
        std::vector<float> sc(2 * n_kv), pa(dv), pb(dv), wa(dv), wb(dv), ra(dv), rb(dv);
        kernels::attention_row_pair(a, b, sc.data(), pa.data(), pb.data());
        kernels::attention_row_avx2(a, sc.data(), wa.data());
        kernels::attention_row_avx2(b, sc.data(), wb.data());
        kernels::attention_row_portable(a, sc.data(), ra.data());
        kernels::attention_row_portable(b, sc.data(), rb.data());
        const auto where = [&] {
          return fmt::format("dk {} dv {} n_kv {} variant {} one pass {}", dk, dv, n_kv, variant,
                             kernels::attention_pair_one_pass(dk, dv));
        };
        ASSERT_EQ(0, std::memcmp(pa.data(), wa.data(), dv * 4)) << where();
        ASSERT_EQ(0, std::memcmp(pb.data(), wb.data(), dv * 4)) << where();
        ASSERT_EQ(0, std::memcmp(pa.data(), ra.data(), dv * 4)) << where();
        ASSERT_EQ(0, std::memcmp(pb.data(), rb.data(), dv * 4)) << where();
      }
    }
  }
  if (!one_pass) GTEST_SKIP() << "CPU lacks AVX-512: only the two-call fallback was checked";
}

// The AVX2 group pass (what an AVX2 CPU runs) on rows, any head count: each head's output has the
// bits of the portable kernel on ref_rows[h] (the same rows, or their widened F32 twins).
static void expect_avx2_group_bits(const std::vector<kernels::AttentionRow>& rows,
                                   const std::vector<kernels::AttentionRow>& ref_rows, float* sc,
                                   const std::vector<float*>& outs, const std::string& where) {
  const uint32_t n_heads = uint32_t(rows.size()), dv = rows[0].head_dim_v;
  for (float* o : outs) std::fill(o, o + dv, -1.0f);
  kernels::attention_rows_group_avx2(rows.data(), n_heads, sc, outs.data());
  std::vector<float> want(dv);
  for (uint32_t h = 0; h < n_heads; ++h) {
    kernels::attention_row_portable(ref_rows[h], sc, want.data());
    ASSERT_EQ(0, std::memcmp(outs[h], want.data(), dv * 4))
        << fmt::format("AVX2 group: {} head {}", where, h);
  }
}

// attention_rows_group (up to 8 heads of a GQA group in one pass) gives each head the bits of its
// own attention_row, AVX2 and portable: group sizes the one-pass kernel takes (2, 4, 6, 8) and the
// fallback's (3: a pair and a row), head dims it takes (multiples of 8 / 16) and those it leaves
// to the pairs, key counts around the 4-key blocks and the prefetch distance, strided K/V, V
// inside the K row, per-head sinks, grok's tanh score cap, exp underflow.
TEST(AttentionCore, GroupEqualsRowsBitForBit) {
  if (!kernels::attention_avx2_supported()) GTEST_SKIP() << "CPU lacks AVX2";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const uint32_t dims[][2] = {{64, 64}, {128, 128}, {8, 16}, {72, 136}, {576, 512}, {128, 48}};
  for (uint32_t n_heads : {1u, 2u, 3u, 4u, 5u, 6u, 8u}) {
    for (const auto& dd : dims) {
      const uint32_t dk = dd[0], dv = dd[1];
      for (uint32_t n_kv : {1u, 3u, 4u, 7u, 33u, 37u, 130u, 300u}) {
        for (int variant = 0; variant < 4; ++variant) {  // plain, sinks + spread, V in K, capped
          const bool v_in_k = variant == 2 && dv <= dk;
          const float spread = variant == 1 || variant == 3 ? 40.0f : 1.0f;
          const size_t k_stride = dk * 3 + 8, v_stride = dv + 5;
          std::vector<float> q(n_heads * dk), k(n_kv * k_stride), v(n_kv * v_stride);
          for (auto& f : q) f = normal(rng) * spread;
          for (auto& f : k) f = normal(rng);
          for (auto& f : v) f = normal(rng);
          std::vector<kernels::AttentionRow> rows(n_heads);
          for (uint32_t h = 0; h < n_heads; ++h) {
            kernels::AttentionRow& a = rows[h];
            a.q = q.data() + h * dk;
            a.k = k.data() + 8;
            a.k_stride = k_stride;
            a.v = v_in_k ? k.data() + 8 : v.data();
            a.v_stride = v_in_k ? k_stride : v_stride;
            a.n_kv = n_kv;
            a.head_dim_k = dk;
            a.head_dim_v = dv;
            a.scale = variant == 3 ? 0.088f / 30.0f : 0.088f;
            a.has_sink = variant == 1;
            a.sink = 0.7f - 0.3f * float(h);
            a.softcap = variant == 3 ? 30.0f : 0.0f;
          }
          std::vector<float> sc(n_heads * n_kv), got(n_heads * dv), want(dv), ref(dv);
          std::vector<float*> outs(n_heads);
          for (uint32_t h = 0; h < n_heads; ++h) outs[h] = got.data() + h * dv;
          kernels::attention_rows_group(rows.data(), n_heads, sc.data(), outs.data());
          for (uint32_t h = 0; h < n_heads; ++h) {
            kernels::attention_row_avx2(rows[h], sc.data(), want.data());
            kernels::attention_row_portable(rows[h], sc.data(), ref.data());
            const auto where = [&] {
              return fmt::format("heads {} head {} dk {} dv {} n_kv {} variant {} one pass {}",
                                 n_heads, h, dk, dv, n_kv, variant,
                                 kernels::attention_group_one_pass(n_heads, dk, dv));
            };
            ASSERT_EQ(0, std::memcmp(outs[h], want.data(), dv * 4)) << where();
            ASSERT_EQ(0, std::memcmp(outs[h], ref.data(), dv * 4)) << where();
          }
          ASSERT_NO_FATAL_FAILURE(
              expect_avx2_group_bits(rows, rows, sc.data(), outs,
                                     fmt::format("heads {} dk {} dv {} n_kv {} variant {}", n_heads,
                                                 dk, dv, n_kv, variant)));
        }
      }
    }
  }
  if (!kernels::attention_avx512_supported())
    GTEST_SKIP() << "CPU lacks AVX-512: the AVX2 group and the pair / row fallback were checked";
}

// KV_TYPE=f16: rows of IEEE halves (k16 / v16) give, in every variant (the portable row, AVX2,
// the AVX-512 pair and group, their fallbacks), the bits of the portable kernel on the same rows
// widened to F32: the halves are widened exactly where the order reads them.
TEST(AttentionCore, F16RowsEqualWidenedF32RowsBitForBit) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const uint32_t dims[][2] = {{64, 64}, {128, 128}, {72, 136}, {7, 7}, {576, 512}};
  for (uint32_t n_heads : {1u, 2u, 3u, 4u, 5u, 8u}) {
    for (const auto& dd : dims) {
      const uint32_t dk = dd[0], dv = dd[1];
      for (uint32_t n_kv : {1u, 5u, 33u, 130u, 257u}) {
        for (int variant = 0; variant < 3; ++variant) {  // plain, sinks + spread, V in K
          const bool v_in_k = variant == 2 && dv <= dk;
          const float spread = variant == 1 ? 40.0f : 1.0f;
          const size_t k_stride = dk + 8, v_stride = dv + 3;
          std::vector<float> q(n_heads * dk), kw(n_kv * k_stride), vw(n_kv * v_stride);
          std::vector<uint16_t> k16(kw.size()), v16(vw.size());
          for (auto& f : q) f = normal(rng) * spread;
          for (size_t i = 0; i < kw.size(); ++i) {
            k16[i] = kernels::f32_to_fp16(normal(rng));
            kw[i] = kernels::fp16_to_f32(k16[i]);
          }
          for (size_t i = 0; i < vw.size(); ++i) {
            v16[i] = kernels::f32_to_fp16(normal(rng));
            vw[i] = kernels::fp16_to_f32(v16[i]);
          }
          std::vector<kernels::AttentionRow> half(n_heads), wide(n_heads);
          for (uint32_t h = 0; h < n_heads; ++h) {
            kernels::AttentionRow& a = wide[h];
            a.q = q.data() + h * dk;
            a.k = kw.data();
            a.k_stride = k_stride;
            a.v = v_in_k ? kw.data() : vw.data();
            a.v_stride = v_in_k ? k_stride : v_stride;
            a.n_kv = n_kv;
            a.head_dim_k = dk;
            a.head_dim_v = dv;
            a.scale = 0.088f;
            a.has_sink = variant == 1;
            a.sink = 0.7f - 0.3f * float(h);
            half[h] = a;
            half[h].k = half[h].v = nullptr;
            half[h].k16 = k16.data();
            half[h].v16 = v_in_k ? k16.data() : v16.data();
          }
          std::vector<float> sc(n_heads * n_kv), got(n_heads * dv), want(dv), one(dv);
          std::vector<float*> outs(n_heads);
          for (uint32_t h = 0; h < n_heads; ++h) outs[h] = got.data() + h * dv;
          kernels::attention_rows_group(half.data(), n_heads, sc.data(), outs.data());
          for (uint32_t h = 0; h < n_heads; ++h) {
            const auto where = [&] {
              return fmt::format("heads {} head {} dk {} dv {} n_kv {} variant {}", n_heads, h, dk,
                                 dv, n_kv, variant);
            };
            kernels::attention_row_portable(wide[h], sc.data(), want.data());
            ASSERT_EQ(0, std::memcmp(outs[h], want.data(), dv * 4)) << "group " << where();
            kernels::attention_row(half[h], sc.data(), one.data());
            ASSERT_EQ(0, std::memcmp(one.data(), want.data(), dv * 4)) << "row " << where();
            kernels::attention_row_portable(half[h], sc.data(), one.data());
            ASSERT_EQ(0, std::memcmp(one.data(), want.data(), dv * 4)) << "portable " << where();
          }
          if (kernels::attention_avx2_supported() && dk % 8 == 0 && dv % 8 == 0) {
            ASSERT_NO_FATAL_FAILURE(
                expect_avx2_group_bits(half, wide, sc.data(), outs,
                                       fmt::format("heads {} dk {} dv {} n_kv {} variant {}",
                                                   n_heads, dk, dv, n_kv, variant)));
          }
        }
      }
    }
  }
}

// KV_TYPE=q8_0: rows of Q8_0 blocks (k8 / v8, strides in bytes) give, in every variant, the bits
// of the portable kernel on the rows dequantized to F32 (d · code is exact); V inside K (MLA's
// latent rows) reads the K row's first blocks.
TEST(AttentionCore, Q8RowsEqualWidenedF32RowsBitForBit) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const uint32_t dims[][2] = {{64, 64}, {128, 128}, {96, 160}, {32, 32}, {576, 512}};
  for (uint32_t n_heads : {1u, 2u, 3u, 4u, 5u, 8u}) {
    for (const auto& dd : dims) {
      const uint32_t dk = dd[0], dv = dd[1];
      for (uint32_t n_kv : {1u, 5u, 33u, 130u, 257u}) {
        for (int variant = 0; variant < 3; ++variant) {  // plain, sinks + spread, V in K
          const bool v_in_k = variant == 2 && dv <= dk;
          const float spread = variant == 1 ? 40.0f : 1.0f;
          const size_t kb = dk / 32 * 34 + 6, vb = dv / 32 * 34 + 2;  // byte strides, padded
          std::vector<float> q(n_heads * dk), kw(n_kv * dk), vw(n_kv * dv), tmp(std::max(dk, dv));
          std::vector<std::byte> k8(n_kv * kb), v8(n_kv * vb);
          for (auto& f : q) f = normal(rng) * spread;
          for (uint32_t j = 0; j < n_kv; ++j) {
            for (auto& f : tmp) f = normal(rng);
            if (j % 7 == 3) std::fill(tmp.begin(), tmp.begin() + 32, 0.0f);  // a zero block
            kernels::quantize_row(GgmlType::Q8_0, tmp.data(), k8.data() + j * kb, dk);
            kernels::dequantize_row(GgmlType::Q8_0, k8.data() + j * kb, kw.data() + j * dk, dk);
            for (uint32_t i = 0; i < dv; ++i) tmp[i] = normal(rng) * 3.0f;
            kernels::quantize_row(GgmlType::Q8_0, tmp.data(), v8.data() + j * vb, dv);
            kernels::dequantize_row(GgmlType::Q8_0, v8.data() + j * vb, vw.data() + j * dv, dv);
          }
          std::vector<kernels::AttentionRow> q8(n_heads), wide(n_heads);
          for (uint32_t h = 0; h < n_heads; ++h) {
            kernels::AttentionRow& a = wide[h];
            a.q = q.data() + h * dk;
            a.k = kw.data();
            a.k_stride = dk;
            a.v = v_in_k ? kw.data() : vw.data();
            a.v_stride = v_in_k ? dk : dv;
            a.n_kv = n_kv;
            a.head_dim_k = dk;
            a.head_dim_v = dv;
            a.scale = 0.088f;
            a.has_sink = variant == 1;
            a.sink = 0.7f - 0.3f * float(h);
            q8[h] = a;
            q8[h].k = q8[h].v = nullptr;
            q8[h].k8 = k8.data();
            q8[h].v8 = v_in_k ? k8.data() : v8.data();
            q8[h].k_stride = kb;
            q8[h].v_stride = v_in_k ? kb : vb;
          }
          std::vector<float> sc(n_heads * n_kv), got(n_heads * dv), want(dv), one(dv);
          std::vector<float*> outs(n_heads);
          for (uint32_t h = 0; h < n_heads; ++h) outs[h] = got.data() + h * dv;
          kernels::attention_rows_group(q8.data(), n_heads, sc.data(), outs.data());
          for (uint32_t h = 0; h < n_heads; ++h) {
            const auto where = [&] {
              return fmt::format("heads {} head {} dk {} dv {} n_kv {} variant {}", n_heads, h, dk,
                                 dv, n_kv, variant);
            };
            kernels::attention_row_portable(wide[h], sc.data(), want.data());
            ASSERT_EQ(0, std::memcmp(outs[h], want.data(), dv * 4)) << "group " << where();
            kernels::attention_row(q8[h], sc.data(), one.data());
            ASSERT_EQ(0, std::memcmp(one.data(), want.data(), dv * 4)) << "row " << where();
            kernels::attention_row_portable(q8[h], sc.data(), one.data());
            ASSERT_EQ(0, std::memcmp(one.data(), want.data(), dv * 4)) << "portable " << where();
          }
          if (kernels::attention_avx2_supported()) {
            ASSERT_NO_FATAL_FAILURE(
                expect_avx2_group_bits(q8, wide, sc.data(), outs,
                                       fmt::format("heads {} dk {} dv {} n_kv {} variant {}",
                                                   n_heads, dk, dv, n_kv, variant)));
          }
        }
      }
    }
  }
}

// The AVX2 SwiGLU (swiglu_row's path on AVX2 CPUs) is portable_swiglu on each element, bit for
// bit: gates over the float range and the exp's branch edges, mixed-sign ups, NaN and infinities,
// lengths with a scalar tail, and out aliasing gate.
TEST(AttentionCore, Avx2SwigluEqualsPortableSwiglu) {
  if (!kernels::attention_avx2_supported()) GTEST_SKIP() << "CPU lacks AVX2";
  std::vector<float> g, u;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (float f = -120.0f; f <= 120.0f; f += 0.0173f) {
    g.push_back(f);
    u.push_back(nd(rng));
  }
  for (float f : {0.0f, -0.0f, 88.72f, 89.01f, -87.34f, -88.73f, -89.01f, 103.9f, 104.1f, 1e30f,
                  -1e30f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f, 1e-40f}) {
    g.push_back(f);
    u.push_back(nd(rng));
  }
  g.push_back(1.0f);
  u.push_back(NAN);
  g.push_back(2.0f);
  u.push_back(INFINITY);
  for (const size_t n : {g.size(), size_t{7}, size_t{13}}) {
    std::vector<float> out(n), alias(g.begin(), g.begin() + n);
    kernels::swiglu_row_avx2(g.data(), u.data(), out.data(), int64_t(n));
    kernels::swiglu_row_avx2(alias.data(), u.data(), alias.data(), int64_t(n));
    for (size_t i = 0; i < n; ++i) {
      const float want = kernels::portable_swiglu(g[i], u[i]);
      uint32_t a, b, c;
      std::memcpy(&a, &out[i], 4);
      std::memcpy(&b, &want, 4);
      std::memcpy(&c, &alias[i], 4);
      ASSERT_EQ(a, b) << "g = " << g[i] << " u = " << u[i] << " got " << out[i] << " want " << want;
      ASSERT_EQ(c, b) << "aliased, g = " << g[i];
    }
  }
}

// exp on 8 (AVX2) and 16 (AVX-512) lanes is portable_expf on each input: a sweep over the float
// range, the branch edges (overflow, subnormal results, underflow), infinities and NaN.
TEST(AttentionCore, SimdExpEqualsPortableExpf) {
  if (!kernels::attention_avx2_supported()) GTEST_SKIP() << "CPU lacks AVX2";
  std::vector<float> x;
  for (float f = -110.0f; f <= 95.0f; f += 0.013f) x.push_back(f);
  for (float f : {0.0f, -0.0f, 88.72f, 88.73f, 89.0f, 89.01f, -87.3f, -87.34f, -103.9f, -104.0f,
                  -104.1f, -120.0f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f})
    x.push_back(f);
  std::vector<std::pair<const char*, void (*)(const float*, float*, int64_t)>> fns = {
      {"avx2", &kernels::expf_avx2}};
  if (kernels::attention_avx512_supported()) fns.emplace_back("avx512", &kernels::expf_avx512);
  for (const auto& [name, fn] : fns) {
    std::vector<float> y(x.size());
    fn(x.data(), y.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = kernels::portable_expf(x[i]);
      uint32_t a, b;
      std::memcpy(&a, &y[i], 4);
      std::memcpy(&b, &want, 4);
      ASSERT_EQ(a, b) << name << " x = " << x[i] << " got " << y[i] << " want " << want;
    }
  }
}

// The AVX-512 softmax of scores is the AVX2 one bit for bit: awkward lengths, with and without a
// sink and a softcap, scores spread wide enough that some exps underflow.
TEST(AttentionCore, Avx512SoftmaxEqualsAvx2) {
  if (!kernels::attention_avx512_supported()) GTEST_SKIP() << "CPU lacks AVX-512";
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 30.0f);
  for (uint32_t n : {1u, 7u, 8u, 15u, 16u, 17u, 31u, 33u, 100u, 1000u, 4099u}) {
    for (int variant = 0; variant < 3; ++variant) {
      kernels::AttentionRow row;
      row.has_sink = variant == 1;
      row.sink = 3.5f;
      row.softcap = variant == 2 ? 30.0f : 0.0f;
      std::vector<float> a(n);
      for (float& v : a) v = normal(rng);
      std::vector<float> b = a;
      kernels::softmax_scores_avx2(a.data(), n, row);
      kernels::softmax_scores_avx512(b.data(), n, row);
      for (uint32_t i = 0; i < n; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i]))
            << "n " << n << " variant " << variant << " element " << i;
    }
  }
}
