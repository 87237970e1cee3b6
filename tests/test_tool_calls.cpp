// Function calling (engine/tool_calls.h, xml_call.h, section_call.h, harmony_call.h): the
// conversation rendered as Qwen3's (Hermes), Qwen3-Coder's and GLM-4.5's (XML), Kimi-K2's and
// DeepSeek-V3.1's (sections) and gpt-oss's (harmony) chat templates render tools, calls and tool
// results; calls parsed back from a reply; OpenAI tools checked; the Hermes call schema and the
// XML, section and harmony call matchers.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "deepseek_v31_prompt.h"
#include "engine/chat_template.h"
#include "engine/json_schema.h"
#include "engine/tool_calls.h"
#include "io/check.h"
#include "tool_calls_probe.h"

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

// A parser leaves each of `texts` as it stands: no call, the text its content.
template <class Parse>
void expect_left_as_text(const Parse& parse, std::initializer_list<const char*> texts) {
  for (const char* t : texts) {
    const ParsedCalls p = parse(t);
    EXPECT_TRUE(p.calls.empty()) << t;
    EXPECT_EQ(p.content, t);
  }
}

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
  // Arguments as written: a long integer keeps its digits, keys their order.
  p = parse_hermes_calls(
      "<tool_call>\n{\"arguments\" :{\"n\": 123456789012345678901234567890, \"a\": "
      "[\"}\\\"]\"]} , \"name\": \"pick\"}\n</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"n\": 123456789012345678901234567890, \"a\": [\"}\\\"]\"]}");
  // The reply ended with the call's JSON (no closing tag).
  p = parse_hermes_calls("<tool_call>{\"name\": \"now\", \"arguments\": {}}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "");
  // Not a call: bad JSON, no name, arguments a number: the text stays.
  expect_left_as_text([&](std::string_view t) { return parse_hermes_calls(t); },
                      {"<tool_call>{\"name\": \"now\", \"arguments\": {</tool_call>",
                       "<tool_call>{\"arguments\": {}}</tool_call>",
                       "<tool_call>{\"name\": \"now\", \"arguments\": 3}</tool_call>"});
  p = parse_hermes_calls("plain answer");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "plain answer");
  // A string that holds "</tool_call>" stays in the call (the JSON is read to its end), and text
  // after the block is content.
  p = parse_hermes_calls(
      "<tool_call>\n{\"name\": \"save\", \"arguments\": {\"text\": \"a</tool_call>b\"}}\n"
      "</tool_call> done");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"text": "a</tool_call>b"})");
  EXPECT_EQ(p.content, "done");
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

TEST(ToolCalls, FormatFromTheTemplate) {
  EXPECT_EQ(tool_format(""), ToolFormat::kNone);
  EXPECT_EQ(tool_format("{{- '<tool_call>\\n{\"name\": ' }}"), ToolFormat::kHermes);
  EXPECT_EQ(tool_format("'<parameters>' ... '<tool_call>\\n<function=' + name"),
            ToolFormat::kQwenXml);
  // XML calls whose tools are written otherwise (Qwen3.5's tojson): not a format strata writes.
  EXPECT_EQ(tool_format("tool | tojson ... '<tool_call>\\n<function=' + name"), ToolFormat::kNone);
  // GLM-4.5's: a chatglm4 template with <tool_call> and <arg_key>.
  const char* glm = "[gMASK]<sop>{%- if tools -%}<tool_call>{function-name}\n<arg_key>";
  EXPECT_EQ(tool_format(ChatFamily::kChatglm4, glm), ToolFormat::kGlmXml);
  EXPECT_EQ(tool_format(ChatFamily::kChatglm4, "[gMASK]<sop>"), ToolFormat::kNone);
  EXPECT_EQ(tool_format(ChatFamily::kChatml, "<tool_call>"), ToolFormat::kHermes);
  EXPECT_EQ(tool_format(ChatFamily::kGptOss, ""), ToolFormat::kHarmony);
  // Kimi-K2's: its family with the section marker, or (older templates) tool_declare.
  EXPECT_EQ(tool_format(ChatFamily::kKimiK2, "<|tool_calls_section_begin|>"), ToolFormat::kKimi);
  EXPECT_EQ(tool_format(ChatFamily::kKimiK2, "<|im_system|>tool_declare<|im_middle|>"),
            ToolFormat::kKimi);
  EXPECT_EQ(tool_format(ChatFamily::kKimiK2, "<|im_assistant|>assistant<|im_middle|>"),
            ToolFormat::kNone);
  // DeepSeek-V3.1's: the name before <｜tool▁sep｜>; V3's and R1's (the type before it, the JSON
  // fenced) are not a format strata writes.
  EXPECT_EQ(tool_format(ChatFamily::kDeepseek3,
                        "'<｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>'"),
            ToolFormat::kDeepseek);
  EXPECT_EQ(tool_format(ChatFamily::kDeepseek3,
                        "tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + "
                        "'```json'"),
            ToolFormat::kNone);
  EXPECT_EQ(tool_format(ChatFamily::kDeepseek3, "<｜Assistant｜>"), ToolFormat::kNone);
  // MiniMax-M2's: its family with the section's opening and <invoke name=.
  EXPECT_EQ(tool_format(ChatFamily::kMinimaxM2,
                        "'<minimax:tool_call>' -%}\n<invoke name=\"tool-name-1\">"),
            ToolFormat::kMinimax);
  EXPECT_EQ(tool_format(ChatFamily::kMinimaxM2, "]~b]ai"), ToolFormat::kNone);
  EXPECT_EQ(tool_format(ChatFamily::kChatml, "<minimax:tool_call><invoke name="),
            ToolFormat::kNone);
}

// One random walk over the bytes a matcher allows (1 to max_byte), three times in four among the
// structural ones (those of `structural`, and with `high` every byte from 0x80), so that walks
// end: the bytes written when the matcher finished within `limit` of them, else nullopt. A dead
// end (no byte allowed) fails the test.
template <class Matcher>
std::optional<std::string> random_walk(Matcher m, std::mt19937& rng, int max_byte,
                                       std::string_view structural, bool high, size_t limit) {
  std::string text;
  while (!m.finished() && text.size() < limit) {
    std::vector<uint8_t> ok, preferred;
    for (int b = 1; b <= max_byte; ++b) {
      Matcher t = m;
      if (!t.feed(uint8_t(b))) continue;
      ok.push_back(uint8_t(b));
      if ((high && b >= 0x80) || structural.find(char(b)) != std::string_view::npos)
        preferred.push_back(uint8_t(b));
    }
    if (ok.empty()) {
      ADD_FAILURE() << "dead end after: " << text;
      return std::nullopt;
    }
    const std::vector<uint8_t>& from = !preferred.empty() && rng() % 4 != 0 ? preferred : ok;
    const uint8_t b = from[rng() % from.size()];
    EXPECT_TRUE(m.feed(b));
    text += char(b);
  }
  return m.finished() ? std::optional<std::string>(text) : std::nullopt;
}

// Tools with typed, bounded and free parameters, for the XML form.
const char* kXmlTools = R"([
  {"type": "function", "function": {"name": "pick", "parameters": {"type": "object",
   "properties": {"n": {"type": "integer", "description": " count ", "minimum": 1,
                        "x-hint": {"a": true}, "flag": false},
                  "opts": {"type": "object"}, "tag": {"type": "string", "maxLength": 3}},
   "required": ["n"]}}},
  {"type": "function", "function": {"name": "free", "parameters": {"type": "object"}}}
])";

std::vector<ToolSpec> all_tools() {
  std::vector<ToolSpec> tools = parse_tools(ojson::parse(kTools));
  for (ToolSpec& t : parse_tools(ojson::parse(kXmlTools))) tools.push_back(std::move(t));
  return tools;
}

