// Function calling in the Hermes, Qwen3-Coder XML, GLM XML, Kimi-K2, DeepSeek-V3.1, MiniMax-M2
// and harmony formats (tool_calls.h).
#include "engine/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <optional>
#include <utility>

#include "io/check.h"

namespace strata::engine {
namespace {

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kSectionOpen = kKimiSyntax.section_begin;
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kMinimaxOpen = "<minimax:tool_call>";

// DeepSeek-V3.1's model card's tool description (its template has none), around each tool's.
constexpr std::string_view kDeepseekToolsHead =
    "## Tools\nYou have access to the following tools:\n";
constexpr std::string_view kDeepseekToolsTail =
    "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments"
    "<｜tool▁call▁end｜>{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\nWhere:\n\n"
    "- `tool_call_name` must be an exact match to one of the available tools\n"
    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters "
    "Schema\n"
    "- For multiple tool calls, chain them directly without separators or spaces";

// MiniMax-M2's template's words around the tools' signatures (each "<tool>JSON</tool>\n").
constexpr std::string_view kMinimaxToolsHead =
    "\n\n# Tools\nYou may call one or more tools to assist with the user query.\nHere are the "
    "tools available in JSONSchema format:\n\n<tools>\n";
constexpr std::string_view kMinimaxToolsTail =
    "</tools>\n\nWhen making tool calls, use XML format to invoke tools and pass parameters:\n\n"
    "<minimax:tool_call>\n<invoke name=\"tool-name-1\">\n<parameter name=\"param-key-1\">"
    "param-value-1</parameter>\n<parameter name=\"param-key-2\">param-value-2</parameter>\n...\n"
    "</invoke>\n</minimax:tool_call>";

// Qwen3's template's words around the tools' signatures.
constexpr std::string_view kToolsHead =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsTail =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call>";

// GLM-4.5's and GLM-4.6's template's words after the tools' signatures (before them, Qwen3's).
constexpr std::string_view kGlmToolsTail =
    "\n</tools>\n\nFor each function call, output the function name and arguments within the "
    "following XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n"
    "<arg_value>{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}"
    "</arg_value>\n...\n</tool_call>";

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// s without its leading and trailing newlines (Jinja's strip('\n')).
std::string strip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return std::string(s);
}

// Whether a template writes the reasoning of earlier replies: the ones that name
// reasoning_content (Qwen3's, GLM-4.5's, Kimi-K2-Thinking's, MiniMax-M2's).
bool keeps_reasoning(std::string_view chat_template) {
  return chat_template.find("reasoning_content") != std::string_view::npos;
}

// The index of the last user message (0 when none): the replies after it are the tool loop's,
// whose reasoning the templates keep.
size_t last_user(const std::vector<ToolMessage>& messages) {
  size_t last = 0;
  for (size_t k = 0; k < messages.size(); ++k)
    if (messages[k].role == "user") last = k;
  return last;
}

std::string dump_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Whether t is JSON text as a whole (nlohmann's parser stops at a NUL byte: what follows one would
// go unread).
bool json_text(std::string_view t) {
  return t.find('\0') == std::string_view::npos && nlohmann::json::accept(t);
}

// Where the JSON value at t[at] ends (t is JSON a parser accepted).
size_t json_value_end(std::string_view t, size_t at) {
  if (at >= t.size()) return t.size();
  if (t[at] == '"' || t[at] == '{' || t[at] == '[') {
    int depth = 0;
    bool in_string = false;
    for (size_t i = at; i < t.size(); ++i) {
      const char c = t[i];
      if (in_string) {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          in_string = false;
          if (depth == 0) return i + 1;
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        return i + 1;
      }
    }
    return t.size();
  }
  size_t i = at;
  while (i < t.size() && std::string_view(",}] \t\r\n").find(t[i]) == std::string_view::npos) ++i;
  return i;
}

// The text of the top-level object's member `key` in JSON text a parser accepted (empty: none),
// as written: a number keeps its digits, where a parse and a dump could round it.
std::string_view json_member_text(std::string_view t, std::string_view key) {
  const auto skip = [&](size_t i) {
    while (i < t.size() && (t[i] == ' ' || t[i] == '\t' || t[i] == '\r' || t[i] == '\n')) ++i;
    return i;
  };
  size_t i = skip(0);
  if (i >= t.size() || t[i] != '{') return {};
  i = skip(i + 1);
  while (i < t.size() && t[i] == '"') {
    const size_t key_end = json_value_end(t, i);
    const nlohmann::json k = nlohmann::json::parse(t.substr(i, key_end - i), nullptr, false);
    i = skip(key_end);
    if (i >= t.size() || t[i] != ':') return {};
    const size_t value = skip(i + 1), value_end = json_value_end(t, value);
    if (k.is_string() && k.get_ref<const std::string&>() == key)
      return t.substr(value, value_end - value);
    i = skip(value_end);
    if (i < t.size() && t[i] == ',') i = skip(i + 1);
  }
  return {};
}

// Qwen3-Coder's template's words.
constexpr std::string_view kCoderSystem =
    "You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks.";
constexpr std::string_view kCoderToolsHead =
    "\n\nYou have access to the following functions:\n\n<tools>";
constexpr std::string_view kCoderToolsTail =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO "
    "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\n"
    "value_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second "
    "parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
    "<function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- "
    "Required parameters MUST be specified\n- You may provide optional reasoning for your function "
    "call in natural language BEFORE the function call, but NOT after\n- If there is no function "
    "call available, answer the question like normal with your current knowledge and do not tell "
    "the user about function calls\n</IMPORTANT>";

// Jinja's `string` filter as Python writes a value (True, None, ['a', 1]); strings as they are at
// the top, quoted inside a list or a mapping.
std::string py_string(const nlohmann::ordered_json& v, bool top = true) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return top ? s : "'" + s + "'";
  }
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + py_string(v[i], false);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      out += (first ? "'" : ", '") + k + "': " + py_string(x, false);
      first = false;
    }
    return out + "}";
  }
  return v.dump();
}

// The template's render_item_list: "\n<required>[`a`, `b`]</required>" for a non-empty list.
std::string item_list(const nlohmann::ordered_json* list) {
  if (!list || !list->is_array() || list->empty()) return {};
  std::string out = "\n<required>[";
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::ordered_json& x = (*list)[i];
    if (i) out += ", ";
    if (x.is_string()) {
      out += '`';
      out += x.get_ref<const std::string&>();
      out += '`';
    } else {
      out += py_string(x);
    }
  }
  return out + "]</required>";
}

