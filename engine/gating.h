// The router's gating functions: from one token's router logits to its gating probabilities, the
// selected experts and their weights, exactly as llama.cpp's build_moe_ffn computes them (softmax
// / sigmoid with the selection bias and group-limited top-k / softmax over the selected logits;
// renormalization; expert_weights_scale). Tested by tests/test_arch_gating.cpp and against the
// fixtures' MOER dumps by tests/test_arch_forward.cpp.
#pragma once

#include <cstdint>

#include "engine/model_config.h"
#include "engine/weights.h"

namespace strata::engine {

// One token. probs: [n_expert] in: the router logits W_gate_inp·x; out: the gating probabilities
// (llama.cpp's ffn_moe_probs: softmax, unbiased sigmoid, or the bias-added logits for gpt-oss).
// ids: [k] selected experts in selection-score-descending order (ties → lower index).
// weights: [k] the final multiplier of each selected expert's output.
void select_experts(const ModelConfig& cfg, const LayerWeights& layer, float* probs,
                    uint32_t n_expert, uint32_t k, int32_t* ids, float* weights);

// The score top-k selection ranks expert e by: probs[e] + exp_probs_b[e] (a selection bias:
// sigmoid gating's, ernie4_5-moe's softmax), else probs[e]. Exposed for the tests' near-tie
// margins.
inline float selection_score(const LayerWeights& layer, const float* probs, uint32_t e) {
  return layer.exp_probs_b.present() ? probs[e] + layer.exp_probs_b.f32()[e] : probs[e];
}

// Group-limited routing: bit g set when group g is among the n_group_used groups with the largest
// sum of their two best selection scores (all groups when groups are off).
uint64_t selected_groups(const ModelConfig& cfg, const LayerWeights& layer, const float* probs);

}  // namespace strata::engine