TEST(ToolCalls, RendersAsQwen3CodersTemplate) {
  const std::vector<ToolSpec> tools = all_tools();
  const std::vector<ToolMessage> msgs = {
      {"system", "Be brief.", {}},
      {"user", "Weather in Paris and Oslo?", {}},
      {"assistant",
       "",
       {{"a", "get_weather", R"({"city": "Paris"})"}, {"b", "get_weather", R"({"city": "Oslo"})"}}},
      {"tool", "18 C", {}},
      {"tool", "4 C", {}},
      {"assistant", " Checking. ", {{"c", "pick", R"({"n": 3, "opts": {"a": [1, "x"]}})"}}},
      {"tool", "ok", {}},
      {"assistant", "Done.", {}},
  };
  const std::vector<ChatMessage> out = render_qwen_xml(msgs, tools);
  ASSERT_EQ(out.size(), 7u);
  EXPECT_EQ(out[0].role, "system");
  const std::string kHead = "\n\nYou have access to the following functions:\n\n<tools>";
  const std::string kWeather =
      "\n<function>\n<name>get_weather</name>\n<description>Weather in a city</description>\n"
      "<parameters>\n<parameter>\n<name>city</name>\n<type>string</type>\n</parameter>\n"
      "<parameter>\n<name>unit</name>\n</parameter>\n<required>[`city`]</required>\n"
      "</parameters>\n</function>";
  const std::string kNow =
      "\n<function>\n<name>now</name>\n<description>The time, à la minute</description>\n"
      "<parameters>\n</parameters>\n</function>";
  const std::string kPick =
      "\n<function>\n<name>pick</name>\n<description></description>\n<parameters>\n<parameter>\n"
      "<name>n</name>\n<type>integer</type>\n<description>count</description>\n<minimum>1"
      "</minimum>\n<x_hint>{\"a\": true}</x_hint>\n<flag>False</flag>\n</parameter>\n<parameter>"
      "\n<name>opts</name>\n<type>object</type>\n</parameter>\n<parameter>\n<name>tag</name>\n"
      "<type>string</type>\n<maxLength>3</maxLength>\n</parameter>\n<required>[`n`]</required>\n"
      "</parameters>\n</function>";
  const std::string kFree =
      "\n<function>\n<name>free</name>\n<description></description>\n<parameters>\n"
      "</parameters>\n</function>";
  ASSERT_TRUE(out[0].content.starts_with("Be brief." + kHead + kWeather + kNow + kPick + kFree +
                                         "\n</tools>\n\nIf you choose to call a function ONLY"))
      << out[0].content;
  EXPECT_TRUE(out[0].content.ends_with("do not tell the user about function calls\n</IMPORTANT>"));
  EXPECT_EQ(out[1].content, "Weather in Paris and Oslo?");
  EXPECT_EQ(out[2].role, "assistant");
  EXPECT_EQ(out[2].content,
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
            "Oslo\n</parameter>\n</function>\n</tool_call>");
  EXPECT_EQ(out[3].role, "user");
  EXPECT_EQ(out[3].content,
            "<tool_response>\n18 C\n</tool_response>\n<tool_response>\n4 C\n</tool_response>\n");
  EXPECT_EQ(out[4].content,
            "Checking.\n\n<tool_call>\n<function=pick>\n<parameter=n>\n3\n</parameter>\n"
            "<parameter=opts>\n{\"a\": [1, \"x\"]}\n</parameter>\n</function>\n</tool_call>");
  EXPECT_EQ(out[6].content, "Done.");
  // No system message: the template's own, with the tools. No tools: the messages as they are.
  const std::vector<ChatMessage> bare = render_qwen_xml({{"user", "hi", {}}}, tools);
  ASSERT_EQ(bare.size(), 2u);
  EXPECT_TRUE(bare[0].content.starts_with(
      "You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks." +
      kHead));
  const std::vector<ChatMessage> none = render_qwen_xml({{"user", "hi", {}}}, {});
  ASSERT_EQ(none.size(), 1u);
  // A call whose arguments are not an object cannot be written.
  EXPECT_THROW(render_qwen_xml({{"assistant", "", {{"", "now", "[1]"}}}}, tools), Error);
}

// Both XML forms' test reply: text, then get_weather's city "New\nYork", then pick's n 3, opts
// {"a": 1} and tag 42.
void expect_two_calls(const ParsedCalls& p) {
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"New\nYork"})");
  EXPECT_EQ(p.calls[1].name, "pick");
  // n and opts are JSON, as written; tag is a string parameter, so "42" stays text.
  EXPECT_EQ(p.calls[1].arguments, R"({"n":3,"opts":{"a": 1},"tag":"42"})");
  EXPECT_EQ(p.content, "Let me check.");
}

TEST(ToolCalls, ParsesXmlCallsFromAReply) {
  const std::vector<ToolSpec> tools = all_tools();
  ParsedCalls p = parse_qwen_xml_calls(
      "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\nYork\n"
      "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=pick>\n<parameter=n>\n3\n"
      "</parameter>\n<parameter=opts>\n{\"a\": 1}\n</parameter>\n<parameter=tag>\n42\n"
      "</parameter>\n</function>",
      tools);
  expect_two_calls(p);
  // A typed value that is not JSON stays a string; an unknown tool's values are strings.
  p = parse_qwen_xml_calls(
      "<tool_call>\n<function=pick>\n<parameter=n>\nthree\n</parameter>\n</function>\n"
      "</tool_call><tool_call><function=mystery><parameter=k>\n1\n</parameter></function>",
      tools);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].arguments, R"({"n":"three"})");
  EXPECT_EQ(p.calls[1].name, "mystery");
  EXPECT_EQ(p.calls[1].arguments, R"({"k":"1"})");
  // A value holding "</parameter>" ends where the matcher ends it; an empty value.
  p = parse_qwen_xml_calls(
      "<tool_call>\n<function=free>\n<parameter=a>\nx </parameter> y\n</parameter>\n"
      "<parameter=b>\n\n</parameter>\n</function>\n</tool_call>",
      tools);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"a":"x </parameter> y","b":""})");
  // A value that holds "</tool_call>" (code that writes a call, say) stays in the call.
  p = parse_qwen_xml_calls(
      "<tool_call>\n<function=free>\n<parameter=code>\nx = \"</tool_call>\"\n</parameter>\n"
      "</function>\n</tool_call>\n<tool_call>\n<function=now>\n</function>\n</tool_call>",
      tools);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].arguments, R"({"code":"x = \"</tool_call>\""})");
  EXPECT_EQ(p.calls[1].name, "now");
  EXPECT_EQ(p.content, "");
  // Not a call: the text stays.
  expect_left_as_text([&](std::string_view t) { return parse_qwen_xml_calls(t, tools); },
                      {"<tool_call>\n<function=now>\n</tool_call>",
                       "<tool_call>\n<function=x>\n<parameter=a>\nv\n</function>\n</tool_call>",
                       "<tool_call>\n{\"name\": \"now\"}\n</tool_call>"});
}

TEST(ToolCalls, XmlCallMatcherFollowsTheTools) {
  const std::vector<ToolSpec> tools = all_tools();
  const auto spec = xml_call_spec(tools);
  const auto accepts = [&](std::string_view text) {
    XmlCallMatcher m(spec);
    return m.feed(text) && m.finished();
  };
  const auto viable = [&](std::string_view text) {
    XmlCallMatcher m(spec);
    return m.feed(text);
  };
  const std::string w = "<function=get_weather>\n";
  EXPECT_TRUE(accepts(w + "<parameter=city>\nParis\n</parameter>\n</function>"));
  EXPECT_TRUE(accepts("\n" + w + "<parameter=city>\nParis\n</parameter>\n</function>"));
  // A value runs to the first "\n</parameter>\n": newlines, quotes and tags without one are text.
  EXPECT_TRUE(accepts(w + "<parameter=city>\n\"A\"\\\nB </parameter> C\n\n</parameter>\n" +
                      "<parameter=unit>\nc\n</parameter>\n</function>"));
  EXPECT_FALSE(viable(w + "<parameter=unit>\nk\n"));  // not in the enum
  EXPECT_FALSE(viable(w + "</"));                     // city is required
  EXPECT_FALSE(viable(w + "<parameter=city>\nA\n</parameter>\n<parameter=city>"));  // twice
  EXPECT_FALSE(viable("<function=nope"));
  EXPECT_FALSE(viable("<function=get_weather>x"));
  EXPECT_TRUE(accepts("<function=now>\n</function>"));
  EXPECT_FALSE(viable("<function=now>\n<p"));  // no parameters: only </function>
  const std::string p = "<function=pick>\n<parameter=n>\n";
  EXPECT_FALSE(viable(p + "3 "));  // JSON text, nothing after it
  EXPECT_TRUE(accepts(p + "3\n</parameter>\n</function>"));
  EXPECT_TRUE(accepts(p + "3\n</parameter>\n<parameter=opts>\n{\"a\": [1]}\n</parameter>\n" +
                      "<parameter=tag>\nab\n</parameter>\n</function>"));
  EXPECT_FALSE(viable(p + "0\n</"));  // minimum 1
  EXPECT_FALSE(viable(p + "x"));
  EXPECT_FALSE(viable(p + "3\n</parameter>\n<parameter=tag>\nabcd"));  // maxLength 3
  EXPECT_TRUE(accepts("<function=free>\n<parameter=any_key>\nv\n</parameter>\n</function>"));
  EXPECT_FALSE(viable("<function=free>\n<parameter=a b"));
  // Complete: nothing may follow.
  XmlCallMatcher m(spec);
  ASSERT_TRUE(m.feed("<function=now>\n</function>"));
  EXPECT_TRUE(m.finished());
  EXPECT_FALSE(m.feed('\n'));
  // Plain text passes inside a raw value until a "\n</parameter>" may be under way.
  XmlCallMatcher v(spec);
  ASSERT_TRUE(v.feed(w + "<parameter=city>\nPar"));
  EXPECT_GT(v.plain_string_room(), 0u);
  ASSERT_TRUE(v.feed("is\n</par"));
  EXPECT_EQ(v.plain_string_room(), 0u);
  EXPECT_FALSE(v.finished());
}

