// The tokenizer vocabulary of a GGUF model: tokens, scores, attributes, BPE merge ranks, special
// ids and flags, loaded with llama.cpp's defaults and heuristics (EOG set, auto-detected EOT/EOM).
// Exercised by tests/test_tokenizer.cpp (every fixture model, malformed-vocab unit tests).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata::io {
class GgufFile;
}

namespace strata::engine {

constexpr int32_t kNoToken = -1;

// tokenizer.ggml.model: "llama" is SentencePiece-style BPE with scores, "gpt2" byte-level BPE.
enum class VocabType { kSpm, kBpe };

// Pre-tokenizer families; tokenizer.ggml.pre names map onto these (see pre_type_from_name).
enum class PreType {
  kDefault,
  kLlama3,
  kDeepseekCoder,
  kDeepseek3,
  kFalcon,
  kStarcoder,
  kGpt2,
  kQwen2,
  kChatGlm4,
  kGpt4o,
  kTekken,
  kBloom,
  kKimiK2,
  kBailingMoe,
};

// Token attributes, the bit values of llama.cpp's llama_token_attr.
namespace token_attr {
constexpr uint32_t kUndefined = 0;
constexpr uint32_t kUnknown = 1u << 0;
constexpr uint32_t kUnused = 1u << 1;
constexpr uint32_t kNormal = 1u << 2;
constexpr uint32_t kControl = 1u << 3;
constexpr uint32_t kUserDefined = 1u << 4;
constexpr uint32_t kByte = 1u << 5;
constexpr uint32_t kNormalized = 1u << 6;
constexpr uint32_t kLstrip = 1u << 7;
constexpr uint32_t kRstrip = 1u << 8;
constexpr uint32_t kSingleWord = 1u << 9;
}  // namespace token_attr

struct TokenData {
  std::string text;
  float score = 0.0f;
  uint32_t attr = token_attr::kNormal;
};

// Heterogeneous lookup (string_view keys without a copy). Hashes like std::hash<std::string>, so
// iteration order equals llama.cpp's std::unordered_map<std::string, ...> built the same way; the
// EOT auto-detection picks the first match in that order.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class Vocab {
 public:
  // Reads the tokenizer.* keys. A missing required key or an inconsistent vocabulary (duplicate
  // token, merge naming an unknown token, short scores array ...) throws strata::Error naming the
  // file and key.
  static Vocab from_gguf(const io::GgufFile& file);

  VocabType type() const { return type_; }
  PreType pre_type() const { return pre_type_; }
  const std::string& model_name() const { return model_name_; }  // tokenizer.ggml.model
  const std::string& pre_name() const { return pre_name_; }      // tokenizer.ggml.pre
  int32_t n_tokens() const { return static_cast<int32_t>(tokens_.size()); }
  bool valid_id(int32_t id) const { return id >= 0 && id < n_tokens(); }

  const TokenData& token(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
  const std::string& text(int32_t id) const { return token(id).text; }
  uint32_t attr(int32_t id) const { return token(id).attr; }
  bool has_attr(int32_t id, uint32_t mask) const { return (attr(id) & mask) != 0; }
  // kNoToken when text is not a token.
  int32_t text_to_token(std::string_view text) const;
  // The merge rank of the pair (left, right), -1 when they do not merge.
  int32_t bpe_rank(std::string_view left, std::string_view right) const;
  size_t n_merges() const { return bpe_ranks_.size(); }
  // The token of one raw byte: <0xNN> (SPM, falling back to the byte itself) or its GPT-2
  // symbol (BPE); kNoToken when the vocabulary has neither.
  int32_t byte_to_token(uint8_t byte) const;
  size_t max_token_len() const { return max_token_len_; }

  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  int32_t eom() const { return eom_; }
  int32_t unk() const { return unk_; }
  int32_t pad() const { return pad_; }
  int32_t sep() const { return sep_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  bool clean_spaces() const { return clean_spaces_; }
  bool ignore_merges() const { return ignore_merges_; }
  bool escape_whitespaces() const { return escape_whitespaces_; }

  // End of generation: eos, eot, eom and the tokens llama.cpp recognises by text.
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }  // ascending
  // Control, user-defined and unknown tokens, longest text first: the strings the tokenizer
  // splits out before BPE.
  const std::vector<int32_t>& special_tokens() const { return special_tokens_; }

  const std::string& chat_template() const { return chat_template_; }  // "" when absent

 private:
  Vocab() = default;
  void load(const io::GgufFile& file);
  void load_merges(const io::GgufFile& file);
  void load_special_ids(const io::GgufFile& file);
  void detect_special_tokens();
  void build_eog_set();

  VocabType type_ = VocabType::kSpm;
  PreType pre_type_ = PreType::kDefault;
  std::string model_name_;
  std::string pre_name_;
  std::vector<TokenData> tokens_;  // [n_tokens]
  StringMap<int32_t> token_to_id_;
  StringMap<int32_t> bpe_ranks_;  // key "left right" (the merge line as stored)
  size_t max_token_len_ = 0;

  int32_t bos_ = kNoToken;
  int32_t eos_ = kNoToken;
  int32_t eot_ = kNoToken;
  int32_t eom_ = kNoToken;
  int32_t unk_ = kNoToken;
  int32_t sep_ = kNoToken;
  int32_t pad_ = kNoToken;
  int32_t mask_ = kNoToken;
  int32_t fim_pre_ = kNoToken;
  int32_t fim_suf_ = kNoToken;
  int32_t fim_mid_ = kNoToken;
  int32_t fim_pad_ = kNoToken;
  int32_t fim_rep_ = kNoToken;
  int32_t fim_sep_ = kNoToken;

  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_sep_ = false;
  bool add_space_prefix_ = false;
  bool clean_spaces_ = false;
  bool ignore_merges_ = false;
  bool escape_whitespaces_ = true;

  std::vector<int32_t> eog_ids_;
  std::vector<int32_t> special_tokens_;
  std::string chat_template_;
};

// The PreType for a tokenizer.ggml.pre value plus the flags llama.cpp ties to it; throws
// strata::Error (kUnsupported) listing the accepted names for an unknown one.
PreType pre_type_from_name(std::string_view name);
std::string_view pre_type_name(PreType t);

}  // namespace strata::engine
