// UTF-8 helpers for the tokenizer: llama.cpp-compatible code point decoding (lenient, invalid
// bytes become U+FFFD) and the GPT-2 byte <-> unicode mapping of byte-level BPE.
// Exercised by tests/test_tokenizer.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata::engine {

// Bytes in the UTF-8 sequence that starts with `lead`, from its high nibble alone (1 for a stray
// continuation byte), as llama.cpp's unicode_len_utf8 computes it.
inline size_t utf8_seq_len(char lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[static_cast<uint8_t>(lead) >> 4];
}

// Strict UTF-8 (what a JSON string may hold): the range of the byte after `lead`, narrower after
// E0, ED, F0 and F4 (no overlong forms, no UTF-16 surrogates, nothing past U+10FFFF).
struct ByteRange {
  uint8_t lo, hi;
};
inline ByteRange utf8_second_byte(uint8_t lead) {
  if (lead == 0xE0) return {0xA0, 0xBF};
  if (lead == 0xED) return {0x80, 0x9F};
  if (lead == 0xF0) return {0x90, 0xBF};
  if (lead == 0xF4) return {0x80, 0x8F};
  return {0x80, 0xBF};
}

// The value of an ASCII hex digit, or -1 for any other byte.
inline int hex_digit(uint8_t b) {
  if (b >= '0' && b <= '9') return b - '0';
  const uint8_t l = b | 0x20;
  return l >= 'a' && l <= 'f' ? l - 'a' + 10 : -1;
}

// Decodes the code point at text[pos], advancing pos, with llama.cpp's lenient rules: an invalid
// or truncated sequence yields U+FFFD and advances one byte.
uint32_t next_codepoint(std::string_view text, size_t& pos);

// Appends the UTF-8 encoding of cpt (cpt <= 0x10FFFF).
void append_utf8(std::string& out, uint32_t cpt);

// Decodes text into code points and re-encodes them, which is what llama.cpp's BPE path does
// before splitting: an invalid byte becomes U+FFFD (one per byte), overlong forms are
// accepted and re-encoded canonically.
std::string normalize_utf8(std::string_view text);

// GPT-2 byte-level BPE: byte b is spelled as the UTF-8 of bytes_to_unicode()[b].
const std::string& byte_to_gpt2(uint8_t b);
// The byte a single GPT-2 symbol (one code point, UTF-8) stands for.
std::optional<uint8_t> gpt2_to_byte(std::string_view symbol);

}  // namespace strata::engine
