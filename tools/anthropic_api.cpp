// Anthropic's Messages API over the chat completions `serve` speaks (see anthropic_api.h).
#include "tools/anthropic_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <tuple>

#include "io/check.h"

namespace strata::tools::anthropic {
namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A member's string (absent or null: `dflt`); another type is an Error naming it.
// Anthropic's tool_use ids are [A-Za-z0-9_-]+; a call id with other bytes (Kimi-K2's
// functions.NAME:IDX, which its later prompts name) goes out as "toolu_x" and its bytes in hex,
// and comes back from a client's tool_use / tool_result as it was.
constexpr std::string_view kHexId = "toolu_x";

std::string anthropic_id(const std::string& id) {
  const bool plain = !id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  if (plain) return id;
  std::string out(kHexId);
  for (const char c : id) out += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return out;
}

std::string call_id(const std::string& id) {
  const std::string_view hex = std::string_view(id).substr(std::min(id.size(), kHexId.size()));
  if (!id.starts_with(kHexId) || hex.empty() || hex.size() % 2 != 0 ||
      hex.find_first_not_of("0123456789abcdef") != std::string_view::npos)
    return id;
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  return out;
}

std::string text_field(const ojson& o, const char* key, const std::string& where,
                       std::string dflt = {}) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return dflt;
  if (!it->is_string()) fail(ErrorKind::kBadValue, "{}.{} must be a string", where, key);
  return it->get<std::string>();
}

// A member's boolean (absent or null: false); another type is an Error naming it.
bool flag_field(const ojson& o, const char* key, const std::string& where) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return false;
  if (!it->is_boolean()) fail(ErrorKind::kBadValue, "{}.{} must be true or false", where, key);
  return it->get<bool>();
}

// The text of a content value: a string, or the text blocks of a list (what else it may hold is
// refused, named with `where`; in a tool's result an image or a document becomes a line saying
// so: an agent's tool may return one, and its turn should go on).
std::string text_of(const ojson& content, const std::string& where, bool tool_result = false) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  if (!content.is_array())
    fail(ErrorKind::kBadValue, "{} must be a string or a list of blocks", where);
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& b = content[i];
    const std::string type =
        b.is_object() ? text_field(b, "type", fmt::format("{}[{}]", where, i)) : "";
    if (tool_result && (type == "image" || type == "document")) {
      out += fmt::format("[{} not shown: this model reads text only]", type);
      continue;
    }
    if (type != "text" || !b.contains("text") || !b["text"].is_string())
      fail(ErrorKind::kBadValue, "{}[{}]: only text blocks are supported here (got '{}')", where, i,
           type);
    out += b["text"].get<std::string>();
  }
  return out;
}

// One Messages message as chat messages: a user's tool results become tool messages (before its
// text), an assistant's tool_use blocks its tool_calls, its thinking blocks' text its
// reasoning_content (which templates that keep the reasoning of a tool loop write; redacted
// thinking is dropped).
void add_message(const ojson& m, size_t i, ojson& out) {
  const std::string where = fmt::format("messages[{}]", i);
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
    fail(ErrorKind::kBadValue, "{} needs a 'role'", where);
  const std::string role = m["role"].get<std::string>();
  if (role != "user" && role != "assistant")
    fail(ErrorKind::kBadValue, "{}.role '{}': user or assistant", where, role);
  const ojson content = m.value("content", ojson());
  if (!content.is_array()) {
    out.push_back({{"role", role}, {"content", text_of(content, where + ".content")}});
    return;
  }
  std::string text, reasoning;
  ojson calls = ojson::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const ojson& b = content[k];
    const std::string at = fmt::format("{}.content[{}]", where, k);
    const std::string type = b.is_object() ? text_field(b, "type", at) : "";
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string())
        fail(ErrorKind::kBadValue, "{} needs a string 'text'", at);
      text += b["text"].get<std::string>();
    } else if (type == "thinking") {
      if (role == "assistant" && b.contains("thinking") && b["thinking"].is_string())
        reasoning += b["thinking"].get<std::string>();
    } else if (type == "redacted_thinking") {
      continue;
    } else if (type == "tool_use" && role == "assistant") {
      if (!b.contains("name") || !b["name"].is_string())
        fail(ErrorKind::kBadValue, "{} needs a string 'name'", at);
      const ojson input = b.value("input", ojson::object());
      calls.push_back(
          {{"id", call_id(text_field(b, "id", at, fmt::format("toolu_{}_{}", i, k)))},
           {"type", "function"},
           {"function",
            {{"name", b["name"]},
             {"arguments", input.dump(-1, ' ', false, ojson::error_handler_t::replace)}}}});
    } else if (type == "tool_result" && role == "user") {
      std::string result = text_of(b.value("content", ojson("")), at + ".content", true);
      if (flag_field(b, "is_error", at)) result = "Error: " + result;
      out.push_back({{"role", "tool"},
                     {"tool_call_id", call_id(text_field(b, "tool_use_id", at))},
                     {"content", result}});
    } else {
      fail(ErrorKind::kBadValue, "{}: '{}' blocks are not supported in a{} message", at, type,
           role == "user" ? " user" : "n assistant");
    }
  }
  if (role == "assistant") {
    ojson msg = {{"role", "assistant"}, {"content", text}};
    if (!reasoning.empty()) msg["reasoning_content"] = std::move(reasoning);
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    out.push_back(std::move(msg));
  } else if (!text.empty()) {
    out.push_back({{"role", "user"}, {"content", text}});
  }
}

}  // namespace

