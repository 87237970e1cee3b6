// A tool call in gpt-oss's harmony form, byte by byte, after a header's " to=functions.":
//
//   NAME <|constrain|>json<|message|>{...}      (the form the model writes), or
//   NAME<|channel|>commentary json<|message|>{...}  (the form the chat template writes), …
//
// NAME is one of the tools', the JSON its parameters' schema accepts (as tool_call_schema reads
// them). The reply ends when the JSON is complete (the model would write <|call|>). For
// TokenConstraint (token_constraint.h); harmony's <|constrain|>, <|channel|> and <|message|> are
// rendered tokens (vocab.cpp), so they are bytes here. Tested by tests/test_tool_calls.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/json_schema.h"

namespace strata::engine {

struct HarmonyCallSpec {
  struct Function {
    std::string name;
    std::shared_ptr<const JsonSchema> arguments;
  };
  std::vector<Function> functions;
};

class HarmonyCallMatcher {
 public:
  // What may come between NAME and the JSON.
  static constexpr std::string_view kEndings[] = {
      " <|constrain|>json<|message|>",
      "<|constrain|>json<|message|>",
      " json<|message|>",
      "<|channel|>commentary <|constrain|>json<|message|>",
      "<|channel|>commentary json<|message|>",
      "<|channel|>commentary<|message|>",
      "<|message|>"};

  explicit HarmonyCallMatcher(std::shared_ptr<const HarmonyCallSpec> spec);

  bool feed(uint8_t b);
  bool feed(std::string_view bytes);
  bool accepting() const { return phase_ == kJson && json_.accepting(); }
  bool finished() const { return phase_ == kJson && json_.finished(); }
  uint32_t plain_string_room() const { return phase_ == kJson ? json_.plain_string_room() : 0; }

 private:
  enum Phase : uint8_t { kName, kEnding, kJson, kDead };
  std::shared_ptr<const HarmonyCallSpec> spec_;
  Phase phase_ = kName;
  std::string buf_;  // the name, then the ending so far
  int32_t function_ = -1;
  JsonMatcher json_;
};

}  // namespace strata::engine
