// Gating functions and group-limited top-k (see gating.h). Tested by tests/test_arch_gating.cpp.
#include "engine/gating.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "io/check.h"

namespace strata::engine {

uint64_t selected_groups(const ModelConfig& cfg, const LayerWeights& layer, const float* probs) {
  const uint32_t n_groups = cfg.n_expert_groups;
  if (n_groups <= 1) return ~uint64_t{0};
  const uint32_t per_group = cfg.n_expert / n_groups;
  // A group's score is the sum of its two best selection scores (llama.cpp: top-2 of the group,
  // then sum_rows, which sums in double and rounds once: the same as one float add).
  auto group_score = [&](uint32_t g) {
    float a = -std::numeric_limits<float>::infinity(), b = a;
    for (uint32_t e = g * per_group; e < (g + 1) * per_group; ++e) {
      const float s = selection_score(layer, probs, e);
      if (s > a) {
        b = a;
        a = s;
      } else if (s > b) {
        b = s;
      }
    }
    return static_cast<float>(static_cast<double>(a) + static_cast<double>(b));
  };
  uint64_t chosen = 0;
  for (uint32_t j = 0; j < cfg.n_group_used; ++j) {
    int32_t best = -1;
    float best_score = 0;
    for (uint32_t g = 0; g < n_groups; ++g) {
      if (chosen >> g & 1) continue;
      const float s = group_score(g);
      if (best < 0 || s > best_score) {
        best = static_cast<int32_t>(g);
        best_score = s;
      }
    }
    chosen |= uint64_t{1} << best;
  }
  return chosen;
}

void select_experts(const ModelConfig& cfg, const LayerWeights& layer, float* probs,
                    uint32_t n_expert, uint32_t k, int32_t* ids, float* weights) {
  if (layer.ffn_gate_inp_b.present()) {
    const float* b = layer.ffn_gate_inp_b.f32();
    for (uint32_t e = 0; e < n_expert; ++e) probs[e] += b[e];
  }
  switch (cfg.gating) {
    case GatingType::kSoftmax:
      softmax(probs, n_expert);
      break;
    case GatingType::kSigmoid:
      for (uint32_t e = 0; e < n_expert; ++e) probs[e] = 1.0f / (1.0f + std::exp(-probs[e]));
      break;
    case GatingType::kSoftmaxTopK:
      break;  // top-k on the logits themselves
  }

  // Top-k by selection score among the experts of the selected groups: the repeated argmax, ties
  // to the lower index. First in one pass (an insertion into the best k so far, scores descending;
  // an expert moves ahead only on a strictly greater score, so equal ones keep index order): the
  // same picks in the same order, without k passes over every expert. A NaN score, whose
  // comparisons decide the argmax's picks, or fewer than k selectable, takes the argmax loop.
  const uint64_t groups = selected_groups(cfg, layer, probs);
  const uint32_t per_group = cfg.n_expert_groups > 1 ? n_expert / cfg.n_expert_groups : n_expert;
  constexpr uint32_t kMaxInsert = 64;
  float best[kMaxInsert];
  uint32_t n_best = 0;
  bool nan = false;
  if (k <= kMaxInsert) {
    for (uint32_t e = 0; e < n_expert && !nan; ++e) {
      if (!(groups >> (e / per_group) & 1)) continue;
      const float s = selection_score(layer, probs, e);
      nan = std::isnan(s);
      if (nan || (n_best == k && !(s > best[k - 1]))) continue;
      uint32_t p = n_best < k ? n_best++ : k - 1;  // full: the last one drops out
      for (; p > 0 && s > best[p - 1]; --p) {
        best[p] = best[p - 1];
        ids[p] = ids[p - 1];
      }
      best[p] = s;
      ids[p] = static_cast<int32_t>(e);
    }
  }
  const bool inserted = k <= kMaxInsert && !nan && n_best == k;
  for (uint32_t j = 0; j < k && !inserted; ++j) {
    int32_t best = -1;
    float best_score = 0;
    for (uint32_t e = 0; e < n_expert; ++e) {
      if (!(groups >> (e / per_group) & 1)) continue;
      bool taken = false;
      for (uint32_t i = 0; i < j; ++i) taken |= ids[i] == int32_t(e);
      if (taken) continue;
      const float s = selection_score(layer, probs, e);
      if (best < 0 || s > best_score) {
        best = static_cast<int32_t>(e);
        best_score = s;
      }
    }
    STRATA_ASSERT(best >= 0, "top-{}: only {} experts selectable", k, j);
    ids[j] = best;
  }

  // Weights from the unbiased probabilities.
  for (uint32_t j = 0; j < k; ++j) weights[j] = probs[ids[j]];
  if (cfg.gating == GatingType::kSoftmaxTopK) softmax(weights, k);
  if (cfg.norm_topk_weights) {
    // ggml_sum_rows sums in double; llama.cpp clamps the sum away from 0 before dividing.
    double sum = 0.0;
    for (uint32_t j = 0; j < k; ++j) sum += static_cast<double>(weights[j]);
    const float s = std::max(static_cast<float>(sum), 6.103515625e-5f);
    for (uint32_t j = 0; j < k; ++j) weights[j] /= s;
  }
  if (cfg.expert_weights_scale != 1.0f)
    for (uint32_t j = 0; j < k; ++j) weights[j] *= cfg.expert_weights_scale;
}

}  // namespace strata::engine
