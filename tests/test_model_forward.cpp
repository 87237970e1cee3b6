// The forward pass against llama.cpp's references (../shared/fixtures): teacher-forced logits and
// routing, greedy continuations, decode vs prefill, chunked prefill and thread-count invariance,
// for every variant of tiny-qwen3moe and tiny-mixtral. These tolerances are the contract.
#include "forward_ref.h"

using namespace strata;
using namespace strata::engine;
using namespace strata::engine::forward_ref;

namespace {

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

// Greedy continuations must match exactly for F32 and Q8_0.
const Variant kVariants[] = {
    {"tiny-qwen3moe", "F32", true, true, 0},
    {"tiny-qwen3moe", "Q8_0", false, true, kQuantRelRms},
    {"tiny-qwen3moe", "Q4_0", false, false, kQuantRelRms},
    {"tiny-qwen3moe", "Q4_K_M", false, false, kQuantRelRms},
    {"tiny-mixtral", "F32", true, true, 0},
    {"tiny-mixtral", "Q4_0", false, false, kQuantRelRms},
};

// The smallest gap between consecutive probabilities among the top k+1 of a router row: below
// kRouterTieMargin a different rounding may legitimately pick or order experts differently.
double router_tie_margin(const float* p, uint32_t n_expert, uint32_t k) {
  std::vector<float> s(p, p + n_expert);
  std::sort(s.begin(), s.end(), std::greater<>());
  double m = INFINITY;
  for (uint32_t j = 0; j < k && j + 1 < n_expert; ++j) m = std::min(m, double(s[j]) - s[j + 1]);
  return m;
}

class ModelForward : public ForwardRefTest {
 protected:
  // Compares one stream run with the reference under the variant's rules.
  // Returns the number of rows within kF32Atol of the reference.
  int check_stream(int s, const Run& run, const char* what) override {
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
    const double rrms = rel_rms(run.logits.data(), ref.logits.data(), ref.logits.size());
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
      EXPECT_LE(rrms, v.rel_rms);
      EXPECT_GE(sets_equal, 0.99 * total) << "routing sets agree at fewer than 99% of positions";
    }
    return exact_rows;
  }
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
  check_paths_bit_identical();
}

// Greedy continuations (gen{0,1,2}), see ForwardRefTest::check_greedy.
TEST_P(ModelForward, GreedyContinuations) {
  check_greedy();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelForward, ::testing::ValuesIn(kVariants), variant_name);

}  // namespace
