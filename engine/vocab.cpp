// Loads the tokenizer vocabulary from GGUF metadata the way llama.cpp's llama_vocab::load does:
// the same defaults per tokenizer model, the same pre-tokenizer flags, the same EOG heuristics.
// Exercised by tests/test_tokenizer.cpp.
#include "engine/vocab.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <set>

#include "engine/unicode.h"
#include "io/check.h"
#include "io/gguf.h"

namespace strata::engine {

namespace {

// GGUF keys read here.
constexpr std::string_view kKeyModel = "tokenizer.ggml.model";
constexpr std::string_view kKeyPre = "tokenizer.ggml.pre";
constexpr std::string_view kKeyTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kKeyScores = "tokenizer.ggml.scores";
constexpr std::string_view kKeyTokenType = "tokenizer.ggml.token_type";
constexpr std::string_view kKeyMerges = "tokenizer.ggml.merges";
constexpr std::string_view kKeyAddBos = "tokenizer.ggml.add_bos_token";
constexpr std::string_view kKeyAddEos = "tokenizer.ggml.add_eos_token";
constexpr std::string_view kKeyAddSep = "tokenizer.ggml.add_sep_token";
constexpr std::string_view kKeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix";
constexpr std::string_view kKeyChatTemplate = "tokenizer.chat_template";
constexpr std::string_view kKeyGeneralName = "general.name";

// gguf token types (tokenizer.ggml.token_type) -> attributes.
uint32_t attr_from_token_type(int64_t t) {
  switch (t) {
    case 1:
      return token_attr::kNormal;
    case 2:
      return token_attr::kUnknown;
    case 3:
      return token_attr::kControl;
    case 4:
      return token_attr::kUserDefined;
    case 5:
      return token_attr::kUnused;
    case 6:
      return token_attr::kByte;
    default:
      return token_attr::kUndefined;
  }
}

struct PreSpec {
  std::string_view name;
  PreType type;
  bool clean_spaces;   // detokenize removes " ," " ." ... (llama.cpp's clean_spaces)
  bool ignore_merges;  // a pre-token that is itself a token skips BPE
  bool add_bos;        // default before tokenizer.ggml.add_bos_token
  bool no_default_bos;
};

// tokenizer.ggml.pre values and what llama.cpp sets for each.
constexpr std::array kPreSpecs = {
    PreSpec{"default", PreType::kDefault, true, false, false, false},
    PreSpec{"llama3", PreType::kLlama3, true, true, true, false},
    PreSpec{"llama-v3", PreType::kLlama3, true, true, true, false},
    PreSpec{"llama-bpe", PreType::kLlama3, true, true, true, false},
    PreSpec{"falcon3", PreType::kLlama3, true, true, true, false},
    PreSpec{"falcon-h1", PreType::kLlama3, true, true, true, false},
    PreSpec{"pixtral", PreType::kLlama3, true, true, true, false},
    PreSpec{"dbrx", PreType::kLlama3, true, false, false, false},
    PreSpec{"smaug-bpe", PreType::kLlama3, true, false, false, false},
    PreSpec{"deepseek-coder", PreType::kDeepseekCoder, false, false, false, false},
    PreSpec{"deepseek-v3", PreType::kDeepseek3, false, false, false, false},
    PreSpec{"falcon", PreType::kFalcon, true, false, false, false},
    PreSpec{"mpt", PreType::kGpt2, true, false, false, false},
    PreSpec{"gpt-2", PreType::kGpt2, true, false, false, false},
    PreSpec{"phi-2", PreType::kGpt2, true, false, false, false},
    PreSpec{"olmo", PreType::kGpt2, true, false, false, false},
    PreSpec{"jais", PreType::kGpt2, true, false, false, false},
    PreSpec{"exaone4", PreType::kGpt2, true, false, false, false},
    PreSpec{"trillion", PreType::kGpt2, false, false, false, false},
    PreSpec{"starcoder", PreType::kStarcoder, true, false, false, false},
    PreSpec{"refact", PreType::kStarcoder, true, false, false, false},
    PreSpec{"command-r", PreType::kStarcoder, false, false, false, false},
    PreSpec{"smollm", PreType::kStarcoder, false, false, false, false},
    PreSpec{"codeshell", PreType::kStarcoder, true, false, false, false},
    PreSpec{"exaone", PreType::kStarcoder, true, false, false, false},
    PreSpec{"minerva-7b", PreType::kStarcoder, true, false, false, false},
    PreSpec{"qwen2", PreType::kQwen2, false, false, false, false},
    PreSpec{"deepseek-r1-qwen", PreType::kQwen2, false, false, false, false},
    PreSpec{"stablelm2", PreType::kQwen2, true, false, false, false},
    PreSpec{"megrez", PreType::kQwen2, true, false, false, false},
    PreSpec{"hunyuan", PreType::kQwen2, false, false, false, false},
    PreSpec{"grok-2", PreType::kQwen2, false, false, false, false},
    PreSpec{"solar-open", PreType::kQwen2, false, false, false, false},
    PreSpec{"glm4", PreType::kChatGlm4, true, false, false, true},
    PreSpec{"chatglm-bpe", PreType::kChatGlm4, true, false, false, true},
    PreSpec{"gpt-4o", PreType::kGpt4o, false, false, false, false},
    PreSpec{"llama4", PreType::kGpt4o, false, false, false, false},
    PreSpec{"minimax-m2", PreType::kGpt4o, false, false, false, false},
    PreSpec{"kimi-k2", PreType::kKimiK2, false, false, false, false},
    PreSpec{"bailingmoe", PreType::kBailingMoe, false, false, false, false},
    PreSpec{"bailingmoe2", PreType::kBailingMoe, false, false, false, false},
    PreSpec{"llada-moe", PreType::kBailingMoe, false, false, false, false},
    PreSpec{"tekken", PreType::kTekken, false, true, true, false},
    PreSpec{"bloom", PreType::kBloom, true, false, false, false},
    PreSpec{"gpt3-finnish", PreType::kBloom, true, false, false, false},
    PreSpec{"poro-chat", PreType::kBloom, false, false, false, false},
};

const PreSpec& pre_spec(std::string_view name) {
  for (const PreSpec& s : kPreSpecs) {
    if (s.name == name) return s;
  }
  std::string names;
  for (const PreSpec& s : kPreSpecs) {
    names += names.empty() ? "" : ", ";
    names += s.name;
  }
  fail(ErrorKind::kUnsupported, "{}: unknown pre-tokenizer '{}' (supported: {})", kKeyPre, name,
       names);
}

// Texts llama.cpp treats as end-of-turn (when no eot id is given), end-of-message, FIM, and as
// end of generation.
constexpr std::array<std::string_view, 11> kEotTexts = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>"};
constexpr std::array<std::string_view, 8> kFimPreTexts = {"<|fim_prefix|>",
                                                          "<fim-prefix>",
                                                          "<fim_prefix>",
                                                          "<\xef\xbd\x9c"
                                                          "fim\xe2\x96\x81"
                                                          "begin\xef\xbd\x9c>",
                                                          "<PRE>",
                                                          "\xe2\x96\x81<PRE>",
                                                          "<|code_prefix|>",
                                                          "<|prefix|>"};
constexpr std::array<std::string_view, 8> kFimSufTexts = {"<|fim_suffix|>",
                                                          "<fim-suffix>",
                                                          "<fim_suffix>",
                                                          "<\xef\xbd\x9c"
                                                          "fim\xe2\x96\x81hole\xef\xbd\x9c>",
                                                          "<SUF>",
                                                          "\xe2\x96\x81<SUF>",
                                                          "<|code_suffix|>",
                                                          "<|suffix|>"};
constexpr std::array<std::string_view, 8> kFimMidTexts = {"<|fim_middle|>",
                                                          "<fim-middle>",
                                                          "<fim_middle>",
                                                          "<\xef\xbd\x9c"
                                                          "fim\xe2\x96\x81"
                                                          "end\xef\xbd\x9c>",
                                                          "<MID>",
                                                          "\xe2\x96\x81<MID>",
                                                          "<|code_middle|>",
                                                          "<|middle|>"};
constexpr std::array<std::string_view, 5> kFimPadTexts = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                                          "<PAD>", "[PAD]"};
constexpr std::array<std::string_view, 5> kFimRepTexts = {"<|fim_repo|>", "<|repo_name|>",
                                                          "<fim-repo>", "<REPO>", "<reponame>"};
constexpr std::array<std::string_view, 1> kFimSepTexts = {"<|file_sep|>"};
constexpr std::array<std::string_view, 23> kEogTexts = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "[e~[",
    "<|end_of_sentence|>",  // ERNIE 4.5's turn end (strata's: its files name </s> as eos)
};
// Tokens always rendered (made user-defined): gpt-oss harmony's, as llama.cpp does it, and
// Kimi-K2's, DeepSeek-V3.1's and MiniMax-M2's tool-call markers (llama.cpp's server renders them
// for a request with tools), whose text serve parses and the call's constraint matches.
constexpr std::array<std::string_view, 16> kRenderedMarkers = {"<|channel|>",
                                                               "<|message|>",
                                                               "<|start|>",
                                                               "<|constrain|>",
                                                               "<|tool_calls_section_begin|>",
                                                               "<|tool_calls_section_end|>",
                                                               "<|tool_call_begin|>",
                                                               "<|tool_call_argument_begin|>",
                                                               "<|tool_call_end|>",
                                                               "<｜tool▁calls▁begin｜>",
                                                               "<｜tool▁calls▁end｜>",
                                                               "<｜tool▁call▁begin｜>",
                                                               "<｜tool▁sep｜>",
                                                               "<｜tool▁call▁end｜>",
                                                               "<minimax:tool_call>",
                                                               "</minimax:tool_call>"};