// The matcher and the parser agree, in the three XML forms: random walks over the bytes the
// matcher allows that reach the call's close (MiniMax-M2: the section's end) parse back into one
// call (MiniMax-M2: one or more) of that tool whose arguments its schema accepts.
TEST(ToolCalls, XmlCallsTheMatcherAllowsParseBack) {
  const std::vector<ToolSpec> tools = all_tools();
  for (const ToolFormat format :
       {ToolFormat::kQwenXml, ToolFormat::kGlmXml, ToolFormat::kMinimax}) {
    SCOPED_TRACE(tool_format_name(format));
    const bool minimax = format == ToolFormat::kMinimax;
    const auto spec = xml_call_spec(tools, format == ToolFormat::kGlmXml ? kGlmSyntax
                                           : minimax                     ? kMinimaxSyntax
                                                                         : kQwenCoderSyntax);
    std::mt19937 rng(7);
    int finished = 0;
    for (int walk = 0; walk < 400; ++walk) {
      const std::optional<std::string> walked =
          random_walk(XmlCallMatcher(spec), rng, 127, "\n</>=\"{}[]0123456789", false, 300);
      if (!walked) continue;
      const std::string& text = *walked;
      ++finished;
      const ParsedCalls p = parse_calls(format, std::string(call_opening(format)) + text, tools);
      EXPECT_EQ(p.content, "") << text;
      ASSERT_FALSE(p.calls.empty()) << text;
      if (!minimax) {
        ASSERT_EQ(p.calls.size(), 1u) << text;
      }
      for (const ToolCall& c : p.calls) {
        const auto tool = std::find_if(tools.begin(), tools.end(),
                                       [&](const ToolSpec& t) { return t.name == c.name; });
        ASSERT_NE(tool, tools.end()) << text;
        // A tool's schema as the XML form reads it: its listed parameters (no schema: none).
        nlohmann::json schema = tool->parameters.is_null()
                                    ? nlohmann::json{{"type", "object"},
                                                     {"properties", nlohmann::json::object()},
                                                     {"additionalProperties", false}}
                                    : tool->parameters;
        if (schema.contains("properties")) schema["additionalProperties"] = false;
        JsonMatcher jm(JsonSchema::from_json(schema));
        EXPECT_TRUE(jm.feed(c.arguments) && jm.accepting()) << text << "\n" << c.arguments;
      }
    }
    EXPECT_GT(finished, 100);
  }
}

// GLM-4.6's template, run with Jinja on this conversation (tools with two calls, results, a
// call without arguments), wrote exactly this prompt.
TEST(ToolCalls, RendersAsGlmsTemplate) {
  const std::vector<ToolSpec> tools = parse_tools(ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
     "required": ["city"]}}},
    {"type": "function", "function": {"name": "now"}}])"));
  const std::vector<ToolMessage> msgs = {
      {"system", "Be brief.", {}},
      {"user", "Weather in Paris and Oslo?", {}},
      {"assistant",
       "",
       {{"a", "get_weather", R"({"city": "Paris"})"},
        {"b", "get_weather", R"({"city": "Oslo", "n": 3, "o": {"a": [1, "x"]}})"}}},
      {"tool", "18 C", {}},
      {"tool", "4 C", {}},
      {"assistant", " Checking. ", {{"c", "now", "{}"}}},
      {"tool", "ok", {}},
      {"assistant", "Done.", {}},
      {"user", "Thanks", {}},
  };
  const std::string want =
      "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist with the "
      "user query.\n\nYou are provided with function signatures within <tools></tools> XML "
      "tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
      "\"description\": \"Weather\", \"parameters\": {\"type\": \"object\", \"properties\": "
      "{\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n{\"type\": "
      "\"function\", \"function\": {\"name\": \"now\"}}\n</tools>\n\nFor each function call, "
      "output the function name and arguments within the following XML format:\n<tool_call>"
      "{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
      "<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>"
      "<|system|>\nBe brief.<|user|>\nWeather in Paris and Oslo?<|assistant|>\n<think></think>\n"
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
      "</tool_call>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>"
      "\n<arg_key>n</arg_key>\n<arg_value>3</arg_value>\n<arg_key>o</arg_key>\n<arg_value>{\"a\": "
      "[1, \"x\"]}</arg_value>\n</tool_call><|observation|>\n<tool_response>\n18 C\n"
      "</tool_response>\n<tool_response>\n4 C\n</tool_response><|assistant|>\n<think></think>\n"
      "Checking.\n<tool_call>now\n</tool_call><|observation|>\n<tool_response>\nok\n"
      "</tool_response><|assistant|>\n<think></think>\nDone.<|user|>\nThanks";
  EXPECT_EQ(format_chat(ChatFamily::kChatglm4, render_glm(msgs, tools), false), want);
  // (The template's generation prompt is "<|assistant|>"; llama.cpp's chatglm4 formatter, which
  // strata follows, writes "<|assistant|>\n".)
  EXPECT_EQ(format_chat(ChatFamily::kChatglm4, render_glm(msgs, tools), true),
            want + "<|assistant|>\n");
  EXPECT_EQ(render_tools(ToolFormat::kGlmXml, msgs, tools).size(), 9u);
  // No tools: the conversation only.
  EXPECT_EQ(render_glm({{"user", "hi", {}}}, {}).size(), 1u);
  EXPECT_THROW(render_glm({{"assistant", "", {{"", "now", "[1]"}}}}, tools), Error);
  // A forced call opens after the empty reasoning block; the parse needs the <tool_call>.
  EXPECT_EQ(forced_call_prompt(ToolFormat::kGlmXml), "<think></think>\n<tool_call>");
  EXPECT_EQ(forced_call_head(ToolFormat::kGlmXml), "<tool_call>");
  EXPECT_EQ(forced_call_head(ToolFormat::kHermes), forced_call_prompt(ToolFormat::kHermes));
}

TEST(ToolCalls, ParsesGlmCallsFromAReply) {
  const std::vector<ToolSpec> tools = all_tools();
  ParsedCalls p = parse_glm_calls(
      "Let me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>New\nYork"
      "</arg_value>\n</tool_call>\n<tool_call>pick\n<arg_key>n</arg_key>\n<arg_value>3"
      "</arg_value>\n<arg_key>opts</arg_key><arg_value>{\"a\": 1}</arg_value> "
      "<arg_key>tag</arg_key>\n<arg_value>42</arg_value>\n</tool_call>",
      tools);
  expect_two_calls(p);
  // No arguments; a typed value that is not JSON stays a string; the last block unclosed.
  p = parse_glm_calls(
      "<tool_call>now\n</tool_call><tool_call>pick\n<arg_key>n</arg_key>\n<arg_value>three"
      "</arg_value>\n",
      tools);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "now");
  EXPECT_EQ(p.calls[0].arguments, "{}");
  EXPECT_EQ(p.calls[1].arguments, R"({"n":"three"})");
  EXPECT_EQ(p.content, "");
  // A value that holds "</tool_call>" stays in the call.
  p = parse_glm_calls(
      "<tool_call>free\n<arg_key>code</arg_key>\n<arg_value>a</tool_call>b</arg_value>\n"
      "</tool_call> done",
      tools);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"code":"a</tool_call>b"})");
  EXPECT_EQ(p.content, "done");
  // Not a call: the text stays.
  expect_left_as_text(
      [&](std::string_view t) { return parse_glm_calls(t, tools); },
      {"<tool_call>\n</tool_call>", "<tool_call>pick\n<arg_key>n</arg_key>\n3\n</tool_call>",
       "<tool_call>pick\n<arg_key>n\n<arg_value>3</arg_value></tool_call>",
       "<tool_call>pick\nn=3\n</tool_call>"});
}

