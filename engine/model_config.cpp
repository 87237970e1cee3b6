// Fills ModelConfig from GGUF metadata for qwen3moe, llama (Mixtral), deepseek2, glm4moe, olmoe,
// gpt-oss, qwen2moe, granitemoe, deepseek, dbrx, phimoe and arctic. Defaults follow llama.cpp's
// hparams loader. Exercised by tests/test_model_config.cpp and tests/test_arch_config.cpp.
#include "engine/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "engine/names.h"
#include "io/check.h"

namespace strata::engine {
namespace {

// Reads keys of one architecture; every error names the full key.
class KeyReader {
 public:
  KeyReader(const io::GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  std::string name(Key key) const { return key_name(key, arch_); }

  uint32_t u32(Key key) const { return checked_u32(name(key), file_.get_uint(name(key))); }
  uint32_t u32_or(Key key, uint32_t dflt) const {
    const auto v = file_.get_uint_opt(name(key));
    return v ? checked_u32(name(key), *v) : dflt;
  }
  // key, else fallback (read only when key is absent: a file may lack the fallback).
  uint32_t u32_or_key(Key key, Key fallback) const { return has(key) ? u32(key) : u32(fallback); }
  float f32(Key key) const { return static_cast<float>(file_.get_double(name(key))); }
  float f32_or(Key key, float dflt) const {
    const auto v = file_.get_double_opt(name(key));
    return v ? static_cast<float>(*v) : dflt;
  }
  bool has(Key key) const { return file_.find(name(key)) != nullptr; }
  bool bool_or(Key key, bool dflt) const {
    const auto v = file_.get_bool_opt(name(key));
    return v ? *v : dflt;
  }
  std::string str_or(Key key, std::string dflt) const {
    const auto v = file_.get_string_opt(name(key));
    return v ? *v : dflt;
  }

  // A key that is either one number for every layer or an array of n_layer numbers.
  std::vector<uint32_t> per_layer(Key key, uint32_t n_layer) const {
    const std::string k = name(key);
    const io::GgufValue* value = file_.find(k);
    if (const io::GgufArray* arr = value ? value->as_array() : nullptr) {
      if (arr->items.size() != n_layer)
        fail(ErrorKind::kBadFile, "{}: key {} has {} entries, expected one per layer ({})",
             file_.path(), k, arr->items.size(), n_layer);
      std::vector<uint32_t> out;
      for (const io::GgufValue& v : arr->items) {
        const auto u = v.as_uint();
        if (!u) fail(ErrorKind::kBadFile, "{}: key {} holds a non-integer entry", file_.path(), k);
        out.push_back(checked_u32(k, *u));
      }
      return out;
    }
    return std::vector<uint32_t>(n_layer, u32(key));
  }
  std::vector<uint32_t> per_layer_or(Key key, uint32_t n_layer, uint32_t dflt) const {
    return has(key) ? per_layer(key, n_layer) : std::vector<uint32_t>(n_layer, dflt);
  }

 private:
  uint32_t checked_u32(const std::string& key, uint64_t v) const {
    if (v > UINT32_MAX)
      fail(ErrorKind::kBadFile, "{}: key {} = {} is too large", file_.path(), key, v);
    return static_cast<uint32_t>(v);
  }
  const io::GgufFile& file_;
  std::string arch_;
};

void require(bool ok, const io::GgufFile& file, const std::string& what) {
  if (!ok) fail(ErrorKind::kBadFile, "{}: bad model config: {}", file.path(), what);
}

}  // namespace

uint32_t ModelConfig::max_n_expert_used() const {
  uint32_t m = 0;
  for (uint32_t il = 0; il < n_layer; ++il) m = std::max(m, layer_n_expert_used(il));
  return m;
}
uint32_t ModelConfig::max_n_ff() const {
  uint32_t m = n_ff_shexp;
  for (uint32_t il = 0; il < n_layer; ++il) m = std::max(m, layer_n_ff(il));
  return m;
}
uint32_t ModelConfig::max_n_embd_q() const {
  uint32_t m = 0;
  for (uint32_t il = 0; il < n_layer; ++il)
    m = std::max({m, n_embd_q(il), n_head(il) * head_dim_v});
  return m;
}
uint32_t ModelConfig::max_n_embd_kv() const {
  uint32_t m = 0;
  for (uint32_t il = 0; il < n_layer; ++il) m = std::max({m, n_embd_k_gqa(il), n_embd_v_gqa(il)});
  return m;
}

namespace {

const char* gating_name(GatingType g) {
  switch (g) {
    case GatingType::kSoftmax:
      return "softmax";
    case GatingType::kSigmoid:
      return "sigmoid";
    case GatingType::kSoftmaxTopK:
      return "softmax over the top-k logits";
  }
  return "?";
}

const char* scaling_name(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::kNone:
      return "none";
    case RopeScalingType::kLinear:
      return "linear";
    case RopeScalingType::kYarn:
      return "yarn";
  }
  return "?";
}

}  // namespace

std::string ModelConfig::describe() const {
  std::string s = fmt::format(
      "{}: {} layers, n_embd {}, {}/{} heads x {}, rope {} base {:g} ({} dims), "
      "eps {:g}, vocab {}",
      arch_name, n_layer, n_embd, n_head(0), n_head_kv(0), head_dim_k,
      rope_type == RopeType::kNeox ? "neox" : "norm", rope_freq_base, n_rot, norm_eps, n_vocab);
  if (has_mla_projections())
    s += fmt::format(", MLA{} q_lora {} kv_lora {} head {}/{}", is_mla() ? "" : " (decompressed)",
                     n_lora_q, n_lora_kv, head_dim_k_mla, head_dim_v_mla);
  if (n_expert > 0)
    s += fmt::format(", {} experts top-{} x {}", n_expert, n_expert_used, n_ff_exp);
  else
    s += fmt::format(", dense ffn {}", n_ff(0));
  if (n_layer_dense_lead > 0) s += fmt::format(", {} dense lead", n_layer_dense_lead);
  if (n_ff_shexp > 0) s += fmt::format(", shared expert x {}", n_ff_shexp);
  if (gating != GatingType::kSoftmax) s += fmt::format(", {} gating", gating_name(gating));
  if (n_expert_groups > 1) s += fmt::format(", groups {}/{}", n_group_used, n_expert_groups);
  if (n_swa > 0) s += fmt::format(", swa {}", n_swa);
  if (residual_scale != 0.0f || embedding_scale != 0.0f || logit_scale != 0.0f)
    s += fmt::format(", scales embd {:g} resid {:g} logit {}", embedding_scale, residual_scale,
                     logit_multiplier != 0.0f ? fmt::format("x{:g}", logit_multiplier)
                                              : fmt::format("1/{:g}", logit_scale));
  if (attn_softcap > 0.0f) s += fmt::format(", score cap {:g}", attn_softcap);
  if (final_logit_softcap > 0.0f) s += fmt::format(", logit cap {:g}", final_logit_softcap);
  if (rope_scaling.type != RopeScalingType::kNone && rope.freq_scale != 1.0f)
    s += fmt::format(", rope {} x{:g}", scaling_name(rope_scaling.type), rope_scaling.factor);
  return s;
}

std::vector<std::pair<std::string, std::string>> ModelConfig::arch_details() const {
  std::vector<std::pair<std::string, std::string>> d;
  auto add = [&](std::string k, std::string v) { d.emplace_back(std::move(k), std::move(v)); };
  add("attention", is_mla()                ? "MLA (absorbed; cache holds [c ; k_pe])"
                   : has_mla_projections() ? "MLA (decompressed by attn_kv_b; cache holds K/V)"
                                           : "GQA");
  if (has_mla_projections()) {
    add("q_lora_rank", n_lora_q ? std::to_string(n_lora_q) : "0 (plain attn_q)");
    add("kv_lora_rank", std::to_string(n_lora_kv));
    add("head dim q/k (nope + rope)",
        fmt::format("{} ({} + {})", head_dim_k_mla, head_dim_k_mla - n_rot, n_rot));
    add("head dim v", std::to_string(head_dim_v_mla));
  }
  add("kv cache floats/token/layer", std::to_string(kv_k_width(0) + kv_v_width(0)));
  if (layer_norm) add("norms", "LayerNorm (no bias)");
  if (norm_bias) add("norms", "RMSNorm with bias (weight, then + bias); output head bias");
  if (clamp_kqv > 0) add("q/k/v clamp", fmt::format("[-{0:g}, {0:g}]", clamp_kqv));
  if (qk_norm)
    add("q/k norm", std::string(qk_norm_whole ? "RMSNorm over the whole projection" : "per head") +
                        (qk_norm_after_rope ? ", after RoPE" : ""));
  if (attn_sinks) add("attention sinks", "yes");
  if (n_swa > 0) {
    std::string layers;
    for (uint32_t il = 0; il < n_layer; ++il) layers += is_swa(il) ? 'S' : 'F';
    add("sliding window", fmt::format("{} (layers {}: S = window, F = full)", n_swa, layers));
  }
  add("kq scale", fmt::format("{:g}", kq_scale));
  if (attn_softcap > 0.0f)
    add("score cap", fmt::format("{0:g}·tanh(kq scale · q·k) before the softmax", attn_softcap));
  if (post_norms)
    add("post norms", "RMSNorm of the attention and MoE outputs before the residual (optional)");
  if (embedding_scale != 0.0f) add("embedding scale", fmt::format("{:g}", embedding_scale));
  if (residual_scale != 0.0f) add("residual scale", fmt::format("{:g}", residual_scale));
  if (logit_scale != 0.0f) add("logit scale", fmt::format("1/{:g}", logit_scale));
  if (logit_multiplier != 0.0f) add("logit scale", fmt::format("{:g}", logit_multiplier));
  if (final_logit_softcap > 0.0f)
    add("logit cap", fmt::format("{0:g}·tanh(logits / {0:g})", final_logit_softcap));
  add("rope", fmt::format("{} on {} dims, base {:g}",
                          rope_type == RopeType::kNeox ? "neox" : "norm", n_rot, rope_freq_base));
  if (rope.ext_factor == 0.0f && rope.attn_factor != 1.0f)
    add("rope magnitude", fmt::format("{:g} (rope.scaling.attn_factor)", rope.attn_factor));
  if (rope_scaling.type != RopeScalingType::kNone && rope.freq_scale != 1.0f) {
    add("rope scaling",
        fmt::format("{} factor {:g}, original context {}", scaling_name(rope_scaling.type),
                    rope_scaling.factor, rope_n_ctx_orig()));
    if (rope.ext_factor != 0.0f)
      add("yarn",
          fmt::format("beta_fast {:g} beta_slow {:g}, correction dims [{:g}, {:g}], "
                      "rotation magnitude {:g}, log multiplier {:g}",
                      rope_scaling.beta_fast, rope_scaling.beta_slow, rope.corr_low, rope.corr_high,
                      rope.attn_factor * (1.0f + 0.1f * std::log(1.0f / rope.freq_scale)),
                      rope_scaling.yarn_log_mul));
  }
  if (n_expert > 0) {
    add("gating", gating_name(gating));
    add("routed experts", fmt::format("{} top-{} x {}", n_expert, n_expert_used, n_ff_exp));
    if (n_expert_groups > 1)
      add("expert groups",
          fmt::format("{} of {} kept (top-2 sum per group)", n_group_used, n_expert_groups));
    add("weights", fmt::format("{}normalized, scale {:g}", norm_topk_weights ? "" : "not ",
                               expert_weights_scale));
    if (ffn_combine_scale != 0.0f)
      add("dense FFN beside the experts",
          fmt::format("1 x {} (resident, GELU); (MoE + dense) x {:g}", n_ff_shexp,
                      ffn_combine_scale));
    else if (moe_beside_dense)
      add("dense residual FFN",
          fmt::format("1 x {} (resident) on the attention output; the routed experts read the "
                      "layer's input (ffn_norm_exps)",
                      n_ff_shexp));
    else if (shared_expert_gate)
      add("shared expert",
          fmt::format("1 x {} (resident), gated by sigmoid(ffn_gate_inp_shexp)", n_ff_shexp));
    else if (n_ff_shexp > 0)
      add("shared experts", fmt::format("{} x {} (resident)", std::max(n_expert_shared, 1u),
                                        n_ff_shexp / std::max(n_expert_shared, 1u)));
    if (n_layer_dense_lead > 0)
      add("leading dense layers", fmt::format("{} (ffn {})", n_layer_dense_lead, n_ff(0)));
    add("expert activation",
        activation == FfnActivation::kSwigluOai ? "SwiGLU-OAI (clamp 7, alpha 1.702, up + 1)"
        : activation == FfnActivation::kGeluGlu ? "GELU-GLU (ggml's fp16-table tanh GELU)"
                                                : "SiLU-GLU");
  }
  if (n_layer_nextn > 0) add("MTP layers (skipped)", std::to_string(n_layer_nextn));
  return d;
}

ModelConfig load_model_config(const io::GgufFile& file) {
  ModelConfig c;
  c.arch_name = file.get_string(key_name(Key::kArchitecture, ""));
  static constexpr std::pair<std::string_view, Arch> kArchs[] = {
      {"qwen3moe", Arch::kQwen3Moe},
      {"llama", Arch::kLlama},
      {"deepseek2", Arch::kDeepseek2},
      {"glm4moe", Arch::kGlm4Moe},
      {"olmoe", Arch::kOlmoe},
      {"gpt-oss", Arch::kGptOss},
      {"qwen2moe", Arch::kQwen2Moe},
      {"granitemoe", Arch::kGraniteMoe},
      {"deepseek", Arch::kDeepseek},
      {"dbrx", Arch::kDbrx},
      {"phimoe", Arch::kPhiMoe},
      {"arctic", Arch::kArctic},
      {"grok", Arch::kGrok},
      {"minimax-m2", Arch::kMinimaxM2},
      {"dots1", Arch::kDots1},
      {"bailingmoe2", Arch::kBailingMoe2},
      {"ernie4_5-moe", Arch::kErnie45Moe},
      {"hunyuan-moe", Arch::kHunyuanMoe},
  };
  const auto* found = std::find_if(std::begin(kArchs), std::end(kArchs),
                                   [&](const auto& a) { return a.first == c.arch_name; });
  if (found == std::end(kArchs))
    fail(ErrorKind::kUnsupported,
         "{}: architecture '{}' is not supported (qwen3moe, qwen2moe, llama, granitemoe, "
         "deepseek, deepseek2, glm4moe, olmoe, gpt-oss, dbrx, phimoe, arctic, grok, minimax-m2, "
         "dots1, bailingmoe2, ernie4_5-moe, hunyuan-moe)",
         file.path(), c.arch_name);
  c.arch = found->second;
  const KeyReader kr(file, c.arch_name);

  c.n_embd = kr.u32(Key::kEmbeddingLength);
  const uint32_t n_block = kr.u32(Key::kBlockCount);
  c.n_ctx_train = kr.u32(Key::kContextLength);
  require(c.n_embd > 0 && n_block > 0, file, "embedding_length and block_count must be > 0");
  // Per-layer tables are sized from block_count before any tensor is checked: a damaged count
  // must be an error here, not a huge allocation (llama.cpp allows 512 layers;
  // tests/data/meta_bad/block_count_huge.bin).
  constexpr uint32_t kMaxBlocks = 4096;
  require(n_block <= kMaxBlocks, file,
          fmt::format("block_count {} is more than {} layers", n_block, kMaxBlocks));
  // Multi-token-prediction layers are counted in block_count but are not part of the forward
  // pass (llama.cpp loads and skips them); they are only used for speculative decoding.
  c.n_layer_nextn = kr.u32_or(Key::kNextnPredictLayers, 0);
  require(c.n_layer_nextn < n_block, file,
          fmt::format("{} = {} leaves no layers of block_count {}",
                      kr.name(Key::kNextnPredictLayers), c.n_layer_nextn, n_block));
  c.n_layer = n_block - c.n_layer_nextn;

  if (kr.has(Key::kVocabSize)) {
    c.n_vocab = kr.u32(Key::kVocabSize);
  } else {
    c.n_vocab =
        static_cast<uint32_t>(file.get_array(key_name(Key::kTokenizerTokens, "")).items.size());
  }
  require(c.n_vocab > 0, file, "empty vocabulary");

  c.n_head_arr = kr.per_layer(Key::kHeadCount, n_block);
  c.n_head_kv_arr = kr.per_layer_or(Key::kHeadCountKv, n_block, 0);
  c.n_head_arr.resize(c.n_layer);
  c.n_head_kv_arr.resize(c.n_layer);
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    if (c.n_head_kv_arr[il] == 0) c.n_head_kv_arr[il] = c.n_head_arr[il];  // llama.cpp: MHA
    require(c.n_head_arr[il] > 0 && c.n_head_arr[il] % c.n_head_kv_arr[il] == 0, file,
            fmt::format("layer {}: head_count {} is not a positive multiple of head_count_kv {}",
                        il, c.n_head_arr[il], c.n_head_kv_arr[il]));
  }
  const uint32_t default_head_dim = c.n_embd / c.n_head_arr[0];
  c.head_dim_k = kr.u32_or(Key::kKeyLength, default_head_dim);
  c.head_dim_v = kr.u32_or(Key::kValueLength, default_head_dim);
  require(c.head_dim_k > 0 && c.head_dim_v > 0, file, "head dimension must be > 0");
  c.layer_norm = c.arch == Arch::kDbrx;
  c.norm_eps = kr.f32(c.layer_norm ? Key::kLayerNormEps : Key::kRmsEps);
  c.n_rot = kr.u32_or(Key::kRopeDimensionCount, c.head_dim_k);
  require(c.n_rot % 2 == 0 && c.n_rot <= c.head_dim_k, file,
          fmt::format("rope.dimension_count {} must be even and <= head dim {}", c.n_rot,
                      c.head_dim_k));
  c.rope_freq_base = kr.f32_or(Key::kRopeFreqBase, 10000.0f);
  c.rope_freq_base_swa = kr.f32_or(Key::kRopeFreqBaseSwa, c.rope_freq_base);

