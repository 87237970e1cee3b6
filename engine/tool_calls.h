// Function calling in the formats the chat templates of the models strata runs are trained on
// (their tool sections, written out here since the Jinja is not run):
//  - Hermes (Qwen2.5, Qwen3): the tools' signatures as JSON in the system message, each call a
//    JSON object {"name", "arguments"} inside <tool_call> tags in the assistant's reply;
//  - Qwen3-Coder's XML: the tools as XML in the system message, each call a <tool_call> block of
//    "\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n…</function>\n" (xml_call.h);
//    (each result inside <tool_response> tags in a user turn, in both);
//  - GLM-4.5's and GLM-4.6's XML: the tools' signatures as JSON in a system turn of their own, each
//    call a <tool_call> block of "NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n…"
//    (xml_call.h), each run of results <tool_response> blocks in an observation turn;
//  - Kimi-K2's: the tools as JSON in a tool_declare system turn, each call a
//    <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|> inside
//    one <|tool_calls_section_begin|> … <|tool_calls_section_end|> (section_call.h), each result a
//    tool turn "## Return of ID\n…";
//  - DeepSeek-V3.1's: the tools described in the system prompt as its model card has it (the
//    template writes none), the calls
//    <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜> inside one
//    <｜tool▁calls▁begin｜> … <｜tool▁calls▁end｜> (section_call.h), each result
//    <｜tool▁output▁begin｜>…<｜tool▁output▁end｜> after which the model goes on (chat_template.h);
//  - MiniMax-M2's: the tools as <tool> JSON lines in the system message, the calls
//    <invoke name="NAME">\n<parameter name="KEY">VALUE</parameter>\n…</invoke>\n inside one
//    <minimax:tool_call> … </minimax:tool_call> section (xml_call.h), each run of results one tool
//    turn of <response> blocks (chat_template.h);
//  - gpt-oss's harmony: the tools as a TypeScript namespace in the developer message, after
//    harmony's system message; each call a commentary message to=functions.NAME whose body is
//    the JSON arguments (harmony_call.h), each result a message from functions.NAME.
// `serve` renders OpenAI's tools /
// tool_calls / tool messages with them and parses the reply's calls back; ChatSession constrains
// a call's body (set_tool_calls). Tested by tests/test_tool_calls.cpp.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_template.h"
#include "engine/harmony_call.h"
#include "engine/json_schema.h"
#include "engine/section_call.h"
#include "engine/token_constraint.h"
#include "engine/xml_call.h"

namespace strata::engine {

enum class ToolFormat {
  kNone,      // no format strata knows
  kHermes,    // the template mentions <tool_call> (Qwen2.5's, Qwen3's, Hermes')
  kQwenXml,   // and <function= and <parameters> (Qwen3-Coder's)
  kGlmXml,    // a chatglm4 template with <tool_call> and <arg_key> (GLM-4.5's, GLM-4.6's)
  kHarmony,   // gpt-oss (the chat family)
  kKimi,      // the kimi-k2 family with <|tool_calls_section_begin|> or tool_declare
  kDeepseek,  // the deepseek3 family with <｜tool▁sep｜> after the name (DeepSeek-V3.1's)
  kMinimax,   // the minimax-m2 family with <minimax:tool_call> and <invoke name=
};
// The format a ChatML template speaks (other families: kNone).
ToolFormat tool_format(std::string_view chat_template);
// The format of a chat family with this template.
ToolFormat tool_format(ChatFamily family, std::string_view chat_template);
std::string_view tool_format_name(ToolFormat f);

struct ToolSpec {
  std::string name;
  // OpenAI's tool object ({"type": "function", "function": {...}}) as the template's `tojson`
  // writes it: keys in the client's order, ", " and ": " between items, non-ASCII kept.
  std::string json_text;
  nlohmann::json parameters;        // the function's parameters schema (null: none given)
  nlohmann::ordered_json function;  // the function object as the client wrote it
};
// From OpenAI's `tools` array (keys in the client's order): Error (kBadValue) naming what is
// wrong with an entry.
std::vector<ToolSpec> parse_tools(const nlohmann::ordered_json& tools);
// The template's tojson: compact but for ", " and ": ".
std::string template_json(const nlohmann::ordered_json& v);

struct ToolCall {  // OpenAI's
  std::string id;  // OpenAI's call id (serve's; not in the prompt)
  std::string name;
  std::string arguments;  // JSON text, as the model wrote it or the client sent it
};

// A conversation message with its calls (an assistant's) or its call id (a tool's result).
struct ToolMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
  std::vector<ToolCall> calls;
  std::string call_id = {};  // a tool's result: the call it answers (OpenAI's tool_call_id)
  // An assistant's reasoning as the client sent it back (reasoning_content; Anthropic's thinking
  // blocks): the templates that keep a tool loop's reasoning (Qwen3's, GLM-4.5's,
  // Kimi-K2-Thinking's, MiniMax-M2's) write it for the replies after the last user message (Kimi:
  // after the last reply without calls); the others leave it out, as their templates do.
  std::string reasoning = {};
};