template <size_t N>
bool one_of(std::string_view s, const std::array<std::string_view, N>& list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

const io::GgufValue& require(const io::GgufFile& file, std::string_view key) {
  const io::GgufValue* v = file.find(key);
  if (!v) fail(ErrorKind::kNotFound, "{}: missing tokenizer key '{}'", file.path(), key);
  return *v;
}

const io::GgufArray& require_array(const io::GgufFile& file, std::string_view key,
                                   bool (*elem_ok)(io::GgufType), std::string_view elem_what) {
  const io::GgufArray* a = require(file, key).as_array();
  if (!a || !elem_ok(a->elem_type)) {
    fail(ErrorKind::kBadFile, "{}: tokenizer key '{}' must be an array of {}", file.path(), key,
         elem_what);
  }
  return *a;
}

bool is_string_type(io::GgufType t) {
  return t == io::GgufType::kString;
}
bool is_integer_type(io::GgufType t) {
  switch (t) {
    case io::GgufType::kU8:
    case io::GgufType::kI8:
    case io::GgufType::kU16:
    case io::GgufType::kI16:
    case io::GgufType::kU32:
    case io::GgufType::kI32:
    case io::GgufType::kU64:
    case io::GgufType::kI64:
      return true;
    default:
      return false;
  }
}
bool is_score_type(io::GgufType t) {
  return t == io::GgufType::kF32 || t == io::GgufType::kI32;
}

std::optional<bool> opt_bool(const io::GgufFile& file, std::string_view key) {
  const io::GgufValue* v = file.find(key);
  if (!v) return std::nullopt;
  if (const bool* b = v->as_bool()) return *b;
  fail(ErrorKind::kBadFile, "{}: tokenizer key '{}' must be a bool, not {}", file.path(), key,
       io::gguf_type_name(v->type()));
}

std::string opt_string(const io::GgufFile& file, std::string_view key) {
  const io::GgufValue* v = file.find(key);
  if (!v) return {};
  if (const std::string* s = v->as_string()) return *s;
  fail(ErrorKind::kBadFile, "{}: key '{}' must be a string, not {}", file.path(), key,
       io::gguf_type_name(v->type()));
}

}  // namespace

