// GGUF metadata keys and tensor names, as llama.cpp spells them, in two tables. Nothing else in
// strata spells a key or tensor name; tiers/ and placement/ only see TensorId and expert indices.
// Exercised by tests/test_model_config.cpp (every table row resolves on the fixtures).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

namespace strata::engine {

// Metadata keys. "{arch}" in a pattern is replaced by general.architecture.
enum class Key {
  kArchitecture,
  kVocabSize,
  kContextLength,
  kEmbeddingLength,
  kBlockCount,
  kFeedForwardLength,        // dense FFN width; scalar or per-layer array
  kExpertFeedForwardLength,  // width of one routed expert
  kExpertCount,
  kExpertUsedCount,
  kHeadCount,    // scalar or per-layer array
  kHeadCountKv,  // scalar or per-layer array
  kKeyLength,
  kValueLength,
  kRmsEps,
  kRopeDimensionCount,
  kRopeFreqBase,
  kRopeScalingType,
  kTokenizerTokens,
  // Second-batch architectures (deepseek2, glm4moe, olmoe, gpt-oss); all optional unless the
  // architecture's loader says otherwise.
  kLeadingDenseBlockCount,         // first N layers have a dense FFN
  kExpertSharedCount,              // always-on shared experts (their width is n_ff_exp × count)
  kExpertSharedFeedForwardLength,  // qwen2moe: the shared expert's own width
  kEmbeddingScale,                 // granitemoe: token embeddings × this
  kResidualScale,         // granitemoe: attention and FFN outputs × this before the residual
  kLogitScale,            // granitemoe: logits ÷ this
  kAttentionScale,        // granitemoe: the kq scale (instead of 1/sqrt(head dim))
  kLayerNormEps,          // dbrx: LayerNorm epsilon (its norms are LayerNorms)
  kClampKqv,              // dbrx: q, k and v clamped to [-c, c] after the projection
  kExpertWeightsScale,    // routed weights × this (0 or 1 = none)
  kExpertWeightsNorm,     // renormalize the k routed weights to sum 1
  kExpertGatingFunc,      // 1 softmax, 2 sigmoid, 3 softmax over the selected k (llama.cpp enum)
  kExpertGroupCount,      // group-limited routing: contiguous groups of experts
  kExpertGroupUsedCount,  // groups kept per token
  kNextnPredictLayers,    // trailing multi-token-prediction layers counted in block_count
  kQLoraRank,             // MLA: query low-rank width (absent on V2-Lite: plain attn_q)
  kKvLoraRank,            // MLA: compressed KV latent width
  kKeyLengthMla,          // MLA: per-head q/k width before absorption (nope + rope)
  kValueLengthMla,        // MLA: per-head v width after decompression
  kSlidingWindow,         // sliding-window attention width (gpt-oss: on even layers)
  kRopeFreqBaseSwa,       // RoPE base of the sliding-window layers (default: freq_base)
  kRopeScalingFactor,
  kRopeScaleLinear,  // older spelling of the scaling factor
  kRopeScalingAttnFactor,
  kRopeScalingOrigCtx,
  kRopeScalingYarnLogMul,  // DeepSeek: 0.1 × mscale_all_dim as the converter writes it
  kRopeScalingYarnExtFactor,
  kRopeScalingYarnAttnFactor,
  kRopeScalingYarnBetaFast,
  kRopeScalingYarnBetaSlow,
  kAttentionOutputScale,    // grok: the scores' scale inside its tanh cap
  kAttnLogitSoftcapping,    // grok: the cap c of c·tanh(scale · q·k)
  kFinalLogitSoftcapping,   // grok-2: logits capped to c·tanh(logits / c)
  kInterleaveMoeLayerStep,  // ernie4_5-moe: every N-th layer after the dense lead is MoE
  kCount,                   // not a key: the table size
};

struct KeySpec {
  Key key;
  std::string_view pattern;
};

inline constexpr KeySpec kKeyTable[] = {
    {Key::kArchitecture, "general.architecture"},
    {Key::kVocabSize, "{arch}.vocab_size"},
    {Key::kContextLength, "{arch}.context_length"},
    {Key::kEmbeddingLength, "{arch}.embedding_length"},
    {Key::kBlockCount, "{arch}.block_count"},
    {Key::kFeedForwardLength, "{arch}.feed_forward_length"},
    {Key::kExpertFeedForwardLength, "{arch}.expert_feed_forward_length"},
    {Key::kExpertCount, "{arch}.expert_count"},
    {Key::kExpertUsedCount, "{arch}.expert_used_count"},
    {Key::kHeadCount, "{arch}.attention.head_count"},
    {Key::kHeadCountKv, "{arch}.attention.head_count_kv"},
    {Key::kKeyLength, "{arch}.attention.key_length"},
    {Key::kValueLength, "{arch}.attention.value_length"},
    {Key::kRmsEps, "{arch}.attention.layer_norm_rms_epsilon"},
    {Key::kRopeDimensionCount, "{arch}.rope.dimension_count"},
    {Key::kRopeFreqBase, "{arch}.rope.freq_base"},
    {Key::kRopeScalingType, "{arch}.rope.scaling.type"},
    {Key::kTokenizerTokens, "tokenizer.ggml.tokens"},
    {Key::kLeadingDenseBlockCount, "{arch}.leading_dense_block_count"},
    {Key::kExpertSharedCount, "{arch}.expert_shared_count"},
    {Key::kExpertSharedFeedForwardLength, "{arch}.expert_shared_feed_forward_length"},
    {Key::kEmbeddingScale, "{arch}.embedding_scale"},
    {Key::kResidualScale, "{arch}.residual_scale"},
    {Key::kLogitScale, "{arch}.logit_scale"},
    {Key::kAttentionScale, "{arch}.attention.scale"},
    {Key::kLayerNormEps, "{arch}.attention.layer_norm_epsilon"},
    {Key::kClampKqv, "{arch}.attention.clamp_kqv"},
    {Key::kExpertWeightsScale, "{arch}.expert_weights_scale"},
    {Key::kExpertWeightsNorm, "{arch}.expert_weights_norm"},
    {Key::kExpertGatingFunc, "{arch}.expert_gating_func"},
    {Key::kExpertGroupCount, "{arch}.expert_group_count"},
    {Key::kExpertGroupUsedCount, "{arch}.expert_group_used_count"},
    {Key::kNextnPredictLayers, "{arch}.nextn_predict_layers"},
    {Key::kQLoraRank, "{arch}.attention.q_lora_rank"},
    {Key::kKvLoraRank, "{arch}.attention.kv_lora_rank"},
    {Key::kKeyLengthMla, "{arch}.attention.key_length_mla"},
    {Key::kValueLengthMla, "{arch}.attention.value_length_mla"},
    {Key::kSlidingWindow, "{arch}.attention.sliding_window"},
    {Key::kRopeFreqBaseSwa, "{arch}.rope.freq_base_swa"},
    {Key::kRopeScalingFactor, "{arch}.rope.scaling.factor"},
    {Key::kRopeScaleLinear, "{arch}.rope.scale_linear"},
    {Key::kRopeScalingAttnFactor, "{arch}.rope.scaling.attn_factor"},
    {Key::kRopeScalingOrigCtx, "{arch}.rope.scaling.original_context_length"},
    {Key::kRopeScalingYarnLogMul, "{arch}.rope.scaling.yarn_log_multiplier"},
    {Key::kRopeScalingYarnExtFactor, "{arch}.rope.scaling.yarn_ext_factor"},
    {Key::kRopeScalingYarnAttnFactor, "{arch}.rope.scaling.yarn_attn_factor"},
    {Key::kRopeScalingYarnBetaFast, "{arch}.rope.scaling.yarn_beta_fast"},
    {Key::kRopeScalingYarnBetaSlow, "{arch}.rope.scaling.yarn_beta_slow"},
    {Key::kAttentionOutputScale, "{arch}.attention.output_scale"},
    {Key::kAttnLogitSoftcapping, "{arch}.attn_logit_softcapping"},
    {Key::kFinalLogitSoftcapping, "{arch}.final_logit_softcapping"},
    {Key::kInterleaveMoeLayerStep, "{arch}.interleave_moe_layer_step"},
};
static_assert(std::size(kKeyTable) == static_cast<size_t>(Key::kCount));

// Each table row sits at its enum's index, so lookups are an index.
constexpr bool key_table_ordered() {
  for (size_t i = 0; i < std::size(kKeyTable); ++i)
    if (static_cast<size_t>(kKeyTable[i].key) != i) return false;
  return true;
}
static_assert(key_table_ordered());

// Replaces the one "{...}" placeholder in pattern by value.
inline std::string fill_pattern(std::string_view pattern, std::string_view value) {
  const size_t open = pattern.find('{');
  if (open == std::string_view::npos) return std::string(pattern);
  const size_t close = pattern.find('}', open);
  std::string out(pattern.substr(0, open));
  out += value;
  out += pattern.substr(close + 1);
  return out;
}

// The full key for an architecture, e.g. key_name(Key::kBlockCount, "qwen3moe") ==
// "qwen3moe.block_count".
inline std::string key_name(Key key, std::string_view arch) {
  return fill_pattern(kKeyTable[static_cast<size_t>(key)].pattern, arch);
}

// Tensors. Per-layer patterns carry "{layer}".
enum class TensorId {
  kTokenEmbd,
  kOutputNorm,
  kOutput,
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOut,
  kAttnQNorm,
  kAttnKNorm,
  kFfnNorm,
  kFfnGateInp,
  kFfnGateExps,
  kFfnUpExps,
  kFfnDownExps,
  kFfnGate,
  kFfnUp,
  kFfnDown,
  // Second-batch architectures.
  kAttnQBias,  // glm4moe, gpt-oss
  kAttnKBias,
  kAttnVBias,
  kAttnOutBias,   // gpt-oss
  kAttnSinks,     // gpt-oss: one learned softmax-denominator logit per head
  kPostAttnNorm,  // glm4moe, gpt-oss: the pre-FFN norm under its llama.cpp name
  kAttnQA,        // MLA (deepseek2)
  kAttnQANorm,
  kAttnQB,
  kAttnKvAMqa,
  kAttnKvANorm,
  kAttnKB,
  kAttnVB,
  kAttnKvB,          // MLA before absorption (legacy files); detected to refuse them by name
  kFfnGateInpBias,   // gpt-oss router bias
  kFfnExpProbsB,     // DeepSeek-V3 / GLM-4.5 selection bias (added to the gate for top-k only)
  kFfnGateExpsBias,  // gpt-oss per-expert biases {n_ff, n_expert} / {n_embd, n_expert}
  kFfnUpExpsBias,
  kFfnDownExpsBias,
  kFfnGateShexp,  // shared expert: a resident dense FFN added to every token's MoE output
  kFfnUpShexp,
  kFfnDownShexp,
  kFfnGateInpShexp,  // qwen2moe: the shared expert's sigmoid gate {n_embd} (one logit per token)
  kAttnQkv,          // dbrx: q, k and v fused {n_embd, n_q + 2 n_kv} (bound as three row slices)
  kAttnOutNorm,      // dbrx: the pre-FFN norm under its llama.cpp name
  kAttnNormBias,     // phimoe: the norms' biases (RMSNorm · w + b) and the head's bias
  kFfnNormBias,
  kOutputNormBias,
  kOutputBias,
  kRopeFreqs,         // llama / granitemoe (Llama 3.1): RoPE frequency divisors [n_rot / 2]
  kRopeFactorsLong,   // phimoe (LongRoPE): divisors for contexts beyond the original length
  kRopeFactorsShort,  // ... and within it
  kFfnNormExps,       // arctic: the routed experts' own norm (of the layer's input)
  kLayerOutNorm,      // grok: the MoE output's norm before the residual (attn_output_norm: the
                      // attention output's)
  kFfnPostNorm,       // grok (newer files): the same norm under its other name
  kCount,             // not a tensor: the table size
};

struct TensorSpec {
  TensorId id;
  std::string_view pattern;
  bool per_layer;
  // [n_expert, rows, cols] stacks of routed experts: the unit tiers/ moves, one slice per expert.
  bool stacked_experts;
};

inline constexpr TensorSpec kTensorTable[] = {
    {TensorId::kTokenEmbd, "token_embd.weight", false, false},
    {TensorId::kOutputNorm, "output_norm.weight", false, false},
    {TensorId::kOutput, "output.weight", false, false},
    {TensorId::kAttnNorm, "blk.{layer}.attn_norm.weight", true, false},
    {TensorId::kAttnQ, "blk.{layer}.attn_q.weight", true, false},
    {TensorId::kAttnK, "blk.{layer}.attn_k.weight", true, false},
    {TensorId::kAttnV, "blk.{layer}.attn_v.weight", true, false},
    {TensorId::kAttnOut, "blk.{layer}.attn_output.weight", true, false},
    {TensorId::kAttnQNorm, "blk.{layer}.attn_q_norm.weight", true, false},
    {TensorId::kAttnKNorm, "blk.{layer}.attn_k_norm.weight", true, false},
    {TensorId::kFfnNorm, "blk.{layer}.ffn_norm.weight", true, false},
    {TensorId::kFfnGateInp, "blk.{layer}.ffn_gate_inp.weight", true, false},
    {TensorId::kFfnGateExps, "blk.{layer}.ffn_gate_exps.weight", true, true},
    {TensorId::kFfnUpExps, "blk.{layer}.ffn_up_exps.weight", true, true},
    {TensorId::kFfnDownExps, "blk.{layer}.ffn_down_exps.weight", true, true},
    {TensorId::kFfnGate, "blk.{layer}.ffn_gate.weight", true, false},
    {TensorId::kFfnUp, "blk.{layer}.ffn_up.weight", true, false},
    {TensorId::kFfnDown, "blk.{layer}.ffn_down.weight", true, false},
    {TensorId::kAttnQBias, "blk.{layer}.attn_q.bias", true, false},
    {TensorId::kAttnKBias, "blk.{layer}.attn_k.bias", true, false},
    {TensorId::kAttnVBias, "blk.{layer}.attn_v.bias", true, false},
    {TensorId::kAttnOutBias, "blk.{layer}.attn_output.bias", true, false},
    {TensorId::kAttnSinks, "blk.{layer}.attn_sinks.weight", true, false},
    {TensorId::kPostAttnNorm, "blk.{layer}.post_attention_norm.weight", true, false},
    {TensorId::kAttnQA, "blk.{layer}.attn_q_a.weight", true, false},
    {TensorId::kAttnQANorm, "blk.{layer}.attn_q_a_norm.weight", true, false},
    {TensorId::kAttnQB, "blk.{layer}.attn_q_b.weight", true, false},
    {TensorId::kAttnKvAMqa, "blk.{layer}.attn_kv_a_mqa.weight", true, false},
    {TensorId::kAttnKvANorm, "blk.{layer}.attn_kv_a_norm.weight", true, false},
    {TensorId::kAttnKB, "blk.{layer}.attn_k_b.weight", true, false},
    {TensorId::kAttnVB, "blk.{layer}.attn_v_b.weight", true, false},
    {TensorId::kAttnKvB, "blk.{layer}.attn_kv_b.weight", true, false},
    {TensorId::kFfnGateInpBias, "blk.{layer}.ffn_gate_inp.bias", true, false},
    {TensorId::kFfnExpProbsB, "blk.{layer}.exp_probs_b.bias", true, false},
    {TensorId::kFfnGateExpsBias, "blk.{layer}.ffn_gate_exps.bias", true, false},
    {TensorId::kFfnUpExpsBias, "blk.{layer}.ffn_up_exps.bias", true, false},
    {TensorId::kFfnDownExpsBias, "blk.{layer}.ffn_down_exps.bias", true, false},
    {TensorId::kFfnGateShexp, "blk.{layer}.ffn_gate_shexp.weight", true, false},
    {TensorId::kFfnUpShexp, "blk.{layer}.ffn_up_shexp.weight", true, false},
    {TensorId::kFfnDownShexp, "blk.{layer}.ffn_down_shexp.weight", true, false},
    {TensorId::kFfnGateInpShexp, "blk.{layer}.ffn_gate_inp_shexp.weight", true, false},
    {TensorId::kAttnQkv, "blk.{layer}.attn_qkv.weight", true, false},
    {TensorId::kAttnOutNorm, "blk.{layer}.attn_output_norm.weight", true, false},
    {TensorId::kAttnNormBias, "blk.{layer}.attn_norm.bias", true, false},
    {TensorId::kFfnNormBias, "blk.{layer}.ffn_norm.bias", true, false},
    {TensorId::kOutputNormBias, "output_norm.bias", false, false},
    {TensorId::kOutputBias, "output.bias", false, false},
    {TensorId::kRopeFreqs, "rope_freqs.weight", false, false},
    {TensorId::kRopeFactorsLong, "rope_factors_long.weight", false, false},
    {TensorId::kRopeFactorsShort, "rope_factors_short.weight", false, false},
    {TensorId::kFfnNormExps, "blk.{layer}.ffn_norm_exps.weight", true, false},
    {TensorId::kLayerOutNorm, "blk.{layer}.layer_output_norm.weight", true, false},
    {TensorId::kFfnPostNorm, "blk.{layer}.post_ffw_norm.weight", true, false},
};
static_assert(std::size(kTensorTable) == static_cast<size_t>(TensorId::kCount));

constexpr bool tensor_table_ordered() {
  for (size_t i = 0; i < std::size(kTensorTable); ++i)
    if (static_cast<size_t>(kTensorTable[i].id) != i) return false;
  return true;
}
static_assert(tensor_table_ordered());

inline const TensorSpec& tensor_spec(TensorId id) {
  return kTensorTable[static_cast<size_t>(id)];
}
// The tensor's name in the file; layer is ignored for global tensors.
inline std::string tensor_name(TensorId id, int layer = -1) {
  const TensorSpec& spec = tensor_spec(id);
  return spec.per_layer ? fill_pattern(spec.pattern, std::to_string(layer))
                        : std::string(spec.pattern);
}

}  // namespace strata::engine
