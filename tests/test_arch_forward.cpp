// The second-batch architectures against llama.cpp's references (../shared/fixtures): deepseek2
// (MLA, groups, sigmoid + selection bias, shared expert, dense lead layer), glm4moe, olmoe and
// gpt-oss (sinks, sliding window, biases, SwiGLU-OAI, MXFP4). Same contract as
// tests/test_model_forward.cpp: teacher-forced logits and routing, greedy continuations, decode vs
// prefill, chunked prefill and thread-count invariance. The rules that differ are stated where
// they are used, with the margins measured in the references.
#include "engine/gating.h"
#include "forward_ref.h"

using namespace strata;
using namespace strata::engine;
using namespace strata::engine::forward_ref;

namespace {

// Quantized variants. As in tests/test_model_forward.cpp the engine quantizes activations like
// llama.cpp and reproduces its logits to ~1e-6 until one activation element rounds to the
// neighbouring Q8_0 code (the two engines sum floats in different orders); from there the
// difference spreads through attention (measured: 16-63 of 64 rows per stream stay within 1e-4).
// The sigmoid-routed models amplify it: their selection scores sit in a narrow band (sigmoid +
// bias), so a perturbed row can pick another expert (deepseek2 also another group), which is why
// routing and logits are compared up to the first explained routing flip for them (see
// check_stream). rel-RMS over the compared positions: measured 8e-8..8.7e-3 (worst:
// deepseek2-Q4_0 and gpt-oss-Q4_0 stream 0, both after one rounding flip); the bound is 2x that,
// and far below a dequantize-then-F32 engine (fixture README: 1.1e-2..1.2e-1).
constexpr double kQuantRelRms = 2e-2;
// MXFP4 experts with Q8_0 activations: numpy matched llama.cpp to 1.9e-6 (README) and so do we
// (measured 1.9e-6), so the MXFP4 variant is held to the F32 bound.
constexpr double kMxfp4Atol = 1e-4;

const Variant kVariants[] = {
    {"tiny-olmoe", "F32", true, true, 0},  // skipped while the F32 GGUF is held back
    {"tiny-olmoe", "Q4_0", false, false, kQuantRelRms},
    {"tiny-glm4moe", "F32", true, true, 0},  // skipped while the F32 GGUF is held back
    {"tiny-glm4moe", "Q4_0", false, false, kQuantRelRms},
    {"tiny-gpt-oss", "F32", true, true, 0},
    {"tiny-gpt-oss", "MXFP4", false, true, kQuantRelRms},
    {"tiny-gpt-oss", "Q4_0", false, false, kQuantRelRms},
    {"tiny-deepseek2", "F32", true, true, 0},
    // Greedy with the quantized rule (top-1 where the reference margin > 0.05), not the exact
    // one the first batch's Q8_0 meets: the teacher-forced streams match (stream 0: 64/64 rows
    // within 1e-6), but in gen2, 20 of 32 decode steps differ from llama.cpp by 0.03-0.05 while
    // the next step matches again to 1e-6 — the difference never reaches the KV cache, so it is
    // confined to the last layer and the head: a Q8_0 rounding flip there (an instrumented run
    // found an element within 3e-4 codes of a rounding boundary at such steps). Step 25 has a
    // reference margin of 0.017, below that.
    {"tiny-deepseek2", "Q8_0", false, false, kQuantRelRms},
    {"tiny-deepseek2", "Q4_0", false, false, kQuantRelRms},
};

// The smallest gap that decides a reference routing row, measured on what llama.cpp ranks: the
// selection scores (probs + exp_probs_b) among the experts of the chosen groups (k-th vs
// (k+1)-th and every consecutive pair above), and for group-limited routing the gap between the
// n_group_used-th and the next group score. Below kRouterTieMargin another rounding may
// legitimately route differently.
double routing_margin(const ModelConfig& cfg, const LayerWeights& l, const float* prob) {
  std::vector<float> p(prob, prob + cfg.n_expert);
  double m = INFINITY;
  uint64_t groups = ~uint64_t{0};
  if (cfg.n_expert_groups > 1) {
    const uint32_t per = cfg.n_expert / cfg.n_expert_groups;
    std::vector<float> gs;
    for (uint32_t g = 0; g < cfg.n_expert_groups; ++g) {
      std::vector<float> s;
      for (uint32_t e = g * per; e < (g + 1) * per; ++e)
        s.push_back(selection_score(l, p.data(), e));
      std::sort(s.begin(), s.end(), std::greater<>());
      gs.push_back(s[0] + s[1]);
    }
    std::vector<float> sorted = gs;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    m = std::min(m, double(sorted[cfg.n_group_used - 1]) - sorted[cfg.n_group_used]);
    groups = selected_groups(cfg, l, p.data());
  }
  const uint32_t per = cfg.n_expert_groups > 1 ? cfg.n_expert / cfg.n_expert_groups : cfg.n_expert;
  std::vector<float> s;
  for (uint32_t e = 0; e < cfg.n_expert; ++e)
    if (groups >> (e / per) & 1) s.push_back(selection_score(l, p.data(), e));
  std::sort(s.begin(), s.end(), std::greater<>());
  for (uint32_t j = 0; j < cfg.n_expert_used && j + 1 < s.size(); ++j)
    m = std::min(m, double(s[j]) - s[j + 1]);
  return m;
}

class ArchForward : public ForwardRefTest {
 protected:
  bool near_exact() const { return GetParam().f32 || std::string(GetParam().variant) == "MXFP4"; }