PreType pre_type_from_name(std::string_view name) {
  return pre_spec(name).type;
}

std::string_view pre_type_name(PreType t) {
  switch (t) {
    case PreType::kDefault:
      return "default";
    case PreType::kLlama3:
      return "llama3";
    case PreType::kDeepseekCoder:
      return "deepseek-coder";
    case PreType::kDeepseek3:
      return "deepseek-v3";
    case PreType::kFalcon:
      return "falcon";
    case PreType::kStarcoder:
      return "starcoder";
    case PreType::kGpt2:
      return "gpt-2";
    case PreType::kQwen2:
      return "qwen2";
    case PreType::kChatGlm4:
      return "glm4";
    case PreType::kGpt4o:
      return "gpt-4o";
    case PreType::kTekken:
      return "tekken";
    case PreType::kBloom:
      return "bloom";
    case PreType::kKimiK2:
      return "kimi-k2";
    case PreType::kBailingMoe:
      return "bailingmoe";
  }
  return "?";
}

Vocab Vocab::from_gguf(const io::GgufFile& file) {
  Vocab v;
  v.load(file);
  return v;
}

int32_t Vocab::text_to_token(std::string_view text) const {
  const auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? kNoToken : it->second;
}

int32_t Vocab::bpe_rank(std::string_view left, std::string_view right) const {
  // The key is the merge line itself; byte-level BPE tokens never contain a plain space.
  thread_local std::string key;
  key.assign(left);
  key.push_back(' ');
  key.append(right);
  const auto it = bpe_ranks_.find(std::string_view(key));
  return it == bpe_ranks_.end() ? -1 : it->second;
}