// The conversation as the Hermes templates write it, for a chat format's formatter: the tools'
// block appended to the system message (one made when there is none), an assistant's calls as
// <tool_call> blocks after its content, and each run of tool results one user message of
// <tool_response> blocks.
// With a template that keeps earlier reasoning (Qwen3's, which names reasoning_content), a reply
// after the last user message (the tool loop's) opens with its reasoning,
// "<think>\n…\n</think>\n\n".
std::vector<ChatMessage> render_hermes(const std::vector<ToolMessage>& messages,
                                       const std::vector<ToolSpec>& tools,
                                       std::string_view chat_template = {});

// The same in Qwen3-Coder's form: the system message (the template's default one when there is
// none) followed by the tools as XML, an assistant's calls as <tool_call> blocks of <function=>
// and <parameter=> tags after its content (an Error, kBadValue, when a call's arguments are not a
// JSON object), and each run of tool results one user message of <tool_response> blocks.
std::vector<ChatMessage> render_qwen_xml(const std::vector<ToolMessage>& messages,
                                         const std::vector<ToolSpec>& tools);
// The same in GLM-4.5's form (chatglm4's formatter): the tools in a system message of their own
// before the conversation's; an assistant's turn opened by an empty <think></think> block, then
// its content and its calls as <tool_call> blocks of <arg_key> / <arg_value> pairs (an Error,
// kBadValue, when a call's arguments are not a JSON object); each run of tool results one
// observation message of <tool_response> blocks.
// (With a template that keeps earlier reasoning, a tool loop's reply holds its reasoning in that
// block: "<think>…</think>".)
std::vector<ChatMessage> render_glm(const std::vector<ToolMessage>& messages,
                                    const std::vector<ToolSpec>& tools,
                                    std::string_view chat_template = {});
// The same in Kimi-K2's form (`chat_template`: the model's, for its default system message and
// whether assistant turns open with an empty <think></think>): a tool_declare message of the
// tools' JSON array, the template's default system message when the conversation has none, an
// assistant's calls in one tool-call section (each with its call id), each tool result a tool
// message "## Return of ID\n…". With Kimi-K2-Thinking's template (it names reasoning_content),
// the replies after the last one without calls open with "<think>REASONING</think>".
std::vector<ChatMessage> render_kimi(const std::vector<ToolMessage>& messages,
                                     const std::vector<ToolSpec>& tools,
                                     std::string_view chat_template);
// The same in DeepSeek-V3.1's form (deepseek3's formatter): the system messages joined into one,
// then the tools' description (each tool's name, description and parameters' JSON, and the call
// format); an assistant's calls in one tool-call section after its content; tool results as they
// are (the formatter writes their markers).
std::vector<ChatMessage> render_deepseek(const std::vector<ToolMessage>& messages,
                                         const std::vector<ToolSpec>& tools);
// The same in MiniMax-M2's form (`chat_template`: the model's, for its default system message):
// the system message (the template's model_identity when the conversation has none, or an empty
// one) followed by the tools as <tool> JSON lines, an assistant's calls in one section of
// <invoke> blocks after its content (an Error, kBadValue, when a call's arguments are not a JSON
// object), its reasoning before them as "<think>\n…\n</think>\n\n" when it comes after the
// last user message (the tool loop's turns: interleaved thinking); tool results as they are (the
// formatter makes each run one tool turn).
std::vector<ChatMessage> render_minimax(const std::vector<ToolMessage>& messages,
                                        const std::vector<ToolSpec>& tools,
                                        std::string_view chat_template);
// The same in gpt-oss's harmony, for its chat formatter (whose roles may carry a header's
// channel and recipient): with tools, harmony's system message (reasoning_effort: low, medium or
// high; `date` YYYY-MM-DD) and a developer message of the system prompt's instructions and the
// tools' TypeScript namespace; an assistant's calls as commentary messages to=functions.NAME;
// each tool result a message from functions.NAME (the call it follows), its content as JSON.
std::vector<ChatMessage> render_harmony(const std::vector<ToolMessage>& messages,
                                        const std::vector<ToolSpec>& tools,
                                        std::string_view reasoning_effort, std::string_view date);
// The TypeScript type harmony writes for a parameter's JSON Schema.
std::string harmony_type(const nlohmann::ordered_json& schema);
// render_hermes, render_qwen_xml, render_glm, render_kimi, render_deepseek, render_minimax or
// render_harmony (today's date).
std::vector<ChatMessage> render_tools(ToolFormat f, const std::vector<ToolMessage>& messages,
                                      const std::vector<ToolSpec>& tools,
                                      std::string_view reasoning_effort = "medium",
                                      std::string_view chat_template = {});

