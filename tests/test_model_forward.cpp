// The forward pass against llama.cpp's references (../shared/fixtures): teacher-forced logits and
// routing, greedy continuations, decode vs prefill, chunked prefill and thread-count invariance,
// for every variant of tiny-qwen3moe and tiny-mixtral. These tolerances are the contract.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "engine/logit_dump.h"
#include "engine/model.h"
#include "engine/sampler.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::engine;

namespace {

struct Variant {
  const char* model;
  const char* variant;
  bool f32;
  // Greedy continuations must match the reference exactly (F32 and Q8_0).
  bool exact_greedy;
};

// Quantized variants. The engine quantizes activations like llama.cpp (Q8_0 / Q8_K) and uses the
// same integer block dots, so it reproduces llama.cpp's logits to ~1e-6 until one activation
// element lands within a few ulps of a rounding boundary of the activation quantizer; there the
// two engines' float summation orders (ggml's AVX2/repacked kernels vs ours) legitimately round it
// to neighbouring codes, and the difference spreads to later positions through attention. Such
// flips are traced, not guessed: in tiny-qwen3moe-Q4_K_M stream 0 the first one is the attention
// output fed to blk.0.attn_output at position 3, element 233 scaled to -75.49998 (2 ulp from
// -75.5), which makes every later position differ (rel-RMS 1.5e-2, the largest measured; the
// others are 2.8e-4..7e-3). Hence:
//   - rel-RMS per stream <= 2e-2: what one flip at the earliest possible layer costs;
//   - at least 25% of both streams' rows within 1e-4 absolute (measured 36%..95%): a
//     dequantize-then-F32 engine (fixture README: rel-RMS 1.2e-2..2.6e-2, argmax 95-98%) matches
//     no row at that level, so this is what shows the activation quantization is reproduced;
//   - top-1 agreement wherever the reference margin exceeds 0.05, routing sets >= 99%.
constexpr double kQuantRelRms = 2e-2;
constexpr double kQuantExactRowShare = 0.25;

const Variant kVariants[] = {
    {"tiny-qwen3moe", "F32", true, true},    {"tiny-qwen3moe", "Q8_0", false, true},
    {"tiny-qwen3moe", "Q4_0", false, false}, {"tiny-qwen3moe", "Q4_K_M", false, false},
    {"tiny-mixtral", "F32", true, true},     {"tiny-mixtral", "Q4_0", false, false},
};

void PrintTo(const Variant& v, std::ostream* os) {
  *os << v.model << "-" << v.variant;
}

constexpr double kF32Atol = 1e-4;           // F32 logits vs llama.cpp, absolute
constexpr double kRouterTieMargin = 1e-4;   // F32: skip routing comparison below this prob gap
constexpr double kTop1Margin = 0.05;        // quantized: top-1 must agree above this logit gap
constexpr double kGreedyStopMargin = 1e-3;  // stop comparing greedy after a step this close

fs::path fixtures() {
  return fs::path(STRATA_FIXTURES_DIR);
}

fs::path model_path(const Variant& v) {
  return fixtures() / v.model / (std::string(v.model) + "-" + v.variant + ".gguf");
}
fs::path ref_dir(const Variant& v) {
  return fixtures() / v.model / "ref" / v.variant;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

double rel_rms(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / den);
}

// Gap between the best and second-best value of a row.
double top_margin(const float* x, uint32_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (uint32_t i = 0; i < n; ++i) {
    if (x[i] > a) {
      b = a;
      a = x[i];
    } else if (x[i] > b) {
      b = x[i];
    }
  }
  return double(a) - double(b);
}

// The smallest gap between consecutive probabilities among the top k+1 of a router row: below
// kRouterTieMargin a different rounding may legitimately pick or order experts differently.
double router_tie_margin(const float* p, uint32_t n_expert, uint32_t k) {
  std::vector<float> s(p, p + n_expert);
  std::sort(s.begin(), s.end(), std::greater<>());
  double m = INFINITY;
  for (uint32_t j = 0; j < k && j + 1 < n_expert; ++j) m = std::min(m, double(s[j]) - s[j + 1]);
  return m;
}

class ModelForward : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    if (!fs::exists(fixtures())) GTEST_SKIP() << "fixtures not found at " << fixtures();
    if (!fs::exists(model_path(GetParam())))
      GTEST_SKIP() << "model file missing: " << model_path(GetParam());
    model_ = std::make_unique<Model>(Model::load(model_path(GetParam()).string()));
    ref_ = read_json(ref_dir(GetParam()) / "ref.json");
  }
  const ModelConfig& cfg() const { return model_->config(); }

  // Teacher-forced logits and routing of a stream, computed as one batch (like the references)
  // or in chunks / one token at a time.
  struct Run {
    std::vector<float> logits;  // [n_pos, n_vocab]
    RoutingTrace trace;
  };
  Run run_stream(const std::vector<int32_t>& ids, uint32_t n_ubatch, int n_threads,
                 bool decode_path) {
    ForwardOptions o;
    o.n_ctx = 512;
    o.n_ubatch = n_ubatch;
    o.n_threads = n_threads;
    Forward fwd(*model_, o);
    Run r;
    r.logits.resize(ids.size() * cfg().n_vocab);
    r.trace.reset(cfg().n_layer, cfg().n_expert, cfg().n_expert_used);
    if (decode_path) {
      for (size_t i = 0; i < ids.size(); ++i) {
        auto row = fwd.decode(ids[i], &r.trace);
        std::copy(row.begin(), row.end(), r.logits.begin() + i * cfg().n_vocab);
      }
    } else {
      fwd.prefill(ids, r.logits.data(), &r.trace);
    }
    return r;
  }

  // Compares one stream run with the reference under the variant's rules.
  // Returns the number of rows within kF32Atol of the reference.
  int check_stream(int s, const Run& run, const char* what) {
    const Variant& v = GetParam();
    SCOPED_TRACE(fmt::format("{} {} stream {} ({})", v.model, v.variant, s, what));
    const LogitDump ref =
        read_logit_dump((ref_dir(v) / fmt::format("stream{}.logits.bin", s)).string());
    const RoutingTrace rr =
        read_routing_dump((ref_dir(v) / fmt::format("stream{}.routing.bin", s)).string());
    const uint32_t nv = ref.n_vocab;
    const bool shapes_ok = nv == cfg().n_vocab && run.logits.size() == ref.logits.size() &&
                           rr.n_layer == cfg().n_layer && rr.k == cfg().n_expert_used &&
                           rr.n_pos == ref.n_pos();
    EXPECT_TRUE(shapes_ok) << "reference files do not match the model";
    if (!shapes_ok) return 0;

    // Logits.
    double max_abs = 0;
    for (size_t i = 0; i < ref.logits.size(); ++i) {
      if (std::isnan(run.logits[i])) {
        ADD_FAILURE() << "NaN logit at " << i;
        return 0;
      }
      max_abs = std::max(max_abs, std::fabs(double(run.logits[i]) - ref.logits[i]));
    }
    const double rrms = rel_rms(run.logits, ref.logits);
    int exact_rows = 0;  // rows within kF32Atol: llama.cpp's arithmetic reproduced bit-for-bit
    for (uint32_t p = 0; p < ref.n_pos(); ++p) {
      double m = 0;
      for (uint32_t i = 0; i < nv; ++i)
        m = std::max(m, std::fabs(double(run.logits[size_t{p} * nv + i]) - ref.row(p)[i]));
      exact_rows += m <= kF32Atol;
    }
    int top1_checked = 0, top1_agree = 0;
    for (uint32_t p = 0; p < ref.n_pos(); ++p) {
      if (top_margin(ref.row(p), nv) <= kTop1Margin) continue;
      ++top1_checked;
      const int32_t got = argmax(std::span<const float>(run.logits.data() + size_t{p} * nv, nv));
      const int32_t want = argmax(std::span<const float>(ref.row(p), nv));
      top1_agree += got == want;
      EXPECT_EQ(got, want) << "top-1 differs at position " << p;
    }

    // Routing.
    int compared = 0, identical = 0, tie_skipped = 0, sets_equal = 0, total = 0;
    double max_prob_diff = 0;
    for (uint32_t il = 0; il < rr.n_layer; ++il) {
      for (uint32_t p = 0; p < rr.n_pos; ++p) {
        const int32_t* want = rr.topk_at(il, p);
        const int32_t* got = run.trace.topk_at(il, p);
        std::vector<int32_t> a(want, want + rr.k), b(got, got + rr.k);
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        ++total;
        sets_equal += a == b;
        for (uint32_t e = 0; e < rr.n_expert; ++e)
          max_prob_diff = std::max(
              max_prob_diff, std::fabs(double(rr.prob_at(il, p)[e]) - run.trace.prob_at(il, p)[e]));
        if (!v.f32) continue;
        if (router_tie_margin(rr.prob_at(il, p), rr.n_expert, rr.k) < kRouterTieMargin) {
          ++tie_skipped;
          continue;
        }
        ++compared;
        const bool same = std::equal(want, want + rr.k, got);
        identical += same;
        EXPECT_TRUE(same) << "layer " << il << " pos " << p << ": top-k ids differ";
        for (uint32_t j = 0; j < rr.k; ++j)
          EXPECT_NEAR(run.trace.weight_at(il, p)[j], rr.weight_at(il, p)[j], 1e-5)
              << "layer " << il << " pos " << p << " slot " << j;
      }
    }
    std::printf(
        "  %s %s stream %d (%s): max|dlogit| %.3g  rel-RMS %.3g  top1 %d/%d  "
        "routing sets %d/%d  max|dprob| %.3g  rows within 1e-4 %d/%u%s\n",
        v.model, v.variant, s, what, max_abs, rrms, top1_agree, top1_checked, sets_equal, total,
        max_prob_diff, exact_rows, ref.n_pos(),
        v.f32 ? fmt::format("  ids identical {}/{} ({} near-ties skipped)", identical, compared,
                            tie_skipped)
                    .c_str()
              : "");
    if (v.f32) {
      EXPECT_LE(max_abs, kF32Atol);
    } else {
      EXPECT_LE(rrms, kQuantRelRms);
      EXPECT_GE(sets_equal, 0.99 * total) << "routing sets agree at fewer than 99% of positions";
    }
    return exact_rows;
  }

  // Both streams under the variant's rules.
  void check_streams(uint32_t n_ubatch, bool decode_path) {
    int exact = 0, rows = 0;
    for (int s = 0; s < 2; ++s) {
      const std::vector<int32_t> ids = stream_ids(s);
      exact += check_stream(s, run_stream(ids, n_ubatch, 2, decode_path),
                            decode_path ? "decode" : "prefill");
      rows += int(ids.size());
    }
    if (!GetParam().f32) {
      EXPECT_GE(exact, kQuantExactRowShare * rows)
          << "too few rows reproduce llama.cpp exactly: activation quantization not emulated?";
    }
  }

  std::vector<int32_t> stream_ids(int s) const {
    return ref_["streams"][s]["ids"].get<std::vector<int32_t>>();
  }

  std::unique_ptr<Model> model_;
  nlohmann::json ref_;
};

