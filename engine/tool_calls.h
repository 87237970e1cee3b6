// Function calling in the Hermes format that Qwen2.5 and Qwen3 are trained on (their chat
// templates' tool sections, written out here since the Jinja is not run): the tools' signatures
// in the system message, each call a JSON object {"name", "arguments"} inside <tool_call> tags in
// the assistant's reply, each result inside <tool_response> tags in a user turn. `serve` renders
// OpenAI's tools / tool_calls / tool messages with it and parses the reply's calls back;
// ChatSession constrains a call's JSON (set_tool_calls). Tested by tests/test_tool_calls.cpp.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_template.h"
#include "engine/json_schema.h"

namespace strata::engine {

// A template that speaks the format: it mentions <tool_call> (Qwen2.5's, Qwen3's, Hermes').
bool hermes_tools_template(std::string_view chat_template);

struct ToolSpec {
  std::string name;
  // OpenAI's tool object ({"type": "function", "function": {...}}) as the template's `tojson`
  // writes it: keys in the client's order, ", " and ": " between items, non-ASCII kept.
  std::string json_text;
  nlohmann::json parameters;  // the function's parameters schema (null: none given)
};
// From OpenAI's `tools` array (keys in the client's order): Error (kBadValue) naming what is
// wrong with an entry.
std::vector<ToolSpec> parse_tools(const nlohmann::ordered_json& tools);
// The template's tojson: compact but for ", " and ": ".
std::string template_json(const nlohmann::ordered_json& v);

struct ToolCall {
  std::string id;  // OpenAI's call id (serve's; not in the prompt)
  std::string name;
  std::string arguments;  // JSON text, as the model wrote it or the client sent it
};

// A conversation message with its calls (an assistant's) or its call id (a tool's result).
struct ToolMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
  std::vector<ToolCall> calls;
};

// The conversation as the Hermes templates write it, for a chat format's formatter: the tools'
// block appended to the system message (one made when there is none), an assistant's calls as
// <tool_call> blocks after its content, and each run of tool results one user message of
// <tool_response> blocks.
std::vector<ChatMessage> render_hermes(const std::vector<ToolMessage>& messages,
                                       const std::vector<ToolSpec>& tools);

// The calls in a reply's answer: each <tool_call> block (the last may be unclosed: the reply ended
// with its JSON) whose JSON is an object with a string "name" and an object or string "arguments".
// `content` is the text outside the blocks, trimmed. A block that does not parse stays in the
// content, and is not a call.
struct ParsedCalls {
  std::vector<ToolCall> calls;
  std::string content;
};
ParsedCalls parse_hermes_calls(std::string_view answer);

// The schema of one call's JSON: {"name": a tool's name, "arguments": its parameters}, one branch
// per tool. A tool without parameters takes none ({} only, as OpenAI reads it); a parameters
// schema the compiler refuses is taken as any object for that tool.
std::shared_ptr<const JsonSchema> tool_call_schema(const std::vector<ToolSpec>& tools);

}  // namespace strata::engine
