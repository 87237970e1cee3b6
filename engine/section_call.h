// A tool-call section, byte by byte after its opening: Kimi-K2's
//
//   <|tool_calls_section_begin|>
//   <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>
//   ... (more calls, when parallel) <|tool_calls_section_end|>
//
// and DeepSeek-V3.1's
//
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
//   ... (more calls, when parallel) <｜tool▁calls▁end｜>
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

// A format's markers. A call is call_begin, name_prefix, NAME (ended by ':' and its index when
// `indexed`, else by argument_begin), argument_begin, the JSON, call_end.
struct SectionCallSyntax {
  std::string_view section_begin;
  std::string_view call_begin;
  std::string_view name_prefix;
  bool indexed = false;
  std::string_view argument_begin;
  std::string_view call_end;
  std::string_view section_end;
};
inline constexpr SectionCallSyntax kKimiSyntax = {.section_begin = "<|tool_calls_section_begin|>",
                                                  .call_begin = "<|tool_call_begin|>",
                                                  .name_prefix = "functions.",
                                                  .indexed = true,
                                                  .argument_begin = "<|tool_call_argument_begin|>",
                                                  .call_end = "<|tool_call_end|>",
                                                  .section_end = "<|tool_calls_section_end|>"};
inline constexpr SectionCallSyntax kDeepseekSyntax = {.section_begin = "<｜tool▁calls▁begin｜>",
                                                      .call_begin = "<｜tool▁call▁begin｜>",
                                                      .name_prefix = "",
                                                      .indexed = false,
                                                      .argument_begin = "<｜tool▁sep｜>",
                                                      .call_end = "<｜tool▁call▁end｜>",
                                                      .section_end = "<｜tool▁calls▁end｜>"};

struct SectionCallSpec {
  std::shared_ptr<const HarmonyCallSpec> functions;  // the tools' names and arguments' schemas
  bool parallel = true;                              // more than one call in the section
  SectionCallSyntax syntax = kKimiSyntax;
};

class SectionCallMatcher {
 public:
  static constexpr size_t kMaxIndexDigits = 6;

  explicit SectionCallMatcher(std::shared_ptr<const SectionCallSpec> spec);

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
  // The name so far is a whole tool's: its function, else false.
  bool name_done();

  std::shared_ptr<const SectionCallSpec> spec_;
  std::string open_;  // call_begin and name_prefix
  Phase phase_ = kOpen;
  std::string buf_;  // the literal so far, or the name
  int32_t function_ = -1;
  uint32_t calls_ = 0;  // complete calls
  JsonMatcher json_;
};

}  // namespace strata::engine
