// Structured output at the token level (see token_constraint.h).
#include "engine/token_constraint.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/tokenizer.h"
#include "engine/unicode.h"
#include "io/check.h"

namespace strata::engine {

namespace {

// Code points of `t` when a JSON string may hold it as it stands (see TokenTexts::plain).
uint32_t plain_chars(std::string_view t) {
  uint32_t chars = 0;
  for (size_t i = 0; i < t.size();) {
    const auto b = uint8_t(t[i]);
    if (b < 0x20 || b == '"' || b == '\\') return 0;
    size_t len = 1;
    ByteRange second{0x80, 0xBF};
    if (b >= 0x80) {
      if (b < 0xC2 || b > 0xF4) return 0;
      len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
      second = utf8_second_byte(b);
    }
    if (i + len > t.size()) return 0;  // a character cut by the token's end
    for (size_t k = 1; k < len; ++k) {
      const auto c = uint8_t(t[i + k]);
      const ByteRange r = k == 1 ? second : ByteRange{0x80, 0xBF};
      if (c < r.lo || c > r.hi) return 0;
    }
    i += len;
    ++chars;
  }
  return chars > 0xFFFF ? 0 : chars;
}

}  // namespace

TokenTexts::TokenTexts(const Tokenizer& tok) {
  const Vocab& v = tok.vocab();
  const auto n = size_t(v.n_tokens());
  offsets_.reserve(n + 1);
  eog_.resize(n);
  plain_.resize(n);
  offsets_.push_back(0);
  for (size_t id = 0; id < n; ++id) {
    tok.append_piece(bytes_, int32_t(id), /*special=*/false);
    offsets_.push_back(uint32_t(bytes_.size()));
    eog_[id] = v.is_eog(int32_t(id)) ? 1 : 0;
    plain_[id] = eog_[id] ? 0 : uint16_t(plain_chars(text(int32_t(id))));
  }
}

template <class Matcher>
bool BasicTokenConstraint<Matcher>::allows(int32_t id) {
  if (id < 0 || size_t(id) >= texts_->size()) return false;
  if (texts_->eog(id)) return matcher_.accepting();
  const std::string_view t = texts_->text(id);
  if (t.empty()) return false;
  scratch_ = matcher_;
  return scratch_.feed(t);
}

template <class Matcher>
void BasicTokenConstraint<Matcher>::mask(std::span<float> logits) {
  const auto t0 = std::chrono::steady_clock::now();
  // Which first bytes survive: most tokens are ruled out by their first byte without copying
  // the matcher (outside a string only a few bytes may come next).
  std::array<uint8_t, 256> first{};
  for (int b = 0; b < 256; ++b) {
    scratch_ = matcher_;
    first[size_t(b)] = scratch_.feed(uint8_t(b)) ? 1 : 0;
  }
  std::fill(pairs_.begin(), pairs_.end(), uint8_t(0));
  // Inside a string, plain text of at most `room` characters passes without being fed.
  const uint32_t room = matcher_.plain_string_room();
  for (size_t id = 0; id < logits.size(); ++id) {
    if (logits[id] == -INFINITY) continue;
    bool ok = false;
    if (id < texts_->size()) {
      const uint32_t chars = texts_->plain(int32_t(id));
      if (chars && chars <= room) {
        ok = true;
      } else if (texts_->eog(int32_t(id))) {
        ok = matcher_.accepting();
      } else {
        const std::string_view t = texts_->text(int32_t(id));
        if (!t.empty() && first[uint8_t(t[0])]) {
          if (t.size() == 1) {
            ok = true;
          } else {
            // Then the first two bytes (memoized per pair: between values most tokens that
            // start with a space go on with a letter), then the whole token.
            uint8_t& pair = pairs_[size_t(uint8_t(t[0])) << 8 | uint8_t(t[1])];
            if (pair == 0) {
              scratch_ = matcher_;
              pair = scratch_.feed(t.substr(0, 2)) ? 1 : 2;
            }
            if (pair == 1) {
              if (t.size() == 2) {
                ok = true;
              } else {
                scratch_ = matcher_;
                ok = scratch_.feed(t);
              }
            }
          }
        }
      }
    }
    if (!ok) logits[id] = -INFINITY;
  }
  ++masks_;
  mask_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <class Matcher>
void BasicTokenConstraint<Matcher>::accept(int32_t id) {
  if (texts_->eog(id)) return;
  const bool ok = matcher_.feed(texts_->text(id));
  STRATA_ASSERT(ok, "TokenConstraint::accept: token {} is not allowed", id);
}

template class BasicTokenConstraint<JsonMatcher>;
template class BasicTokenConstraint<XmlCallMatcher>;
template class BasicTokenConstraint<HarmonyCallMatcher>;
template class BasicTokenConstraint<SectionCallMatcher>;

}  // namespace strata::engine
