// Function calling in the Hermes format (tool_calls.h).
#include "engine/tool_calls.h"

#include <fmt/format.h>

#include <utility>

#include "io/check.h"

namespace strata::engine {
namespace {

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";

// Qwen3's template's words around the tools' signatures.
constexpr std::string_view kToolsHead =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsTail =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call>";

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::string dump_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

bool hermes_tools_template(std::string_view chat_template) {
  return chat_template.find(kCallOpen) != std::string_view::npos;
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
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
        !t["function"].is_object())
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
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<ChatMessage> render_hermes(const std::vector<ToolMessage>& messages,
                                       const std::vector<ToolSpec>& tools) {
  std::vector<ChatMessage> out;
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
    std::string content = m.content;
    for (size_t c = 0; c < m.calls.size(); ++c) {
      if (c > 0 || !content.empty()) content += '\n';
      content += fmt::format("<tool_call>\n{{\"name\": \"{}\", \"arguments\": {}}}\n</tool_call>",
                             m.calls[c].name, m.calls[c].arguments);
    }
    out.push_back({m.role, std::move(content)});
  }
  return out;
}

ParsedCalls parse_hermes_calls(std::string_view answer) {
  ParsedCalls r;
  std::string content;
  size_t at = 0;
  while (at < answer.size()) {
    const size_t open = answer.find(kCallOpen, at);
    if (open == std::string_view::npos) break;
    const size_t body = open + kCallOpen.size();
    size_t close = answer.find(kCallClose, body);
    const size_t end = close == std::string_view::npos ? answer.size() : close + kCallClose.size();
    if (close == std::string_view::npos) close = answer.size();
    const nlohmann::json j = nlohmann::json::parse(trim(answer.substr(body, close - body)), nullptr,
                                                   /*allow_exceptions=*/false);
    const bool ok = j.is_object() && j.contains("name") && j["name"].is_string() &&
                    j.contains("arguments") &&
                    (j["arguments"].is_object() || j["arguments"].is_string());
    content += answer.substr(at, open - at);
    if (ok) {
      ToolCall c;
      c.name = j["name"].get<std::string>();
      c.arguments =
          j["arguments"].is_string()
              ? j["arguments"].get<std::string>()
              : j["arguments"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      r.calls.push_back(std::move(c));
    } else {
      content += answer.substr(open, end - open);
    }
    at = end;
  }
  if (at < answer.size()) content += answer.substr(at);
  r.content = std::string(trim(content));
  return r;
}

std::shared_ptr<const JsonSchema> tool_call_schema(const std::vector<ToolSpec>& tools) {
  const auto branch = [](const ToolSpec& t, bool any_arguments) {
    // No parameters: an empty parameter list (OpenAI's reading), so {} only.
    nlohmann::json args = any_arguments ? nlohmann::json{{"type", "object"}}
                          : t.parameters.is_null()
                              ? nlohmann::json{{"type", "object"},
                                               {"properties", nlohmann::json::object()},
                                               {"additionalProperties", false}}
                              : t.parameters;
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

}  // namespace strata::engine
