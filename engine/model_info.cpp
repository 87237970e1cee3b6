// GGUF model summary (see model_info.h): header-only, so inspecting a 17 GB file costs one mmap
// and a parse of its metadata. Tested by tests/test_inspect.cpp and tests/test_arch_config.cpp
// (the engine's architecture details).
#include "engine/model_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "engine/chat_template.h"
#include "engine/model_config.h"
#include "engine/names.h"
#include "engine/reasoning.h"
#include "engine/tool_calls.h"
#include "io/check.h"

namespace strata::engine {
namespace {

// How llama.cpp rotates each architecture's heads (llama_model_rope_type); GGUF has no key for it.
constexpr std::string_view kNormRope[] = {
    "llama",      "llama4",    "deci",         "baichuan", "starcoder", "internlm2",
    "minicpm",    "xverse",    "command-r",    "cohere2",  "olmo",      "arctic",
    "deepseek",   "deepseek2", "chatglm",      "glm4",     "granite",   "granitemoe",
    "bailingmoe", "ernie4_5",  "ernie4_5-moe", "arcee",    "smollm3"};
constexpr std::string_view kNeoxRope[] = {
    "falcon", "grok",        "dbrx",    "stablelm",   "qwen",     "qwen2",      "qwen2moe",
    "qwen3",  "qwen3moe",    "olmo2",   "olmoe",      "phi2",     "phi3",       "phimoe",
    "gemma",  "gemma2",      "gemma3",  "starcoder2", "gptneox",  "exaone",     "minicpm3",
    "dots1",  "hunyuan-moe", "gpt-oss", "glm4moe",    "nemotron", "minimax-m2", "bailingmoe2"};

std::string rope_type_of(std::string_view arch) {
  for (auto a : kNormRope)
    if (a == arch) return "norm";
  for (auto a : kNeoxRope)
    if (a == arch) return "neox";
  return "?";
}

// "blk.12.ffn_up_exps.weight" -> (12, "ffn_up_exps.weight"); nullopt for global tensors.
std::optional<std::pair<int, std::string_view>> split_layer(std::string_view name) {
  constexpr std::string_view kBlk = "blk.";
  if (name.substr(0, kBlk.size()) != kBlk) return std::nullopt;
  name.remove_prefix(kBlk.size());
  int layer = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (ec != std::errc() || end == name.data() || end == name.data() + name.size() || *end != '.' ||
      layer < 0 || layer > 100000)
    return std::nullopt;
  return std::pair{layer, name.substr(end - name.data() + 1)};
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

// Old Mixtral GGUFs keep one tensor per expert: "ffn_gate.3.weight". Returns the expert index.
std::optional<int> per_expert_index(std::string_view rest) {
  for (std::string_view p : {"ffn_gate.", "ffn_up.", "ffn_down."}) {
    if (!starts_with(rest, p)) continue;
    std::string_view tail = rest.substr(p.size());
    int e = 0;
    const auto [end, ec] = std::from_chars(tail.data(), tail.data() + tail.size(), e);
    const std::string_view after(end, static_cast<size_t>(tail.data() + tail.size() - end));
    if (ec == std::errc() && end != tail.data() && after == ".weight") return e;
  }
  return std::nullopt;
}

std::string escape_head(const std::string& s, size_t max_chars) {
  std::string out;
  for (size_t i = 0; i < s.size() && out.size() < max_chars; ++i) {
    if (s[i] == '\n')
      out += "\\n";
    else if (s[i] == '\t')
      out += "\\t";
    else
      out += s[i];
  }
  if (out.size() < s.size()) out += "...";
  return out;
}

std::string commas(uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string s;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

std::string mib(uint64_t bytes) {
  const double m = static_cast<double>(bytes) / (1024.0 * 1024.0);
  return m >= 1024 ? fmt::format("{:.2f} GiB", m / 1024) : fmt::format("{:.2f} MiB", m);
}

nlohmann::ordered_json value_json(const io::GgufValue& v) {
  if (const auto* s = v.as_string()) return *s;
  if (const auto* b = v.as_bool()) return *b;
  if (const auto* a = v.as_array()) {
    auto arr = nlohmann::ordered_json::array();
    for (const auto& item : a->items) arr.push_back(value_json(item));
    return arr;
  }
  if (v.is_integer()) {
    if (auto i = v.as_int()) return *i;
    if (auto u = v.as_uint()) return *u;
  }
  if (auto d = v.as_double()) return *d;
  return nullptr;
}

std::string token_text(const io::GgufFile& f, std::optional<int64_t> id) {
  const io::GgufArray* tokens = f.get_array_opt("tokenizer.ggml.tokens");
  if (!id || !tokens || *id < 0 || static_cast<uint64_t>(*id) >= tokens->items.size()) return {};
  const std::string* s = tokens->items[static_cast<size_t>(*id)].as_string();
  return s ? *s : std::string();
}

std::optional<int64_t> int_key(const io::GgufFile& f, std::string_view key) {
  const io::GgufValue* v = f.find(key);
  return v ? v->as_int() : std::nullopt;
}

TokenizerInfo summarize_tokenizer(const io::GgufFile& f) {
  TokenizerInfo t;
  const io::GgufValue* model = f.find("tokenizer.ggml.model");
  if (!model || !model->as_string()) return t;
  t.present = true;
  t.model = *model->as_string();
  if (const auto* pre = f.find("tokenizer.ggml.pre"); pre && pre->as_string())
    t.pre = *pre->as_string();
  if (const auto* a = f.get_array_opt("tokenizer.ggml.tokens")) t.n_tokens = a->items.size();
  if (const auto* a = f.get_array_opt("tokenizer.ggml.merges")) t.n_merges = a->items.size();
  if (const auto* a = f.get_array_opt("tokenizer.ggml.token_type"))
    for (const auto& v : a->items) t.n_control += v.as_int() == 3;
  t.bos = int_key(f, "tokenizer.ggml.bos_token_id");
  t.eos = int_key(f, "tokenizer.ggml.eos_token_id");
  t.pad = int_key(f, "tokenizer.ggml.padding_token_id");
  t.unk = int_key(f, "tokenizer.ggml.unknown_token_id");
  t.bos_text = token_text(f, t.bos);
  t.eos_text = token_text(f, t.eos);
  if (const auto* v = f.find("tokenizer.ggml.add_bos_token"); v && v->as_bool())
    t.add_bos = *v->as_bool();
  if (const auto* v = f.find("tokenizer.ggml.add_eos_token"); v && v->as_bool())
    t.add_eos = *v->as_bool();
  if (const auto* v = f.find("tokenizer.chat_template"); v && v->as_string()) {
    const std::string& tmpl = *v->as_string();
    t.has_chat_template = true;
    t.chat_family = chat_template_family(tmpl);
    t.chat_template_chars = tmpl.size();
    t.chat_template_head = escape_head(tmpl, 60);
    if (const std::optional<ChatFamily> family = detect_chat_family(tmpl)) {
      bool think_tokens = false;
      if (const auto* a = f.get_array_opt("tokenizer.ggml.tokens")) {
        bool open = false, close = false;
        for (const auto& v : a->items) {
          open = open || (v.as_string() && *v.as_string() == "<think>");
          close = close || (v.as_string() && *v.as_string() == "</think>");
        }
        think_tokens = open && close;
      }
      if (*family == ChatFamily::kGptOss) {
        t.reasoning = reasoning_format_name(ReasoningFormat::kHarmony);
      } else if (think_tokens) {
        t.reasoning = reasoning_format_name(ReasoningFormat::kThinkTags);
        t.no_think_switch = !no_think_text(tmpl).empty();
        t.prompt_opens_reasoning = !think_open_text(tmpl).empty();
      }
      t.tool_format = tool_format_name(tool_format(*family, tmpl));
    }
  }
  return t;
}

template <typename... Args>
void add_line(std::string& s, fmt::format_string<Args...> f, Args&&... args) {
  s += fmt::format(f, std::forward<Args>(args)...);
  s += '\n';
}

std::string_view kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::kMoe:
      return "moe";
    case LayerKind::kDense:
      return "dense";
    case LayerKind::kNoFfn:
      return "none";
  }
  return "?";
}

}  // namespace

const io::GgufValue* ModelInfo::hparam(std::string_view key) const {
  for (const auto& [k, v] : hparams)
    if (k == key) return &v;
  return nullptr;
}

std::string chat_template_family(const std::string& tmpl) {
  auto has = [&](std::string_view s) { return tmpl.find(s) != std::string::npos; };
  // The order matters, as in llama.cpp's detection: several families share markers.
  if (has("<|im_start|>")) return "chatml";
  if (has("[INST]")) return "mistral/llama2";
  if (has("<|start|>") && has("<|channel|>")) return "gpt-oss";
  if (has("<|assistant|>") && has("<|end|>")) return "phi3";
  if (has("[gMASK]<sop>")) return "chatglm4";
  if (has("<|assistant|>") && has("<|user|>")) return "glmedge";
  if (has("<start_of_turn>")) return "gemma";
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return "llama3";
  if (has("<\xef\xbd\x9cUser\xef\xbd\x9c>") && has("<\xef\xbd\x9c"
                                                   "Assistant\xef\xbd\x9c>"))
    return "deepseek3";
  return "custom";
}

ModelInfo summarize_model(const io::GgufFile& f) {
  ModelInfo info;
  info.path = f.path();
  info.file_size = f.file_size();
  if (f.split())
    for (const io::FilePart& part : f.parts()) info.shards.push_back(part.path);
  info.gguf_version = f.version();
  info.alignment = f.alignment();
  info.n_kv = f.metadata().size();
  if (auto a = f.get_string_opt("general.architecture")) info.arch = *a;
  if (auto n = f.get_string_opt("general.name")) info.name = *n;
  if (const auto* v = f.find("general.file_type")) info.file_type = v->as_uint();

  if (!info.arch.empty()) {
    const std::string prefix = info.arch + ".";
    for (const auto& kv : f.metadata())
      if (starts_with(kv.key, prefix))
        info.hparams.emplace_back(kv.key.substr(prefix.size()), kv.value);
    info.rope_type = rope_type_of(info.arch);
  }
  auto hp_uint = [&](std::string_view k) -> std::optional<uint64_t> {
    const io::GgufValue* v = info.hparam(k);
    return v ? v->as_uint() : std::nullopt;
  };
  info.head_dim = hp_uint("attention.key_length");
  if (!info.head_dim) {
    auto n_embd = hp_uint("embedding_length"), n_head = hp_uint("attention.head_count");
    if (n_embd && n_head && *n_head > 0) info.head_dim = *n_embd / *n_head;
  }

  info.tokenizer = summarize_tokenizer(f);
  try {
    const ModelConfig cfg = load_model_config(f);
    info.engine_summary = cfg.describe();
    info.arch_details = cfg.arch_details();
    // The RoPE divisor tensors the engine binds (weights.h rope_freq_factors()).
    const bool llama_graph = cfg.arch == Arch::kLlama || cfg.arch == Arch::kGraniteMoe;
    if (llama_graph && f.find_tensor(tensor_name(TensorId::kRopeFreqs)))
      info.arch_details.emplace_back("rope frequency factors", "rope_freqs (Llama 3.1), always");
    if (cfg.arch == Arch::kPhiMoe && f.find_tensor(tensor_name(TensorId::kRopeFactorsLong)))
      info.arch_details.emplace_back(
          "rope frequency factors",
          fmt::format("LongRoPE: the long set when the context exceeds {}, else the short set",
                      cfg.rope_n_ctx_orig()));
  } catch (const Error& e) {
    info.engine_error = e.what();
  }

  std::map<GgmlType, TypeStat> types;
  std::map<int, LayerInfo> layers;
  std::map<int, int> per_expert_max;  // old-style Mixtral: highest expert index per layer
  for (const auto& t : f.tensors()) {
    ++info.n_tensors;
    info.tensor_bytes += t.n_bytes;
    TypeStat& ts = types[t.type];
    ts.type = t.type;
    ++ts.count;
    ts.bytes += t.n_bytes;

    const auto split = split_layer(t.name);
    if (!split) continue;
    auto [layer_index, rest] = *split;
    LayerInfo& L = layers[layer_index];
    L.index = layer_index;
    if (starts_with(rest, "ffn_") && rest.find("_exps") != std::string_view::npos &&
        t.n_dims >= 2) {
      const uint64_t n_expert = t.ne[t.n_dims - 1];
      L.n_expert = static_cast<uint32_t>(n_expert);
      L.expert_bytes += t.n_bytes;
      ExpertSliceInfo* slice = rest == "ffn_gate_exps.weight"   ? &L.gate
                               : rest == "ffn_up_exps.weight"   ? &L.up
                               : rest == "ffn_down_exps.weight" ? &L.down
                                                                : nullptr;
      if (slice) {
        slice->present = true;
        slice->type = t.type;
        slice->bytes = n_expert ? t.n_bytes / n_expert : 0;
        slice->ne.assign(t.ne.begin(), t.ne.begin() + t.n_dims);
      }
    } else if (auto e = per_expert_index(rest)) {
      per_expert_max[layer_index] = std::max(per_expert_max[layer_index], *e);
      L.expert_bytes += t.n_bytes;
      ExpertSliceInfo* slice = starts_with(rest, "ffn_gate.") ? &L.gate
                               : starts_with(rest, "ffn_up.") ? &L.up
                                                              : &L.down;
      slice->present = true;
      slice->type = t.type;
      slice->bytes = t.n_bytes;
      slice->ne.assign(t.ne.begin(), t.ne.begin() + t.n_dims);
    } else if (rest.find("_shexp") != std::string_view::npos) {
      L.shared_expert_bytes += t.n_bytes;
    } else if (starts_with(rest, "ffn_gate.") || starts_with(rest, "ffn_up.") ||
               starts_with(rest, "ffn_down.")) {
      L.dense_ffn_bytes += t.n_bytes;
    } else {
      L.other_bytes += t.n_bytes;
    }
  }
  for (const auto& [l, e] : per_expert_max) layers[l].n_expert = static_cast<uint32_t>(e + 1);

  for (auto& [index, L] : layers) {
    if (L.expert_bytes > 0 && L.n_expert > 0) {
      L.kind = LayerKind::kMoe;
      L.bytes_per_expert = L.expert_bytes / L.n_expert;
      ++info.n_moe_layers;
    } else if (L.dense_ffn_bytes > 0 || L.shared_expert_bytes > 0) {
      L.kind = LayerKind::kDense;
      ++info.n_dense_layers;
    }
    info.expert_bytes += L.expert_bytes;
    info.shared_expert_bytes += L.shared_expert_bytes;
    info.max_n_expert = std::max(info.max_n_expert, L.n_expert);
    info.max_bytes_per_expert = std::max(info.max_bytes_per_expert, L.bytes_per_expert);
    info.layers.push_back(std::move(L));
  }
  info.n_layer = static_cast<uint32_t>(info.layers.size());
  info.dense_bytes = info.tensor_bytes - info.expert_bytes;
  for (const auto& [type, ts] : types) info.types.push_back(ts);
  std::stable_sort(info.types.begin(), info.types.end(),
                   [](const TypeStat& a, const TypeStat& b) { return a.bytes > b.bytes; });
  return info;
}

ModelInfo inspect_model(const std::string& path) {
  const io::GgufFile f = io::GgufFile::open(path);
  return summarize_model(f);
}

std::string format_model_info(const ModelInfo& m) {
  std::string s;
  add_line(s, "file         {}: {} ({} bytes), GGUF v{}, alignment {}, {} keys, {} tensors", m.path,
           mib(m.file_size), commas(m.file_size), m.gguf_version, m.alignment, m.n_kv, m.n_tensors);
  if (!m.shards.empty())
    add_line(s, "split        {} files (gguf-split), read as one: {} .. {}", m.shards.size(),
             m.shards.front(), m.shards.back());
  add_line(s, "model        {} \"{}\"{}", m.arch.empty() ? "(no general.architecture)" : m.arch,
           m.name, m.file_type ? fmt::format(", file_type {}", *m.file_type) : "");
  if (!m.arch.empty()) {
    add_line(s, "hparams      ({}.*)", m.arch);
    for (const auto& [k, v] : m.hparams) add_line(s, "  {:<36} {}", k, v.to_display(16));
    add_line(s, "  {:<36} {}", "rope type (by architecture)", m.rope_type);
    if (m.head_dim) add_line(s, "  {:<36} {}", "head dim", *m.head_dim);
  }
  if (!m.engine_error.empty()) {
    add_line(s, "engine       not runnable: {}", m.engine_error);
  } else if (!m.engine_summary.empty()) {
    add_line(s, "engine       {}", m.engine_summary);
    for (const auto& [k, v] : m.arch_details) add_line(s, "  {:<36} {}", k, v);
  }
  const TokenizerInfo& t = m.tokenizer;
  if (t.present) {
    add_line(s, "tokenizer    {}{}, {} tokens ({} control), {} merges", t.model,
             t.pre.empty() ? "" : " / " + t.pre, t.n_tokens, t.n_control, t.n_merges);
    std::string ids;
    auto id = [&](const char* label, std::optional<int64_t> v, const std::string& text) {
      if (!v) return;
      ids += fmt::format("{}{} {}", ids.empty() ? "" : ", ", label, *v);
      if (!text.empty()) ids += fmt::format(" '{}'", text);
    };
    id("bos", t.bos, t.bos_text);
    id("eos", t.eos, t.eos_text);
    id("pad", t.pad, "");
    id("unk", t.unk, "");
    if (t.add_bos) ids += fmt::format("{}add_bos {}", ids.empty() ? "" : ", ", *t.add_bos);
    if (t.add_eos) ids += fmt::format(", add_eos {}", *t.add_eos);
    if (!ids.empty()) add_line(s, "  {}", ids);
    if (t.has_chat_template) {
      add_line(s, "  chat template: {} ({} chars) \"{}\"", t.chat_family, t.chat_template_chars,
               t.chat_template_head);
      add_line(s, "  thinking: {}{}{}; function calling: {}", t.reasoning,
               t.no_think_switch ? " (THINK=off turns it off)" : "",
               t.prompt_opens_reasoning ? " (the prompt opens the block)" : "", t.tool_format);
    } else
      add_line(s, "  chat template: none");
  } else {
    add_line(s, "tokenizer    none");
  }
  add_line(s, "tensor types {:<6} {:>7} {:>16}", "type", "count", "bytes");
  for (const auto& ts : m.types)
    add_line(s, "             {:<6} {:>7} {:>16}", ggml_type_name(ts.type), ts.count,
             commas(ts.bytes));
  add_line(s, "layers       {} ({} MoE, {} dense); per expert up to {} bytes", m.n_layer,
           m.n_moe_layers, m.n_dense_layers, commas(m.max_bytes_per_expert));
  add_line(s, "  {:>5} {:<5} {:>7} {:>12}  {:<18} {:<18} {:<18} {:>10} {:>10}", "layer", "kind",
           "experts", "bytes/expert", "gate", "up", "down", "shared", "dense ffn");
  auto slice = [](const ExpertSliceInfo& e) {
    return e.present ? fmt::format("{} {}", ggml_type_name(e.type), commas(e.bytes)) : "-";
  };
  for (const auto& L : m.layers)
    add_line(s, "  {:>5} {:<5} {:>7} {:>12}  {:<18} {:<18} {:<18} {:>10} {:>10}", L.index,
             kind_name(L.kind), L.n_expert, commas(L.bytes_per_expert), slice(L.gate), slice(L.up),
             slice(L.down), commas(L.shared_expert_bytes), commas(L.dense_ffn_bytes));
  const double frac =
      m.tensor_bytes ? 100.0 * static_cast<double>(m.expert_bytes) / m.tensor_bytes : 0.0;
  add_line(s,
           "totals       routed experts {} ({:.1f}%), dense {} (incl. shared experts {}), all {}",
           mib(m.expert_bytes), frac, mib(m.dense_bytes), mib(m.shared_expert_bytes),
           mib(m.tensor_bytes));
  return s;
}

nlohmann::ordered_json model_info_json(const ModelInfo& m) {
  using J = nlohmann::ordered_json;
  J j;
  j["file"] = {{"path", m.path},           {"size", m.file_size}, {"gguf_version", m.gguf_version},
               {"alignment", m.alignment}, {"n_kv", m.n_kv},      {"n_tensors", m.n_tensors}};
  if (!m.shards.empty()) j["file"]["shards"] = m.shards;
  j["architecture"] = m.arch;
  j["name"] = m.name;
  j["file_type"] = m.file_type ? J(*m.file_type) : J(nullptr);
  J hp = J::object();
  for (const auto& [k, v] : m.hparams) hp[k] = value_json(v);
  j["hparams"] = hp;
  j["rope_type"] = m.rope_type;
  j["head_dim"] = m.head_dim ? J(*m.head_dim) : J(nullptr);
  J details = J::object();
  for (const auto& [k, v] : m.arch_details) details[k] = v;
  j["engine"] = {{"supported", m.engine_error.empty()},
                 {"summary", m.engine_summary},
                 {"error", m.engine_error},
                 {"details", details}};
  const TokenizerInfo& t = m.tokenizer;
  auto opt = [](const auto& o) { return o ? J(*o) : J(nullptr); };
  if (t.present) {
    j["tokenizer"] = {{"model", t.model},
                      {"pre", t.pre},
                      {"n_tokens", t.n_tokens},
                      {"n_control", t.n_control},
                      {"n_merges", t.n_merges},
                      {"bos", opt(t.bos)},
                      {"bos_text", t.bos_text},
                      {"eos", opt(t.eos)},
                      {"eos_text", t.eos_text},
                      {"pad", opt(t.pad)},
                      {"unk", opt(t.unk)},
                      {"add_bos", opt(t.add_bos)},
                      {"add_eos", opt(t.add_eos)},
                      {"chat_template",
                       t.has_chat_template ? J{{"family", t.chat_family},
                                               {"chars", t.chat_template_chars},
                                               {"head", t.chat_template_head},
                                               {"reasoning", t.reasoning},
                                               {"no_think_switch", t.no_think_switch},
                                               {"prompt_opens_reasoning", t.prompt_opens_reasoning},
                                               {"tool_format", t.tool_format}}
                                           : J(nullptr)}};
  } else {
    j["tokenizer"] = nullptr;
  }
  J types = J::array();
  for (const auto& ts : m.types)
    types.push_back({{"type", ggml_type_name(ts.type)}, {"count", ts.count}, {"bytes", ts.bytes}});
  j["tensor_types"] = types;
  auto slice = [](const ExpertSliceInfo& e) {
    return e.present ? J{{"type", ggml_type_name(e.type)}, {"bytes", e.bytes}, {"ne", e.ne}}
                     : J(nullptr);
  };
  J layers = J::array();
  for (const auto& L : m.layers)
    layers.push_back({{"index", L.index},
                      {"kind", kind_name(L.kind)},
                      {"n_expert", L.n_expert},
                      {"bytes_per_expert", L.bytes_per_expert},
                      {"gate", slice(L.gate)},
                      {"up", slice(L.up)},
                      {"down", slice(L.down)},
                      {"expert_bytes", L.expert_bytes},
                      {"shared_expert_bytes", L.shared_expert_bytes},
                      {"dense_ffn_bytes", L.dense_ffn_bytes},
                      {"other_bytes", L.other_bytes}});
  j["layers"] = layers;
  j["totals"] = {
      {"tensor_bytes", m.tensor_bytes}, {"expert_bytes", m.expert_bytes},
      {"dense_bytes", m.dense_bytes},   {"shared_expert_bytes", m.shared_expert_bytes},
      {"n_moe_layers", m.n_moe_layers}, {"n_dense_layers", m.n_dense_layers},
      {"max_n_expert", m.max_n_expert}, {"max_bytes_per_expert", m.max_bytes_per_expert}};
  return j;
}

}  // namespace strata::engine
