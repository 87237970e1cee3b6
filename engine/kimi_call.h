// A tool-call section in Kimi-K2's form, byte by byte, after its <|tool_calls_section_begin|>:
//
//   <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>
//   ... (more calls, when parallel) <|tool_calls_section_end|>
//
// NAME is one of the tools', IDX a call number (1 to 6 digits), the JSON its parameters' schema
// accepts (as tool_call_schema reads them). The markers are rendered tokens (vocab.cpp), so they
// are bytes here. For TokenConstraint (token_constraint.h). Tested by tests/test_tool_calls.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "engine/harmony_call.h"
#include "engine/json_schema.h"

namespace strata::engine {

struct KimiCallSpec {
  std::shared_ptr<const HarmonyCallSpec> functions;  // the tools' names and arguments' schemas
  bool parallel = true;                              // more than one call in the section
};

class KimiCallMatcher {
 public:
  static constexpr std::string_view kCallBegin = "<|tool_call_begin|>";
  static constexpr std::string_view kArgumentBegin = "<|tool_call_argument_begin|>";
  static constexpr std::string_view kCallEnd = "<|tool_call_end|>";
  static constexpr std::string_view kSectionEnd = "<|tool_calls_section_end|>";
  static constexpr size_t kMaxIndexDigits = 6;

  explicit KimiCallMatcher(std::shared_ptr<const KimiCallSpec> spec);

  bool feed(uint8_t b);
  bool feed(std::string_view bytes);
  // The section is complete (its end written): nothing may follow.
  bool finished() const { return phase_ == kDone; }
  bool accepting() const { return finished(); }
  uint32_t plain_string_room() const { return phase_ == kJson ? json_.plain_string_room() : 0; }

 private:
  enum Phase : uint8_t {
    kOpen,
    kName,
    kIndex,
    kArgumentOpen,
    kJson,
    kCallClose,
    kNext,
    kDone,
    kDead
  };
  bool step(uint8_t b);

  std::shared_ptr<const KimiCallSpec> spec_;
  Phase phase_ = kOpen;
  std::string buf_;  // the literal so far, or the name
  int32_t function_ = -1;
  uint32_t calls_ = 0;  // complete calls
  JsonMatcher json_;
};

}  // namespace strata::engine