// Each stream as one batch of 64 tokens into an empty cache, like the references.
TEST_P(ModelForward, TeacherForcedPrefill) {
  check_streams(512, false);
}

// The same streams one token at a time (the decode path), under the same rules.
TEST_P(ModelForward, TeacherForcedDecode) {
  check_streams(512, true);
}

// Decode, chunked prefill and any thread count compute every element with the same kernel calls
// in the same order, so they agree with the one-batch prefill to the bit (DESIGN invariant 1).
TEST_P(ModelForward, PathsAndThreadsBitIdentical) {
  const std::vector<int32_t> ids = stream_ids(1);
  const Run base = run_stream(ids, 512, 2, false);
  const Run decode = run_stream(ids, 512, 1, true);
  const Run chunked = run_stream(ids, 7, 3, false);
  const Run one_thread = run_stream(ids, 512, 1, false);
  EXPECT_TRUE(base.logits == decode.logits) << "decode path differs from prefill";
  EXPECT_TRUE(base.logits == chunked.logits) << "chunked prefill differs from one batch";
  EXPECT_TRUE(base.logits == one_thread.logits) << "1 thread differs from 2 threads";
  EXPECT_TRUE(base.trace.same_as(decode.trace)) << "decode routing differs from prefill";
  EXPECT_TRUE(base.trace.same_as(chunked.trace)) << "chunked routing differs from one batch";
  EXPECT_TRUE(base.trace.same_as(one_thread.trace)) << "1-thread routing differs";
}