TEST(ToolCalls, GlmCallMatcherFollowsTheTools) {
  const std::vector<ToolSpec> tools = all_tools();
  const auto spec = xml_call_spec(tools, kGlmSyntax);
  const auto accepts = [&](std::string_view text) {
    XmlCallMatcher m(spec);
    return m.feed(text) && m.finished();
  };
  const auto viable = [&](std::string_view text) {
    XmlCallMatcher m(spec);
    return m.feed(text);
  };
  const std::string w = "get_weather\n";
  EXPECT_TRUE(accepts(w + "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"));
  EXPECT_FALSE(viable("\n" + w));  // the name comes first
  // A value runs to the first "</arg_value>\n": newlines, quotes and tags without one are text.
  EXPECT_TRUE(accepts(w + "<arg_key>city</arg_key>\n<arg_value>\"A\"\\\nB </arg_value> C<"
                          "</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>c</arg_value>\n"
                          "</tool_call>"));
  EXPECT_FALSE(viable(w + "<arg_key>unit</arg_key>\n<arg_value>k"));  // not in the enum
  EXPECT_FALSE(viable(w + "</"));                                     // city is required
  EXPECT_FALSE(viable(w + "<arg_key>city</arg_key>\n<arg_value>A</arg_value>\n<arg_key>city<"));
  EXPECT_FALSE(viable("nope"));
  EXPECT_FALSE(viable("get_weather "));
  EXPECT_TRUE(accepts("now\n</tool_call>"));
  EXPECT_FALSE(viable("now\n<a"));  // no parameters: only </tool_call>
  const std::string p = "pick\n<arg_key>n</arg_key>\n<arg_value>";
  EXPECT_FALSE(viable(p + "3 "));  // JSON text, nothing after it
  EXPECT_TRUE(accepts(p + "3</arg_value>\n</tool_call>"));
  EXPECT_FALSE(viable(p + "0</"));                                                     // minimum 1
  EXPECT_FALSE(viable(p + "3</arg_value>\n<arg_key>tag</arg_key>\n<arg_value>abcd"));  // max 3
  EXPECT_TRUE(accepts("free\n<arg_key>any_key</arg_key>\n<arg_value>v</arg_value>\n</tool_call>"));
  EXPECT_FALSE(viable("free\n<arg_key>a b"));
  XmlCallMatcher m(spec);
  ASSERT_TRUE(m.feed("now\n</tool_call>"));
  EXPECT_TRUE(m.finished());
  EXPECT_FALSE(m.feed('\n'));
}

// MiniMax-M2's template (llama.cpp's models/templates/MiniMax-M2.jinja), run with Jinja on this
// conversation (tools, two calls in one section after some text, their results, an answer, a
// call with typed arguments alone), wrote exactly this prompt, then its "<think>\n" (the
// session's: ReasoningStyle::think_open).
TEST(ToolCalls, RendersAsMinimaxM2sTemplate) {
  const std::vector<ToolSpec> tools = parse_tools(ojson::parse(kTools));
  std::vector<ToolMessage> msgs = {
      {"user", "Weather in Paris?", {}},
      {"assistant",
       "Let me check.",
       {{"", "get_weather", R"({"city": "Paris", "unit": "c"})"}, {"", "now", "{}"}}},
      {"tool", "sunny", {}},
      {"tool", "noon", {}},
      {"assistant", "Sunny at noon.", {}},
      {"user", "And Oslo?", {}},
      {"assistant",
       "",
       {{"", "get_weather", R"({"city": "Oslo", "days": 3, "opts": {"a": [1, "é"]}})"}}},
      {"tool", "rain", {}},
  };
  // (The part of the template render_minimax reads: its default system message.)
  const std::string tmpl =
      "{%- if model_identity is not defined -%}{%- set model_identity = \"You are a helpful "
      "assistant.\" -%}{%- endif -%} ]~!b[ ]~b]ai <minimax:tool_call> <invoke name=";
  const std::string want =
      "]~!b[]~b]system\nYou are a helpful assistant.\n"
      "\n# Tools\nYou may call one or more tools to assist with the user query.\n"
      "Here are the tools available in JSONSchema format:\n"
      "\n<tools>\n<tool>{\"name\": \"get_weather\", \"description\": \"Weather in a city\", \"par"
      "ameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"uni"
      "t\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}</tool>\n"
      "<tool>{\"name\": \"now\", \"description\": \"The time, à la minute\"}</tool>\n"
      "</tools>\n\nWhen making tool calls, use XML format to invoke tools and pass parameters:\n"
      "\n<minimax:tool_call>\n<invoke name=\"tool-name-1\">\n"
      "<parameter name=\"param-key-1\">param-value-1</parameter>\n"
      "<parameter name=\"param-key-2\">param-value-2</parameter>\n"
      "...\n</invoke>\n</minimax:tool_call>[e~[\n"
      "]~b]user\nWeather in Paris?[e~[\n]~b]ai\n"
      "Let me check.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
      "<parameter name=\"city\">Paris</parameter>\n"
      "<parameter name=\"unit\">c</parameter>\n</invoke>\n"
      "<invoke name=\"now\">\n</invoke>\n</minimax:tool_call>[e~[\n"
      "]~b]tool\n<response>sunny</response>\n<response>noon</response>[e~[\n"
      "]~b]ai\nSunny at noon.[e~[\n]~b]user\nAnd Oslo?[e~[\n"
      "]~b]ai\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
      "<parameter name=\"city\">Oslo</parameter>\n"
      "<parameter name=\"days\">3</parameter>\n<parameter name=\"opts\">{\"a\": [1, \"é\"]}</para"
      "meter>\n</invoke>\n</minimax:tool_call>[e~[\n"
      "]~b]tool\n<response>rain</response>[e~[\n"
      "]~b]ai\n";
  EXPECT_EQ(format_chat(ChatFamily::kMinimaxM2, render_minimax(msgs, tools, tmpl), true), want);
  EXPECT_EQ(format_chat(ChatFamily::kMinimaxM2,
                        render_tools(ToolFormat::kMinimax, msgs, tools, "", tmpl), true),
            want);
  // The conversation's own system message (an empty one: the default); no tools: as it is.
  msgs.insert(msgs.begin(), {"system", "Be brief.", {}});
  std::vector<ChatMessage> out = render_minimax(msgs, tools, tmpl);
  ASSERT_EQ(out.size(), msgs.size());
  EXPECT_TRUE(out[0].content.starts_with("Be brief.\n\n# Tools\n")) << out[0].content;
  msgs[0].content.clear();
  EXPECT_TRUE(render_minimax(msgs, tools, tmpl)[0].content.starts_with(
      "You are a helpful assistant.\n\n# Tools\n"));
  out = render_minimax({{"user", "Hi", {}}}, {}, tmpl);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].content, "Hi");
  EXPECT_THROW(render_minimax({{"assistant", "", {{"", "now", "[1]"}}}}, tools, tmpl), Error);
  // Interleaved thinking: the reasoning of the turns after the last user message, as the
  // template writes it (Jinja on this conversation with reasoning_content on both replies; its
  // default system message, without tools, is the session's); the earlier turn's is left out.
  std::vector<ToolMessage> loop = {
      {"user", "Weather in Paris?", {}},
      {"assistant", "", {{"", "now", "{}"}}, "", "Time first."},
      {"tool", "noon", {}},
      {"user", "And Oslo?", {}},
      {"assistant", "", {{"", "get_weather", R"({"city": "Oslo"})"}}, "", "Oslo's weather."},
      {"tool", "rain", {}},
  };
  EXPECT_EQ(format_chat(ChatFamily::kMinimaxM2, render_minimax(loop, {}, tmpl), true),
            "]~!b[]~b]system\n[e~[\n]~b]user\nWeather in Paris?[e~[\n]~b]ai\n\n"
            "<minimax:tool_call>\n<invoke name=\"now\">\n</invoke>\n</minimax:tool_call>[e~[\n"
            "]~b]tool\n<response>noon</response>[e~[\n]~b]user\nAnd Oslo?[e~[\n]~b]ai\n<think>\n"
            "Oslo's weather.\n</think>\n\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
            "<parameter name=\"city\">Oslo</parameter>\n</invoke>\n</minimax:tool_call>[e~[\n"
            "]~b]tool\n<response>rain</response>[e~[\n]~b]ai\n");
  EXPECT_EQ(call_opening(ToolFormat::kMinimax), "<minimax:tool_call>");
  EXPECT_EQ(forced_call_head(ToolFormat::kMinimax), "<minimax:tool_call>\n");
  EXPECT_EQ(tool_format_name(ToolFormat::kMinimax), "minimax-m2");
}