// The calls in a reply's answer: each <tool_call> block (the last may be unclosed: the reply ended
// with its JSON) whose JSON is an object with a string "name" and an object or string "arguments".
// `content` is the text outside the blocks, trimmed. A block that does not parse stays in the
// content, and is not a call. Each block is read in order, as the call's matcher reads it, to
// its </tool_call>: a string or value that holds "</tool_call>" stays in the call (all three
// <tool_call> forms).
struct ParsedCalls {
  std::vector<ToolCall> calls;
  std::string content;
};
ParsedCalls parse_hermes_calls(std::string_view answer);
// The same for Qwen3-Coder's calls: each <tool_call> block holding <function=NAME> … and its
// <parameter=KEY> tags (the last block may be cut after </function>). A raw parameter
// (xml_raw_param of the tool's schema for it) becomes a JSON string; any other VALUE is read as
// JSON, and as a string when it is not JSON.
ParsedCalls parse_qwen_xml_calls(std::string_view answer, const std::vector<ToolSpec>& tools);
// The same for GLM's: each <tool_call> block of NAME and its <arg_key> / <arg_value> pairs
// (whitespace between them is skipped), VALUE read as parse_qwen_xml_calls reads it.
ParsedCalls parse_glm_calls(std::string_view answer, const std::vector<ToolSpec>& tools);
// Kimi-K2's and DeepSeek-V3.1's (the syntax's): in each section, each call's
// <|tool_call_begin|>ID<|tool_call_argument_begin|>JSON<|tool_call_end|> (the last may be cut
// after its JSON) whose ID names the function (Kimi-K2: functions.NAME:IDX, or NAME; the call
// keeps ID as its id) and whose JSON is an object. `content` is the text outside the sections.
ParsedCalls parse_section_calls(std::string_view answer, const SectionCallSyntax& syntax);
// MiniMax-M2's: in each <minimax:tool_call> section (the last may be unclosed), each
// <invoke name="NAME"> … </invoke> and its <parameter name="KEY">VALUE</parameter> tags, VALUE
// read as parse_qwen_xml_calls reads it. A section that does not read stays in the content.
ParsedCalls parse_minimax_calls(std::string_view answer, const std::vector<ToolSpec>& tools);
// gpt-oss's calls in a reply as written (its harmony headers rendered): each message whose header
// names a recipient functions.NAME and whose body is a JSON object. `content` is the text of the
// other messages but analysis ones (the reasoning).
ParsedCalls parse_harmony_calls(std::string_view reply);
// For kHarmony, `answer` is the reply as written.
ParsedCalls parse_calls(ToolFormat f, std::string_view answer, const std::vector<ToolSpec>& tools);

// What a call starts with, in format f: the text whose sampling arms the call's constraint
// (<tool_call>; Kimi-K2, DeepSeek-V3.1 and MiniMax-M2: their section's opening; harmony:
// " to=functions." in a header),
// and what a prompt ends with to make the reply a call (tool_choice "required" or a named
// function).
// (GLM: "<think></think>\n<tool_call>", the empty reasoning its turns open with.)
std::string_view call_opening(ToolFormat f);
std::string_view forced_call_prompt(ToolFormat f);
// What of forced_call_prompt the reply's parse needs before it: the call's opening (harmony: its
// header so far).
std::string_view forced_call_head(ToolFormat f);

// The schema of one call's JSON: {"name": a tool's name, "arguments": its parameters}, one branch
// per tool. A tool without parameters takes none ({} only, as OpenAI reads it); a parameters
// schema the compiler refuses is taken as any object for that tool.
std::shared_ptr<const JsonSchema> tool_call_schema(const std::vector<ToolSpec>& tools);
// An XML form's: one function per tool; each parameter's schema compiled on its own (one the
// compiler refuses, or that refers outside itself, takes any value of its kind); parallel: a
// section (MiniMax-M2's) may hold more than one call.
std::shared_ptr<const XmlCallSpec> xml_call_spec(const std::vector<ToolSpec>& tools,
                                                 const XmlCallSyntax& syntax = kQwenCoderSyntax,
                                                 bool parallel = true);
// Harmony's: each tool's name and its arguments' schema (tool_call_schema's reading).
std::shared_ptr<const HarmonyCallSpec> harmony_call_spec(const std::vector<ToolSpec>& tools);
// Kimi-K2's and DeepSeek-V3.1's: harmony's, the syntax, and whether a section may hold more than
// one call.
std::shared_ptr<const SectionCallSpec> section_call_spec(const std::vector<ToolSpec>& tools,
                                                         const SectionCallSyntax& syntax,
                                                         bool parallel);

// Filters of a call's body in format f (after call_opening) for ChatSession::set_tool_calls, the
// tools' schemas compiled once. parallel: a Kimi-K2, DeepSeek or MiniMax section may hold more
// than one call (the other formats' further calls are the session's).
DocumentFilterFn call_filters(ToolFormat f, const std::vector<ToolSpec>& tools,
                              bool parallel = true);

}  // namespace strata::engine
