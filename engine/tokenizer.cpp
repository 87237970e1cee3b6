// BPE tokenization (byte-level and SentencePiece-style), special-token partitioning and
// detokenization, following llama.cpp's llama-vocab.cpp step by step (see tokenizer.h).
// Exercised by tests/test_tokenizer.cpp.
#include "engine/tokenizer.h"

#include <cctype>
#include <queue>

#include "engine/unicode.h"
#include "io/check.h"

namespace strata::engine {

namespace {

constexpr std::string_view kSpaceEscape = "\xe2\x96\x81";  // U+2581, SentencePiece's space

// A symbol of the merge loop: a byte range of the word, linked to its live neighbours.
struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t offset;
  uint32_t length;  // 0 once merged into its left neighbour
};

// A candidate merge of two adjacent symbols. `size` is their combined length when the candidate
// was made; a candidate whose symbols changed since then is stale.
struct Bigram {
  double score;  // SPM: the merged token's score (higher first); BPE: -rank
  int32_t left;
  int32_t right;
  uint32_t size;
};

// Best score first, then the leftmost pair; llama.cpp's order for both tokenizer kinds.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

using BigramQueue = std::priority_queue<Bigram, std::vector<Bigram>, BigramLess>;

// Splits word into one symbol per UTF-8 sequence (lengths from the lead byte, as llama.cpp).
void init_symbols(std::string_view word, std::vector<Symbol>& symbols) {
  symbols.clear();
  size_t offset = 0;
  int32_t index = 0;
  while (offset < word.size()) {
    const size_t n = std::min(utf8_seq_len(word[offset]), word.size() - offset);
    symbols.push_back({index - 1, offset + n == word.size() ? -1 : index + 1,
                       static_cast<uint32_t>(offset), static_cast<uint32_t>(n)});
    offset += n;
    ++index;
  }
}

// Runs the merge loop: `candidate(left, right)` pushes a bigram for two adjacent symbols if they
// merge. Returns nothing; the surviving symbols are those with length > 0.
template <typename Candidate>
void merge_symbols(std::vector<Symbol>& symbols, BigramQueue& queue, Candidate candidate) {
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) candidate(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != b.size) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    if (left.prev >= 0) candidate(left.prev, b.left);
    if (left.next >= 0) candidate(b.left, left.next);
  }
}

bool is_c_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

// llama.cpp's detokenize clean-up (clean_spaces): three in-place passes over the bytes, kept
// exactly as llama.cpp writes them, in-place aliasing included.
void clean_up_spaces(std::string& s) {
  char* text = s.data();
  int32_t total = static_cast<int32_t>(s.size());

  const int32_t total1 = total;
  total = total ? 1 : 0;
  for (int32_t i = 1; i < total1; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
    text[total++] = x;
  }

  const int32_t total2 = total;
  total = total ? 1 : 0;
  for (int32_t i = 1; i < total2; ++i) {
    const char x = text[i];
    if (x == '\'' && i + 1 < total2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
      total--;
      text[++i] = '\0';
    }
    text[total++] = x;
  }

  const int32_t total3 = total;
  total = total ? 1 : 0;
  for (int32_t i = 1; i < total3; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
      const char x1 = text[i + 1];
      if (x1 == 's' || x1 == 'm') {
        total--;  // " 's" " 'm"
      } else if (i + 2 < total3) {
        const char x2 = text[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) total--;  // " 're" " 've"
      }
    }
    text[total++] = x;
  }
  s.resize(static_cast<size_t>(total));
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)), pre_(vocab_.pre_type()) {
  pieces_.resize(static_cast<size_t>(vocab_.n_tokens()));
  for (int32_t id = 0; id < vocab_.n_tokens(); ++id) pieces_[id] = render_piece(id);
  if (vocab_.type() == VocabType::kSpm) {
    newline_ = vocab_.byte_to_token('\n');
  } else {
    const std::vector<int32_t> nl = tokenize("\n", false, false);
    newline_ = nl.empty() ? vocab_.pad() : nl[0];
  }
}