const nlohmann::ordered_json* member(const nlohmann::ordered_json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  const auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

// One tool as Qwen3-Coder's template writes it in <tools>.
std::string coder_tool(const ToolSpec& t) {
  const nlohmann::ordered_json& f = t.function;
  std::string out = "\n<function>\n<name>" + t.name + "</name>";
  const nlohmann::ordered_json* desc = member(f, "description");
  out += "\n<description>" +
         std::string(trim(desc && desc->is_string() ? desc->get_ref<const std::string&>() : "")) +
         "</description>\n<parameters>";
  const nlohmann::ordered_json* params = member(f, "parameters");
  const nlohmann::ordered_json* props = params ? member(*params, "properties") : nullptr;
  if (props && props->is_object()) {
    for (const auto& [name, fields] : props->items()) {
      out += "\n<parameter>\n<name>" + name + "</name>";
      if (const auto* type = member(fields, "type"))
        out += "\n<type>" + py_string(*type) + "</type>";
      if (const auto* d = member(fields, "description"))
        out += "\n<description>" + std::string(trim(py_string(*d))) + "</description>";
      if (fields.is_object()) {
        for (const auto& [key, value] : fields.items()) {
          if (key == "type" || key == "description" || key == "enum" || key == "required" ||
              value.is_null())
            continue;
          std::string k;
          for (const char c : key)
            if (c != '$') k += c == '-' || c == ' ' ? '_' : c;
          out += "\n<" + k + ">" + (value.is_object() ? template_json(value) : py_string(value)) +
                 "</" + k + ">";
        }
      }
      out += item_list(member(fields, "required")) + "\n</parameter>";
    }
  }
  out += item_list(params ? member(*params, "required") : nullptr) + "\n</parameters>";
  if (const auto* ret = member(f, "return"))
    out += "\n<return>" + (ret->is_object() ? template_json(*ret) : py_string(*ret)) + "</return>";
  return out + "\n</function>";
}

// The tool's schema for a parameter (null: none).
const nlohmann::json* param_schema(const std::vector<ToolSpec>& tools, std::string_view tool,
                                   const std::string& key) {
  for (const ToolSpec& t : tools) {
    if (t.name != tool || !t.parameters.is_object()) continue;
    const auto props = t.parameters.find("properties");
    if (props == t.parameters.end() || !props->is_object()) return nullptr;
    const auto p = props->find(key);
    return p == props->end() ? nullptr : &*p;
  }
  return nullptr;
}

}  // namespace

ToolFormat tool_format(std::string_view chat_template) {
  const auto has = [&](std::string_view s) { return chat_template.find(s) != std::string::npos; };
  if (!has(kCallOpen)) return ToolFormat::kNone;
  if (has("<function=")) return has("<parameters>") ? ToolFormat::kQwenXml : ToolFormat::kNone;
  return ToolFormat::kHermes;
}

ToolFormat tool_format(ChatFamily family, std::string_view chat_template) {
  if (family == ChatFamily::kGptOss) return ToolFormat::kHarmony;
  if (family == ChatFamily::kKimiK2)
    return chat_template.find(kSectionOpen) != std::string_view::npos ||
                   chat_template.find("tool_declare") != std::string_view::npos
               ? ToolFormat::kKimi
               : ToolFormat::kNone;
  if (family == ChatFamily::kChatglm4)
    return chat_template.find(kCallOpen) != std::string_view::npos &&
                   chat_template.find("<arg_key>") != std::string_view::npos
               ? ToolFormat::kGlmXml
               : ToolFormat::kNone;
  if (family == ChatFamily::kMinimaxM2)
    return chat_template.find(kMinimaxOpen) != std::string_view::npos &&
                   chat_template.find("<invoke name=") != std::string_view::npos
               ? ToolFormat::kMinimax
               : ToolFormat::kNone;
  if (family == ChatFamily::kDeepseek3)  // V3.1's calls (V3's and R1's fence their JSON)
    return chat_template.find(kDeepseekSyntax.argument_begin) != std::string_view::npos &&
                   chat_template.find("```json") == std::string_view::npos
               ? ToolFormat::kDeepseek
               : ToolFormat::kNone;
  return family == ChatFamily::kChatml ? tool_format(chat_template) : ToolFormat::kNone;
}

std::string_view call_opening(ToolFormat f) {
  return f == ToolFormat::kHarmony    ? " to=functions."
         : f == ToolFormat::kKimi     ? kSectionOpen
         : f == ToolFormat::kDeepseek ? kDeepseekSyntax.section_begin
         : f == ToolFormat::kMinimax  ? kMinimaxOpen
                                      : kCallOpen;
}

std::string_view forced_call_prompt(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHarmony:
      return "<|channel|>commentary to=functions.";
    case ToolFormat::kGlmXml:  // the empty reasoning block GLM's turns start with
      return "<think></think>\n<tool_call>";
    case ToolFormat::kKimi:
      return kSectionOpen;
    case ToolFormat::kDeepseek:
      return kDeepseekSyntax.section_begin;
    case ToolFormat::kMinimax:  // (the template's "\n" after it)
      return "<minimax:tool_call>\n";
    default:
      return "<tool_call>\n";
  }
}

std::string_view forced_call_head(ToolFormat f) {
  const std::string_view p = forced_call_prompt(f);
  return f == ToolFormat::kGlmXml ? p.substr(p.find(kCallOpen)) : p;
}

std::string_view tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHarmony:
      return "harmony";
    case ToolFormat::kHermes:
      return "hermes";
    case ToolFormat::kQwenXml:
      return "qwen3-coder xml";
    case ToolFormat::kGlmXml:
      return "glm xml";
    case ToolFormat::kKimi:
      return "kimi-k2";
    case ToolFormat::kDeepseek:
      return "deepseek-v3.1";
    case ToolFormat::kMinimax:
      return "minimax-m2";
    case ToolFormat::kNone:
      break;
  }
  return "none";
}

std::string template_json(const nlohmann::ordered_json& v) {
  std::string out;
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) out += ", ";
      first = false;
      out += dump_string(k) + ": " + template_json(x);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      out += template_json(v[i]);
    }
    out += ']';
  } else {
    out += v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  return out;
}

