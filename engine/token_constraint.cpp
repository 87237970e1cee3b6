// Structured output at the token level (see token_constraint.h).
#include "engine/token_constraint.h"

#include <chrono>
#include <cmath>

#include "engine/tokenizer.h"
#include "io/check.h"

namespace strata::engine {

TokenTexts::TokenTexts(const Tokenizer& tok) {
  const Vocab& v = tok.vocab();
  const auto n = size_t(v.n_tokens());
  offsets_.reserve(n + 1);
  eog_.resize(n);
  offsets_.push_back(0);
  for (size_t id = 0; id < n; ++id) {
    tok.append_piece(bytes_, int32_t(id), /*special=*/false);
    offsets_.push_back(uint32_t(bytes_.size()));
    eog_[id] = v.is_eog(int32_t(id)) ? 1 : 0;
  }
}

TokenConstraint::TokenConstraint(std::shared_ptr<const JsonSchema> schema,
                                 std::shared_ptr<const TokenTexts> texts)
    : texts_(std::move(texts)), matcher_(schema), scratch_(schema) {}

bool TokenConstraint::allows(int32_t id) {
  if (id < 0 || size_t(id) >= texts_->size()) return false;
  if (texts_->eog(id)) return matcher_.accepting();
  const std::string_view t = texts_->text(id);
  if (t.empty()) return false;
  scratch_ = matcher_;
  return scratch_.feed(t);
}

void TokenConstraint::mask(std::span<float> logits) {
  const auto t0 = std::chrono::steady_clock::now();
  // Which first bytes survive: most tokens are ruled out by their first byte without copying
  // the matcher (outside a string only a few bytes may come next).
  std::array<uint8_t, 256> first{};
  for (int b = 0; b < 256; ++b) {
    scratch_ = matcher_;
    first[size_t(b)] = scratch_.feed(uint8_t(b)) ? 1 : 0;
  }
  for (size_t id = 0; id < logits.size(); ++id) {
    if (logits[id] == -INFINITY) continue;
    bool ok = false;
    if (id < texts_->size()) {
      if (texts_->eog(int32_t(id))) {
        ok = matcher_.accepting();
      } else {
        const std::string_view t = texts_->text(int32_t(id));
        if (!t.empty() && first[uint8_t(t[0])]) {
          if (t.size() == 1) {
            ok = true;
          } else {
            scratch_ = matcher_;
            ok = scratch_.feed(t);
          }
        }
      }
    }
    if (!ok) logits[id] = -INFINITY;
  }
  ++masks_;
  mask_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void TokenConstraint::accept(int32_t id) {
  if (texts_->eog(id)) return;
  const bool ok = matcher_.feed(texts_->text(id));
  STRATA_ASSERT(ok, "TokenConstraint::accept: token {} is not allowed", id);
}

}  // namespace strata::engine