TEST(ToolCalls, ParsesMinimaxCalls) {
  const std::vector<ToolSpec> tools = all_tools();
  const auto parse = [&](std::string_view t) { return parse_minimax_calls(t, tools); };
  // Two calls in one section, as the template writes them (a VALUE with newlines, JSON values).
  ParsedCalls p = parse(
      "Let me check.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter "
      "name=\"city\">New\nYork</parameter>\n</invoke>\n<invoke name=\"pick\">\n<parameter "
      "name=\"n\">3</parameter>\n<parameter name=\"opts\">{\"a\": 1}</parameter>\n<parameter "
      "name=\"tag\">42</parameter>\n</invoke>\n</minimax:tool_call>");
  expect_two_calls(p);
  // The section unclosed (the reply ended); a value holding "</parameter>" ends where the
  // matcher ends it; a value holding "</invoke>"; an empty value; text after the section.
  p = parse(
      "<minimax:tool_call>\n<invoke name=\"free\">\n<parameter name=\"a\">x </parameter> "
      "</invoke> y</parameter>\n<parameter name=\"b\"></parameter>\n</invoke>\n"
      "</minimax:tool_call> done");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"a":"x </parameter> </invoke> y","b":""})");
  EXPECT_EQ(p.content, "done");
  p = parse("<minimax:tool_call>\n<invoke name=\"now\">\n</invoke>\n");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "now");
  EXPECT_EQ(p.calls[0].arguments, "{}");
  // Not a call: the text stays.
  expect_left_as_text(parse, {"<minimax:tool_call>\n<invoke name=\"now\">",
                              "<minimax:tool_call>\n<invoke name=\"\">\n</invoke>\n"
                              "</minimax:tool_call>",
                              "<minimax:tool_call>\n<invoke name=\"x\">\n<parameter name=\"a\">v"
                              "</invoke>\n</minimax:tool_call>",
                              "<minimax:tool_call></minimax:tool_call>",
                              "<tool_call>\n<function=now>\n</function>\n</tool_call>"});
}

TEST(ToolCalls, MinimaxCallMatcherFollowsTheTools) {
  const std::vector<ToolSpec> tools = all_tools();
  const auto spec = xml_call_spec(tools, kMinimaxSyntax);
  const auto accepts = [&](const std::shared_ptr<const XmlCallSpec>& s, std::string_view text) {
    XmlCallMatcher m(s);
    return m.feed(text) && m.finished();
  };
  const auto viable = [&](std::string_view text) {
    XmlCallMatcher m(spec);
    return m.feed(text);
  };
  const std::string w =
      "<invoke name=\"get_weather\">\n<parameter name=\"city\">Oslo</parameter>\n"
      "</invoke>\n";
  const std::string now = "<invoke name=\"now\">\n</invoke>\n";
  const std::string end = "</minimax:tool_call>";
  EXPECT_TRUE(accepts(spec, "\n" + w + end));  // the '\n' after the opening is optional
  EXPECT_TRUE(accepts(spec, w + now + end));
  EXPECT_TRUE(accepts(spec, "\n" + w + "\n" + now + end));
  const auto single = xml_call_spec(tools, kMinimaxSyntax, false);
  EXPECT_TRUE(accepts(single, now + end));
  EXPECT_FALSE(accepts(single, w + now + end));
  // A value runs to the first "</parameter>\n": newlines, quotes and tags without one are text.
  EXPECT_TRUE(accepts(spec,
                      "<invoke name=\"get_weather\">\n<parameter name=\"city\">\"A\"\\\n"
                      "B</parameter> </invoke>\n</parameter>\n<parameter name=\"unit\">c"
                      "</parameter>\n</invoke>\n" +
                          end));
  EXPECT_FALSE(viable("<invoke name=\"get_weather\">\n<parameter name=\"unit\">k"));  // enum
  EXPECT_FALSE(viable("<invoke name=\"get_weather\">\n</"));  // city is required
  EXPECT_FALSE(viable("<invoke name=\"nope"));
  EXPECT_FALSE(viable("<invoke name=\"now\" "));
  EXPECT_FALSE(viable("<invoke name=\"now\">\n<p"));  // no parameters: only </invoke>
  EXPECT_FALSE(viable(now + "</invoke>"));            // a call's close, then the section's end
  EXPECT_FALSE(viable(now + "\n</minimax"));
  EXPECT_FALSE(viable("<tool_call>"));
  const std::string p = "<invoke name=\"pick\">\n<parameter name=\"n\">";
  EXPECT_FALSE(viable(p + "3 "));  // JSON text, nothing after it
  EXPECT_TRUE(accepts(spec, p + "3</parameter>\n</invoke>\n" + end));
  EXPECT_FALSE(viable(p + "0</"));  // minimum 1
  EXPECT_TRUE(accepts(spec,
                      "<invoke name=\"free\">\n<parameter name=\"any_key\">v</parameter>\n"
                      "</invoke>\n" +
                          end));
  // Complete: nothing may follow.
  XmlCallMatcher m(spec);
  ASSERT_TRUE(m.feed(now + end));
  EXPECT_TRUE(m.finished());
  EXPECT_FALSE(m.feed('\n'));
}

// Kimi-K2-Thinking's template, run with Jinja on this conversation (tools, two calls in one
// section, their results, an answer, a later call), wrote exactly this prompt.
TEST(ToolCalls, RendersAsKimisTemplate) {
  const std::vector<ToolSpec> tools = parse_tools(ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
     "required": ["city"]}}},
    {"type": "function", "function": {"name": "now"}}])"));
  std::vector<ToolMessage> msgs = {
      {"user", "Weather in Paris and Oslo?", {}},
      {"assistant",
       "",
       {{"functions.get_weather:0", "get_weather", R"({"city": "Paris"})"},
        {"functions.get_weather:1", "get_weather", R"({"city": "Oslo"})"}}},
      {"tool", "18 C", {}, "functions.get_weather:0"},
      {"tool", "4 C", {}, "functions.get_weather:1"},
      {"assistant", "Warm and cold.", {}},
      {"user", "Time?", {}},
      {"assistant", "Checking.", {{"functions.now:2", "now", "{}"}}},
      {"tool", "noon", {}, "functions.now:2"},
  };
  // (The parts of the template render_kimi reads: its default system message, and the empty
  // <think></think> its assistant turns open with.)
  const std::string tmpl =
      "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI."
      "<|im_end|> … <|im_assistant|>{{role_name}}<|im_middle|> … <think></think>{{ c }}";
  const std::string want =
      "<|im_system|>tool_declare<|im_middle|>[{\"type\": \"function\", \"function\": {\"name\": "
      "\"get_weather\", \"description\": \"Weather\", \"parameters\": {\"type\": \"object\", "
      "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}, {\"type\": "
      "\"function\", \"function\": {\"name\": \"now\"}}]<|im_end|><|im_system|>system<|im_middle|>"
      "You are Kimi, an AI assistant created by Moonshot AI.<|im_end|><|im_user|>user<|im_middle|>"
      "Weather in Paris and Oslo?<|im_end|><|im_assistant|>assistant<|im_middle|><think></think>"
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>"
      "functions.get_weather:1<|tool_call_argument_begin|>{\"city\": \"Oslo\"}<|tool_call_end|>"
      "<|tool_calls_section_end|><|im_end|><|im_system|>tool<|im_middle|>## Return of "
      "functions.get_weather:0\n18 C<|im_end|><|im_system|>tool<|im_middle|>## Return of "
      "functions.get_weather:1\n4 C<|im_end|><|im_assistant|>assistant<|im_middle|><think></think>"
      "Warm and cold.<|im_end|><|im_user|>user<|im_middle|>Time?<|im_end|><|im_assistant|>"
      "assistant<|im_middle|><think></"
      "think>Checking.<|tool_calls_section_begin|><|tool_call_begin|>"
      "functions.now:2<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"
      "<|im_end|><|im_system|>tool<|im_middle|>## Return of functions.now:2\nnoon<|im_end|>"
      "<|im_assistant|>assistant<|im_middle|>";
  EXPECT_EQ(format_chat(ChatFamily::kKimiK2, render_kimi(msgs, tools, tmpl), true), want);
  EXPECT_EQ(format_chat(ChatFamily::kKimiK2, render_tools(ToolFormat::kKimi, msgs, tools, "", tmpl),
                        true),
            want);
  // A system message of the conversation's own replaces the default; a template without the
  // empty block writes none; a call without an id gets Kimi's form.
  msgs.insert(msgs.begin(), {"system", "Be brief.", {}});
  msgs[2].calls[0].id.clear();
  const std::vector<ChatMessage> own = render_kimi(msgs, tools, "tool_declare");
  ASSERT_EQ(own.size(), msgs.size() + 1);
  EXPECT_EQ(own[1].content, "Be brief.");
  EXPECT_TRUE(
      own[3].content.starts_with("<|tool_calls_section_begin|><|tool_call_begin|>"
                                 "functions.get_weather:0<|tool_call_argument_begin|>"))
      << own[3].content;
  EXPECT_EQ(call_opening(ToolFormat::kKimi), "<|tool_calls_section_begin|>");
  EXPECT_EQ(forced_call_head(ToolFormat::kKimi), "<|tool_calls_section_begin|>");
}