// Greedy continuations (gen{0,1,2}): the prompt as one batch, then the 32 steps one token at a
// time, as the references were made. Each step is fed the reference's token, so every step's
// logits are compared even after a legitimate flip; while our argmax equals the reference's at
// every step, free-running generation is identical. F32 and Q8_0: argmax identical at every step
// up to the first one whose reference top1-top2 margin is below kGreedyStopMargin (a different
// rounding may legitimately pick the other token there; we stop comparing after it). Other
// quantized variants: argmax identical wherever the margin exceeds kTop1Margin, as for streams.
TEST_P(ModelForward, GreedyContinuations) {
  const Variant& v = GetParam();
  for (size_t g = 0; g < ref_["greedy"].size(); ++g) {
    const auto& gr = ref_["greedy"][g];
    const auto prompt = gr["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = gr["generated_ids"].get<std::vector<int32_t>>();
    const auto margin = gr["top1_top2_margin"].get<std::vector<double>>();
    const LogitDump ref =
        read_logit_dump((ref_dir(v) / fmt::format("gen{}.logits.bin", g)).string());
    ASSERT_EQ(ref.tokens, want);
    ASSERT_EQ(margin.size(), want.size());

    ForwardOptions o;
    o.n_ctx = 512;
    o.n_threads = 2;
    Forward fwd(*model_, o);
    std::span<const float> logits = fwd.prefill(prompt);
    size_t identical = 0, compared = 0;
    bool stopped = false;
    double max_abs = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      for (uint32_t t = 0; t < cfg().n_vocab; ++t)
        max_abs = std::max(max_abs, std::fabs(double(logits[t]) - ref.row(uint32_t(i))[t]));
      const int32_t got = argmax(logits);
      const bool check =
          v.exact_greedy ? !stopped && margin[i] >= kGreedyStopMargin : margin[i] > kTop1Margin;
      if (check) {
        ++compared;
        identical += got == want[i];
        EXPECT_EQ(got, want[i]) << "greedy " << g << " step " << i << " (reference margin "
                                << margin[i] << ")";
      }
      if (margin[i] < kGreedyStopMargin) stopped = true;
      if (i + 1 < want.size()) logits = fwd.decode(want[i]);
    }
    std::printf(
        "  %s %s greedy %zu: argmax identical at %zu/%zu compared steps, "
        "max|dlogit| %.3g\n",
        v.model, v.variant, g, identical, compared, max_abs);
    if (v.f32) {
      EXPECT_LE(max_abs, kF32Atol);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelForward, ::testing::ValuesIn(kVariants),
                         [](const ::testing::TestParamInfo<Variant>& i) {
                           std::string n = std::string(i.param.model) + "_" + i.param.variant;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