  // RoPE scaling; llama.cpp's default type is linear (a factor alone means linear scaling).
  RopeScaling& rs = c.rope_scaling;
  const std::string scaling = kr.str_or(Key::kRopeScalingType, "linear");
  if (scaling == "none") {
    rs.type = RopeScalingType::kNone;
  } else if (scaling == "linear") {
    rs.type = RopeScalingType::kLinear;
  } else if (scaling == "yarn") {
    rs.type = RopeScalingType::kYarn;
  } else {
    fail(ErrorKind::kUnsupported, "{}: {} = '{}' is not supported (none, linear, yarn)",
         file.path(), kr.name(Key::kRopeScalingType), scaling);
  }
  rs.factor = kr.f32_or(Key::kRopeScalingFactor, kr.f32_or(Key::kRopeScaleLinear, 0.0f));
  require(rs.factor >= 0.0f && std::isfinite(rs.factor), file,
          fmt::format("{} = {:g} must be >= 0", kr.name(Key::kRopeScalingFactor), rs.factor));
  if (rs.factor == 0.0f) rs.factor = 1.0f;
  rs.n_ctx_orig = kr.u32_or(Key::kRopeScalingOrigCtx, 0);
  rs.attn_factor = kr.f32_or(Key::kRopeScalingAttnFactor, 1.0f);
  require(std::isfinite(rs.attn_factor) && rs.attn_factor > 0.0f, file,
          fmt::format("{} = {:g} must be finite and > 0 (it scales every rotated q and k)",
                      kr.name(Key::kRopeScalingAttnFactor), rs.attn_factor));
  rs.beta_fast = kr.f32_or(Key::kRopeScalingYarnBetaFast, 32.0f);
  rs.beta_slow = kr.f32_or(Key::kRopeScalingYarnBetaSlow, 1.0f);
  rs.ext_factor = kr.f32_or(Key::kRopeScalingYarnExtFactor, -1.0f);
  rs.yarn_attn_factor = kr.f32_or(Key::kRopeScalingYarnAttnFactor, -1.0f);