std::string Tokenizer::render_piece(int32_t id) const {
  const TokenData& t = vocab_.token(id);
  if (t.attr & (token_attr::kUnknown | token_attr::kControl | token_attr::kUserDefined)) {
    return t.text;
  }
  if (t.attr & token_attr::kNormal) {
    std::string out;
    if (vocab_.type() == VocabType::kSpm || vocab_.escape_whitespaces()) {
      size_t pos = 0;
      while (pos < t.text.size()) {
        if (t.text.compare(pos, kSpaceEscape.size(), kSpaceEscape) == 0) {
          out.push_back(' ');
          pos += kSpaceEscape.size();
        } else {
          out.push_back(t.text[pos++]);
        }
      }
      return out;
    }
    // Byte-level BPE: every code point stands for one byte (llama_decode_text).
    size_t pos = 0;
    while (pos < t.text.size()) {
      std::string utf8;
      append_utf8(utf8, next_codepoint(t.text, pos));
      if (const auto byte = gpt2_to_byte(utf8)) {
        out.push_back(static_cast<char>(*byte));
      } else {
        out += "[UNK_BYTE_0x";
        for (const char c : utf8) out += fmt::format("{:02x}", static_cast<uint8_t>(c));
        out += t.text;
        out += "]";
      }
    }
    return out;
  }
  if (t.attr & token_attr::kByte) {
    // "<0xNN>"; a malformed byte token renders as nothing rather than failing the load.
    if (t.text.size() == 6 && t.text.starts_with("<0x") && t.text.back() == '>' &&
        std::isxdigit(static_cast<unsigned char>(t.text[3])) &&
        std::isxdigit(static_cast<unsigned char>(t.text[4]))) {
      return std::string(1, static_cast<char>(std::stoi(t.text.substr(3, 2), nullptr, 16)));
    }
  }
  return {};
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  std::string out;
  append_piece(out, id, special);
  return out;
}

void Tokenizer::append_piece(std::string& out, int32_t id, bool special, int lstrip) const {
  if (!vocab_.valid_id(id)) {
    fail(ErrorKind::kBadValue, "token id {} is outside the vocabulary (0..{})", id,
         vocab_.n_tokens() - 1);
  }
  if (!special && vocab_.has_attr(id, token_attr::kUnknown | token_attr::kControl)) return;
  const std::string& piece = pieces_[id];
  size_t skip = 0;
  while (static_cast<int>(skip) < lstrip && skip < piece.size() && piece[skip] == ' ') ++skip;
  out.append(piece, skip, std::string::npos);
}

std::vector<Tokenizer::Fragment> Tokenizer::partition(std::string_view text,
                                                      bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({kNoToken, 0, text.size()});
  std::vector<Fragment> next;
  for (const int32_t id : vocab_.special_tokens()) {
    const TokenData& tok = vocab_.token(id);
    if (!parse_special && (tok.attr & (token_attr::kControl | token_attr::kUnknown))) continue;
    const std::string_view needle = tok.text;
    if (text.find(needle) == std::string_view::npos) continue;  // cheap filter
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token != kNoToken) {
        next.push_back(f);
        continue;
      }
      size_t base = f.offset;
      size_t len = f.length;
      while (true) {
        const size_t match = text.substr(0, base + len).find(needle, base);
        if (match == std::string_view::npos) {
          next.push_back({kNoToken, base, len});
          break;
        }
        size_t left_len = match - base;
        if (tok.attr & token_attr::kLstrip) {
          while (left_len > 0 && is_c_space(text[base + left_len - 1])) --left_len;
        }
        if (left_len > 0) next.push_back({kNoToken, base, left_len});
        next.push_back({id, 0, 0});
        size_t right = match + needle.size();
        size_t right_len = base + len - right;
        if (right_len == 0) break;
        if (tok.attr & token_attr::kRstrip) {
          while (right_len > 0 && is_c_space(text[right])) {
            ++right;
            --right_len;
          }
        }
        if (right_len == 0) break;
        base = right;
        len = right_len;
      }
    }
    frags.swap(next);
  }
  return frags;
}

