// What any text must do in the tokenizer (shared by the libFuzzer target tests/fuzz_tokenize.cpp
// and tests/test_tokenizer_text.cpp): tokenize with every add/parse_special combination without
// throwing, give ids inside the vocabulary, detokenize them again, and — for valid UTF-8 without
// special parsing — give back the very text (every fixture vocabulary is lossless: byte-level
// BPE, or SentencePiece with byte fallback, but for SentencePiece's own space mark U+2581 and
// vocabularies that tidy spaces on the way out). Text reaches the tokenizer from `serve`'s clients.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer.h"

namespace strata::testing {

// Whether s is valid UTF-8 (shortest forms, no surrogates, at most U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    int n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + size_t(n) >= s.size()) return false;  // the continuation bytes run past the end
    for (int k = 1; k <= n; ++k) {
      const auto d = static_cast<uint8_t>(s[i + size_t(k)]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += size_t(n) + 1;
  }
  return true;
}

// "" when the text behaves; else what went wrong.
inline std::string check_text(const engine::Tokenizer& tok, std::string_view text) {
  const int64_t n_vocab = int64_t(tok.vocab().n_tokens());
  for (const bool add : {false, true})
    for (const bool parse : {false, true}) {
      const std::vector<int32_t> ids = tok.tokenize(text, add, parse);
      for (const int32_t id : ids)
        if (id < 0 || id >= n_vocab) return "id " + std::to_string(id) + " outside the vocabulary";
      (void)tok.detokenize(ids, add, parse);
      // SentencePiece writes spaces as U+2581, so a literal U+2581 comes back as a space (as in
      // llama.cpp): such text is exempt from the round trip there.
      const bool spm_marker = tok.vocab().type() == engine::VocabType::kSpm &&
                              text.find("\xe2\x96\x81") != std::string_view::npos;
      // clean_spaces vocabularies tidy " ," " 's" ... on the way out (llama.cpp's
      // clean_up_tokenization_spaces): lossy by design, no round trip.
      const bool tidies = tok.vocab().clean_spaces();
      if (!add && !parse && valid_utf8(text) && !spm_marker && !tidies) {
        const std::string back = tok.detokenize(ids, false, false);
        if (back != text) return "round trip changed the text to '" + back + "'";
      }
    }
  return "";
}

}  // namespace strata::testing
