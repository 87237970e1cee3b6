// Fills ModelConfig from GGUF metadata for qwen3moe and llama (Mixtral). Defaults follow
// llama.cpp's hparams loader. Exercised by tests/test_model_config.cpp.
#include "engine/model_config.h"

#include <fmt/format.h>

#include <algorithm>

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
  float f32(Key key) const { return static_cast<float>(file_.get_double(name(key))); }
  float f32_or(Key key, float dflt) const {
    const auto v = file_.get_double_opt(name(key));
    return v ? static_cast<float>(*v) : dflt;
  }
  bool has(Key key) const { return file_.find(name(key)) != nullptr; }

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
  uint32_t m = 0;
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

std::string ModelConfig::describe() const {
  std::string s = fmt::format(
      "{}: {} layers, n_embd {}, {}/{} heads x {}, rope {} base {:g} ({} dims), "
      "eps {:g}, vocab {}",
      arch_name, n_layer, n_embd, n_head(0), n_head_kv(0), head_dim_k,
      rope_type == RopeType::kNeox ? "neox" : "norm", rope_freq_base, n_rot, norm_eps, n_vocab);
  if (n_expert > 0)
    s += fmt::format(", {} experts top-{} x {}", n_expert, n_expert_used, n_ff_exp);
  else
    s += fmt::format(", dense ffn {}", n_ff(0));
  return s;
}

ModelConfig load_model_config(const io::GgufFile& file) {
  ModelConfig c;
  c.arch_name = file.get_string(key_name(Key::kArchitecture, ""));
  if (c.arch_name == "qwen3moe") {
    c.arch = Arch::kQwen3Moe;
  } else if (c.arch_name == "llama") {
    c.arch = Arch::kLlama;
  } else {
    fail(ErrorKind::kUnsupported, "{}: architecture '{}' is not supported (qwen3moe, llama)",
         file.path(), c.arch_name);
  }
  const KeyReader kr(file, c.arch_name);

  c.n_embd = kr.u32(Key::kEmbeddingLength);
  c.n_layer = kr.u32(Key::kBlockCount);
  c.n_ctx_train = kr.u32(Key::kContextLength);
  require(c.n_embd > 0 && c.n_layer > 0, file, "embedding_length and block_count must be > 0");

  if (kr.has(Key::kVocabSize)) {
    c.n_vocab = kr.u32(Key::kVocabSize);
  } else {
    c.n_vocab =
        static_cast<uint32_t>(file.get_array(key_name(Key::kTokenizerTokens, "")).items.size());
  }
  require(c.n_vocab > 0, file, "empty vocabulary");

  c.n_head_arr = kr.per_layer(Key::kHeadCount, c.n_layer);
  c.n_head_kv_arr = kr.per_layer_or(Key::kHeadCountKv, c.n_layer, 0);
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
  c.norm_eps = kr.f32(Key::kRmsEps);
  c.n_rot = kr.u32_or(Key::kRopeDimensionCount, c.head_dim_k);
  require(c.n_rot % 2 == 0 && c.n_rot <= c.head_dim_k, file,
          fmt::format("rope.dimension_count {} must be even and <= head dim {}", c.n_rot,
                      c.head_dim_k));
  c.rope_freq_base = kr.f32_or(Key::kRopeFreqBase, 10000.0f);
  if (kr.has(Key::kRopeScalingType)) {
    const std::string t = file.get_string(kr.name(Key::kRopeScalingType));
    if (t != "none")
      fail(ErrorKind::kUnsupported, "{}: {} = '{}' is not supported", file.path(),
           kr.name(Key::kRopeScalingType), t);
  }

  c.n_expert = kr.u32_or(Key::kExpertCount, 0);
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
        c.n_ff_exp = kr.u32_or(Key::kExpertFeedForwardLength, kr.u32(Key::kFeedForwardLength));
      }
      break;
  }
  c.gating = GatingType::kSoftmax;
  c.norm_topk_weights = true;
  c.activation = FfnActivation::kSiluGlu;

  c.is_moe_arr.assign(c.n_layer, c.n_expert > 0 ? 1 : 0);
  if (c.n_expert > 0) {
    require(c.n_expert_used > 0 && c.n_expert_used <= c.n_expert, file,
            fmt::format("expert_used_count {} must be in 1..expert_count {}", c.n_expert_used,
                        c.n_expert));
    require(c.n_ff_exp > 0, file, "expert feed-forward length must be > 0");
    c.n_ff_arr = kr.per_layer_or(Key::kFeedForwardLength, c.n_layer, 0);
  } else {
    c.n_ff_arr = kr.per_layer(Key::kFeedForwardLength, c.n_layer);
  }
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    if (!c.is_moe(il))
      require(c.n_ff(il) > 0, file, fmt::format("layer {}: feed_forward_length must be > 0", il));
  }
  return c;
}

}  // namespace strata::engine