std::vector<ToolSpec> parse_tools(const nlohmann::ordered_json& tools) {
  if (!tools.is_array()) fail(ErrorKind::kBadValue, "'tools' must be an array");
  std::vector<ToolSpec> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const nlohmann::ordered_json& t = tools[i];
    if (!t.is_object() || !t.contains("type") || t["type"] != "function" ||
        !t.contains("function") || !t["function"].is_object())
      fail(ErrorKind::kBadValue,
           "tools[{}] must be {{\"type\": \"function\", \"function\": {{...}}}}", i);
    const nlohmann::ordered_json& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
      fail(ErrorKind::kBadValue, "tools[{}].function needs a non-empty string 'name'", i);
    ToolSpec s;
    s.name = f["name"].get<std::string>();
    for (const ToolSpec& earlier : out)
      if (earlier.name == s.name)
        fail(ErrorKind::kBadValue, "tools[{}]: a second function named '{}'", i, s.name);
    if (f.contains("parameters") && !f["parameters"].is_null()) {
      if (!f["parameters"].is_object())
        fail(ErrorKind::kBadValue, "tools[{}].function.parameters must be an object", i);
      s.parameters = nlohmann::json::parse(f["parameters"].dump());
    }
    s.json_text = template_json(t);
    s.function = f;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<ChatMessage> render_hermes(const std::vector<ToolMessage>& messages,
                                       const std::vector<ToolSpec>& tools,
                                       std::string_view chat_template) {
  std::vector<ChatMessage> out;
  const bool keep = keeps_reasoning(chat_template);
  const size_t user = last_user(messages);
  size_t i = 0;
  if (!tools.empty()) {
    std::string system;
    if (!messages.empty() && messages[0].role == "system") {
      system = messages[0].content + "\n\n";
      i = 1;
    }
    system += kToolsHead;
    for (const ToolSpec& t : tools) system += "\n" + t.json_text;
    system += kToolsTail;
    out.push_back({"system", std::move(system)});
  }
  for (; i < messages.size(); ++i) {
    const ToolMessage& m = messages[i];
    if (m.role == "tool") {
      std::string text;
      for (; i < messages.size() && messages[i].role == "tool"; ++i) {
        if (!text.empty()) text += '\n';
        text += "<tool_response>\n" + messages[i].content + "\n</tool_response>";
      }
      --i;
      out.push_back({"user", std::move(text)});
      continue;
    }
    // Qwen3's: a tool loop's reply keeps its reasoning, "<think>\n…\n</think>\n\n" before it.
    const bool think = keep && m.role == "assistant" && i > user && !m.reasoning.empty();
    std::string content = m.content;
    if (think) content.erase(0, std::min(content.find_first_not_of('\n'), content.size()));
    for (size_t c = 0; c < m.calls.size(); ++c) {
      if (c > 0 || !m.content.empty()) content += '\n';
      content += fmt::format("<tool_call>\n{{\"name\": \"{}\", \"arguments\": {}}}\n</tool_call>",
                             m.calls[c].name, m.calls[c].arguments);
    }
    if (think) content = "<think>\n" + strip_newlines(m.reasoning) + "\n</think>\n\n" + content;
    out.push_back({m.role, std::move(content)});
  }
  return out;
}

namespace {

// Whitespace skipped from the front.
std::string_view ltrim(std::string_view s) {
  while (!s.empty() && (s[0] == ' ' || s[0] == '\n' || s[0] == '\t' || s[0] == '\r'))
    s.remove_prefix(1);
  return s;
}

// A block reader's answer: the block's calls (one, but in MiniMax-M2's sections), and where in the
// text after the block's opening its body ends.
using BlockCall = std::optional<std::pair<std::vector<ToolCall>, size_t>>;

// The blocks of an answer (<tool_call> … </tool_call>, or another form's `open` … `close`), each
// read by `call` from the text after its opening, in order as the format's matcher reads it (so
// a value that holds the close stays in it); then only whitespace and the close, or the answer's
// end (the reply ended in the block). A block it does not read stays in the content (to its
// first close), with the text outside the blocks, trimmed.
template <class Read>
ParsedCalls parse_blocks(std::string_view answer, const Read& call,
                         std::string_view open_tag = kCallOpen,
                         std::string_view close_tag = kCallClose) {
  ParsedCalls r;
  std::string content;
  size_t at = 0;
  while (at < answer.size()) {
    const size_t open = answer.find(open_tag, at);
    if (open == std::string_view::npos) break;
    content += answer.substr(at, open - at);
    const size_t body = open + open_tag.size();
    if (BlockCall read = call(answer.substr(body))) {
      const std::string_view after = ltrim(answer.substr(body + read->second));
      if (after.empty() || after.starts_with(close_tag)) {
        for (ToolCall& c : read->first) r.calls.push_back(std::move(c));
        at = answer.size() - after.size() + (after.empty() ? 0 : close_tag.size());
        continue;
      }
    }
    const size_t close = answer.find(close_tag, body);
    at = close == std::string_view::npos ? answer.size() : close + close_tag.size();
    content += answer.substr(open, at - open);
  }
  if (at < answer.size()) content += answer.substr(at);
  r.content = std::string(trim(content));
  return r;
}

}  // namespace

ParsedCalls parse_hermes_calls(std::string_view answer) {
  return parse_blocks(answer, [](std::string_view rest) -> BlockCall {
    // The JSON object after the opening, to its closing brace.
    const size_t start = rest.size() - ltrim(rest).size();
    if (start == rest.size() || rest[start] != '{') return std::nullopt;
    const size_t end = json_value_end(rest, start);
    const std::string_view text = rest.substr(start, end - start);
    if (!json_text(text)) return std::nullopt;
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string() ||
        !j.contains("arguments") || !(j["arguments"].is_object() || j["arguments"].is_string()))
      return std::nullopt;
    ToolCall c;
    c.name = j["name"].get<std::string>();
    // An object as written (see json_member_text); a string holds the JSON text.
    c.arguments = j["arguments"].is_string() ? j["arguments"].get<std::string>()
                                             : std::string(json_member_text(text, "arguments"));
    return std::pair(std::vector<ToolCall>{std::move(c)}, end);
  });
}

namespace {

// A call's arguments in an XML form: each key and value between the form's tags (a string value
// as it is, any other as JSON), in the client's order; an Error (kBadValue) when they are not a
// JSON object.
std::string xml_args(const ToolCall& call, std::string_view key_open, std::string_view key_close,
                     std::string_view value_close) {
  const nlohmann::ordered_json args = nlohmann::ordered_json::parse(call.arguments, nullptr, false);
  if (!args.is_object())
    fail(ErrorKind::kBadValue, "the arguments of a call of '{}' are not a JSON object", call.name);
  std::string out;
  for (const auto& [key, value] : args.items())
    out += std::string(key_open) + key + std::string(key_close) +
           (value.is_string() ? value.get<std::string>() : template_json(value)) +
           std::string(value_close);
  return out;
}

}  // namespace