  c.n_expert = kr.u32_or(Key::kExpertCount, 0);
  c.gating = GatingType::kSoftmax;
  c.norm_topk_weights = true;
  c.activation = FfnActivation::kSiluGlu;
  const bool has_q_norm = file.find_tensor(tensor_name(TensorId::kAttnQNorm, 0)) != nullptr;
  float attention_scale = 0;  // granitemoe's attention.scale (0: 1/sqrt(head dim))
  // Required expert count and top-k, experts feed_forward_length wide unless the file says
  // expert_feed_forward_length (llama.cpp's olmoe, dbrx, phimoe, arctic and granitemoe graphs).
  const auto read_experts_ffn_wide = [&] {
    c.n_expert = kr.u32(Key::kExpertCount);
    c.n_expert_used = kr.u32(Key::kExpertUsedCount);
    c.n_ff_exp = kr.u32_or_key(Key::kExpertFeedForwardLength, Key::kFeedForwardLength);
  };
  // dots1's and bailingmoe2's FFN (deepseek's layout): leading dense layers, shared experts
  // n_ff_exp × count wide, sigmoid routing whose selection adds exp_probs_b where the file has it,
  // top-k weights renormalized and scaled as the file says. expert_gating_func is required
  // (llama.cpp aborts without it).
  const auto read_sigmoid_ffn = [&] {
    c.n_expert = kr.u32(Key::kExpertCount);
    c.n_expert_used = kr.u32(Key::kExpertUsedCount);
    c.n_ff_exp = kr.u32(Key::kExpertFeedForwardLength);
    c.n_expert_shared = kr.u32(Key::kExpertSharedCount);
    c.n_layer_dense_lead = kr.u32_or(Key::kLeadingDenseBlockCount, 0);
    const uint32_t g = kr.u32(Key::kExpertGatingFunc);
    if (g != 2)
      fail(ErrorKind::kUnsupported, "{}: {} = {} is not supported for {} (2: sigmoid)", file.path(),
           kr.name(Key::kExpertGatingFunc), g, c.arch_name);
    c.gating = GatingType::kSigmoid;
    c.norm_topk_weights = kr.bool_or(Key::kExpertWeightsNorm, false);
  };
  // ERNIE 4.5's and Hunyuan-A13B's: softmax routing, the top-k weights renormalized, a shared
  // expert expert_shared_feed_forward_length wide where the key is set.
  const auto read_softmax_shared_ffn = [&] {
    c.n_expert = kr.u32(Key::kExpertCount);
    c.n_expert_used = kr.u32(Key::kExpertUsedCount);
    c.n_ff_exp = kr.u32(Key::kExpertFeedForwardLength);
    c.n_ff_shexp = kr.u32_or(Key::kExpertSharedFeedForwardLength, 0);
    c.gating = GatingType::kSoftmax;
    c.norm_topk_weights = true;
  };
  // llama.cpp's graphs that assert RoPE over the whole head.
  const auto require_whole_head_rope = [&] {
    require(c.n_rot == c.head_dim_k, file,
            fmt::format("rope.dimension_count {} must equal the head dim {} (llama.cpp's {})",
                        c.n_rot, c.head_dim_k, c.arch_name));
  };
  switch (c.arch) {
    case Arch::kQwen3Moe:
      c.qk_norm = true;
      c.rope_type = RopeType::kNeox;
      c.n_expert = kr.u32(Key::kExpertCount);
      c.n_expert_used = kr.u32(Key::kExpertUsedCount);
      c.n_ff_exp = kr.u32(Key::kExpertFeedForwardLength);
      break;
    case Arch::kLlama:
      c.qk_norm = false;
      c.rope_type = RopeType::kNorm;
      if (c.n_expert > 0) {
        c.n_expert_used = kr.u32(Key::kExpertUsedCount);
        // Mixtral's experts use feed_forward_length (llama.cpp); a newer file may say it directly.
        c.n_ff_exp = kr.u32_or_key(Key::kExpertFeedForwardLength, Key::kFeedForwardLength);
      }
      break;
    case Arch::kDeepseek2: {
      c.attention = AttentionKind::kMla;
      c.rope_type = RopeType::kNorm;
      c.n_lora_q = kr.u32_or(Key::kQLoraRank, 0);
      c.n_lora_kv = kr.u32(Key::kKvLoraRank);
      if (kr.has(Key::kKeyLengthMla)) {
        c.head_dim_k_mla = kr.u32(Key::kKeyLengthMla);
        c.head_dim_v_mla = kr.u32(Key::kValueLengthMla);
        require(c.head_dim_k == c.n_lora_kv + c.n_rot && c.head_dim_v == c.n_lora_kv, file,
                fmt::format("MLA cache widths key_length {} / value_length {} must be "
                            "kv_lora_rank + rope dims ({}) / kv_lora_rank ({})",
                            c.head_dim_k, c.head_dim_v, c.n_lora_kv + c.n_rot, c.n_lora_kv));
        for (uint32_t il = 0; il < c.n_layer; ++il)
          require(c.n_head_kv_arr[il] == 1, file,
                  fmt::format("layer {}: MLA needs head_count_kv 1, the file says {}", il,
                              c.n_head_kv_arr[il]));
      } else {
        // Converted before absorption: key/value_length are the per-head widths and every head
        // has its own K and V (llama.cpp reads these files the same way).
        c.attention = AttentionKind::kMlaDecompressed;
        c.head_dim_k_mla = c.head_dim_k;
        c.head_dim_v_mla = c.head_dim_v;
        for (uint32_t il = 0; il < c.n_layer; ++il)
          require(c.n_head_kv_arr[il] == c.n_head_arr[il], file,
                  fmt::format("layer {}: decompressed MLA needs head_count_kv = head_count {}, "
                              "the file says {}",
                              il, c.n_head_arr[il], c.n_head_kv_arr[il]));
      }
      require(c.n_rot > 0 && c.n_rot < c.head_dim_k_mla, file,
              fmt::format("rope.dimension_count {} must be in 1..{} (the per-head q/k width)",
                          c.n_rot, c.head_dim_k_mla - 1));
      c.n_expert = kr.u32(Key::kExpertCount);
      c.n_expert_used = kr.u32(Key::kExpertUsedCount);
      c.n_ff_exp = kr.u32(Key::kExpertFeedForwardLength);
      c.n_expert_shared = kr.u32(Key::kExpertSharedCount);
      c.n_layer_dense_lead = kr.u32_or(Key::kLeadingDenseBlockCount, 0);
      // Files without the key are DeepSeek-V2/V2.5: softmax (llama.cpp's compatibility default).
      const uint32_t g = kr.u32_or(Key::kExpertGatingFunc, 1);
      if (g == 2) {
        c.gating = GatingType::kSigmoid;
      } else if (g != 1) {
        fail(ErrorKind::kUnsupported, "{}: {} = {} is not supported for deepseek2 (1, 2)",
             file.path(), kr.name(Key::kExpertGatingFunc), g);
      }
      c.norm_topk_weights = kr.bool_or(Key::kExpertWeightsNorm, false);
      // The converter writes 0.1 × mscale_all_dim (llama.cpp divides it back).
      c.rope_scaling.yarn_log_mul = kr.f32_or(Key::kRopeScalingYarnLogMul, 0.0f) / 0.1f;
      break;
    }
    case Arch::kGlm4Moe: {
      c.qk_norm = has_q_norm;  // GLM-4.5 has them, GLM-4.5-Air does not
      c.rope_type = RopeType::kNeox;
      c.n_expert = kr.u32(Key::kExpertCount);
      c.n_expert_used = kr.u32(Key::kExpertUsedCount);
      c.n_ff_exp = kr.u32(Key::kExpertFeedForwardLength);
      c.n_expert_shared = kr.u32(Key::kExpertSharedCount);
      c.n_layer_dense_lead = kr.u32_or(Key::kLeadingDenseBlockCount, 0);
      const uint32_t g = kr.u32_or(Key::kExpertGatingFunc, 2);
      if (g == 1) {
        c.gating = GatingType::kSoftmax;
      } else if (g == 2) {
        c.gating = GatingType::kSigmoid;
      } else {
        fail(ErrorKind::kUnsupported, "{}: {} = {} is not supported for glm4moe (1, 2)",
             file.path(), kr.name(Key::kExpertGatingFunc), g);
      }
      c.norm_topk_weights = kr.bool_or(Key::kExpertWeightsNorm, false);
      break;
    }
    case Arch::kOlmoe:
      c.qk_norm = true;
      c.qk_norm_whole = true;
      c.rope_type = RopeType::kNeox;
      read_experts_ffn_wide();
      c.norm_topk_weights = false;
      break;
    case Arch::kGptOss:
      c.rope_type = RopeType::kNeox;
      c.attn_sinks = true;
      c.n_swa = kr.u32(Key::kSlidingWindow);
      require(c.n_swa > 0, file, fmt::format("{} must be > 0", kr.name(Key::kSlidingWindow)));
      c.n_expert = kr.u32(Key::kExpertCount);
      c.n_expert_used = kr.u32(Key::kExpertUsedCount);
      c.n_ff_exp = kr.u32(Key::kExpertFeedForwardLength);
      c.gating = GatingType::kSoftmaxTopK;
      c.norm_topk_weights = false;
      c.activation = FfnActivation::kSwigluOai;
      break;
    case Arch::kQwen2Moe:
      // llama.cpp: expert widths default to feed_forward_length / top-k and feed_forward_length.
      c.rope_type = RopeType::kNeox;
      c.n_expert = kr.u32(Key::kExpertCount);
      c.n_expert_used = kr.u32(Key::kExpertUsedCount);
      require(c.n_expert_used > 0, file,
              fmt::format("{} must be > 0", kr.name(Key::kExpertUsedCount)));
      c.n_ff_exp = kr.has(Key::kExpertFeedForwardLength)
                       ? kr.u32(Key::kExpertFeedForwardLength)
                       : kr.u32(Key::kFeedForwardLength) / c.n_expert_used;
      c.norm_topk_weights = false;
      c.n_expert_shared = 1;
      c.n_ff_shexp = kr.u32_or_key(Key::kExpertSharedFeedForwardLength, Key::kFeedForwardLength);
      require(c.n_ff_shexp > 0, file, "shared expert width must be > 0");
      c.shared_expert_gate = true;
      break;
    case Arch::kDeepseek:
      // DeepSeek-MoE (V1): llama's attention and RoPE, deepseek2's FFN layout (dense lead layers,
      // shared experts n_ff_exp x count wide), softmax top-k without renormalization. llama.cpp
      // requires expert_weights_scale but does not apply it (its scale_w is off for this graph).
      c.rope_type = RopeType::kNorm;
      c.n_expert = kr.u32(Key::kExpertCount);
      c.n_expert_used = kr.u32(Key::kExpertUsedCount);
      c.n_ff_exp = kr.u32(Key::kExpertFeedForwardLength);
      c.n_expert_shared = kr.u32(Key::kExpertSharedCount);
      c.n_layer_dense_lead = kr.u32(Key::kLeadingDenseBlockCount);
      (void)kr.f32(Key::kExpertWeightsScale);
      c.norm_topk_weights = false;
      break;
    case Arch::kDbrx:
      // llama.cpp: experts are feed_forward_length wide, top-k renormalized; clamp_kqv required.
      c.rope_type = RopeType::kNeox;
      read_experts_ffn_wide();
      c.clamp_kqv = kr.f32(Key::kClampKqv);
      require(std::isfinite(c.clamp_kqv) && c.clamp_kqv > 0.0f, file,
              fmt::format("{} = {:g} must be > 0", kr.name(Key::kClampKqv), c.clamp_kqv));
      break;
    case Arch::kPhiMoe:
      // llama.cpp's phi3 graph: biased RMSNorms, NEOX RoPE with the LongRoPE factor tensors,
      // experts feed_forward_length wide, softmax top-k renormalized; no sliding window (the
      // converter writes one, llama.cpp's phimoe loader does not read it).
      c.rope_type = RopeType::kNeox;
      c.norm_bias = true;
      c.kq_scale_on_q = true;
      read_experts_ffn_wide();
      break;
    case Arch::kArctic:
      // llama.cpp's arctic graph: llama attention (NORM RoPE), a dense FFN n_embd wide on the
      // attention's output and, beside it, the routed experts (feed_forward_length wide, softmax
      // top-k renormalized) on the layer's input; both added to the residual.
      c.rope_type = RopeType::kNorm;
      read_experts_ffn_wide();
      c.moe_beside_dense = true;
      c.n_expert_shared = 1;
      c.n_ff_shexp = c.n_embd;
      require_whole_head_rope();
      break;
    case Arch::kGrok: {
      // llama.cpp's grok graph: NEOX RoPE over the whole head, GELU experts (expert_ or
      // feed_forward_length wide), softmax top-k renormalized, RMSNorms on the attention and MoE
      // outputs. Its multipliers, Grok-1's values unless the file says (newer converters write
      // them): embeddings × embedding_scale (78.38367176906169), scores
      // cap·tanh(q·k · output_scale / cap) (0.08838834764831845, cap 30; kq scale 1), logits ×
      // logit_scale (0.5773502691896257, a multiplier here), then, Grok-2, capped by
      // final_logit_softcapping. Grok-2 also has a dense GELU FFN beside the experts
      // (ffn_gate/up/down, feed_forward_length wide): (MoE + dense) × √2/2.
      c.rope_type = RopeType::kNeox;
      read_experts_ffn_wide();
      c.activation = FfnActivation::kGeluGlu;
      c.embedding_scale = kr.f32_or(Key::kEmbeddingScale, 78.38367176906169f);
      c.logit_multiplier = kr.f32_or(Key::kLogitScale, 0.5773502691896257f);
      c.attn_softcap = kr.f32_or(Key::kAttnLogitSoftcapping, 30.0f);
      c.final_logit_softcap = kr.f32_or(Key::kFinalLogitSoftcapping, 0.0f);
      const float out_scale = kr.f32_or(Key::kAttentionOutputScale, 0.08838834764831845f);
      for (const auto& [key, v] : {std::pair{Key::kEmbeddingScale, c.embedding_scale},
                                   std::pair{Key::kLogitScale, c.logit_multiplier},
                                   std::pair{Key::kAttnLogitSoftcapping, c.attn_softcap},
                                   std::pair{Key::kAttentionOutputScale, out_scale}})
        require(std::isfinite(v) && v > 0.0f, file,
                fmt::format("{} = {:g} must be finite and > 0", kr.name(key), v));
      require(std::isfinite(c.final_logit_softcap) && c.final_logit_softcap >= 0.0f, file,
              fmt::format("{} = {:g} must be finite and >= 0 (0: none)",
                          kr.name(Key::kFinalLogitSoftcapping), c.final_logit_softcap));
      attention_scale = out_scale / c.attn_softcap;
      c.post_norms = true;
      if (!kr.has(Key::kRopeScalingYarnBetaFast)) c.rope_scaling.beta_fast = 8.0f;  // llama.cpp's
      if (file.find_tensor(tensor_name(TensorId::kFfnUp, 0)) != nullptr) {          // Grok-2
        c.n_expert_shared = 1;
        c.n_ff_shexp = kr.u32(Key::kFeedForwardLength);
        c.ffn_combine_scale = static_cast<float>(std::sqrt(2.0) / 2);
      }
      require(c.n_rot == c.head_dim_k && c.head_dim_k == c.head_dim_v, file,
              fmt::format("rope.dimension_count {} must equal the head dims {} / {} (llama.cpp's "
                          "grok)",
                          c.n_rot, c.head_dim_k, c.head_dim_v));
      break;
    }
    case Arch::kMinimaxM2: {
      // llama.cpp's minimax-m2 graph (MiniMax-M2, M2.1): q/k RMSNorms over the whole projection
      // (olmoe's), NEOX RoPE on each head's first rope.dimension_count dims, experts
      // expert_feed_forward_length wide, sigmoid routing whose selection adds exp_probs_b, top-k
      // weights renormalized (and × expert_weights_scale); no shared or dense layers. llama.cpp
      // aborts on a file without expert_gating_func: it is required here.
      c.qk_norm = true;
      c.qk_norm_whole = true;
      c.rope_type = RopeType::kNeox;
      c.n_expert = kr.u32(Key::kExpertCount);
      c.n_expert_used = kr.u32(Key::kExpertUsedCount);
      c.n_ff_exp = kr.u32(Key::kExpertFeedForwardLength);
      const uint32_t g = kr.u32(Key::kExpertGatingFunc);
      if (g != 2)
        fail(ErrorKind::kUnsupported, "{}: {} = {} is not supported for minimax-m2 (2: sigmoid)",
             file.path(), kr.name(Key::kExpertGatingFunc), g);
      c.gating = GatingType::kSigmoid;
      c.norm_topk_weights = true;
      break;
    }
    case Arch::kDots1:
      // llama.cpp's dots1 graph (dots.llm1): qwen3's per-head q/k RMSNorms and NEOX RoPE over the
      // whole head, the sigmoid FFN layout below.
      c.qk_norm = true;
      c.rope_type = RopeType::kNeox;
      read_sigmoid_ffn();
      require_whole_head_rope();
      break;
    case Arch::kBailingMoe2:
      // llama.cpp's bailingmoe2 graph (Ling-mini / Ling-flash 2.0, Ling-1T): one fused q/k/v
      // matrix, per-head q/k RMSNorms, NEOX RoPE on rope.dimension_count dims, the sigmoid FFN
      // layout below with the generic expert groups; the shared experts are
      // expert_shared_feed_forward_length (else the routed width) × count wide;
      // multi-token-prediction layers are skipped.
      c.qk_norm = true;
      c.rope_type = RopeType::kNeox;
      read_sigmoid_ffn();
      c.n_ff_shexp = kr.u32_or(Key::kExpertSharedFeedForwardLength, c.n_ff_exp) * c.n_expert_shared;
      break;
    case Arch::kErnie45Moe: {
      // llama.cpp's ernie4_5-moe graph (ERNIE-4.5-21B-A3B, ERNIE-4.5-300B-A47B): llama's
      // attention (RoPE over the whole head), leading dense layers, softmax routing whose
      // selection adds exp_probs_b where the file has it, the top-k weights renormalized (and
      // scaled as the file says), one shared expert expert_shared_feed_forward_length wide where
      // the key is set. Every layer after the dense lead is MoE: llama.cpp binds expert weights
      // for all of them, so interleave_moe_layer_step (required) must be 1.
      c.rope_type = RopeType::kNorm;
      read_softmax_shared_ffn();
      c.n_expert_shared = c.n_ff_shexp > 0 ? 1 : 0;
      c.n_layer_dense_lead = kr.u32_or(Key::kLeadingDenseBlockCount, 0);
      const uint32_t step = kr.u32(Key::kInterleaveMoeLayerStep);
      if (step != 1)
        fail(ErrorKind::kUnsupported,
             "{}: {} = {} is not supported (1: every layer after the dense lead is MoE, the "
             "only layout llama.cpp loads)",
             file.path(), kr.name(Key::kInterleaveMoeLayerStep), step);
      require_whole_head_rope();
      break;
    }
    case Arch::kHunyuanMoe:
      // llama.cpp's hunyuan-moe graph (Hunyuan-A13B): per-head q/k RMSNorms of the rotated q and
      // k (NEOX RoPE over the whole head), every layer MoE with softmax routing (top-k
      // renormalized, scaled as the file says) beside one shared expert
      // expert_shared_feed_forward_length (else feed_forward_length) wide.
      c.qk_norm = true;
      c.qk_norm_after_rope = true;
      c.rope_type = RopeType::kNeox;
      read_softmax_shared_ffn();
      if (c.n_ff_shexp == 0) c.n_ff_shexp = kr.per_layer_or(Key::kFeedForwardLength, n_block, 0)[0];
      c.n_expert_shared = 1;
      require_whole_head_rope();
      break;
    case Arch::kGraniteMoe: {
      // llama.cpp reads the four multipliers as required keys; experts are feed_forward_length
      // wide, their top-k weights renormalized (its llama graph).
      c.rope_type = RopeType::kNorm;
      read_experts_ffn_wide();
      c.embedding_scale = kr.f32(Key::kEmbeddingScale);
      c.residual_scale = kr.f32(Key::kResidualScale);
      c.logit_scale = kr.f32(Key::kLogitScale);
      attention_scale = kr.f32(Key::kAttentionScale);
      for (const auto& [key, v] : {std::pair{Key::kEmbeddingScale, c.embedding_scale},
                                   std::pair{Key::kResidualScale, c.residual_scale},
                                   std::pair{Key::kLogitScale, c.logit_scale},
                                   std::pair{Key::kAttentionScale, attention_scale}})
        require(std::isfinite(v) && v >= 0.0f, file,
                fmt::format("{} = {:g} must be finite and >= 0 (0: none)", kr.name(key), v));
      break;
    }
  }
  // 0 (absent) and 1 both mean "no scale" in llama.cpp.
  c.expert_weights_scale = kr.f32_or(Key::kExpertWeightsScale, 0.0f);
  if (c.expert_weights_scale == 0.0f || c.arch == Arch::kDeepseek) c.expert_weights_scale = 1.0f;
  require(std::isfinite(c.expert_weights_scale) && c.expert_weights_scale > 0.0f, file,
          fmt::format("{} = {:g} must be > 0", kr.name(Key::kExpertWeightsScale),
                      c.expert_weights_scale));

