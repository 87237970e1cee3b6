// Pre-tokenizer of byte-level BPE: splits text into words with the regex list llama.cpp uses for
// each tokenizer.ggml.pre family (PCRE2, UTF + Unicode properties, JIT when available).
// Exercised by tests/test_tokenizer.cpp (every fixture's tokenizer_tests).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "engine/vocab.h"

namespace strata::engine {

// The regexes of a family, in application order (PCRE2 syntax).
std::vector<std::string_view> pretokenize_patterns(PreType type);

class PreTokenizer {
 public:
  explicit PreTokenizer(PreType type);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Appends to `lengths` the byte lengths of the consecutive words that cover `text` (valid
  // UTF-8, see normalize_utf8). Each regex splits every word of the previous pass into its
  // matches and the unmatched gaps between them, as llama.cpp's unicode_regex_split does.
  // Thread-safe.
  void split(std::string_view text, std::vector<size_t>& lengths) const;

 private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace strata::engine
