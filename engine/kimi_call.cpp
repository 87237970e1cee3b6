// A tool-call section in Kimi-K2's form, byte by byte (see kimi_call.h).
#include "engine/kimi_call.h"

#include <algorithm>

namespace strata::engine {
namespace {
constexpr std::string_view kOpenText = "<|tool_call_begin|>functions.";
}  // namespace

KimiCallMatcher::KimiCallMatcher(std::shared_ptr<const KimiCallSpec> spec)
    : spec_(std::move(spec)), json_(JsonSchema::any_value()) {}

bool KimiCallMatcher::feed(std::string_view bytes) {
  for (const char c : bytes)
    if (!feed(uint8_t(c))) return false;
  return true;
}

bool KimiCallMatcher::feed(uint8_t b) {
  if (phase_ == kDead) return false;
  if (!step(b)) phase_ = kDead;
  return phase_ != kDead;
}

bool KimiCallMatcher::step(uint8_t b) {
  const auto& fns = spec_->functions->functions;
  // The next byte of a literal: done (then `then`), under way, or not it.
  const auto literal = [&](std::string_view lit, Phase then) {
    buf_ += char(b);
    if (!lit.starts_with(buf_)) return false;
    if (buf_.size() == lit.size()) {
      buf_.clear();
      phase_ = then;
    }
    return true;
  };
  switch (phase_) {
    case kOpen:
      return literal(kOpenText, kName);
    case kName: {
      if (b == ':') {
        const auto f =
            std::find_if(fns.begin(), fns.end(),
                         [&](const HarmonyCallSpec::Function& x) { return x.name == buf_; });
        if (f == fns.end()) return false;
        function_ = int32_t(f - fns.begin());
        buf_.clear();
        phase_ = kIndex;
        return true;
      }
      buf_ += char(b);
      return std::any_of(fns.begin(), fns.end(), [&](const HarmonyCallSpec::Function& x) {
        return std::string_view(x.name).starts_with(buf_);
      });
    }
    case kIndex:
      if (b >= '0' && b <= '9' && buf_.size() < kMaxIndexDigits) {
        buf_ += char(b);
        return true;
      }
      if (buf_.empty()) return false;
      buf_.clear();
      phase_ = kArgumentOpen;
      return step(b);
    case kArgumentOpen:
      if (!literal(kArgumentBegin, kJson)) return false;
      if (phase_ == kJson) json_ = JsonMatcher(fns[size_t(function_)].arguments);
      return true;
    case kJson:
      if (!json_.finished()) return json_.feed(b);
      phase_ = kCallClose;
      return step(b);
    case kCallClose:
      if (!literal(kCallEnd, kNext)) return false;
      if (phase_ == kNext) ++calls_;
      return true;
    case kNext:
      // Another call (parallel), or the section's end.
      buf_ += char(b);
      if (spec_->parallel && kCallBegin.starts_with(buf_)) {
        if (buf_.size() == kCallBegin.size()) phase_ = kOpen;  // buf_ keeps what kOpen matched
        return true;
      }
      if (kSectionEnd.starts_with(buf_)) {
        if (buf_.size() == kSectionEnd.size()) {
          buf_.clear();
          phase_ = kDone;
        }
        return true;
      }
      return false;
    case kDone:
    case kDead:
      return false;
  }
  return false;
}

}  // namespace strata::engine