  // Sliding-window layers: llama.cpp's gpt-oss pattern 2 (even layers use the window).
  c.is_swa_arr.assign(c.n_layer, 0);
  if (c.n_swa > 0)
    for (uint32_t il = 0; il < c.n_layer; ++il) c.is_swa_arr[il] = il % 2 == 0;

  c.rope = resolve_rope(c.n_rot, c.rope_freq_base, c.n_ctx_train, c.rope_scaling,
                        c.arch == Arch::kDeepseek2);
  c.rope_swa = resolve_rope(c.n_rot, c.rope_freq_base_swa, c.n_ctx_train, c.rope_scaling,
                            c.arch == Arch::kDeepseek2);
  c.kq_scale = c.has_mla_projections()
                   ? mla_kq_scale(c.rope, c.rope_scaling.yarn_log_mul, c.head_dim_k_mla)
               : attention_scale != 0.0f ? attention_scale
                                         : 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));

  require(c.n_layer_dense_lead <= c.n_layer, file,
          fmt::format("leading_dense_block_count {} > block_count {}", c.n_layer_dense_lead,
                      c.n_layer));
  c.is_moe_arr.assign(c.n_layer, 0);
  for (uint32_t il = c.n_layer_dense_lead; il < c.n_layer; ++il) c.is_moe_arr[il] = c.n_expert > 0;
  if (c.n_expert > 0) {
    require(c.n_expert_used > 0 && c.n_expert_used <= c.n_expert, file,
            fmt::format("expert_used_count {} must be in 1..expert_count {}", c.n_expert_used,
                        c.n_expert));
    require(c.n_ff_exp > 0, file, "expert feed-forward length must be > 0");
    c.n_ff_arr = kr.per_layer_or(Key::kFeedForwardLength, n_block, 0);
    // Shared experts are n_expert_shared routed-expert widths unless the architecture says.
    if (c.n_ff_shexp == 0) c.n_ff_shexp = c.n_ff_exp * c.n_expert_shared;
    require(c.n_expert_shared == 0 || c.n_ff_shexp > 0, file, "shared expert width must be > 0");
    c.n_expert_groups = kr.u32_or(Key::kExpertGroupCount, 0);
    c.n_group_used = kr.u32_or(Key::kExpertGroupUsedCount, 0);
    if (c.n_expert_groups > 1) {
      const uint32_t per_group = c.n_expert / c.n_expert_groups;
      require(c.n_expert_groups <= 64, file,
              fmt::format("expert_group_count {} > 64 is not supported", c.n_expert_groups));
      require(c.n_expert % c.n_expert_groups == 0 && per_group >= 2, file,
              fmt::format("expert_count {} must split into expert_group_count {} groups of "
                          ">= 2 experts",
                          c.n_expert, c.n_expert_groups));
      require(c.n_group_used >= 1 && c.n_group_used <= c.n_expert_groups &&
                  c.n_expert_used <= c.n_group_used * per_group,
              file,
              fmt::format("expert_group_used_count {} must be in 1..{} and hold the top-{}",
                          c.n_group_used, c.n_expert_groups, c.n_expert_used));
    }
  } else {
    c.n_ff_arr = kr.per_layer(Key::kFeedForwardLength, n_block);
  }
  c.n_ff_arr.resize(c.n_layer);
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    if (!c.is_moe(il))
      require(c.n_ff(il) > 0, file, fmt::format("layer {}: feed_forward_length must be > 0", il));
  }
  return c;
}

}  // namespace strata::engine
