// A tool-call section in Kimi-K2's or DeepSeek-V3.1's form, byte by byte (see section_call.h).
#include "engine/section_call.h"

#include <algorithm>

namespace strata::engine {

SectionCallMatcher::SectionCallMatcher(std::shared_ptr<const SectionCallSpec> spec)
    : spec_(std::move(spec)),
      open_(std::string(spec_->syntax.call_begin) + std::string(spec_->syntax.name_prefix)),
      json_(JsonSchema::any_value()) {}

bool SectionCallMatcher::feed(std::string_view bytes) {
  for (const char c : bytes)
    if (!feed(uint8_t(c))) return false;
  return true;
}

bool SectionCallMatcher::feed(uint8_t b) {
  if (phase_ == kDead) return false;
  if (!step(b)) phase_ = kDead;
  return phase_ != kDead;
}

bool SectionCallMatcher::name_done() {
  const auto& fns = spec_->functions->functions;
  const auto f = std::find_if(fns.begin(), fns.end(),
                              [&](const HarmonyCallSpec::Function& x) { return x.name == buf_; });
  if (f == fns.end()) return false;
  function_ = int32_t(f - fns.begin());
  buf_.clear();
  return true;
}

bool SectionCallMatcher::step(uint8_t b) {
  const SectionCallSyntax& syn = spec_->syntax;
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
      return literal(open_, kName);
    case kName: {
      if (syn.indexed ? b == ':' : b == uint8_t(syn.argument_begin[0])) {
        if (!name_done()) return false;
        phase_ = syn.indexed ? kIndex : kArgumentOpen;
        return syn.indexed || step(b);
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
      if (!literal(syn.argument_begin, kJson)) return false;
      if (phase_ == kJson) json_ = JsonMatcher(fns[size_t(function_)].arguments);
      return true;
    case kJson:
      if (!json_.finished()) return json_.feed(b);
      phase_ = kCallClose;
      return step(b);
    case kCallClose:
      if (!literal(syn.call_end, kNext)) return false;
      if (phase_ == kNext) ++calls_;
      return true;
    case kNext:
      // Another call (parallel), or the section's end.
      buf_ += char(b);
      if (spec_->parallel && std::string_view(open_).starts_with(buf_)) {
        if (buf_.size() == open_.size()) {
          buf_.clear();
          phase_ = kName;
        }
        return true;
      }
      if (syn.section_end.starts_with(buf_)) {
        if (buf_.size() == syn.section_end.size()) {
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