std::vector<ChatMessage> render_qwen_xml(const std::vector<ToolMessage>& messages,
                                         const std::vector<ToolSpec>& tools) {
  std::vector<ChatMessage> out;
  size_t i = 0;
  if (!messages.empty() && messages[0].role == "system") {
    out.push_back({"system", messages[0].content});
    i = 1;
  } else if (!tools.empty()) {
    out.push_back({"system", std::string(kCoderSystem)});
  }
  if (!tools.empty()) {
    std::string& system = out.back().content;
    system += kCoderToolsHead;
    for (const ToolSpec& t : tools) system += coder_tool(t);
    system += kCoderToolsTail;
  }
  for (; i < messages.size(); ++i) {
    const ToolMessage& m = messages[i];
    if (m.role == "tool") {
      std::string text;
      for (; i < messages.size() && messages[i].role == "tool"; ++i)
        text += "<tool_response>\n" + messages[i].content + "\n</tool_response>\n";
      --i;
      out.push_back({"user", std::move(text)});
      continue;
    }
    if (m.calls.empty()) {
      out.push_back({m.role, m.content});
      continue;
    }
    // The template writes "<|im_start|>assistant" + ("\n" + content + "\n") + "\n<tool_call>…";
    // the formatter writes the role's "\n" itself.
    const std::string_view content = trim(m.content);
    std::string text = content.empty() ? std::string() : std::string(content) + "\n\n";
    for (size_t c = 0; c < m.calls.size(); ++c) {
      if (c) text += '\n';
      text += fmt::format("<tool_call>\n<function={}>\n", m.calls[c].name) +
              xml_args(m.calls[c], "<parameter=", ">\n", "\n</parameter>\n") +
              "</function>\n</tool_call>";
    }
    out.push_back({m.role, std::move(text)});
  }
  return out;
}

std::string harmony_type(const nlohmann::ordered_json& s) {
  if (!s.is_object()) return "any";
  const auto join = [](const nlohmann::ordered_json& list, const auto& each) {
    std::string out;
    for (const auto& x : list) out += (out.empty() ? "" : " | ") + each(x);
    return out.empty() ? std::string("any") : out;
  };
  if (const auto* e = member(s, "enum"); e && e->is_array())
    return join(*e, [](const nlohmann::ordered_json& v) { return template_json(v); });
  if (const auto* c = member(s, "const")) return template_json(*c);
  for (const char* k : {"anyOf", "oneOf"})
    if (const auto* u = member(s, k); u && u->is_array())
      return join(*u, [](const nlohmann::ordered_json& b) { return harmony_type(b); });
  const auto* type = member(s, "type");
  if (type && type->is_array())
    return join(*type, [&](const nlohmann::ordered_json& t) {
      nlohmann::ordered_json one = s;
      one["type"] = t;
      return harmony_type(one);
    });
  const std::string t = type && type->is_string() ? type->get<std::string>() : "";
  if (t == "string") return "string";
  if (t == "integer" || t == "number") return "number";
  if (t == "boolean") return "boolean";
  if (t == "null") return "null";
  if (t == "array") {
    const auto* items = member(s, "items");
    const std::string item = items ? harmony_type(*items) : "any";
    return (item.find(" | ") != std::string::npos ? "(" + item + ")" : item) + "[]";
  }
  const auto* props = member(s, "properties");
  if (t == "object" || props) {
    if (!props || !props->is_object() || props->empty()) return "object";
    std::string out = "{\n";
    const auto* req = member(s, "required");
    for (const auto& [name, spec] : props->items()) {
      if (const auto* d = member(spec, "description"); d && d->is_string())
        out += "// " + d->get<std::string>() + "\n";
      const bool required =
          req && req->is_array() && std::find(req->begin(), req->end(), name) != req->end();
      out += name + (required ? ": " : "?: ") + harmony_type(spec);
      if (const auto* dflt = member(spec, "default"))
        out +=
            ", // default: " + (member(spec, "enum") && dflt->is_string() ? dflt->get<std::string>()
                                                                          : template_json(*dflt));
      out += ",\n";
    }
    return out + "}";
  }
  return "any";
}