// DeepSeek-V3.1's template, run with Jinja on deepseek_conversation() (deepseek_v31_prompt.h),
// wrote its prompt: tool results with no assistant opener after them, and none at the end. Its
// "</think>" before each answer to a user is the session's to write (ReasoningStyle::answer_open;
// test_thinking), done here by hand. Its template describes no tools: the model card's
// description goes after the system prompt.
TEST(ToolCalls, RendersAsDeepseekV31sTemplate) {
  const std::vector<ToolSpec> tools = parse_tools(ojson::parse(kTools));
  std::vector<ToolMessage> msgs = test::deepseek_conversation();
  std::vector<ChatMessage> out = render_deepseek(msgs, {});
  ASSERT_EQ(out.size(), msgs.size());
  for (size_t i = 1; i < out.size(); ++i)
    if (out[i].role == "assistant" && out[i - 1].role == "user")
      out[i].content.insert(0, "</think>");
  EXPECT_EQ(format_chat(ChatFamily::kDeepseek3, out, true),
            test::kDeepseekPromptHead + test::kDeepseekPromptRest);
  EXPECT_TRUE(after_tool_output(ChatFamily::kDeepseek3, out));
  out.resize(6);  // ... "And Oslo?": the opener
  EXPECT_FALSE(after_tool_output(ChatFamily::kDeepseek3, out));
  EXPECT_TRUE(format_chat(ChatFamily::kDeepseek3, out, true).ends_with("And Oslo?<｜Assistant｜>"));
  // The tools after the system messages (joined, as the template joins them).
  msgs.insert(msgs.begin(), {{"system", "Be brief.", {}}, {"system", "Be kind.", {}}});
  out = render_tools(ToolFormat::kDeepseek, msgs, tools);
  ASSERT_EQ(out.size(), msgs.size() - 1);
  EXPECT_EQ(out[0].role, "system");
  EXPECT_EQ(
      out[0].content,
      "Be brief.\n\nBe kind.\n\n## Tools\nYou have access to the following tools:\n\n"
      "### get_weather\nDescription: Weather in a city\n\nParameters: {\"type\": \"object\", "
      "\"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"enum\": [\"c\", "
      "\"f\"]}}, \"required\": [\"city\"]}\n\n### now\nDescription: The time, à la minute\n\n"
      "Parameters: {}\n\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>"
      "tool_call_arguments<｜tool▁call▁end｜>{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\n"
      "Where:\n\n- `tool_call_name` must be an exact match to one of the available tools\n"
      "- `tool_call_arguments` must be valid JSON that strictly follows the tool's "
      "Parameters Schema\n- For multiple tool calls, chain them directly without separators "
      "or spaces");
  EXPECT_EQ(out[1].content, "Weather in Paris?");
  EXPECT_EQ(render_deepseek({{"user", "Hi", {}}}, tools)[0].content.substr(0, 9), "## Tools\n");
  EXPECT_EQ(call_opening(ToolFormat::kDeepseek), "<｜tool▁calls▁begin｜>");
  EXPECT_EQ(forced_call_head(ToolFormat::kDeepseek), "<｜tool▁calls▁begin｜>");
}

// A tool loop's reasoning, sent back with the replies (reasoning_content), as the templates that
// keep it write it: Qwen3's, GLM-4.6's and Kimi-K2-Thinking's, run by Jinja on this conversation
// (an answer before the last user message, whose reasoning is dropped, then two replies with
// calls), wrote exactly these prompts. A template that does not name reasoning_content keeps
// none.
TEST(ToolCalls, ToolLoopsKeepTheirReasoningAsTheTemplatesDo) {
  const std::vector<ToolSpec> tools = parse_tools(ojson::parse(kTools));
  const std::vector<ToolMessage> msgs = {
      {"user", "Hi", {}},
      {"assistant", "Hello.", {}, "", "Greet."},
      {"user", "Weather in Paris?", {}},
      {"assistant",
       "Let me check.",
       {{"functions.get_weather:0", "get_weather", R"({"city": "Paris"})"}},
       "",
       "\nNeed weather.\n"},
      {"tool", "sunny", {}, "functions.get_weather:0"},
      {"assistant", "", {{"functions.now:1", "now", "{}"}}, "", "Now the time."},
      {"tool", "noon", {}, "functions.now:1"},
  };
  const std::string qwen3 =
      "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user "
      "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n"
      "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description"
      "\": \"Weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city"
      "\": {\"type\": \"string\"}, \"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\""
      "]}}}\n{\"type\": \"function\", \"function\": {\"name\": \"now\", \"description\": \"The ti"
      "me, à la minute\"}}\n</tools>\n\nFor each function call, return a json object with functio"
      "n name and arguments within <tool_call></tool_call> XML tags:\n"
      "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
      "</tool_call><|im_end|>\n<|im_start|>user\n"
      "Hi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
      "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n<think>\nNeed weather.\n"
      "</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city"
      "\": \"Paris\"}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\nsunny\n"
      "</tool_response><|im_end|>\n<|im_start|>assistant\n"
      "<think>\nNow the time.\n</think>\n\n<tool_call>\n"
      "{\"name\": \"now\", \"arguments\": {}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\nnoon\n"
      "</tool_response><|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(
      format_chat(ChatFamily::kChatml,
                  render_tools(ToolFormat::kHermes, msgs, tools, "", "reasoning_content"), true),
      qwen3);
  const std::string glm =
      "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist with the u"
      "ser query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n"
      "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description"
      "\": \"Weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city"
      "\": {\"type\": \"string\"}, \"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\""
      "]}}}\n{\"type\": \"function\", \"function\": {\"name\": \"now\", \"description\": \"The ti"
      "me, à la minute\"}}\n</tools>\n\nFor each function call, output the function name and argu"
      "ments within the following XML format:\n<tool_call>{function-name}\n"
      "<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
      "<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n"
      "...\n</tool_call><|user|>\nHi<|assistant|>\n"
      "<think></think>\nHello.<|user|>\nWeather in Paris?<|assistant|>\n"
      "<think>Need weather.</think>\nLet me check.\n"
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n"
      "<arg_value>Paris</arg_value>\n</tool_call><|observation|>\n"
      "<tool_response>\nsunny\n</tool_response><|assistant|>\n"
      "<think>Now the time.</think>\n<tool_call>now\n"
      "</tool_call><|observation|>\n<tool_response>\n"
      "noon\n</tool_response><|assistant|>";
  EXPECT_EQ(
      format_chat(ChatFamily::kChatglm4,
                  render_tools(ToolFormat::kGlmXml, msgs, tools, "", "reasoning_content"), false) +
          "<|assistant|>",
      glm);
  const std::string kimi =
      "<|im_system|>tool_declare<|im_middle|>[{\"type\": \"function\", \"function\": {\"name\": "
      "\"get_weather\", \"description\": \"Weather in a city\", \"parameters\": {\"type\": \"obje"
      "ct\", \"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"enum\": [\"c\", \"f"
      "\"]}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"no"
      "w\", \"description\": \"The time, à la minute\"}}]<|im_end|><|im_system|>system<|im_middle"
      "|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|><|im_user|>user<|im_middl"
      "e|>Hi<|im_end|><|im_assistant|>assistant<|im_middle|><think></think>Hello.<|im_end|><|im_u"
      "ser|>user<|im_middle|>Weather in Paris?<|im_end|><|im_assistant|>assistant<|im_middle|><th"
      "ink>\nNeed weather.\n</think>Let me check.<|tool_calls_section_begin|><|tool_call_begin|>f"
      "unctions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|"
      "tool_calls_section_end|><|im_end|><|im_system|>tool<|im_middle|>## Return of functions.get"
      "_weather:0\nsunny<|im_end|><|im_assistant|>assistant<|im_middle|><think>Now the time.</thi"
      "nk><|tool_calls_section_begin|><|tool_call_begin|>functions.now:1<|tool_call_argument_begi"
      "n|>{}<|tool_call_end|><|tool_calls_section_end|><|im_end|><|im_system|>tool<|im_middle|>##"
      " Return of functions.now:1\nnoon<|im_end|><|im_assistant|>assistant<|im_middle|>";
  const std::string kimi_tmpl =
      "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI."
      "<|im_end|> <think></think> message.get('reasoning_content', '')";
  EXPECT_EQ(format_chat(ChatFamily::kKimiK2,
                        render_tools(ToolFormat::kKimi, msgs, tools, "", kimi_tmpl), true),
            kimi);
  // Templates that keep no reasoning (Qwen2.5's, Kimi-K2-Instruct's): none is written.
  for (const ToolFormat f : {ToolFormat::kHermes, ToolFormat::kGlmXml, ToolFormat::kKimi})
    for (const ChatMessage& m : render_tools(f, msgs, tools, "", "<think></think>"))
      EXPECT_EQ(m.content.find("Need weather"), std::string::npos) << m.content;
}