int32_t Vocab::byte_to_token(uint8_t byte) const {
  if (type_ == VocabType::kBpe) return text_to_token(byte_to_gpt2(byte));
  static constexpr char kHex[] = "0123456789ABCDEF";
  const char buf[6] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
  const int32_t id = text_to_token(std::string_view(buf, 6));
  if (id != kNoToken) return id;
  const char raw = static_cast<char>(byte);
  return text_to_token(std::string_view(&raw, 1));
}

bool Vocab::is_eog(int32_t id) const {
  return id != kNoToken && std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

void Vocab::load(const io::GgufFile& file) {
  const io::GgufValue& model = require(file, kKeyModel);
  if (!model.as_string()) {
    fail(ErrorKind::kBadFile, "{}: tokenizer key '{}' must be a string", file.path(), kKeyModel);
  }
  model_name_ = *model.as_string();
  pre_name_ = opt_string(file, kKeyPre);

  if (model_name_ == "llama") {
    type_ = VocabType::kSpm;
    bos_ = 1;
    eos_ = 2;
    unk_ = 0;
    pre_type_ = PreType::kDefault;
    add_space_prefix_ = true;
    clean_spaces_ = false;
    add_bos_ = true;
    add_eos_ = false;
  } else if (model_name_ == "gpt2") {
    type_ = VocabType::kBpe;
    // llama.cpp's BPE defaults; olmoe (no bos key) reports bos = 11 because of this.
    bos_ = 11;
    eos_ = 11;
    unk_ = kNoToken;
    add_space_prefix_ = false;
    escape_whitespaces_ = false;
    const PreSpec& spec = pre_spec(pre_name_.empty() ? "default" : pre_name_);
    pre_type_ = spec.type;
    clean_spaces_ = spec.clean_spaces;
    ignore_merges_ = spec.ignore_merges;
    add_bos_ = spec.add_bos;
    if (spec.no_default_bos) bos_ = kNoToken;
  } else {
    fail(ErrorKind::kUnsupported,
         "{}: tokenizer model '{}' ({}) is not supported (supported: llama, gpt2)", file.path(),
         model_name_, kKeyModel);
  }
  if (const auto b = opt_bool(file, kKeyAddSpacePrefix)) add_space_prefix_ = *b;

  const io::GgufArray& tokens = require_array(file, kKeyTokens, is_string_type, "strings");
  const size_t n = tokens.items.size();
  if (n == 0) fail(ErrorKind::kBadFile, "{}: tokenizer key '{}' is empty", file.path(), kKeyTokens);
  if (n > static_cast<size_t>(INT32_MAX)) {
    fail(ErrorKind::kBadFile, "{}: '{}' has {} tokens, too many", file.path(), kKeyTokens, n);
  }
  const io::GgufArray* scores = nullptr;
  if (file.find(kKeyScores)) {
    scores = &require_array(file, kKeyScores, is_score_type, "f32 or i32");
    if (scores->items.size() < n) {
      fail(ErrorKind::kBadFile, "{}: '{}' has {} entries for {} tokens", file.path(), kKeyScores,
           scores->items.size(), n);
    }
  }
  const io::GgufArray* types = nullptr;
  if (file.find(kKeyTokenType)) {
    types = &require_array(file, kKeyTokenType, is_integer_type, "integers");
    if (types->items.size() < n) {
      fail(ErrorKind::kBadFile, "{}: '{}' has {} entries for {} tokens", file.path(), kKeyTokenType,
           types->items.size(), n);
    }
  }

  tokens_.resize(n);
  // No reserve(): llama.cpp grows its map one insert at a time, and the resulting iteration
  // order decides which text match becomes the EOT token (see detect_special_tokens).
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = tokens_[i];
    const std::string* text = tokens.items[i].as_string();
    if (!text)
      fail(ErrorKind::kBadFile, "{}: '{}'[{}] is not a string", file.path(), kKeyTokens, i);
    t.text = *text;
    if (t.text.empty()) t.text = fmt::format("[EMPTY_{}]", i);
    const auto [it, inserted] = token_to_id_.emplace(t.text, static_cast<int32_t>(i));
    if (!inserted) {
      fail(ErrorKind::kBadFile, "{}: '{}': duplicate token '{}' at ids {} and {}", file.path(),
           kKeyTokens, t.text, it->second, i);
    }
    max_token_len_ = std::max(max_token_len_, t.text.size());
    if (scores) t.score = static_cast<float>(scores->items[i].as_double().value_or(0.0));
    if (types) t.attr = attr_from_token_type(types->items[i].as_int().value_or(0));
  }

  if (type_ == VocabType::kBpe) load_merges(file);
  load_special_ids(file);
  detect_special_tokens();
  build_eog_set();

  for (int32_t id = 0; id < n_tokens(); ++id) {
    if (has_attr(id, token_attr::kControl | token_attr::kUserDefined | token_attr::kUnknown)) {
      special_tokens_.push_back(id);
    }
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(), [&](int32_t a, int32_t b) {
    return tokens_[a].text.size() > tokens_[b].text.size();
  });

  // Per-model attributes llama.cpp sets by name: phi-3 strips whitespace right of its specials.
  std::string general_name = opt_string(file, kKeyGeneralName);
  std::transform(general_name.begin(), general_name.end(), general_name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (general_name.find("phi-3") != std::string::npos ||
      general_name.find("phi3") != std::string::npos) {
    for (const int32_t id : special_tokens_) tokens_[id].attr |= token_attr::kRstrip;
    for (const std::string_view s : {"</s>"}) {
      if (const int32_t id = text_to_token(s); id != kNoToken)
        tokens_[id].attr |= token_attr::kRstrip;
    }
    for (const std::string_view s : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (const int32_t id = text_to_token(s); id != kNoToken) {
        tokens_[id].attr &= ~token_attr::kRstrip;
      }
    }
  }

  chat_template_ = opt_string(file, kKeyChatTemplate);
}

void Vocab::load_merges(const io::GgufFile& file) {
  const io::GgufArray& merges = require_array(file, kKeyMerges, is_string_type, "strings");
  bpe_ranks_.reserve(merges.items.size());
  for (size_t i = 0; i < merges.items.size(); ++i) {
    const std::string* item = merges.items[i].as_string();
    if (!item)
      fail(ErrorKind::kBadFile, "{}: '{}'[{}] is not a string", file.path(), kKeyMerges, i);
    const std::string& line = *item;
    const size_t space = line.find(' ', 1);
    if (space == std::string::npos || space + 1 >= line.size()) {
      fail(ErrorKind::kBadFile, "{}: '{}'[{}] = '{}' is not two tokens separated by a space",
           file.path(), kKeyMerges, i, line);
    }
    const std::string_view left = std::string_view(line).substr(0, space);
    const std::string_view right = std::string_view(line).substr(space + 1);
    const std::string merged = std::string(left) + std::string(right);
    for (const std::string_view part : {left, right, std::string_view(merged)}) {
      if (text_to_token(part) == kNoToken) {
        fail(ErrorKind::kBadFile, "{}: '{}'[{}] = '{}' refers to '{}', which is not a token",
             file.path(), kKeyMerges, i, line, part);
      }
    }
    bpe_ranks_.emplace(line, static_cast<int32_t>(i));  // a repeated merge keeps its first rank
  }
}

void Vocab::load_special_ids(const io::GgufFile& file) {
  struct SpecialKey {
    std::string_view key;
    int32_t* id;
  };
  const SpecialKey keys[] = {
      {"tokenizer.ggml.bos_token_id", &bos_},
      {"tokenizer.ggml.eos_token_id", &eos_},
      {"tokenizer.ggml.eot_token_id", &eot_},
      {"tokenizer.ggml.eom_token_id", &eom_},
      {"tokenizer.ggml.unknown_token_id", &unk_},
      {"tokenizer.ggml.seperator_token_id", &sep_},  // sic: llama.cpp's spelling
      {"tokenizer.ggml.padding_token_id", &pad_},
      {"tokenizer.ggml.mask_token_id", &mask_},
      {"tokenizer.ggml.fim_pre_token_id", &fim_pre_},
      {"tokenizer.ggml.fim_suf_token_id", &fim_suf_},
      {"tokenizer.ggml.fim_mid_token_id", &fim_mid_},
      {"tokenizer.ggml.fim_pad_token_id", &fim_pad_},
      {"tokenizer.ggml.fim_rep_token_id", &fim_rep_},
      {"tokenizer.ggml.fim_sep_token_id", &fim_sep_},
      {"tokenizer.ggml.prefix_token_id", &fim_pre_},  // deprecated spellings
      {"tokenizer.ggml.suffix_token_id", &fim_suf_},
      {"tokenizer.ggml.middle_token_id", &fim_mid_},
  };
  for (const SpecialKey& k : keys) {
    if (*k.id != kNoToken && !valid_id(*k.id)) *k.id = kNoToken;  // default out of range
    const io::GgufValue* v = file.find(k.key);
    if (!v) continue;
    const std::optional<int64_t> id = v->as_int();
    if (!v->is_integer() || !id) {
      fail(ErrorKind::kBadFile, "{}: tokenizer key '{}' must be an integer, not {}", file.path(),
           k.key, io::gguf_type_name(v->type()));
    }
    // Like llama.cpp, an id outside the vocabulary keeps the default.
    if (*id >= 0 && *id < n_tokens()) *k.id = static_cast<int32_t>(*id);
  }

  if (const auto b = opt_bool(file, kKeyAddBos)) add_bos_ = *b;
  if (const auto b = opt_bool(file, kKeyAddEos)) add_eos_ = *b;
  if (const auto b = opt_bool(file, kKeyAddSep)) add_sep_ = *b;
  if (add_bos_ && bos_ == kNoToken) {
    fail(ErrorKind::kBadFile, "{}: {} is true but tokenizer.ggml.bos_token_id is not set",
         file.path(), kKeyAddBos);
  }
  if (add_eos_ && eos_ == kNoToken) {
    fail(ErrorKind::kBadFile, "{}: {} is true but tokenizer.ggml.eos_token_id is not set",
         file.path(), kKeyAddEos);
  }
}

void Vocab::detect_special_tokens() {
  // Iterates token_to_id_ in hash order on purpose: llama.cpp keeps the first match in its
  // unordered_map's order (gpt-oss: <|endoftext|> wins over <|end|> as EOT).
  const auto mark = [&](int32_t id) { tokens_[id].attr |= token_attr::kControl; };
  for (const auto& [text, id] : token_to_id_) {
    if (eot_ == kNoToken && one_of(text, kEotTexts)) {
      eot_ = id;
      mark(id);
    }
    if (eom_ == kNoToken && text == "<|eom_id|>") {
      eom_ = id;
      mark(id);
    }
    if (fim_pre_ == kNoToken && one_of(text, kFimPreTexts)) {
      fim_pre_ = id;
      mark(id);
    }
    if (fim_suf_ == kNoToken && one_of(text, kFimSufTexts)) {
      fim_suf_ = id;
      mark(id);
    }
    if (fim_mid_ == kNoToken && one_of(text, kFimMidTexts)) {
      fim_mid_ = id;
      mark(id);
    }
    if (fim_pad_ == kNoToken && one_of(text, kFimPadTexts)) {
      fim_pad_ = id;
      mark(id);
    }
    if (fim_rep_ == kNoToken && one_of(text, kFimRepTexts)) {
      fim_rep_ = id;
      mark(id);
    }
    if (fim_sep_ == kNoToken && one_of(text, kFimSepTexts)) {
      fim_sep_ = id;
      mark(id);
    }
  }
  // Control tokens named "unused..." are unused.
  for (TokenData& t : tokens_) {
    if ((t.attr & token_attr::kControl) && t.text.find("unused") != std::string::npos) {
      t.attr |= token_attr::kUnused;
    }
  }
}

void Vocab::build_eog_set() {
  std::set<int32_t> eog;
  for (const int32_t id : {fim_pad_, fim_rep_, fim_sep_}) {
    if (id != kNoToken) eog.insert(id);
  }
  for (const auto& [text, id] : token_to_id_) {
    if (one_of(text, kEogTexts)) {
      eog.insert(id);
      tokens_[id].attr |= token_attr::kControl;
    }
  }
  for (const auto& [text, id] : token_to_id_) {
    if (one_of(text, kRenderedMarkers)) tokens_[id].attr = token_attr::kUserDefined;
  }
  for (const int32_t id : {eos_, eot_, eom_}) {
    if (id != kNoToken) eog.insert(id);
  }

  // o200k harmony / solar-open: with <|return|> and <|call|> (or <|calls|> and <|flush|>),
  // <|end|> ends a message, not the generation.
  bool has_return = false, has_call = false, has_flush = false;
  int32_t end_id = kNoToken;
  for (const int32_t id : eog) {
    const std::string& text = tokens_[id].text;
    if (text == "<|return|>") has_return = true;
    if (text == "<|call|>" || text == "<|calls|>") has_call = true;
    if (text == "<|flush|>") has_flush = true;
    if (text == "<|end|>") end_id = id;
  }
  if (end_id != kNoToken && has_call && (has_return || has_flush)) {
    eog.erase(end_id);
    tokens_[end_id].attr = token_attr::kUserDefined;
  }
  // gemma4 / paddleocr: with <|tool_response>, </s> is an ordinary token.
  bool has_tool_response = false;
  int32_t s_id = kNoToken;
  for (const int32_t id : eog) {
    if (tokens_[id].text == "<|tool_response>") has_tool_response = true;
    if (tokens_[id].text == "</s>") s_id = id;
  }
  if (has_tool_response && s_id != kNoToken) {
    eog.erase(s_id);
    tokens_[s_id].attr = token_attr::kNormal;
  }
  eog_ids_.assign(eog.begin(), eog.end());
}

}  // namespace strata::engine
