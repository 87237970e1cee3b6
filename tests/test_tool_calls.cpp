// Function calling in the Hermes format (engine/tool_calls.h): the conversation rendered as
// Qwen3's chat template renders tools, calls and tool results; calls parsed back from a reply;
// OpenAI tools checked; the call schema.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/json_schema.h"
#include "engine/tool_calls.h"
#include "io/check.h"

using namespace strata;
using namespace strata::engine;
using ojson = nlohmann::ordered_json;

namespace {

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                  "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "now", "description": "The time, à la minute"}}
])";

TEST(ToolCalls, TemplateJsonIsTojsons) {
  EXPECT_EQ(template_json(ojson::parse(R"({"b": [1, 2.5, "x"], "a": {"k": null, "t": true}})")),
            R"({"b": [1, 2.5, "x"], "a": {"k": null, "t": true}})");
  EXPECT_EQ(template_json(ojson::parse(R"("é\n")")), "\"é\\n\"");
}

TEST(ToolCalls, RendersAsQwen3sTemplate) {
  const std::vector<ToolSpec> tools = parse_tools(ojson::parse(kTools));
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[0].name, "get_weather");
  EXPECT_EQ(
      tools[1].json_text,
      R"({"type": "function", "function": {"name": "now", "description": "The time, à la minute"}})");
  const std::vector<ToolMessage> msgs = {
      {"system", "Be brief.", {}},
      {"user", "Weather in Paris and Oslo?", {}},
      {"assistant",
       "",
       {{"a", "get_weather", R"({"city": "Paris"})"}, {"b", "get_weather", R"({"city": "Oslo"})"}}},
      {"tool", "18 C", {}},
      {"tool", "4 C", {}},
      {"assistant", "Paris 18 C, Oslo 4 C.", {}},
      {"user", "Thanks", {}},
  };
  const std::vector<ChatMessage> out = render_hermes(msgs, tools);
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[0].role, "system");
  EXPECT_EQ(out[0].content,
            "Be brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
            "query.\n\nYou are provided with function signatures within <tools></tools> XML "
            "tags:\n<tools>\n" +
                tools[0].json_text + "\n" + tools[1].json_text +
                "\n</tools>\n\nFor each function call, return a json object with function name "
                "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
                "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
  EXPECT_EQ(out[1].content, "Weather in Paris and Oslo?");
  EXPECT_EQ(out[2].role, "assistant");
  EXPECT_EQ(out[2].content,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
            "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
            "\"Oslo\"}}\n</tool_call>");
  EXPECT_EQ(out[3].role, "user");
  EXPECT_EQ(out[3].content,
            "<tool_response>\n18 C\n</tool_response>\n<tool_response>\n4 C\n</tool_response>");
  EXPECT_EQ(out[4].content, "Paris 18 C, Oslo 4 C.");
  // No system message: the tools' block is one. No tools: the messages as they are.
  const std::vector<ChatMessage> bare = render_hermes({{"user", "hi", {}}}, tools);
  ASSERT_EQ(bare.size(), 2u);
  EXPECT_TRUE(bare[0].content.starts_with("# Tools\n"));
  const std::vector<ChatMessage> none =
      render_hermes({{"assistant", "ok", {{"", "now", "{}"}}}}, {});
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].content,
            "ok\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>");
}

TEST(ToolCalls, ParsesCallsFromAReply) {
  ParsedCalls p = parse_hermes_calls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": \"{}\"}\n"
      "</tool_call>");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(p.calls[0].arguments), nlohmann::json({{"city", "Paris"}}));
  EXPECT_EQ(p.calls[1].name, "now");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  EXPECT_EQ(p.content, "Let me check.");
  // The reply ended with the call's JSON (no closing tag).
  p = parse_hermes_calls("<tool_call>{\"name\": \"now\", \"arguments\": {}}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "");
  // Not a call: bad JSON, no name, arguments a number: the text stays.
  for (const char* bad : {"<tool_call>{\"name\": \"now\", \"arguments\": {</tool_call>",
                          "<tool_call>{\"arguments\": {}}</tool_call>",
                          "<tool_call>{\"name\": \"now\", \"arguments\": 3}</tool_call>"}) {
    p = parse_hermes_calls(bad);
    EXPECT_TRUE(p.calls.empty()) << bad;
    EXPECT_EQ(p.content, bad);
  }
  p = parse_hermes_calls("plain answer");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "plain answer");
}

TEST(ToolCalls, BadToolsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "function"})", "'tools' must be an array"},
      {R"([{"type": "retrieval"}])", "tools[0] must be"},
      {R"([{"type": "function", "function": {"description": "x"}}])", "non-empty string 'name'"},
      {R"([{"type": "function", "function": {"name": "a", "parameters": 3}}])",
       "parameters must be an object"},
      {R"([{"type": "function", "function": {"name": "a"}},
           {"type": "function", "function": {"name": "a"}}])",
       "a second function named 'a'"},
  };
  for (const auto& [text, want] : cases) {
    try {
      parse_tools(ojson::parse(text));
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(ToolCalls, CallSchemaTakesTheToolsOnly) {
  std::vector<ToolSpec> tools = parse_tools(ojson::parse(kTools));
  // A parameters schema outside the subset: that tool's arguments are any object.
  tools.push_back(parse_tools(ojson::parse(
      R"([{"type": "function", "function": {"name": "odd", "parameters":
          {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}}}])"))[0]);
  const auto schema = tool_call_schema(tools);
  const auto accepts = [&](std::string_view text) {
    JsonMatcher m(schema);
    return m.feed(text) && m.accepting();
  };
  EXPECT_TRUE(accepts(R"({"name": "get_weather", "arguments": {"city": "Oslo"}})"));
  EXPECT_TRUE(accepts(R"({"arguments": {"city": "Oslo", "unit": "c"}, "name": "get_weather"})"));
  EXPECT_TRUE(accepts(R"({"name": "now", "arguments": {}})"));
  EXPECT_TRUE(accepts(R"({"name": "odd", "arguments": {"n": 3, "m": [1]}})"));
  EXPECT_FALSE(accepts(R"({"name": "get_weather", "arguments": {}})"));  // city required
  EXPECT_FALSE(accepts(R"({"name": "get_weather", "arguments": {"city": "x", "unit": "k"}})"));
  EXPECT_FALSE(accepts(R"({"name": "other", "arguments": {}})"));
  EXPECT_FALSE(accepts(R"({"name": "now"})"));
  EXPECT_FALSE(accepts(R"({"name": "now", "arguments": {"x": 1}})"));  // no parameters: {} only
}

}  // namespace