  // Returns the number of rows within kF32Atol of the reference.
  int check_stream(int s, const Run& run, const char* what) override {
    const Variant& v = GetParam();
    SCOPED_TRACE(fmt::format("{} {} stream {} ({})", v.model, v.variant, s, what));
    const LogitDump ref =
        read_logit_dump((ref_dir(v) / fmt::format("stream{}.logits.bin", s)).string());
    const RoutingTrace rr =
        read_routing_dump((ref_dir(v) / fmt::format("stream{}.routing.bin", s)).string());
    const uint32_t nv = ref.n_vocab;
    const uint32_t n_pos = ref.n_pos();
    const bool shapes_ok = nv == cfg().n_vocab && run.logits.size() == ref.logits.size() &&
                           rr.n_layer == cfg().n_layer && rr.k == cfg().n_expert_used &&
                           rr.n_expert == cfg().n_expert && rr.n_pos == n_pos;
    EXPECT_TRUE(shapes_ok) << "reference files do not match the model";
    if (!shapes_ok) return 0;
    const auto moe_layers = ref_["streams"][s]["moe_layers"].get<std::vector<uint32_t>>();

    // Routing. The first position whose expert set differs in any layer, the reference's deciding
    // margin there (routing_margin) and our probability error on that row.
    uint32_t first_flip = n_pos;
    double flip_margin = INFINITY, flip_dprob = 0;
    double max_prob_diff = 0;
    for (uint32_t p = 0; p < n_pos; ++p) {
      for (uint32_t il = 0; il < rr.n_layer; ++il) {
        const bool moe = std::find(moe_layers.begin(), moe_layers.end(), il) != moe_layers.end();
        if (p == 0) {
          EXPECT_EQ(moe, cfg().is_moe(il)) << "layer " << il;
        }
        const int32_t* want = rr.topk_at(il, p);
        const int32_t* got = run.trace.topk_at(il, p);
        if (!moe) {
          // Dense layers: the trace keeps the MOER convention (topk -1, weight 0, prob 0).
          EXPECT_EQ(want[0], -1);
          EXPECT_EQ(got[0], -1) << "dense layer " << il << " pos " << p << " has routing";
          continue;
        }
        double dprob = 0;
        for (uint32_t e = 0; e < rr.n_expert; ++e)
          dprob = std::max(dprob,
                           std::fabs(double(rr.prob_at(il, p)[e]) - run.trace.prob_at(il, p)[e]));
        max_prob_diff = std::max(max_prob_diff, dprob);
        std::vector<int32_t> a(want, want + rr.k), b(got, got + rr.k);
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        if (a != b && first_flip == n_pos) {
          first_flip = p;
          flip_margin = routing_margin(cfg(), model_->weights().layers[il], rr.prob_at(il, p));
          flip_dprob = dprob;
        }
      }
    }
    // Every routing difference must be one the arithmetic can cause: either a near-tie in the
    // reference (margin < kRouterTieMargin), or a margin within what our probability error on
    // that row can move (two scores each off by dprob; a group score sums two: 4·dprob) — the
    // error itself coming from an earlier legitimate activation-rounding flip.
    const bool near_tie = flip_margin < kRouterTieMargin;
    if (first_flip < n_pos) {
      EXPECT_TRUE(near_tie || flip_margin <= 4 * flip_dprob)
          << "routing differs at position " << first_flip << " with reference margin "
          << flip_margin << " but our probabilities are only " << flip_dprob << " off";
    }
    // Positions compared: all of them, except after a flip at a reference near-tie (the
    // issue's rule: a different expert there is legitimate and changes every later position),
    // and — for sigmoid-gated models, per the fixture README's advice, because their selection
    // scores sit in a narrow band and deepseek2 adds a group choice — after any explained flip.
    const bool sigmoid = cfg().gating == GatingType::kSigmoid;
    const uint32_t cut = near_tie || sigmoid ? first_flip : n_pos;

    int compared = 0, identical = 0, tie_skipped = 0, sets_equal = 0, total = 0;
    for (uint32_t il = 0; il < rr.n_layer; ++il) {
      if (!cfg().is_moe(il)) continue;
      const LayerWeights& l = model_->weights().layers[il];
      for (uint32_t p = 0; p < cut; ++p) {
        const int32_t* want = rr.topk_at(il, p);
        const int32_t* got = run.trace.topk_at(il, p);
        std::vector<int32_t> a(want, want + rr.k), b(got, got + rr.k);
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        ++total;
        sets_equal += a == b;
        if (!near_exact()) continue;
        if (routing_margin(cfg(), l, rr.prob_at(il, p)) < kRouterTieMargin) {
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

    // Logits over the compared positions.
    double max_abs = 0;
    int exact_rows = 0;
    for (uint32_t p = 0; p < n_pos; ++p) {
      double m = 0;
      for (uint32_t i = 0; i < nv; ++i) {
        const float g = run.logits[size_t{p} * nv + i];
        if (std::isnan(g)) {
          ADD_FAILURE() << "NaN logit at pos " << p;
          return 0;
        }
        m = std::max(m, std::fabs(double(g) - ref.row(p)[i]));
      }
      exact_rows += m <= kF32Atol;
      if (p < cut) max_abs = std::max(max_abs, m);
    }
    const double rrms = rel_rms(run.logits.data(), ref.logits.data(), size_t{cut} * nv);
    int top1_checked = 0, top1_agree = 0;
    for (uint32_t p = 0; p < cut; ++p) {
      if (top_margin(ref.row(p), nv) <= kTop1Margin) continue;
      ++top1_checked;
      const int32_t got = argmax(std::span<const float>(run.logits.data() + size_t{p} * nv, nv));
      const int32_t want = argmax(std::span<const float>(ref.row(p), nv));
      top1_agree += got == want;
      EXPECT_EQ(got, want) << "top-1 differs at position " << p;
    }
    const std::string flip =
        first_flip < n_pos
            ? fmt::format(
                  "first routing difference at position {} (reference margin {:.3g}, our "
                  "prob error {:.3g}{})",
                  first_flip, flip_margin, flip_dprob, near_tie ? ", near-tie" : "")
            : std::string("routing sets identical");
    std::printf(
        "  %s %s stream %d (%s): %s; positions compared %u/%u: max|dlogit| %.3g  rel-RMS %.3g  "
        "top1 %d/%d  routing sets %d/%d  max|dprob| %.3g  rows within 1e-4 %d/%u%s\n",
        v.model, v.variant, s, what, flip.c_str(), cut, n_pos, max_abs, rrms, top1_agree,
        top1_checked, sets_equal, total, max_prob_diff, exact_rows, n_pos,
        near_exact() ? fmt::format("  ids identical {}/{} ({} near-ties skipped)", identical,
                                   compared, tie_skipped)
                           .c_str()
                     : "");
    if (v.f32) {
      EXPECT_LE(max_abs, kF32Atol);
    } else if (std::string(v.variant) == "MXFP4") {
      EXPECT_LE(max_abs, kMxfp4Atol);
    } else {
      EXPECT_LE(rrms, v.rel_rms);
      EXPECT_GE(sets_equal, 0.99 * total) << "routing sets agree at fewer than 99% of positions";
    }
    return exact_rows;
  }
};

TEST_P(ArchForward, TeacherForcedPrefill) {
  check_streams(512, false);
}

TEST_P(ArchForward, TeacherForcedDecode) {
  check_streams(512, true);
}

// Decode, chunked prefill and any thread count agree to the bit (DESIGN invariant 1).
TEST_P(ArchForward, PathsAndThreadsBitIdentical) {
  check_paths_bit_identical();
}

// Greedy continuations (gen{0,1,2}), see ForwardRefTest::check_greedy.
TEST_P(ArchForward, GreedyContinuations) {
  check_greedy();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ArchForward, ::testing::ValuesIn(kVariants), variant_name);

}  // namespace