TEST(ToolCalls, ParsesDeepseekCalls) {
  const auto deepseek = [](std::string_view t) { return parse_section_calls(t, kDeepseekSyntax); };
  ParsedCalls p = deepseek(
      "Let me check.<｜tool▁calls▁begin｜> <｜tool▁call▁begin｜>get_weather<｜tool▁sep｜> "
      "{\"city\": \"Paris\"} <｜tool▁call▁end｜><｜tool▁call▁begin｜>now<｜tool▁sep｜>{}"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].id, "");  // serve gives it one
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city": "Paris"})");
  EXPECT_EQ(p.calls[1].name, "now");
  EXPECT_EQ(p.content, "Let me check.");
  // Cut after a call's JSON.
  p = deepseek("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>now<｜tool▁sep｜>{}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "now");
  expect_left_as_text(
      deepseek,
      {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>now<｜tool▁sep｜>[1]<｜tool▁call▁end｜>"
       "<｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜>now<｜tool▁sep｜>{}<｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜><｜tool▁sep｜>{}<｜tool▁call▁end｜>"
       "<｜tool▁calls▁end｜>"});
}

// Whether a section matcher takes `text` whole and finished, or as a viable prefix.
bool section_accepts(const std::shared_ptr<const SectionCallSpec>& spec, std::string_view text) {
  SectionCallMatcher m(spec);
  return m.feed(text) && m.finished();
}
bool section_viable(const std::shared_ptr<const SectionCallSpec>& spec, std::string_view text) {
  SectionCallMatcher m(spec);
  return m.feed(text);
}

TEST(ToolCalls, DeepseekSectionMatcherFollowsTheTools) {
  const std::vector<ToolSpec> tools = all_tools();
  const auto spec = section_call_spec(tools, kDeepseekSyntax, true);
  const auto viable = [&](std::string_view text) { return section_viable(spec, text); };
  const std::string w =
      "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}<｜tool▁call▁end｜>";
  const std::string now = "<｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜>";
  EXPECT_TRUE(section_accepts(spec, w + "<｜tool▁calls▁end｜>"));
  EXPECT_TRUE(section_accepts(spec, w + now + "<｜tool▁calls▁end｜>"));
  const auto single = section_call_spec(tools, kDeepseekSyntax, false);
  EXPECT_TRUE(section_accepts(single, now + "<｜tool▁calls▁end｜>"));
  EXPECT_FALSE(section_accepts(single, w + now + "<｜tool▁calls▁end｜>"));
  EXPECT_FALSE(viable("<｜tool▁call▁begin｜>nope"));
  EXPECT_FALSE(viable("<｜tool▁call▁begin｜>no<"));  // a name's prefix, not a name
  EXPECT_FALSE(viable("<｜tool▁call▁begin｜>now:"));
  EXPECT_FALSE(viable("<｜tool▁call▁begin｜>now<｜tool▁sep｜>{\"a\""));
  EXPECT_FALSE(viable("<|tool_call_begin|>"));  // Kimi's marker
  EXPECT_FALSE(viable(w + " "));
}

TEST(ToolCalls, ParsesKimiCalls) {
  const auto kimi = [](std::string_view t) { return parse_section_calls(t, kKimiSyntax); };
  ParsedCalls p = kimi(
      "Let me check. <|tool_calls_section_begin|> <|tool_call_begin|> functions.get_weather:0 "
      "<|tool_call_argument_begin|> {\"city\": \"Paris\", \"days\": 10000000000000001} "
      "<|tool_call_end|><|tool_call_begin|>now<|tool_call_argument_begin|>{}<|tool_call_end|>"
      "<|tool_calls_section_end|>");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].id, "functions.get_weather:0");
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city": "Paris", "days": 10000000000000001})");
  EXPECT_EQ(p.calls[1].name, "now");
  EXPECT_EQ(p.content, "Let me check.");
  // The section cut after a call's JSON (the reply ended there).
  p = kimi(
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.now:3<|tool_call_argument_begin|>"
      "{}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].id, "functions.now:3");
  // Not calls: the text stays.
  expect_left_as_text(
      kimi,
      {"<|tool_calls_section_begin|><|tool_call_begin|>functions.now:0<|tool_call_argument_begin|>"
       "[1]<|tool_call_end|><|tool_calls_section_end|>",
       "<|tool_calls_section_begin|>functions.now:0 {}<|tool_calls_section_end|>",
       "<|tool_calls_section_begin|><|tool_call_begin|>:0<|tool_call_argument_begin|>{}"
       "<|tool_call_end|><|tool_calls_section_end|>"});
}

TEST(ToolCalls, KimiSectionMatcherFollowsTheTools) {
  const std::vector<ToolSpec> tools = all_tools();
  const auto spec = section_call_spec(tools, kKimiSyntax, true);
  const auto viable = [&](std::string_view text) { return section_viable(spec, text); };
  const std::string w =
      "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Oslo\"}"
      "<|tool_call_end|>";
  const std::string now =
      "<|tool_call_begin|>functions.now:12<|tool_call_argument_begin|>{}<|tool_call_end|>";
  EXPECT_TRUE(section_accepts(spec, w + "<|tool_calls_section_end|>"));
  EXPECT_TRUE(section_accepts(spec, w + now + "<|tool_calls_section_end|>"));
  // One call only, when not parallel.
  const auto single = section_call_spec(tools, kKimiSyntax, false);
  EXPECT_TRUE(section_accepts(single, w + "<|tool_calls_section_end|>"));
  EXPECT_FALSE(section_accepts(single, w + now + "<|tool_calls_section_end|>"));
  EXPECT_FALSE(viable("<|tool_call_begin|>get_weather"));  // functions. first
  EXPECT_FALSE(viable("<|tool_call_begin|>functions.nope"));
  EXPECT_FALSE(viable("<|tool_call_begin|>functions.now:<"));        // a number
  EXPECT_FALSE(viable("<|tool_call_begin|>functions.now:1234567"));  // at most 6 digits
  EXPECT_FALSE(viable("<|tool_call_begin|>functions.now:1<|tool_call_argument_begin|>{\"a\""));
  EXPECT_FALSE(viable("<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{}<"));
  EXPECT_FALSE(viable(w + " "));
  SectionCallMatcher m(spec);
  ASSERT_TRUE(m.feed(w + "<|tool_calls_section_end|>"));
  EXPECT_TRUE(m.finished());
  EXPECT_FALSE(m.feed('<'));
}

