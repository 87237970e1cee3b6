// Text <-> token ids, matching llama.cpp's llama_tokenize / llama_token_to_piece /
// llama_detokenize for byte-level BPE ("gpt2") and SentencePiece-style BPE ("llama") vocabularies.
// Exercised by tests/test_tokenizer.cpp against every fixture's llama.cpp references.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/pretokenize.h"
#include "engine/vocab.h"

namespace strata::io {
class GgufFile;
}

namespace strata::engine {

class Tokenizer {
 public:
  explicit Tokenizer(Vocab vocab);
  static Tokenizer from_gguf(const io::GgufFile& file) { return Tokenizer(Vocab::from_gguf(file)); }

  const Vocab& vocab() const { return vocab_; }

  // add_special: BOS/EOS as the vocabulary asks (tokenizer.ggml.add_bos_token ...).
  // parse_special: control/unknown token strings in the text become their ids (user-defined
  // tokens always do). Merges in O(n log n) per word. Thread-safe.
  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes of one token; control and unknown tokens render as their text only when
  // `special`. An id outside the vocabulary throws strata::Error.
  std::string token_to_piece(int32_t id, bool special) const;
  // Appends the piece to out, dropping up to `lstrip` leading spaces.
  void append_piece(std::string& out, int32_t id, bool special, int lstrip = 0) const;

  // remove_special drops a leading BOS / trailing EOS that add_special would have added;
  // unparse_special renders control tokens. SPM vocabularies drop the space prefix of the first
  // token unless a BOS was removed; BPE vocabularies with clean_spaces tidy " ," " 's" ...
  std::string detokenize(std::span<const int32_t> ids, bool remove_special,
                         bool unparse_special) const;

  int32_t newline_token() const { return newline_; }  // kNoToken when there is none

 private:
  // One piece of the input: raw text [offset, offset + length) or an already known token.
  struct Fragment {
    int32_t token;  // kNoToken for raw text
    size_t offset;
    size_t length;
  };
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
  void tokenize_spm(std::string_view text, std::vector<int32_t>& out) const;
  void tokenize_bpe(std::string_view text, std::vector<int32_t>& out) const;
  void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
  std::string render_piece(int32_t id) const;

  Vocab vocab_;
  PreTokenizer pre_;
  std::vector<std::string> pieces_;  // [n_tokens] token_to_piece(id, special = true)
  int32_t newline_ = kNoToken;
};

}  // namespace strata::engine