std::string chat_request(std::string_view body) {
  const ojson in = ojson::parse(body, nullptr, false);
  if (in.is_discarded() || !in.is_object())
    fail(ErrorKind::kBadValue, "the request body is not a JSON object");
  ojson out = ojson::object();
  ojson messages = ojson::array();
  if (const auto s = in.find("system"); s != in.end() && !s->is_null()) {
    const std::string system = text_of(*s, "system");
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  }
  const auto msgs = in.find("messages");
  if (msgs == in.end() || !msgs->is_array() || msgs->empty())
    fail(ErrorKind::kBadValue, "'messages' must be a non-empty list");
  for (size_t i = 0; i < msgs->size(); ++i) add_message((*msgs)[i], i, messages);
  out["messages"] = std::move(messages);
  for (const char* k : {"max_tokens", "temperature", "top_p", "top_k", "stream"})
    if (const auto v = in.find(k); v != in.end()) out[k] = *v;
  if (const auto s = in.find("stop_sequences"); s != in.end() && !s->is_null()) out["stop"] = *s;
  if (const auto t = in.find("tools"); t != in.end() && !t->is_null()) {
    if (!t->is_array()) fail(ErrorKind::kBadValue, "'tools' must be a list");
    ojson tools = ojson::array();
    for (size_t i = 0; i < t->size(); ++i) {
      const ojson& tool = (*t)[i];
      if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string())
        fail(ErrorKind::kBadValue, "tools[{}] needs a string 'name'", i);
      const std::string type = text_field(tool, "type", fmt::format("tools[{}]", i), "custom");
      if (type != "custom" || !tool.contains("input_schema"))
        fail(ErrorKind::kBadValue,
             "tools[{}] ('{}'): only client tools with an input_schema are supported (server "
             "tools such as '{}' are Anthropic's)",
             i, tool["name"].get<std::string>(), type);
      ojson f = {{"name", tool["name"]}};
      if (tool.contains("description")) f["description"] = tool["description"];
      f["parameters"] = tool["input_schema"];
      tools.push_back({{"type", "function"}, {"function", std::move(f)}});
    }
    out["tools"] = std::move(tools);
  }
  if (const auto c = in.find("tool_choice"); c != in.end() && !c->is_null()) {
    const std::string type = c->is_object() ? text_field(*c, "type", "tool_choice") : "";
    if (type == "auto") {
      out["tool_choice"] = "auto";
    } else if (type == "any") {
      out["tool_choice"] = "required";
    } else if (type == "none") {
      out["tool_choice"] = "none";
    } else if (type == "tool" && c->contains("name") && (*c)["name"].is_string()) {
      out["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*c)["name"]}}}};
    } else {
      fail(ErrorKind::kBadValue,
           "'tool_choice': {{\"type\": \"auto\"}}, {{\"type\": \"any\"}}, {{\"type\": \"none\"}} "
           "or {{\"type\": \"tool\", \"name\": ...}}");
    }
    if (c->is_object() && flag_field(*c, "disable_parallel_tool_use", "tool_choice"))
      out["parallel_tool_calls"] = false;
  }
  if (const auto t = in.find("thinking"); t != in.end() && !t->is_null()) {
    const std::string type = t->is_object() ? text_field(*t, "type", "thinking") : "";
    if (type != "enabled" && type != "disabled")
      fail(ErrorKind::kBadValue,
           "'thinking': {{\"type\": \"enabled\"}} or {{\"type\": \"disabled\"}}");
    out["chat_template_kwargs"] = {{"enable_thinking", type == "enabled"}};
    // The budget caps the reasoning (serve's thinking_budget).
    if (const auto b = t->find("budget_tokens"); type == "enabled" && b != t->end()) {
      if (!b->is_number_integer() || b->get<int64_t>() < 0)
        fail(ErrorKind::kBadValue, "'thinking.budget_tokens' must be a non-negative integer");
      out["thinking_budget"] = std::min<int64_t>(b->get<int64_t>(), int64_t(1) << 30);
    }
  }
  return out.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

namespace {

// A choice's stop_reason, and its stop_sequence (null unless a stop string ended it).
std::pair<const char*, json> stop_reason(const json& choice) {
  const json finish = choice.value("finish_reason", json());
  if (finish == "length") return {"max_tokens", nullptr};
  if (finish == "tool_calls") return {"tool_use", nullptr};
  if (const auto s = choice.find("stop_sequence"); s != choice.end() && s->is_string())
    return {"stop_sequence", *s};
  return {"end_turn", nullptr};
}

json tool_use(const json& call) {
  json input = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
  if (input.is_discarded() || !input.is_object()) input = json::object();
  return {{"type", "tool_use"},
          {"id", anthropic_id(call["id"].get<std::string>())},
          {"name", call["function"]["name"]},
          {"input", std::move(input)}};
}

}  // namespace

json message(const json& completion) {
  const json& choice = completion["choices"][0];
  const json& msg = choice["message"];
  json content = json::array();
  if (msg.contains("reasoning_content") && msg["reasoning_content"].is_string())
    content.push_back(
        {{"type", "thinking"}, {"thinking", msg["reasoning_content"]}, {"signature", ""}});
  const std::string text = msg["content"].is_string() ? msg["content"].get<std::string>() : "";
  const bool calls = msg.contains("tool_calls") && msg["tool_calls"].is_array();
  if (!text.empty() || (!calls && content.empty()))
    content.push_back({{"type", "text"}, {"text", text}});
  if (calls)
    for (const json& c : msg["tool_calls"]) content.push_back(tool_use(c));
  const json& usage = completion["usage"];
  const auto [reason, sequence] = stop_reason(choice);
  return {
      {"id", "msg_" + completion["id"].get<std::string>()},
      {"type", "message"},
      {"role", "assistant"},
      {"model", completion["model"]},
      {"content", std::move(content)},
      {"stop_reason", reason},
      {"stop_sequence", sequence},
      {"usage",
       {{"input_tokens", usage["prompt_tokens"]}, {"output_tokens", usage["completion_tokens"]}}}};
}

std::string error(std::string_view openai_error_body, int status) {
  const json in = json::parse(openai_error_body, nullptr, false);
  std::string what(openai_error_body);
  if (!in.is_discarded() && in.contains("error") && in["error"].contains("message"))
    what = in["error"]["message"].get<std::string>();
  const char* type = status == 404   ? "not_found_error"
                     : status == 413 ? "request_too_large"
                     : status >= 500 ? "api_error"
                                     : "invalid_request_error";
  return dump({{"type", "error"}, {"error", {{"type", type}, {"message", what}}}});
}

std::string Stream::event(const char* name, const json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", name, dump(data));
}

std::string Stream::start() {
  started_ = true;
  return event("message_start",
               {{"type", "message_start"},
                {"message",
                 {{"id", "msg_" + id_},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", model_},
                  {"content", json::array()},
                  {"stop_reason", nullptr},
                  {"stop_sequence", nullptr},
                  {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", 0}}}}}});
}

std::string Stream::close() {
  if (block_ == Block::kNone) return {};
  block_ = Block::kNone;
  return event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
}

std::string Stream::open(Block b) {
  if (block_ == b) return {};
  std::string out = close();
  block_ = b;
  const json block = b == Block::kThinking
                         ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                         : json{{"type", "text"}, {"text", ""}};
  out += event("content_block_start",
               {{"type", "content_block_start"}, {"index", ++index_}, {"content_block", block}});
  return out;
}

std::string Stream::chunk(const json& choice) {
  std::string out = started_ ? std::string() : start();
  const json& delta = choice.contains("delta") ? choice["delta"] : json::object();
  if (const auto r = delta.find("reasoning_content");
      r != delta.end() && r->is_string() && !r->get<std::string>().empty()) {
    out += open(Block::kThinking);
    out +=
        event("content_block_delta", {{"type", "content_block_delta"},
                                      {"index", index_},
                                      {"delta", {{"type", "thinking_delta"}, {"thinking", *r}}}});
  }
  if (const auto c = delta.find("content");
      c != delta.end() && c->is_string() && !c->get<std::string>().empty()) {
    out += open(Block::kText);
    out += event("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", index_},
                                         {"delta", {{"type", "text_delta"}, {"text", *c}}}});
  }
  if (const auto t = delta.find("tool_calls"); t != delta.end() && t->is_array()) {
    for (const json& call : *t) {
      out += close();
      json block = tool_use(call);
      const std::string input = dump(block["input"]);
      block["input"] = json::object();
      out +=
          event("content_block_start",
                {{"type", "content_block_start"}, {"index", ++index_}, {"content_block", block}});
      out += event("content_block_delta",
                   {{"type", "content_block_delta"},
                    {"index", index_},
                    {"delta", {{"type", "input_json_delta"}, {"partial_json", input}}}});
      out += event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    }
  }
  if (const auto f = choice.find("finish_reason"); f != choice.end() && !f->is_null())
    std::tie(stop_reason_, stop_sequence_) = stop_reason(choice);
  return out;
}

std::string Stream::finish(uint32_t output_tokens) {
  std::string out = started_ ? std::string() : start();
  out += close();
  out += event("message_delta",
               {{"type", "message_delta"},
                {"delta", {{"stop_reason", stop_reason_}, {"stop_sequence", stop_sequence_}}},
                {"usage", {{"output_tokens", output_tokens}}}});
  out += event("message_stop", {{"type", "message_stop"}});
  return out;
}

std::string Stream::error_event(std::string_view message) {
  return event("error",
               {{"type", "error"}, {"error", {{"type", "api_error"}, {"message", message}}}});
}

}  // namespace strata::tools::anthropic