// The matcher and the parser agree, in Kimi-K2's and DeepSeek-V3.1's forms: random walks over
// the bytes the matcher allows that reach the section's end parse back into its calls, of the
// tools, with arguments their schemas accept.
TEST(ToolCalls, SectionCallsTheMatcherAllowsParseBack) {
  const std::vector<ToolSpec> tools = all_tools();
  for (const SectionCallSyntax& syntax : {kKimiSyntax, kDeepseekSyntax}) {
    const auto spec = section_call_spec(tools, syntax, true);
    std::mt19937 rng(11);
    int finished = 0;
    for (int walk = 0; walk < 150; ++walk) {
      // (The markers' bytes count as structure.)
      const std::optional<std::string> walked =
          random_walk(SectionCallMatcher(spec), rng, 255, "<|>_}]\"0123456789", true, 400);
      if (!walked) continue;
      const std::string& text = *walked;
      ++finished;
      const ParsedCalls p = parse_section_calls(std::string(syntax.section_begin) + text, syntax);
      ASSERT_FALSE(p.calls.empty()) << text;
      EXPECT_EQ(p.content, "") << text;
      for (const ToolCall& c : p.calls) {
        const auto tool = std::find_if(tools.begin(), tools.end(),
                                       [&](const ToolSpec& t) { return t.name == c.name; });
        ASSERT_NE(tool, tools.end()) << text;
        EXPECT_TRUE(nlohmann::json::parse(c.arguments, nullptr, false).is_object()) << c.arguments;
      }
    }
    EXPECT_GT(finished, 25) << syntax.section_begin;
  }
}

TEST(ToolCalls, RendersAsGptOsssHarmony) {
  const std::vector<ToolSpec> tools = parse_tools(ojson::parse(kTools));
  const std::vector<ToolMessage> msgs = {
      {"system", "Be brief.", {}},
      {"user", "Weather in Oslo?", {}},
      {"assistant", "", {{"a", "get_weather", R"({"city": "Oslo"})"}}},
      {"tool", "4 C", {}},
      {"assistant", "Cold.", {}},
  };
  const std::vector<ChatMessage> out = render_harmony(msgs, tools, "low", "2026-12-07");
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[0].role, "system");
  EXPECT_EQ(out[0].content,
            "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: "
            "2024-06\nCurrent date: 2026-12-07\n\nReasoning: low\n\n# Valid channels: analysis, "
            "commentary, final. Channel must be included for every message.\nCalls to these "
            "tools must go to the commentary channel: 'functions'.");
  EXPECT_EQ(out[1].role, "developer");
  EXPECT_EQ(out[1].content,
            "# Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n"
            "// Weather in a city\ntype get_weather = (_: {\ncity: string,\nunit?: \"c\" | \"f\","
            "\n}) => any;\n\n// The time, à la minute\ntype now = () => any;\n\n} // namespace "
            "functions");
  EXPECT_EQ(out[2].content, "Weather in Oslo?");
  EXPECT_EQ(out[3].role, "assistant to=functions.get_weather<|channel|>commentary json");
  EXPECT_EQ(out[3].content, R"({"city": "Oslo"})");
  EXPECT_EQ(out[4].role, "functions.get_weather to=assistant<|channel|>commentary");
  EXPECT_EQ(out[4].content, "\"4 C\"");
  EXPECT_EQ(out[5].role, "assistant<|channel|>final");
  // The formatter ends a call with <|call|>.
  const std::string text = format_chat(ChatFamily::kGptOss, out, true);
  EXPECT_NE(text.find("<|start|>assistant to=functions.get_weather<|channel|>commentary "
                      "json<|message|>{\"city\": \"Oslo\"}<|call|><|start|>functions.get_weather "
                      "to=assistant<|channel|>commentary<|message|>\"4 C\"<|end|>"),
            std::string::npos)
      << text;
  EXPECT_TRUE(
      text.ends_with("<|start|>assistant<|channel|>final<|message|>Cold.<|end|>"
                     "<|start|>assistant"))
      << text;
  // No tools (a reasoning effort alone): no calls line, no tools section.
  const std::vector<ChatMessage> plain =
      render_harmony({{"user", "hi", {}}}, {}, "high", "2026-12-07");
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_TRUE(plain[0].content.ends_with("Channel must be included for every message."));
  EXPECT_EQ(plain[1].role, "user");
}

TEST(ToolCalls, HarmonyTypes) {
  EXPECT_EQ(harmony_type(ojson::parse(R"({"type": "integer"})")), "number");
  EXPECT_EQ(harmony_type(ojson::parse(R"({"type": "array", "items": {"type": ["string",
            "null"]}})")),
            "(string | null)[]");
  EXPECT_EQ(harmony_type(ojson::parse(R"({"anyOf": [{"type": "boolean"}, {"const": 3}]})")),
            "boolean | 3");
  EXPECT_EQ(harmony_type(ojson::parse(R"({"type": "object", "properties": {"b": {"type":
            "string", "description": "Bee", "default": "x"}, "a": {"enum": ["u", "v"],
            "default": "u"}}, "required": ["b"]})")),
            "{\n// Bee\nb: string, // default: \"x\",\na?: \"u\" | \"v\", // default: u,\n}");
  EXPECT_EQ(harmony_type(ojson::parse(R"({"type": "object"})")), "object");
  EXPECT_EQ(harmony_type(ojson::parse("{}")), "any");
}

TEST(ToolCalls, ParsesHarmonyCalls) {
  ParsedCalls p = parse_harmony_calls(
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
      "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(p.content, "");
  // The template's form (recipient first), and <|end|> not rendered.
  p = parse_harmony_calls(" to=functions.now<|channel|>commentary json<|message|>{}<|call|>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "now");
  p = parse_harmony_calls(
      "<|channel|>analysis<|message|>Hm.<|start|>assistant<|channel|>final"
      "<|message|>Hello");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "Hello");
  p = parse_harmony_calls("<|channel|>commentary to=functions.x <|constrain|>json<|message|>[1]");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "[1]");
  EXPECT_EQ(parse_harmony_calls("plain").content, "plain");
}

TEST(ToolCalls, HarmonyCallMatcherFollowsTheTools) {
  const auto spec = harmony_call_spec(parse_tools(ojson::parse(kTools)));
  const auto accepts = [&](std::string_view text) {
    HarmonyCallMatcher m(spec);
    return m.feed(text) && m.finished();
  };
  const auto viable = [&](std::string_view text) {
    HarmonyCallMatcher m(spec);
    return m.feed(text);
  };
  EXPECT_TRUE(accepts("get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}"));
  EXPECT_TRUE(accepts(
      "get_weather<|channel|>commentary json<|message|>{\"city\":\"Oslo\",\"unit\":\"c\"}"));
  EXPECT_TRUE(accepts("get_weather json<|message|>{\"city\":\"Oslo\"}"));
  EXPECT_TRUE(accepts("now<|message|>{}"));
  EXPECT_FALSE(viable("now<|message|>{\"x\""));  // no parameters
  EXPECT_FALSE(viable("nope"));
  EXPECT_FALSE(viable("get_weatherx"));
  EXPECT_FALSE(viable("get_weather <|message|>"));
  EXPECT_FALSE(viable("get_weather <|constrain|>json<|message|>{}"));  // city is required
  HarmonyCallMatcher m(spec);
  ASSERT_TRUE(m.feed("now <|constrain|>json<|message|>{"));
  EXPECT_FALSE(m.accepting());
  ASSERT_TRUE(m.feed("}"));
  EXPECT_TRUE(m.finished());
}

// The fuzzer's seeds and fixed findings (tests/data/tool_seeds/) keep its invariants.
TEST(ToolCalls, FuzzSeedsKeepTheInvariants) {
  const std::filesystem::path dir = std::filesystem::path(STRATA_TEST_DATA_DIR) / "tool_seeds";
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(e.path(), std::ios::binary);
    const std::string input((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(test::probe_tool_calls(input), "") << e.path();
    ++n;
  }
  EXPECT_GE(n, 13u);
}

}  // namespace
