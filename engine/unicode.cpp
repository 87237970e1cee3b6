// UTF-8 helpers and the GPT-2 byte <-> unicode table (see unicode.h).
// Exercised by tests/test_tokenizer.cpp.
#include "engine/unicode.h"

#include <array>
#include <unordered_map>

namespace strata::engine {

namespace {

constexpr uint32_t kReplacement = 0xFFFD;

// One code point from text[pos...], advancing pos; the same acceptance rules as llama.cpp's
// unicode_cpt_from_utf8 (lead byte decides the length, continuation bytes are checked, overlong
// forms are not), so that the pieces we split match llama.cpp's byte for byte.
uint32_t decode_one(std::string_view text, size_t& pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const auto cont = [&](size_t i) { return i < text.size() && (byte(i) & 0xC0) == 0x80; };
  const uint8_t lead = byte(pos);
  if (!(lead & 0x80)) {
    pos += 1;
    return lead;
  }
  if (!(lead & 0x40)) {
    pos += 1;
    return kReplacement;
  }
  if (!(lead & 0x20)) {
    if (!cont(pos + 1)) {
      pos += 1;
      return kReplacement;
    }
    const uint32_t c = ((lead & 0x1Fu) << 6) | (byte(pos + 1) & 0x3Fu);
    pos += 2;
    return c;
  }
  if (!(lead & 0x10)) {
    if (!cont(pos + 1) || !cont(pos + 2)) {
      pos += 1;
      return kReplacement;
    }
    const uint32_t c =
        ((lead & 0x0Fu) << 12) | ((byte(pos + 1) & 0x3Fu) << 6) | (byte(pos + 2) & 0x3Fu);
    pos += 3;
    return c;
  }
  if (!(lead & 0x08)) {
    if (!cont(pos + 1) || !cont(pos + 2) || !cont(pos + 3)) {
      pos += 1;
      return kReplacement;
    }
    const uint32_t c = ((lead & 0x07u) << 18) | ((byte(pos + 1) & 0x3Fu) << 12) |
                       ((byte(pos + 2) & 0x3Fu) << 6) | (byte(pos + 3) & 0x3Fu);
    pos += 4;
    // llama.cpp cannot re-encode these and throws; a replacement character keeps going.
    return c > 0x10FFFF ? kReplacement : c;
  }
  pos += 1;
  return kReplacement;
}

struct Gpt2Tables {
  std::array<std::string, 256> byte_to_utf8;
  std::unordered_map<uint32_t, uint8_t> cpt_to_byte;

  Gpt2Tables() {
    // Printable bytes keep their code point; the rest are moved to 256, 257, ... in byte order.
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t cpt = printable ? static_cast<uint32_t>(b) : next++;
      append_utf8(byte_to_utf8[b], cpt);
      cpt_to_byte[cpt] = static_cast<uint8_t>(b);
    }
  }
};

const Gpt2Tables& gpt2_tables() {
  static const Gpt2Tables tables;
  return tables;
}

}  // namespace

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt <= 0x7F) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

std::string normalize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    append_utf8(out, decode_one(text, pos));
  }
  return out;
}

uint32_t next_codepoint(std::string_view text, size_t& pos) {
  return decode_one(text, pos);
}

const std::string& byte_to_gpt2(uint8_t b) {
  return gpt2_tables().byte_to_utf8[b];
}

std::optional<uint8_t> gpt2_to_byte(std::string_view symbol) {
  if (symbol.empty()) return std::nullopt;
  size_t pos = 0;
  const uint32_t cpt = decode_one(symbol, pos);
  if (pos != symbol.size()) return std::nullopt;
  const auto& map = gpt2_tables().cpt_to_byte;
  const auto it = map.find(cpt);
  if (it == map.end()) return std::nullopt;
  return it->second;
}

}  // namespace strata::engine
