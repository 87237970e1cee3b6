// A conversation in DeepSeek-V3.1's tool-call form and the prompt its template, run by Jinja,
// wrote for it (the template is not in the repo): two calls in one section after some text, their
// results, the answer the model went on with, a later call, more text and a call after its
// result. Shared by test_tool_calls (the formatter's text) and test_thinking (the session's
// tokens).
#pragma once

#include <string>
#include <vector>

#include "engine/tool_calls.h"

namespace strata::test {

inline std::vector<engine::ToolMessage> deepseek_conversation() {
  return {
      {"user", "Weather in Paris?", {}},
      {"assistant",
       "Let me check.",
       {{"", "get_weather", R"({"city": "Paris"})"}, {"", "now", "{}"}}},
      {"tool", "sunny", {}},
      {"tool", "noon", {}},
      {"assistant", "Sunny at noon.", {}},
      {"user", "And Oslo?", {}},
      {"assistant", "", {{"", "get_weather", R"({"city": "Oslo"})"}}},
      {"tool", "rain", {}},
      {"assistant", "Rain.", {{"", "now", "{}"}}},
      {"tool", "one", {}},
  };
}

// The prompt through the sixth message ("And Oslo?"), and the rest, which ends with the last
// tool result (no assistant opener: the model goes on from it).
inline const std::string kDeepseekPromptHead =
    "<｜User｜>Weather in Paris?<｜Assistant｜></think>Let me check.<｜tool▁calls▁begin｜>"
    "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜>"
    "<｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    "<｜end▁of▁sentence｜><｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>"
    "<｜tool▁output▁begin｜>noon<｜tool▁output▁end｜>Sunny at noon.<｜end▁of▁sentence｜>"
    "<｜User｜>And Oslo?";
inline const std::string kDeepseekPromptRest =
    "<｜Assistant｜></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
    "{\"city\": \"Oslo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
    "<｜tool▁output▁begin｜>rain<｜tool▁output▁end｜>Rain.<｜tool▁calls▁begin｜>"
    "<｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    "<｜end▁of▁sentence｜><｜tool▁output▁begin｜>one<｜tool▁output▁end｜>";

}  // namespace strata::test