namespace {

// gpt-oss's template's namespace of the tools.
std::string harmony_namespace(const std::vector<ToolSpec>& tools) {
  std::string out = "## functions\n\nnamespace functions {\n\n";
  for (const ToolSpec& t : tools) {
    if (const auto* d = member(t.function, "description"); d && d->is_string())
      out += "// " + d->get<std::string>() + "\n";
    out += "type " + t.name + " = ";
    const auto* params = member(t.function, "parameters");
    const auto* props = params ? member(*params, "properties") : nullptr;
    if (props && props->is_object() && !props->empty()) {
      // The parameters' object type, as "(_: {...}) => any".
      out += "(_: " + harmony_type(*params) + ") => any;\n\n";
    } else {
      out += "() => any;\n\n";
    }
  }
  return out + "} // namespace functions";
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

}  // namespace

std::vector<ChatMessage> render_harmony(const std::vector<ToolMessage>& messages,
                                        const std::vector<ToolSpec>& tools,
                                        std::string_view reasoning_effort, std::string_view date) {
  std::vector<ChatMessage> out;
  std::string system = fmt::format(
      "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: "
      "2024-06\nCurrent date: {}\n\nReasoning: {}\n\n# Valid channels: analysis, commentary, "
      "final. Channel must be included for every message.",
      date, reasoning_effort);
  if (!tools.empty())
    system += "\nCalls to these tools must go to the commentary channel: 'functions'.";
  out.push_back({"system", std::move(system)});
  size_t i = 0;
  std::string developer;
  if (!messages.empty() && messages[0].role == "system") {
    developer = "# Instructions\n\n" + messages[0].content + "\n\n";
    i = 1;
  }
  if (!tools.empty()) developer += "# Tools\n\n" + harmony_namespace(tools);
  if (!developer.empty()) out.push_back({"developer", std::move(developer)});
  std::vector<std::string> called;  // the last assistant message's calls, for their results
  size_t result = 0;
  for (; i < messages.size(); ++i) {
    const ToolMessage& m = messages[i];
    if (m.role == "tool") {
      const std::string name =
          called.empty() ? std::string("tool") : called[std::min(result, called.size() - 1)];
      ++result;
      out.push_back({"functions." + name + " to=assistant<|channel|>commentary",
                     template_json(nlohmann::ordered_json(m.content))});
      continue;
    }
    if (m.role != "assistant") {
      out.push_back({m.role, m.content});
      continue;
    }
    if (m.calls.empty()) {
      out.push_back({"assistant<|channel|>final", m.content});
      continue;
    }
    // Text beside calls is the reasoning that led to them.
    if (!trim(m.content).empty()) out.push_back({"assistant<|channel|>analysis", m.content});
    called.clear();
    result = 0;
    for (const ToolCall& c : m.calls) {
      out.push_back(
          {"assistant to=functions." + c.name + "<|channel|>commentary json", c.arguments});
      called.push_back(c.name);
    }
  }
  return out;
}

std::vector<ChatMessage> render_tools(ToolFormat f, const std::vector<ToolMessage>& messages,
                                      const std::vector<ToolSpec>& tools,
                                      std::string_view reasoning_effort,
                                      std::string_view chat_template) {
  switch (f) {
    case ToolFormat::kKimi:
      return render_kimi(messages, tools, chat_template);
    case ToolFormat::kDeepseek:
      return render_deepseek(messages, tools);
    case ToolFormat::kMinimax:
      return render_minimax(messages, tools, chat_template);
    case ToolFormat::kQwenXml:
      return render_qwen_xml(messages, tools);
    case ToolFormat::kGlmXml:
      return render_glm(messages, tools, chat_template);
    case ToolFormat::kHarmony:
      return render_harmony(messages, tools, reasoning_effort, today());
    default:
      return render_hermes(messages, tools, chat_template);
  }
}

ParsedCalls parse_harmony_calls(std::string_view reply) {
  constexpr std::string_view kStart = "<|start|>", kMessage = "<|message|>",
                             kChannel = "<|channel|>", kTo = "to=functions.";
  ParsedCalls r;
  std::string content;
  size_t at = 0;
  while (at <= reply.size()) {
    size_t next = reply.find(kStart, at);
    if (next == std::string_view::npos) next = reply.size();
    const std::string_view msg = reply.substr(at, next - at);
    at = next + kStart.size();
    const size_t m = msg.find(kMessage);
    if (m == std::string_view::npos) {  // no header: text as it stands
      content += msg;
      continue;
    }
    const std::string_view header = msg.substr(0, m);
    std::string_view body = msg.substr(m + kMessage.size());
    for (const std::string_view end : {"<|end|>", "<|call|>", "<|return|>"})
      if (const size_t e = body.find(end); e != std::string_view::npos) body = body.substr(0, e);
    if (const size_t to = header.find(kTo); to != std::string_view::npos) {
      std::string_view name = header.substr(to + kTo.size());
      name = name.substr(0, std::min(name.find(' '), name.find('<')));
      const std::string_view args = trim(body);
      if (!name.empty() && json_text(args) &&
          nlohmann::json::parse(args, nullptr, false).is_object()) {
        r.calls.push_back({"", std::string(name), std::string(args)});
        continue;
      }
    }
    std::string_view channel = header;
    if (const size_t c = header.rfind(kChannel); c != std::string_view::npos)
      channel = header.substr(c + kChannel.size());
    channel = trim(channel);
    channel = channel.substr(0, channel.find(' '));
    if (channel != "analysis") content += body;
  }
  r.content = std::string(trim(content));
  return r;
}

namespace {
// An XML call's KEY and VALUE into its arguments object's text: a raw parameter (xml_raw_param
// of its schema) as a JSON string, any other as the JSON the model wrote (a number keeps its
// digits), a string when it is not JSON.
void append_arg(std::string& args, const std::vector<ToolSpec>& tools, std::string_view tool,
                const std::string& key, std::string_view value) {
  const nlohmann::json* schema = param_schema(tools, tool, key);
  args += args.size() > 1 ? "," : "";
  args += dump_string(key) + ':';
  const bool as_json = schema && !xml_raw_param(*schema) && json_text(value);
  args += as_json ? std::string(trim(value)) : dump_string(std::string(value));
}
}  // namespace

ParsedCalls parse_qwen_xml_calls(std::string_view answer, const std::vector<ToolSpec>& tools) {
  // <function=NAME> … </function>, each <parameter=KEY>\nVALUE\n</parameter> inside.
  return parse_blocks(answer, [&](std::string_view rest) -> BlockCall {
    constexpr std::string_view kFn = "<function=", kFnEnd = "</function>";
    constexpr std::string_view kParam = "<parameter=";
    std::string_view b = ltrim(rest);
    const size_t name_end = b.find('>');
    if (!b.starts_with(kFn) || name_end == std::string_view::npos || name_end == kFn.size())
      return std::nullopt;
    ToolCall c;
    c.name = std::string(b.substr(kFn.size(), name_end - kFn.size()));
    std::string args = "{";
    b.remove_prefix(name_end + 1);
    for (b = ltrim(b); !b.starts_with(kFnEnd); b = ltrim(b)) {
      const size_t key_end = b.find('>');
      if (!b.starts_with(kParam) || key_end == std::string_view::npos) return std::nullopt;
      // The value ends where the matcher ends it, at the first "\n</parameter>\n"; a reply may
      // also close it otherwise.
      size_t value_end = std::string_view::npos, skip = 0;
      for (const std::string_view end : {"\n</parameter>\n", "\n</parameter>", "</parameter>"}) {
        value_end = b.find(end, key_end);
        skip = end.size();
        if (value_end != std::string_view::npos) break;
      }
      if (value_end == std::string_view::npos) return std::nullopt;
      const std::string key(b.substr(kParam.size(), key_end - kParam.size()));
      std::string_view value = b.substr(key_end + 1, value_end - key_end - 1);
      if (value.starts_with('\n')) value.remove_prefix(1);
      b.remove_prefix(value_end + skip);
      append_arg(args, tools, c.name, key, value);
    }
    c.arguments = args + '}';
    return std::pair(std::vector<ToolCall>{std::move(c)}, rest.size() - b.size() + kFnEnd.size());
  });
}

std::vector<ChatMessage> render_glm(const std::vector<ToolMessage>& messages,
                                    const std::vector<ToolSpec>& tools,
                                    std::string_view chat_template) {
  std::vector<ChatMessage> out;
  const bool keep = keeps_reasoning(chat_template);
  const size_t user = last_user(messages);
  if (!tools.empty()) {  // a system turn of its own, before the conversation's
    std::string system(kToolsHead);
    for (const ToolSpec& t : tools) system += "\n" + t.json_text;
    system += kGlmToolsTail;
    out.push_back({"system", std::move(system)});
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ToolMessage& m = messages[i];
    if (m.role == "tool") {  // a run of results: one observation turn
      std::string text;
      for (; i < messages.size() && messages[i].role == "tool"; ++i) {
        if (!text.empty()) text += '\n';
        text += "<tool_response>\n" + messages[i].content + "\n</tool_response>";
      }
      --i;
      out.push_back({"observation", std::move(text)});
      continue;
    }
    if (m.role != "assistant") {
      out.push_back({m.role, m.content});
      continue;
    }
    // The template writes "<|assistant|>" + "\n<think></think>" + ("\n" + content) + each call's
    // "\n<tool_call>NAME\n" + "<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n"… +
    // "</tool_call>"; the formatter writes the role's "\n" itself. A tool loop's reply keeps its
    // reasoning in the block.
    std::string text = keep && i > user && !trim(m.reasoning).empty()
                           ? "<think>" + std::string(trim(m.reasoning)) + "</think>"
                           : std::string("<think></think>");
    if (const std::string_view content = trim(m.content); !content.empty())
      text += "\n" + std::string(content);
    for (const ToolCall& call : m.calls)
      text += "\n<tool_call>" + call.name + "\n" +
              xml_args(call, "<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n") +
              "</tool_call>";
    out.push_back({m.role, std::move(text)});
  }
  return out;
}

ParsedCalls parse_glm_calls(std::string_view answer, const std::vector<ToolSpec>& tools) {
  // NAME, then <arg_key>KEY</arg_key> <arg_value>VALUE</arg_value> pairs, to </tool_call>.
  return parse_blocks(answer, [&](std::string_view rest) -> BlockCall {
    constexpr std::string_view kKey = "<arg_key>", kKeyEnd = "</arg_key>";
    constexpr std::string_view kValue = "<arg_value>", kValueEnd = "</arg_value>";
    std::string_view b = ltrim(rest);
    const std::string_view name = trim(b.substr(0, std::min(b.find('\n'), b.find('<'))));
    if (name.empty()) return std::nullopt;
    ToolCall c;
    c.name = std::string(name);
    std::string args = "{";
    b.remove_prefix(name.size());
    for (b = ltrim(b); !b.empty() && !b.starts_with(kCallClose); b = ltrim(b)) {
      const size_t key_end = b.find(kKeyEnd);
      if (!b.starts_with(kKey) || key_end == std::string_view::npos) return std::nullopt;
      const std::string key(trim(b.substr(kKey.size(), key_end - kKey.size())));
      b = ltrim(b.substr(key_end + kKeyEnd.size()));
      const size_t value_end = b.find(kValueEnd);
      if (!b.starts_with(kValue) || value_end == std::string_view::npos) return std::nullopt;
      append_arg(args, tools, c.name, key, b.substr(kValue.size(), value_end - kValue.size()));
      b.remove_prefix(value_end + kValueEnd.size());
    }
    c.arguments = args + '}';
    return std::pair(std::vector<ToolCall>{std::move(c)}, rest.size() - b.size());
  });
}

std::vector<ChatMessage> render_minimax(const std::vector<ToolMessage>& messages,
                                        const std::vector<ToolSpec>& tools,
                                        std::string_view chat_template) {
  std::vector<ChatMessage> out;
  size_t i = 0;
  if (!tools.empty()) {  // the system message (the template's own when none), then the tools
    std::string system;
    if (!messages.empty() && messages[0].role == "system") {
      system = messages[0].content;
      i = 1;
    }
    if (system.empty()) system = default_system_message(ChatFamily::kMinimaxM2, chat_template);
    system += kMinimaxToolsHead;
    for (const ToolSpec& t : tools) system += "<tool>" + template_json(t.function) + "</tool>\n";
    system += kMinimaxToolsTail;
    out.push_back({"system", std::move(system)});
  }
  const size_t user = last_user(messages);
  for (; i < messages.size(); ++i) {
    const ToolMessage& m = messages[i];
    // The reasoning of a turn after the last user message (the tool loop's) is kept.
    const std::string think = m.role == "assistant" && i > user && !m.reasoning.empty()
                                  ? "<think>\n" + m.reasoning + "\n</think>\n\n"
                                  : std::string();
    if (m.role != "assistant" || m.calls.empty()) {
      out.push_back({m.role, think + m.content});
      continue;
    }
    // "\n<minimax:tool_call>\n", each call's <invoke name="NAME">\n and its
    // <parameter name="KEY">VALUE</parameter>\n lines and </invoke>\n, the section's end.
    std::string text = think + m.content + "\n" + std::string(kMinimaxOpen) + "\n";
    for (const ToolCall& call : m.calls)
      text += "<invoke name=\"" + call.name + "\">\n" +
              xml_args(call, "<parameter name=\"", "\">", "</parameter>\n") + "</invoke>\n";
    out.push_back({m.role, text + std::string(kMinimaxSyntax.section_end)});
  }
  return out;
}

ParsedCalls parse_minimax_calls(std::string_view answer, const std::vector<ToolSpec>& tools) {
  constexpr std::string_view kInvoke = "<invoke name=\"", kInvokeEnd = "</invoke>";
  constexpr std::string_view kParam = "<parameter name=\"", kParamEnd = "</parameter>";
  const std::string_view kSectionEnd = kMinimaxSyntax.section_end;
  // Skips whitespace, then takes `s` if it comes next.
  const auto take = [](std::string_view& rest, std::string_view s) {
    rest = ltrim(rest);
    if (!rest.starts_with(s)) return false;
    rest.remove_prefix(s.size());
    return true;
  };
  // A name or key up to its '">'.
  const auto name = [](std::string_view& rest, std::string& out) {
    const size_t end = rest.find("\">");
    if (end == 0 || end == std::string_view::npos) return false;
    out = std::string(rest.substr(0, end));
    rest.remove_prefix(end + 2);
    return true;
  };
  // Each <invoke name="NAME">, its parameters (a VALUE ends at the first "</parameter>\n", else
  // "</parameter>"), </invoke>; to the section's end, or the reply's.
  return parse_blocks(
      answer,
      [&](std::string_view rest) -> BlockCall {
        std::vector<ToolCall> calls;
        std::string_view b = ltrim(rest);
        for (; !b.empty() && !b.starts_with(kSectionEnd); b = ltrim(b)) {
          ToolCall c;
          if (!take(b, kInvoke) || !name(b, c.name)) return std::nullopt;
          std::string args = "{";
          while (!take(b, kInvokeEnd)) {
            std::string key;
            if (!take(b, kParam) || !name(b, key)) return std::nullopt;
            size_t end = b.find(std::string(kParamEnd) + "\n");
            if (end == std::string_view::npos) end = b.find(kParamEnd);
            if (end == std::string_view::npos) return std::nullopt;
            append_arg(args, tools, c.name, key, b.substr(0, end));
            b.remove_prefix(end + kParamEnd.size());
          }
          c.arguments = args + '}';
          calls.push_back(std::move(c));
        }
        if (calls.empty()) return std::nullopt;
        return std::pair(std::move(calls), rest.size() - b.size());
      },
      kMinimaxOpen, kSectionEnd);
}

std::vector<ChatMessage> render_kimi(const std::vector<ToolMessage>& messages,
                                     const std::vector<ToolSpec>& tools,
                                     std::string_view chat_template) {
  std::vector<ChatMessage> out;
  if (!tools.empty()) {
    std::string list = "[";
    for (const ToolSpec& t : tools) list += (list.size() > 1 ? ", " : "") + t.json_text;
    out.push_back({"tool_declare", list + "]"});
  }
  // The template's system message when the conversation has none (its text between the system
  // header and the turn's end).
  constexpr std::string_view kSystemHeader = "<|im_system|>system<|im_middle|>";
  if (messages.empty() || messages[0].role != "system") {
    const size_t at = chat_template.find(kSystemHeader);
    const size_t end = at == std::string_view::npos
                           ? at
                           : chat_template.find("<|im_end|>", at + kSystemHeader.size());
    if (end != std::string_view::npos)
      out.push_back({"system", std::string(chat_template.substr(at + kSystemHeader.size(),
                                                                end - at - kSystemHeader.size()))});
  }
  const bool empty_think = chat_template.find("<think></think>") != std::string_view::npos;
  // Kimi-K2-Thinking's: the replies after the last one without calls keep their reasoning.
  size_t suffix = 0;
  for (size_t k = 0; k < messages.size(); ++k)
    if (messages[k].role == "assistant" && messages[k].calls.empty()) suffix = k + 1;
  const bool keep = empty_think && keeps_reasoning(chat_template);
  for (size_t k = 0; k < messages.size(); ++k) {
    const ToolMessage& m = messages[k];
    if (m.role == "tool") {
      out.push_back({"tool", "## Return of " + m.call_id + "\n" + m.content});
      continue;
    }
    if (m.role != "assistant") {
      out.push_back({m.role, m.content});
      continue;
    }
    std::string text = (keep && k >= suffix ? "<think>" + m.reasoning + "</think>"
                        : empty_think       ? std::string("<think></think>")
                                            : std::string()) +
                       m.content;
    if (!m.calls.empty()) {
      text += kSectionOpen;
      for (size_t c = 0; c < m.calls.size(); ++c) {
        const ToolCall& call = m.calls[c];
        // (A call without an id gets Kimi's form, numbered in its message.)
        const std::string id =
            call.id.empty() ? fmt::format("functions.{}:{}", call.name, c) : call.id;
        text += std::string(kKimiSyntax.call_begin) + id + std::string(kKimiSyntax.argument_begin) +
                call.arguments + std::string(kKimiSyntax.call_end);
      }
      text += kKimiSyntax.section_end;
    }
    out.push_back({m.role, std::move(text)});
  }
  return out;
}

std::vector<ChatMessage> render_deepseek(const std::vector<ToolMessage>& messages,
                                         const std::vector<ToolSpec>& tools) {
  // The system messages joined, as the template joins them, then the tools' description.
  std::string system;
  bool has_system = false;
  for (const ToolMessage& m : messages) {
    if (m.role != "system") continue;
    system += (has_system ? "\n\n" : "") + m.content;
    has_system = true;
  }
  if (!tools.empty()) {
    system += has_system ? "\n\n" : "";
    system += kDeepseekToolsHead;
    for (const ToolSpec& t : tools) {
      const auto* description = member(t.function, "description");
      const auto* params = member(t.function, "parameters");
      system += "\n### " + t.name + "\nDescription: " +
                (description && description->is_string() ? description->get<std::string>() : "") +
                "\n\nParameters: " + (params ? template_json(*params) : "{}") + "\n";
    }
    system += kDeepseekToolsTail;
  }
  std::vector<ChatMessage> out;
  if (has_system || !tools.empty()) out.push_back({"system", std::move(system)});
  for (const ToolMessage& m : messages) {
    if (m.role == "system") continue;
    if (m.role != "assistant" || m.calls.empty()) {
      out.push_back({m.role, m.content});
      continue;
    }
    std::string text = m.content + std::string(kDeepseekSyntax.section_begin);
    for (const ToolCall& c : m.calls)
      text += std::string(kDeepseekSyntax.call_begin) + c.name +
              std::string(kDeepseekSyntax.argument_begin) + c.arguments +
              std::string(kDeepseekSyntax.call_end);
    out.push_back({m.role, text + std::string(kDeepseekSyntax.section_end)});
  }
  return out;
}

ParsedCalls parse_section_calls(std::string_view answer, const SectionCallSyntax& syn) {
  ParsedCalls r;
  std::string content;
  size_t at = 0;
  while (at < answer.size()) {
    const size_t open = answer.find(syn.section_begin, at);
    if (open == std::string_view::npos) break;
    content += answer.substr(at, open - at);
    const size_t body = open + syn.section_begin.size();
    const size_t close = answer.find(syn.section_end, body);
    const size_t end =
        close == std::string_view::npos ? answer.size() : close + syn.section_end.size();
    std::string_view section =
        answer.substr(body, (close == std::string_view::npos ? answer.size() : close) - body);
    std::vector<ToolCall> calls;
    bool ok = true;
    while (ok && !trim(section).empty()) {
      section = trim(section);
      const size_t args = section.find(syn.argument_begin);
      if (!section.starts_with(syn.call_begin) || args == std::string_view::npos) {
        ok = false;
        break;
      }
      const std::string_view id =
          trim(section.substr(syn.call_begin.size(), args - syn.call_begin.size()));
      std::string_view json = section.substr(args + syn.argument_begin.size());
      const size_t call_end = json.find(syn.call_end);
      json = trim(json.substr(0, call_end));
      // Kimi-K2's functions.NAME:IDX (vLLM's reading) or a bare NAME; DeepSeek's NAME.
      std::string_view name = id;
      if (syn.indexed) {
        name = id.substr(0, id.find(':'));
        if (const size_t dot = name.rfind('.'); dot != std::string_view::npos)
          name.remove_prefix(dot + 1);
      }
      if (name.empty() || !json_text(json) ||
          !nlohmann::json::parse(json, nullptr, false).is_object()) {
        ok = false;
        break;
      }
      calls.push_back(
          {syn.indexed ? std::string(id) : std::string(), std::string(name), std::string(json)});
      section =
          call_end == std::string_view::npos
              ? std::string_view()
              : section.substr(args + syn.argument_begin.size() + call_end + syn.call_end.size());
    }
    if (ok && !calls.empty()) {
      for (ToolCall& c : calls) r.calls.push_back(std::move(c));
    } else {
      content += answer.substr(open, end - open);
    }
    at = end;
  }
  if (at < answer.size()) content += answer.substr(at);
  r.content = std::string(trim(content));
  return r;
}

ParsedCalls parse_calls(ToolFormat f, std::string_view answer, const std::vector<ToolSpec>& tools) {
  switch (f) {
    case ToolFormat::kQwenXml:
      return parse_qwen_xml_calls(answer, tools);
    case ToolFormat::kGlmXml:
      return parse_glm_calls(answer, tools);
    case ToolFormat::kKimi:
      return parse_section_calls(answer, kKimiSyntax);
    case ToolFormat::kDeepseek:
      return parse_section_calls(answer, kDeepseekSyntax);
    case ToolFormat::kMinimax:
      return parse_minimax_calls(answer, tools);
    case ToolFormat::kHarmony:
      return parse_harmony_calls(answer);
    default:
      return parse_hermes_calls(answer);
  }
}

namespace {
// A tool's arguments' schema: its parameters; none: no parameters (OpenAI's reading), so {} only.
nlohmann::json arguments_schema(const ToolSpec& t, bool any_arguments) {
  return any_arguments            ? nlohmann::json{{"type", "object"}}
         : t.parameters.is_null() ? nlohmann::json{{"type", "object"},
                                                   {"properties", nlohmann::json::object()},
                                                   {"additionalProperties", false}}
                                  : t.parameters;
}
}  // namespace

std::shared_ptr<const JsonSchema> tool_call_schema(const std::vector<ToolSpec>& tools) {
  const auto branch = [](const ToolSpec& t, bool any_arguments) {
    const nlohmann::json args = arguments_schema(t, any_arguments);
    return nlohmann::json{{"type", "object"},
                          {"properties", {{"name", {{"const", t.name}}}, {"arguments", args}}},
                          {"required", {"name", "arguments"}},
                          {"additionalProperties", false}};
  };
  nlohmann::json any_of = nlohmann::json::array();
  for (const ToolSpec& t : tools) {
    nlohmann::json b = branch(t, false);
    try {
      JsonSchema::from_json(b);
    } catch (const Error&) {
      b = branch(t, true);  // a parameters schema outside the subset: any object
    }
    any_of.push_back(std::move(b));
  }
  return JsonSchema::from_json(nlohmann::json{{"anyOf", std::move(any_of)}});
}

std::shared_ptr<const XmlCallSpec> xml_call_spec(const std::vector<ToolSpec>& tools,
                                                 const XmlCallSyntax& syntax, bool parallel) {
  auto spec = std::make_shared<XmlCallSpec>();
  spec->syntax = syntax;
  spec->parallel = parallel;
  for (const ToolSpec& t : tools) {
    XmlCallSpec::Function f;
    f.name = t.name;
    const nlohmann::json& p = t.parameters;
    const auto props = p.is_object() ? p.find("properties") : p.end();
    if (p.is_object() && (props == p.end() || !props->is_object() || props->size() > 64)) {
      f.open_params =
          p.value("additionalProperties", nlohmann::json(true)) != false || props != p.end();
    } else if (p.is_object()) {
      std::vector<std::string> required;
      if (const auto r = p.find("required"); r != p.end() && r->is_array())
        for (const nlohmann::json& x : *r)
          if (x.is_string()) required.push_back(x.get<std::string>());
      for (const auto& [name, schema] : props->items()) {
        XmlCallSpec::Param q;
        q.name = name;
        q.raw = xml_raw_param(schema);
        q.required = std::find(required.begin(), required.end(), name) != required.end();
        try {
          q.schema = JsonSchema::from_json(schema);
        } catch (const Error&) {
          q.schema = JsonSchema::any_value();  // outside the subset, or a $ref to the tool's root
        }
        f.params.push_back(std::move(q));
      }
    }
    spec->functions.push_back(std::move(f));
  }
  return spec;
}

std::shared_ptr<const HarmonyCallSpec> harmony_call_spec(const std::vector<ToolSpec>& tools) {
  auto spec = std::make_shared<HarmonyCallSpec>();
  for (const ToolSpec& t : tools) {
    std::shared_ptr<const JsonSchema> args;
    try {
      args = JsonSchema::from_json(arguments_schema(t, false));
    } catch (const Error&) {
      args = JsonSchema::from_json(arguments_schema(t, true));  // outside the subset: any object
    }
    spec->functions.push_back({t.name, std::move(args)});
  }
  return spec;
}

std::shared_ptr<const SectionCallSpec> section_call_spec(const std::vector<ToolSpec>& tools,
                                                         const SectionCallSyntax& syntax,
                                                         bool parallel) {
  auto spec = std::make_shared<SectionCallSpec>();
  spec->functions = harmony_call_spec(tools);
  spec->parallel = parallel;
  spec->syntax = syntax;
  return spec;
}

DocumentFilterFn call_filters(ToolFormat f, const std::vector<ToolSpec>& tools, bool parallel) {
  if (f == ToolFormat::kKimi || f == ToolFormat::kDeepseek)
    return [spec = section_call_spec(tools, f == ToolFormat::kKimi ? kKimiSyntax : kDeepseekSyntax,
                                     parallel)](std::shared_ptr<const TokenTexts> texts) {
      return std::unique_ptr<DocumentFilter>(new SectionCallConstraint(spec, std::move(texts)));
    };
  if (f == ToolFormat::kHarmony)
    return [spec = harmony_call_spec(tools)](std::shared_ptr<const TokenTexts> texts) {
      return std::unique_ptr<DocumentFilter>(new HarmonyCallConstraint(spec, std::move(texts)));
    };
  if (f == ToolFormat::kQwenXml || f == ToolFormat::kGlmXml || f == ToolFormat::kMinimax)
    return [spec = xml_call_spec(tools,
                                 f == ToolFormat::kGlmXml    ? kGlmSyntax
                                 : f == ToolFormat::kMinimax ? kMinimaxSyntax
                                                             : kQwenCoderSyntax,
                                 parallel)](std::shared_ptr<const TokenTexts> texts) {
      return std::unique_ptr<DocumentFilter>(new XmlCallConstraint(spec, std::move(texts)));
    };
  return [schema = tool_call_schema(tools)](std::shared_ptr<const TokenTexts> texts) {
    return std::unique_ptr<DocumentFilter>(new TokenConstraint(schema, std::move(texts)));
  };
}

}  // namespace strata::engine
