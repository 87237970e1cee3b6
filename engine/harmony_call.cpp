// A tool call in gpt-oss's harmony form, byte by byte (see harmony_call.h).
#include "engine/harmony_call.h"

#include <algorithm>

namespace strata::engine {

HarmonyCallMatcher::HarmonyCallMatcher(std::shared_ptr<const HarmonyCallSpec> spec)
    : spec_(std::move(spec)), json_(JsonSchema::any_value()) {}

bool HarmonyCallMatcher::feed(std::string_view bytes) {
  for (const char c : bytes)
    if (!feed(uint8_t(c))) return false;
  return true;
}

bool HarmonyCallMatcher::feed(uint8_t b) {
  const auto& fns = spec_->functions;
  switch (phase_) {
    case kName: {
      // A name ends at the first byte that starts an ending (' ' or '<').
      if (b == ' ' || b == '<') {
        const auto f =
            std::find_if(fns.begin(), fns.end(),
                         [&](const HarmonyCallSpec::Function& x) { return x.name == buf_; });
        if (f == fns.end()) break;
        function_ = int32_t(f - fns.begin());
        buf_.assign(1, char(b));
        phase_ = kEnding;
        return true;
      }
      buf_ += char(b);
      if (std::any_of(fns.begin(), fns.end(), [&](const HarmonyCallSpec::Function& x) {
            return std::string_view(x.name).starts_with(buf_);
          }))
        return true;
      break;
    }
    case kEnding: {
      buf_ += char(b);
      bool prefix = false;
      for (const std::string_view e : kEndings) {
        if (e == buf_) {
          json_ = JsonMatcher(fns[size_t(function_)].arguments);
          phase_ = kJson;
          return true;
        }
        prefix = prefix || e.starts_with(buf_);
      }
      if (prefix) return true;
      break;
    }
    case kJson:
      if (json_.feed(b)) return true;
      break;
    case kDead:
      break;
  }
  phase_ = kDead;
  return false;
}

}  // namespace strata::engine