std::vector<int32_t> Tokenizer::tokenize(std::string_view text, bool add_special,
                                         bool parse_special) const {
  std::vector<int32_t> out;
  const std::vector<Fragment> frags = partition(text, parse_special);
  if (vocab_.type() == VocabType::kSpm) {
    // A raw fragment at the start or after a special token gets the space prefix.
    bool prev_special = true;
    if (add_special && vocab_.add_bos()) out.push_back(vocab_.bos());
    std::string buf;
    for (const Fragment& f : frags) {
      if (f.token != kNoToken) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      buf.clear();
      if (vocab_.add_space_prefix() && prev_special) buf.append(kSpaceEscape);
      for (const char c : text.substr(f.offset, f.length)) {
        if (c == ' ') {
          buf.append(kSpaceEscape);
        } else {
          buf.push_back(c);
        }
      }
      tokenize_spm(buf, out);
      prev_special = false;
    }
    if (add_special && vocab_.add_eos()) out.push_back(vocab_.eos());
  } else {
    if (add_special && vocab_.add_bos()) out.push_back(vocab_.bos());
    for (const Fragment& f : frags) {
      if (f.token != kNoToken) {
        out.push_back(f.token);
      } else {
        tokenize_bpe(text.substr(f.offset, f.length), out);
      }
    }
    if (add_special && vocab_.add_eos()) out.push_back(vocab_.eos());
  }
  return out;
}

void Tokenizer::tokenize_spm(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;
  init_symbols(text, symbols);
  BigramQueue queue;
  merge_symbols(symbols, queue, [&](int32_t l, int32_t r) {
    const Symbol& a = symbols[l];
    const uint32_t size = a.length + symbols[r].length;
    const int32_t id = vocab_.text_to_token(text.substr(a.offset, size));
    if (id == kNoToken) return;
    queue.push({vocab_.token(id).score, l, r, size});
  });
  for (int32_t i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece = text.substr(s.offset, s.length);
    const int32_t id = vocab_.text_to_token(piece);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    // Byte fallback: <0xNN> per byte (a merged symbol is always a token, so this is one
    // unknown character).
    for (const char c : piece) {
      const int32_t b = vocab_.byte_to_token(static_cast<uint8_t>(c));
      if (b != kNoToken) {
        out.push_back(b);
      } else if (vocab_.unk() != kNoToken) {
        out.push_back(vocab_.unk());
      }
    }
  }
}

void Tokenizer::tokenize_bpe(std::string_view text, std::vector<int32_t>& out) const {
  const std::string norm = normalize_utf8(text);
  std::vector<size_t> lengths;
  pre_.split(norm, lengths);
  std::string word;
  size_t start = 0;
  for (const size_t len : lengths) {
    word.clear();
    for (const char c : std::string_view(norm).substr(start, len)) {
      word += byte_to_gpt2(static_cast<uint8_t>(c));
    }
    start += len;
    bpe_word(word, out);
  }
}

void Tokenizer::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (vocab_.ignore_merges()) {
    const int32_t id = vocab_.text_to_token(word);
    if (id != kNoToken) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  init_symbols(word, symbols);
  BigramQueue queue;
  merge_symbols(symbols, queue, [&](int32_t l, int32_t r) {
    const Symbol& a = symbols[l];
    const Symbol& b = symbols[r];
    const int32_t rank =
        vocab_.bpe_rank(word.substr(a.offset, a.length), word.substr(b.offset, b.length));
    if (rank < 0) return;
    queue.push({-static_cast<double>(rank), l, r, a.length + b.length});
  });
  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece = word.substr(s.offset, s.length);
    const int32_t id = vocab_.text_to_token(piece);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    // llama.cpp then looks up each single byte of the encoded symbol; most are not tokens and
    // are dropped, as there.
    for (const char c : piece) {
      const int32_t b = vocab_.text_to_token(std::string_view(&c, 1));
      if (b != kNoToken) out.push_back(b);
    }
  }
}

std::string Tokenizer::detokenize(std::span<const int32_t> ids, bool remove_special,
                                  bool unparse_special) const {
  std::string out;
  bool remove_space = vocab_.add_space_prefix();
  if (remove_special && vocab_.add_bos() && !ids.empty() && ids.front() == vocab_.bos()) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (remove_special && vocab_.add_eos() && !ids.empty() && ids.back() == vocab_.eos()) {
    ids = ids.first(ids.size() - 1);
  }
  for (const int32_t id : ids) {
    append_piece(out, id, unparse_special, remove_space ? 1 : 0);
    remove_space = false;
  }
  if (vocab_.clean_spaces()) clean_up_spaces(out);
  return out;
}

}  // namespace strata::engine
