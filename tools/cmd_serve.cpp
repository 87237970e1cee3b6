// `strata serve -m MODEL [--host H] [--port P] [knob flags]`: an OpenAI-compatible HTTP server
// over one engine::ChatSession — POST /v1/chat/completions and POST /v1/completions (a raw
// prompt, ChatSession::begin_text / begin_tokens, or several, one choice each; whole replies or
// server-sent events; logprobs and an echoed prompt's scores for evaluation harnesses;
// response_format's JSON schemas, engine/json_schema.h), GET
// /v1/models, GET /health — so chat front ends and scripts that speak the OpenAI API can use
// strata. One reply is computed at a time (others wait); each request carries its whole
// conversation, and the KV cache keeps the prefix it shares with the previous one, so a client
// continuing a conversation prefills only the new messages. Replies are the CLI's: the same
// messages, sampling parameters and seed give `strata chat`'s text. Ctrl-C (SIGINT) or SIGTERM
// stops the server (USAGE_SAVE, ROUTE_TRACE and PROF are written as at the end of a chat).
// Tested by tests/test_serve.cpp.
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/chat_template.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/prof.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "engine/tokenizer.h"
#include "engine/tool_calls.h"
#include "io/check.h"
#include "kernels/threadpool.h"
#include "tools/anthropic_api.h"
#include "tools/cli.h"
#include "tools/knob_flags.h"
#include "tools/tier_setup.h"

namespace strata::tools {
namespace {

using json = nlohmann::json;

constexpr uint32_t kDefaultCtx = 4096;  // as chat: the KV cache is F32
constexpr size_t kMaxStops = 4;         // OpenAI's limit on `stop`

struct ServeOptions {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string alias;          // the model id clients see; default general.name or the file stem
  std::string chat_template;  // "" = from the model
  uint32_t ubatch = 512;
  std::optional<uint32_t> ctx;
  size_t stash = 1;              // more conversations' KV rows kept in RAM (ChatSession::set_stash)
  int learn_every = 300;         // seconds between additions to USAGE_AUTO's learned profile
  uint32_t max_body_mib = 32;    // a larger request body is a 413 before it is read
  bool thinking = true;          // THINK: requests' enable_thinking default (off: false)
  bool show_reasoning = true;    // THINK: reasoning_content in responses (hide: left out)
  int32_t thinking_budget = -1;  // THINK_BUDGET: requests' default (< 0: no limit)
  engine::SamplerParams sampling;  // defaults for requests that do not say
  KnobOverrides knobs;
};

// A request's error: HTTP status and one line for the client (OpenAI's error object).
struct BadRequest {
  int status;
  std::string message;
};

std::string error_body(const std::string& message, const char* type) {
  return json{{"error", {{"message", message}, {"type", type}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

// The completion endpoints: POST /v1/chat/completions (messages through the chat template),
// POST /v1/completions (a raw prompt continued as it stands) and POST /v1/messages (Anthropic's
// Messages API, translated to and from the chat one: anthropic_api.h).
enum class Api { kChat, kText, kMessages };

const char* api_path(Api api) {
  return api == Api::kChat   ? "/v1/chat/completions"
         : api == Api::kText ? "/v1/completions"
                             : "/v1/messages";
}

// What a completion request asks for, checked.
struct CompletionRequest {
  Api api = Api::kChat;
  std::vector<engine::ChatMessage> messages;  // kChat
  // kText: the prompts, each text or token ids; one choice each (streamed: one prompt).
  struct Prompt {
    std::optional<std::string> text;
    std::vector<int32_t> ids;
  };
  std::vector<Prompt> prompts;
  engine::SamplerParams sampling;
  int32_t max_tokens = -1;  // < 0: until end of generation or a full context
  bool stream = false;
  std::vector<std::string> stop;
  // Log-probabilities: < 0 none, else each token's and this many alternatives (kText:
  // `logprobs`; kChat: `top_logprobs` with `logprobs: true`).
  int logprobs = -1;
  bool echo = false;  // kText: the prompt before the reply (with logprobs: its tokens scored)
  // response_format json_object / json_schema: the reply a JSON document (structured output).
  std::shared_ptr<const engine::JsonSchema> schema;
  // kChat, thinking models: reasoning_format "none" keeps the reply as written (no
  // reasoning_content); chat_template_kwargs.enable_thinking (unset: THINK's default).
  bool split_reasoning = true;
  std::optional<bool> enable_thinking;
  // thinking_budget (Anthropic's thinking.budget_tokens): the reasoning's tokens at most (unset:
  // THINK_BUDGET's default).
  std::optional<int32_t> thinking_budget;
  // kChat, function calling: the tools offered (tool_choice "auto"), and the messages with their
  // calls and tool results, rendered into `messages` once the model's format is known
  // (Server::complete).
  std::vector<engine::ToolSpec> tools;
  std::vector<engine::ToolMessage> tool_messages;
  bool tool_parts = false;  // a tool message or an assistant's tool_calls
  // tool_choice "required" or a named function: the reply is a call (of tool_name, when named).
  bool tool_forced = false;
  std::string tool_name;
  // parallel_tool_calls (default true): a reply may hold several calls.
  bool parallel_tools = true;
  // reasoning_effort (gpt-oss: harmony's system message says it; set, it is written even
  // without tools).
  std::optional<std::string> reasoning_effort;
};

const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& body, const char* key, double lo, double hi, double dflt) {
  const json* v = field(body, key);
  if (!v) return dflt;
  if (!v->is_number()) throw BadRequest{400, fmt::format("'{}' must be a number", key)};
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    throw BadRequest{400, fmt::format("'{}' is {}; allowed {} to {}", key, x, lo, hi)};
  return x;
}

int64_t integer(const json& body, const char* key, int64_t lo, int64_t hi, int64_t dflt) {
  const json* v = field(body, key);
  if (!v) return dflt;
  if (!v->is_number_integer()) throw BadRequest{400, fmt::format("'{}' must be an integer", key)};
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi)
    throw BadRequest{400, fmt::format("'{}' is {}; allowed {} to {}", key, x, lo, hi)};
  return x;
}

// A message's content: a string, or OpenAI's array of parts of which only text parts are read.
std::string content_text(const json& content, size_t i) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw BadRequest{400, fmt::format("messages[{}].content must be a string or an array of text "
                                      "parts",
                                      i)};
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string())
      throw BadRequest{400, fmt::format("messages[{}].content: only text parts are supported", i)};
    text += part["text"].get<std::string>();
  }
  return text;
}

void parse_messages(const json& body, CompletionRequest& r) {
  const json* messages = field(body, "messages");
  if (!messages || !messages->is_array() || messages->empty())
    throw BadRequest{400, "'messages' must be a non-empty array"};
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw BadRequest{400, fmt::format("messages[{}] needs a string 'role'", i)};
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for it
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      throw BadRequest{
          400, fmt::format("messages[{}].role '{}': system, user, assistant or tool", i, role)};
    engine::ToolMessage tm{role, {}, {}};
    // An assistant's function calls (its content may then be null).
    if (const json* calls = field(m, "tool_calls"); calls && role == "assistant") {
      if (!calls->is_array())
        throw BadRequest{400, fmt::format("messages[{}].tool_calls must be an array", i)};
      for (size_t c = 0; c < calls->size(); ++c) {
        const json& call = (*calls)[c];
        const json* f = call.is_object() ? field(call, "function") : nullptr;
        if (!f || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
          throw BadRequest{400, fmt::format("messages[{}].tool_calls[{}] needs a function with a "
                                            "string 'name'",
                                            i, c)};
        const json* args = field(*f, "arguments");
        std::string arguments = "{}";
        if (args && args->is_string())
          arguments = args->get<std::string>();
        else if (args)
          arguments = args->dump(-1, ' ', false, json::error_handler_t::replace);
        const std::string call_id =
            call.contains("id") && call["id"].is_string() ? call["id"].get<std::string>() : "";
        tm.calls.push_back({call_id, (*f)["name"].get<std::string>(), arguments});
      }
      r.tool_parts = r.tool_parts || !tm.calls.empty();
    }
    const json* content = field(m, "content");
    if (content)
      tm.content = content_text(*content, i);
    else if (tm.calls.empty())
      throw BadRequest{400, fmt::format("messages[{}] has no 'content'", i)};
    r.tool_parts = r.tool_parts || role == "tool";
    if (const json* id = field(m, "tool_call_id"); id && id->is_string() && role == "tool")
      tm.call_id = id->get<std::string>();
    // An earlier reply's reasoning, sent back (MiniMax-M2's template keeps a tool loop's).
    if (const json* rc = field(m, "reasoning_content");
        rc && rc->is_string() && role == "assistant")
      tm.reasoning = rc->get<std::string>();
    r.tool_messages.push_back(std::move(tm));
  }
}

bool boolean(const json& body, const char* key) {
  const json* v = field(body, key);
  if (v && !v->is_boolean()) throw BadRequest{400, fmt::format("'{}' must be true or false", key)};
  return v && v->get<bool>();
}

constexpr int64_t kMaxTop = int64_t(engine::ChatSession::kMaxTopLogprobs);

constexpr size_t kMaxPrompts = 1024;  // prompts in one /v1/completions request

void parse_prompt(const json& body, CompletionRequest& r) {
  const json* p = field(body, "prompt");
  const char* expected =
      "'prompt' must be a string, an array of token ids, or an array of those (one choice each)";
  if (!p) throw BadRequest{400, expected};
  // One prompt: a string or an array of token ids.
  const auto one = [&](const json& x) {
    CompletionRequest::Prompt q;
    if (x.is_string()) {
      q.text = x.get<std::string>();
    } else if (x.is_array() && !x.empty()) {
      for (const json& id : x) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
            id.get<int64_t>() > std::numeric_limits<int32_t>::max())
          throw BadRequest{400, expected};
        q.ids.push_back(int32_t(id.get<int64_t>()));
      }
    } else {
      throw BadRequest{400, expected};
    }
    r.prompts.push_back(std::move(q));
  };
  if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    if (p->size() > kMaxPrompts)
      throw BadRequest{400,
                       fmt::format("{} prompts; at most {} a request", p->size(), kMaxPrompts)};
    for (const json& x : *p) one(x);
  } else {
    one(*p);
  }
  r.echo = boolean(body, "echo");
  r.logprobs = int(integer(body, "logprobs", 0, kMaxTop, -1));
  if (const json* x = field(body, "suffix");
      x && !(x->is_string() && x->get<std::string>().empty()))
    throw BadRequest{400, "'suffix' (fill in the middle) is not supported"};
  if (const json* b = field(body, "best_of");
      b && (!b->is_number_integer() || b->get<int64_t>() != 1))
    throw BadRequest{400, "'best_of' must be 1 (one choice per request)"};
}

// OpenAI's response_format: {"type": "text" | "json_object" | "json_schema", "json_schema":
// {"name", "schema", "strict"}}. A schema outside the supported subset is the request's error.
std::shared_ptr<const engine::JsonSchema> parse_response_format(const json& body) {
  const json* f = field(body, "response_format");
  if (!f) return nullptr;
  if (!f->is_object() || !f->contains("type") || !(*f)["type"].is_string())
    throw BadRequest{400, "'response_format' must be an object with a string 'type'"};
  const std::string type = (*f)["type"].get<std::string>();
  if (type == "text") return nullptr;
  if (type == "json_object") return engine::JsonSchema::any_object();
  if (type != "json_schema")
    throw BadRequest{400, fmt::format("'response_format.type' \"{}\": text, json_object or "
                                      "json_schema",
                                      type)};
  const json* js = field(*f, "json_schema");
  if (!js || !js->is_object())
    throw BadRequest{400, "'response_format.json_schema' must be an object"};
  const json* schema = field(*js, "schema");
  if (!schema) return engine::JsonSchema::any_value();
  try {
    return engine::JsonSchema::from_json(*schema);
  } catch (const Error& e) {
    throw BadRequest{400, fmt::format("response_format: {}", e.what())};
  }
}

CompletionRequest parse_request(const std::string& body_text, const engine::SamplerParams& defaults,
                                Api api) {
  const json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object())
    throw BadRequest{400, "the request body is not a JSON object"};
  CompletionRequest r;
  r.api = api;
  if (api == Api::kChat) {
    parse_messages(body, r);
    const int64_t top = integer(body, "top_logprobs", 0, kMaxTop, -1);
    if (boolean(body, "logprobs"))
      r.logprobs = int(std::max<int64_t>(top, 0));
    else if (top >= 0)
      throw BadRequest{400, "'top_logprobs' needs 'logprobs': true"};
  } else {
    parse_prompt(body, r);
  }
  if (const json* n = field(body, "n"); n && (!n->is_number_integer() || n->get<int64_t>() != 1))
    throw BadRequest{400, "'n' must be 1 (one choice per request)"};
  r.sampling = defaults;
  r.sampling.temperature = float(number(body, "temperature", 0, 2, defaults.temperature));
  r.sampling.top_p = float(number(body, "top_p", 0, 1, defaults.top_p));
  r.sampling.top_k = int32_t(integer(body, "top_k", 0, 1 << 20, defaults.top_k));
  r.sampling.min_p = float(number(body, "min_p", 0, 1, defaults.min_p));
  r.sampling.repeat_penalty = float(number(body, "repeat_penalty", 0, 10, defaults.repeat_penalty));
  r.sampling.seed = uint64_t(integer(body, "seed", 0, std::numeric_limits<int64_t>::max(),
                                     int64_t(std::random_device{}())));
  const int64_t max_tokens = integer(body, "max_completion_tokens", 0, 1 << 30, -1);
  r.max_tokens =
      int32_t(max_tokens >= 0 ? max_tokens : integer(body, "max_tokens", 0, 1 << 30, -1));
  r.stream = boolean(body, "stream");
  r.schema = parse_response_format(body);
  // Thinking models (llama.cpp's server names): reasoning_format, and the templates'
  // enable_thinking switch through chat_template_kwargs (other kwargs are not used: the
  // template is not run).
  if (const json* f = field(body, "reasoning_format")) {
    if (!f->is_string() || (*f != "auto" && *f != "deepseek" && *f != "none"))
      throw BadRequest{400,
                       "'reasoning_format' must be \"auto\", \"deepseek\" (the same: "
                       "reasoning_content apart) or \"none\" (the reply as written)"};
    r.split_reasoning = *f != "none";
  }
  if (const json* e = field(body, "reasoning_effort"); e && !e->is_null()) {
    if (!e->is_string() || (*e != "low" && *e != "medium" && *e != "high"))
      throw BadRequest{400, "'reasoning_effort' must be \"low\", \"medium\" or \"high\""};
    r.reasoning_effort = e->get<std::string>();
  }
  if (const json* b = field(body, "thinking_budget"); b && !b->is_null())
    r.thinking_budget = int32_t(integer(body, "thinking_budget", 0, 1 << 30, 0));
  if (const json* k = field(body, "chat_template_kwargs")) {
    if (!k->is_object()) throw BadRequest{400, "'chat_template_kwargs' must be an object"};
    if (const json* t = field(*k, "enable_thinking")) {
      if (!t->is_boolean())
        throw BadRequest{400, "'chat_template_kwargs.enable_thinking' must be true or false"};
      r.enable_thinking = t->get<bool>();
    }
  }
  // Function calling: tool_choice "auto" (the default), "none" (no tools), "required" or a named
  // function (forced: the reply is a call). The tools keep the client's key order, as the
  // template's tojson writes them.
  const json* tool_choice = field(body, "tool_choice");
  if (tool_choice) {
    const json* f = tool_choice->is_object() ? field(*tool_choice, "function") : nullptr;
    if (f && f->is_object() && f->contains("name") && (*f)["name"].is_string()) {
      r.tool_forced = true;
      r.tool_name = (*f)["name"].get<std::string>();
    } else if (tool_choice->is_string() && *tool_choice == "required") {
      r.tool_forced = true;
    } else if (!(tool_choice->is_string() && (*tool_choice == "none" || *tool_choice == "auto"))) {
      throw BadRequest{400,
                       "'tool_choice': \"auto\", \"none\", \"required\" or {\"type\": "
                       "\"function\", \"function\": {\"name\": ...}}"};
    }
  }
  const bool no_tools = tool_choice && tool_choice->is_string() && *tool_choice == "none";
  if (const json* tools = field(body, "tools"); tools && !no_tools) {
    if (api != Api::kChat) throw BadRequest{400, "'tools' is for /v1/chat/completions"};
    try {
      r.tools =
          engine::parse_tools(nlohmann::ordered_json::parse(body_text, nullptr, false).at("tools"));
    } catch (const Error& e) {
      throw BadRequest{400, e.what()};
    }
    if (!r.tools.empty() && r.schema)
      throw BadRequest{400, "'tools' and 'response_format' together are not supported"};
  }
  if (const json* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) throw BadRequest{400, "'parallel_tool_calls' must be true or false"};
    r.parallel_tools = p->get<bool>();
  }
  if (r.tool_forced && r.tools.empty())
    throw BadRequest{400, "'tool_choice' asks for a call, but the request has no 'tools'"};
  if (!r.tool_name.empty() &&
      std::none_of(r.tools.begin(), r.tools.end(),
                   [&](const engine::ToolSpec& t) { return t.name == r.tool_name; }))
    throw BadRequest{400,
                     fmt::format("'tool_choice' names '{}', which is not in 'tools'", r.tool_name)};
  if (api == Api::kChat && r.tools.empty() && !r.tool_parts)
    for (engine::ToolMessage& m : r.tool_messages)
      r.messages.push_back({std::move(m.role), std::move(m.content)});
  if (r.stream && r.prompts.size() > 1)
    throw BadRequest{400, "a streamed completion takes one prompt"};
  if (const json* s = field(body, "stop")) {
    if (s->is_string()) {
      r.stop.push_back(s->get<std::string>());
    } else if (s->is_array() && s->size() <= kMaxStops) {
      for (const json& x : *s) {
        if (!x.is_string()) throw BadRequest{400, "'stop' must hold strings"};
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      throw BadRequest{400, "'stop' must be a string or an array of at most 4 strings"};
    }
    std::erase_if(r.stop, [](const std::string& x) { return x.empty(); });
  }
  return r;
}

// Bytes of `s` that end on a whole UTF-8 character (a piece may stop inside one).
size_t utf8_whole(std::string_view s) {
  size_t end = s.size();
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > back) end = s.size() - back;
    break;
  }
  return end;
}

// The reply's text as it may be sent: held back while it could still become a stop string, cut
// where one appears.
class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Adds a piece; returns the text now safe to send. stopped() once a stop string appeared.
  std::string add(std::string_view piece) {
    pending_ += piece;
    for (const std::string& s : stops_) {
      if (const size_t at = pending_.find(s); at != std::string::npos) {
        stopped_ = true;
        matched_ = s;
        std::string out = pending_.substr(0, at);
        pending_.clear();
        return out;
      }
    }
    // Keep the longest tail that is a prefix of a stop string, and an unfinished character.
    size_t keep = 0;
    for (const std::string& s : stops_)
      for (size_t n = std::min(s.size() - 1, pending_.size()); n > keep; --n)
        if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
          keep = n;
          break;
        }
    const size_t send = utf8_whole(std::string_view(pending_).substr(0, pending_.size() - keep));
    std::string out = pending_.substr(0, send);
    pending_.erase(0, send);
    return out;
  }
  std::string flush() { return std::exchange(pending_, {}); }  // at the end of the reply
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string that appeared

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  std::string matched_;
  bool stopped_ = false;
};

// A scored token of the reply (or of an echoed prompt): its bytes in the text at `offset`.
struct ScoredToken {
  std::string piece;
  size_t offset = 0;
  engine::TokenScore score;
};

// The reply's scored tokens, given out with the text that holds them: a stop string holds text
// back, or cuts it.
class ScoredTokens {
 public:
  void add(std::string_view piece, const engine::TokenScore& score) {
    pending_.push_back({std::string(piece), end_, score});
    end_ += piece.size();
  }
  // The tokens whose bytes are within the first `sent` of the reply; at the reply's end those
  // that start there too (a stop string cut the text inside them).
  std::vector<ScoredToken> take(size_t sent, bool end) {
    std::vector<ScoredToken> out;
    size_t n = 0;
    while (n < pending_.size() && (pending_[n].offset + pending_[n].piece.size() <= sent ||
                                   (end && pending_[n].offset < sent)))
      ++n;
    out.assign(std::make_move_iterator(pending_.begin()),
               std::make_move_iterator(pending_.begin() + ptrdiff_t(n)));
    pending_.erase(pending_.begin(), pending_.begin() + ptrdiff_t(n));
    return out;
  }

 private:
  std::vector<ScoredToken> pending_;
  size_t end_ = 0;
};

// Reply tokens placed after an echoed prompt of `base` bytes.
std::vector<ScoredToken> after(std::vector<ScoredToken> toks, size_t base) {
  for (ScoredToken& t : toks) t.offset += base;
  return toks;
}

// The echoed prompt's tokens: its text (control tokens rendered, a leading BOS not) and, when
// scored, each token's score.
struct EchoedPrompt {
  std::string text;
  std::vector<ScoredToken> tokens;
};

EchoedPrompt echo_prompt(const engine::Tokenizer& tok, std::span<const int32_t> ids,
                         std::span<const engine::TokenScore> scores) {
  EchoedPrompt e;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece =
        i == 0 && ids[0] == tok.vocab().bos() ? std::string() : tok.token_to_piece(ids[i], true);
    if (i < scores.size()) e.tokens.push_back({piece, e.text.size(), scores[i]});
    e.text += piece;
  }
  return e;
}

// /v1/completions' logprobs object (OpenAI's legacy form): tokens, their logprobs (null for a
// prompt's first), the top alternatives as {text: logprob} (the token itself among them, as
// OpenAI's "up to logprobs + 1"), and byte offsets into the choice's text.
json text_logprobs(const engine::Tokenizer& tok, std::span<const ScoredToken> toks, size_t top_n) {
  json tokens = json::array(), logprobs = json::array(), tops = json::array(),
       offsets = json::array();
  for (const ScoredToken& t : toks) {
    const std::string text = tok.token_to_piece(t.score.id, true);
    tokens.push_back(text);
    offsets.push_back(t.offset);
    if (std::isnan(t.score.logprob)) {
      logprobs.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    logprobs.push_back(t.score.logprob);
    json top = json::object();
    for (size_t i = 0; i < std::min(top_n, t.score.top.size()); ++i) {
      const std::string alt = tok.token_to_piece(t.score.top[i].id, true);
      if (!top.contains(alt)) top[alt] = t.score.top[i].logprob;
    }
    if (!top.contains(text)) top[text] = t.score.logprob;
    tops.push_back(std::move(top));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

// /v1/chat/completions' logprobs object: {"content": [{token, logprob, bytes, top_logprobs}]}.
json chat_logprobs(const engine::Tokenizer& tok, std::span<const ScoredToken> toks, size_t top_n) {
  const auto entry = [&](int32_t id, float logprob) {
    const std::string text = tok.token_to_piece(id, true);
    json bytes = json::array();
    for (const char c : text) bytes.push_back(int(static_cast<unsigned char>(c)));
    return json{{"token", text}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
  };
  json content = json::array();
  for (const ScoredToken& t : toks) {
    json e = entry(t.score.id, t.score.logprob);
    json top = json::array();
    for (size_t i = 0; i < std::min(top_n, t.score.top.size()); ++i)
      top.push_back(entry(t.score.top[i].id, t.score.top[i].logprob));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

const char* finish_reason(engine::TurnStatus s, bool stopped) {
  if (stopped) return "stop";
  switch (s) {
    case engine::TurnStatus::kMaxTokens:
    case engine::TurnStatus::kContextFull:
      return "length";
    default:
      return "stop";
  }
}

std::string completion_id(Api api) {
  static std::atomic<uint64_t> n{0};
  return fmt::format("{}-strata-{}-{}", api == Api::kChat ? "chatcmpl" : "cmpl", ::getpid(), n++);
}

int64_t unix_now() {
  return int64_t(std::time(nullptr));
}

// PROF: each reply token's latency is the time between two pieces (decode of the previous token
// + sampling), as in `strata chat`.
class DecodeClock {
 public:
  DecodeClock(engine::Profiler* prof, const engine::ChatSession& s) : prof_(prof), s_(s) {}
  void tick() {
    if (!prof_ || !prof_->enabled()) return;
    const auto now = std::chrono::steady_clock::now();
    if (have_last_)
      prof_->add_decode_token(std::chrono::duration<double>(now - last_).count(), s_.n_past(),
                              s_.lookup().ran(), s_.lookup().drafted());
    last_ = now;
    have_last_ = true;
  }

 private:
  engine::Profiler* prof_;
  const engine::ChatSession& s_;
  std::chrono::steady_clock::time_point last_;
  bool have_last_ = false;
};

std::string describe(std::exception_ptr ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A streamed answer with tools offered: its text goes out as it comes up to a <tool_call>; from
// there it is held, and parsed into calls at the end.
class ToolStream {
 public:
  // forced: the prompt opened a call (forced_call_prompt).
  ToolStream(engine::ToolFormat format, const std::vector<engine::ToolSpec>& tools, bool forced)
      : format_(format), tools_(tools) {
    if (forced) feed(engine::forced_call_head(format), engine::forced_call_head(format));
  }
  // What of the answer's next piece can go out now; raw: the piece as written (harmony: its
  // headers name a call's recipient, and a call's message is held).
  std::string feed(std::string_view answer, std::string_view raw) {
    if (format_ == engine::ToolFormat::kHarmony) {
      raw_ += raw;
      const size_t start = raw_.rfind("<|start|>");
      if (std::string_view(raw_)
              .substr(start == std::string::npos ? 0 : start)
              .find("to=functions.") == std::string_view::npos)
        return std::string(answer);
      held_ += answer;
      return {};
    }
    if (holding_) {
      held_ += answer;
      return {};
    }
    pending_ += answer;
    const std::string_view kOpen = engine::call_opening(format_);
    if (const size_t open = pending_.find(kOpen); open != std::string::npos) {
      std::string out = pending_.substr(0, open);
      held_ = pending_.substr(open);
      pending_.clear();
      holding_ = true;
      return out;
    }
    size_t keep = 0;  // a partial <tool_call> at the end
    for (size_t k = std::min(pending_.size(), kOpen.size() - 1); k > 0 && keep == 0; --k)
      if (std::string_view(pending_).substr(pending_.size() - k) == kOpen.substr(0, k)) keep = k;
    std::string out = pending_.substr(0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    return out;
  }
  // The reply ended: its calls, and the text still to go out.
  engine::ParsedCalls finish() {
    if (format_ == engine::ToolFormat::kHarmony) {
      engine::ParsedCalls p = engine::parse_harmony_calls(raw_);
      p.content = p.calls.empty() ? held_ : std::string();  // the rest went out as it came
      return p;
    }
    if (!holding_) return {{}, std::exchange(pending_, {})};
    return engine::parse_calls(format_, held_, tools_);
  }

 private:
  engine::ToolFormat format_;
  std::string raw_;  // harmony: the reply as written
  const std::vector<engine::ToolSpec>& tools_;
  std::string pending_, held_;
  bool holding_ = false;
};

// OpenAI's tool_calls array (streamed: each with its index), the ids `prefix`-k.
json tool_calls_json(const std::vector<engine::ToolCall>& calls, const std::string& prefix,
                     bool stream) {
  json out = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    // (Kimi-K2's calls keep the ids the model wrote, which its later prompts name.)
    json c = {{"id", calls[k].id.empty() ? fmt::format("call_{}_{}", prefix, k) : calls[k].id},
              {"type", "function"},
              {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
    if (stream) c["index"] = k;
    out.push_back(std::move(c));
  }
  return out;
}

class Server {
 public:
  Server(const ServeOptions& o, engine::ChatSession& session, const engine::Tokenizer& tok,
         std::string model_id, engine::Profiler* prof, UsageRecorder* usage,
         engine::ExpertSource* experts)
      : o_(o),
        session_(session),
        tok_(tok),
        model_id_(std::move(model_id)),
        prof_(prof),
        usage_(usage),
        experts_(experts),
        tool_format_(engine::tool_format(session.family(), tok.vocab().chat_template())),
        tool_trigger_(tok.vocab().text_to_token(engine::call_opening(tool_format_))) {
    // SO_REUSEADDR only: httplib's default, SO_REUSEPORT, lets a second server bind a port that
    // is in use and share its connections.
    http_.set_socket_options([](int sock) {
      const int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    // A body over the cap is skipped unread (a 413), not buffered whole: one client cannot make
    // the server hold gigabytes.
    http_.set_payload_max_length(size_t(o.max_body_mib) << 20);
    http_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      const json list = {{"object", "list"},
                         {"data",
                          {{{"id", model_id_},
                            {"object", "model"},
                            {"created", started_},
                            {"owned_by", "strata"}}}}};
      res.set_content(dump(list), "application/json");
    });
    http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, Api::kChat);
    });
    http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, Api::kText);
    });
    // Anthropic's Messages API: the chat path, with its request and response translated; an
    // error (a 500 from the engine too) in Anthropic's shape.
    http_.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        complete(req, res, Api::kMessages);
      } catch (...) {
        const std::string what = describe(std::current_exception());
        res.status = 500;
        res.set_content(error_body(what, "server_error"), "application/json");
        fmt::print(stderr, "serve: POST /v1/messages 500: {}\n", what);
      }
      if (res.body.empty()) return;  // streamed
      // (-1: not set yet, httplib's 200.)
      res.set_content(res.status < 300 ? dump(anthropic::message(json::parse(res.body)))
                                       : anthropic::error(res.body, res.status),
                      "application/json");
    });
    http_.Post(
        "/v1/messages/count_tokens",
        [this](const httplib::Request& req, httplib::Response& res) { count_tokens(req, res); });
    http_.set_error_handler(
        [cap = o.max_body_mib](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return;
          std::string what;
          if (res.status == 404 || res.status == 405) {
            what = fmt::format(
                "{} {}: no such endpoint (strata serves POST /v1/chat/completions, "
                "POST /v1/completions, POST /v1/messages, POST /v1/messages/count_tokens, "
                "GET /v1/models, GET /health)",
                req.method, req.path);
          } else if (res.status == 413 &&
                     req.get_header_value("Content-Type")
                         .starts_with("application/x-www-form-urlencoded") &&
                     std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) <=
                         uint64_t(cap) << 20) {
            // cpp-httplib caps a form-encoded body (curl -d's default Content-Type) at 8 KiB.
            what = fmt::format(
                "{} {}: the request body is too large for Content-Type '{}'; send "
                "it as application/json (curl: -H 'Content-Type: application/json')",
                req.method, req.path, req.get_header_value("Content-Type"));
          } else if (res.status == 413) {
            // A chunked body has no Content-Length to name.
            const std::string length = req.get_header_value("Content-Length");
            what = fmt::format(
                "{} {}: the request body{} is over the server's {} MiB limit "
                "(strata serve --max-body-mib)",
                req.method, req.path, length.empty() ? "" : " (" + length + " bytes)", cap);
          } else {
            what = fmt::format("{} {}: HTTP status {}", req.method, req.path, res.status);
          }
          res.set_content(error_body(what, "invalid_request_error"), "application/json");
        });
    // An engine error mid-reply (an I/O error of the tiers): a 500 with the one line; the session
    // recovered (ChatSession::recover) and the next request runs.
    http_.set_exception_handler(
        [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
          res.status = 500;
          res.set_content(error_body(describe(ep), "server_error"), "application/json");
          fmt::print(stderr, "serve: {} {} 500: {}\n", req.method, req.path, describe(ep));
        });
    http_.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      if (req.path != api_path(Api::kChat) && req.path != api_path(Api::kText) &&
          req.path != api_path(Api::kMessages))
        fmt::print(stderr, "serve: {} {} {}\n", req.method, req.path, res.status);
    });
  }

  // Binds (port 0: any free port) and returns the port; throws Error when the address is taken.
  int bind() {
    const int port = o_.port == 0 ? http_.bind_to_any_port(o_.host)
                                  : (http_.bind_to_port(o_.host, o_.port) ? o_.port : -1);
    if (port < 0)
      fail(ErrorKind::kIo, "cannot listen on {}:{} (in use, or not an address of this host)",
           o_.host, o_.port);
    return port;
  }
  void run() { http_.listen_after_bind(); }
  void stop() {
    stop_reply_.store(true);
    http_.stop();
  }

 private:
  // POST /v1/messages/count_tokens: the prompt tokens a Messages request would have.
  void count_tokens(const httplib::Request& req, httplib::Response& res) {
    try {
      CompletionRequest r =
          parse_request(anthropic::chat_request(req.body), o_.sampling, Api::kChat);
      render_tools(r);
      // (A forced call's prompt ends with its opening, as the reply's would.)
      const size_t n = session_
                           .turn_tokens(r.messages, thinking(r),
                                        r.tool_forced && !r.tools.empty()
                                            ? engine::forced_call_prompt(tool_format_)
                                            : std::string_view())
                           .size();
      res.set_content(dump({{"input_tokens", n}}), "application/json");
    } catch (const BadRequest& e) {
      res.status = e.status;
      res.set_content(anthropic::error(error_body(e.message, "invalid_request_error"), e.status),
                      "application/json");
    } catch (const Error& e) {
      res.status = 400;
      res.set_content(anthropic::error(error_body(e.what(), "invalid_request_error"), 400),
                      "application/json");
    }
  }

  // Whether a request's reply thinks: as it asks, else serve's default — but DeepSeek-V3.1 with
  // tools offered does not (its calls are trained without thinking, as its model card says).
  bool thinking(const CompletionRequest& r) const {
    return r.enable_thinking.value_or(
        o_.thinking && !(tool_format_ == engine::ToolFormat::kDeepseek && !r.tools.empty()));
  }

  // A chat request's tools and tool messages into its messages, in the model's format.
  void render_tools(CompletionRequest& r) const {
    // gpt-oss: harmony's system message when the request sets the reasoning effort.
    if (r.tools.empty() && !r.tool_parts && r.reasoning_effort &&
        tool_format_ == engine::ToolFormat::kHarmony) {
      std::vector<engine::ToolMessage> msgs;
      for (const engine::ChatMessage& m : r.messages) msgs.push_back({m.role, m.content, {}});
      r.messages = engine::render_tools(tool_format_, msgs, {}, *r.reasoning_effort);
      return;
    }
    if (r.tools.empty() && !r.tool_parts) return;
    if (tool_format_ == engine::ToolFormat::kNone)
      throw BadRequest{400,
                       "function calling: this model's chat template has no tool-call format "
                       "strata knows (the Hermes <tool_call> JSON of Qwen2.5 / Qwen3, "
                       "Qwen3-Coder's <function=> XML, GLM-4.5's <arg_key> XML, Kimi-K2's, "
                       "DeepSeek-V3.1's and MiniMax-M2's tool-call sections, gpt-oss's "
                       "harmony)"};
    r.messages =
        engine::render_tools(tool_format_, r.tool_messages, r.tools,
                             r.reasoning_effort.value_or("medium"), tok_.vocab().chat_template());
  }

  void complete(const httplib::Request& req, httplib::Response& res, Api api) {
    // Anthropic's Messages: the chat path, the request translated here, the response by the
    // caller (whole) or the stream's Stream (events).
    const bool messages_api = api == Api::kMessages;
    if (messages_api) api = Api::kChat;
    CompletionRequest r;
    engine::DocumentFilterFn call_body;  // a tool call's filter
    try {
      r = parse_request(messages_api ? anthropic::chat_request(req.body) : req.body, o_.sampling,
                        api);
      render_tools(r);
      if (!r.tools.empty()) {
        std::vector<engine::ToolSpec> callable = r.tools;  // a named choice: that tool only
        if (!r.tool_name.empty())
          std::erase_if(callable, [&](const engine::ToolSpec& t) { return t.name != r.tool_name; });
        call_body = engine::call_filters(tool_format_, callable, r.parallel_tools);
      }
    } catch (const BadRequest& e) {
      reply_error(res, api, e.status, e.message);
      return;
    } catch (const Error& e) {
      reply_error(res, api, 400, e.what());
      return;
    }
    // One reply at a time: the lock travels with a streamed reply until its last event.
    auto lock = std::make_shared<std::unique_lock<std::mutex>>(mu_);
    // The earlier replies' expert usage into the learned profile, at most every --learn-every
    // seconds (no pass runs now).
    if (usage_) usage_->learn_if_due(std::chrono::seconds(o_.learn_every));
    // PROMPT_PLACE waits for a request whose reply may repay its reads.
    if (experts_) experts_->set_reply_hint(r.max_tokens);
    stop_reply_.store(false);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string id = completion_id(api);
    // The logprobs object of some scored tokens (offsets already past the echoed prompt).
    const auto logprobs =
        [this, api, want = r.logprobs >= 0,
         top_n = size_t(std::max(r.logprobs, 0))](std::span<const ScoredToken> toks) -> json {
      if (!want) return nullptr;
      return api == Api::kText ? text_logprobs(tok_, toks, top_n)
                               : chat_logprobs(tok_, toks, top_n);
    };
    // One choice: the reply's text (whole, or one streamed piece), its tokens' logprobs and its
    // finish reason.
    // reasoning: a thinking model's (chat), before the text's answer; empty: none.
    // tool_calls: the reply's calls (a message's content is then null when empty).
    const auto choice = [api, show = o_.show_reasoning](
                            size_t index, std::optional<std::string> text, const char* finish,
                            bool chunk, json logprobs, const std::string& reasoning = {},
                            json tool_calls = nullptr) {
      json c = {{"index", index}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
      if (api == Api::kText) {
        c["text"] = text.value_or("");
      } else if (!chunk) {
        c["message"] = {{"role", "assistant"}, {"content", text.value_or("")}};
        if (show && !reasoning.empty()) c["message"]["reasoning_content"] = reasoning;
        if (!tool_calls.is_null()) {
          c["message"]["tool_calls"] = std::move(tool_calls);
          if (text.value_or("").empty()) c["message"]["content"] = nullptr;
        }
      } else {
        c["delta"] = json::object();
        if (show && !reasoning.empty()) c["delta"]["reasoning_content"] = reasoning;
        if (text) c["delta"]["content"] = *text;
        if (!tool_calls.is_null()) c["delta"]["tool_calls"] = std::move(tool_calls);
      }
      c["logprobs"] = std::move(logprobs);
      return c;
    };
    // Brings the session to the conversation, or to prompt i, and fills its echo (/v1/completions:
    // the prompt's text, and scores, before the reply's); false when it replied an error.
    const auto begin = [&](size_t i, EchoedPrompt& echo) {
      session_.set_sampling(r.sampling);
      session_.set_json_schema(r.schema);
      session_.set_reasoning(r.split_reasoning);
      session_.set_thinking(thinking(r));
      session_.set_reasoning_budget(r.thinking_budget.value_or(o_.thinking_budget));
      const bool harmony = tool_format_ == engine::ToolFormat::kHarmony;
      const bool sections = tool_format_ == engine::ToolFormat::kKimi ||
                            tool_format_ == engine::ToolFormat::kDeepseek ||
                            tool_format_ == engine::ToolFormat::kMinimax;
      session_.set_tool_calls(
          {.open = harmony ? -1 : tool_trigger_,
           .open_text =
               std::string(harmony ? engine::call_opening(tool_format_) : std::string_view()),
           .body = call_body,
           // (GLM: the call's body ends with its </tool_call>; Kimi-K2, DeepSeek-V3.1,
           // MiniMax-M2: the section's body holds all its calls and its end.)
           .close = tool_format_ == engine::ToolFormat::kGlmXml ? "" : "\n</tool_call>",
           .forced_prompt = std::string(engine::forced_call_prompt(tool_format_)),
           .forced = r.tool_forced,
           .parallel = r.parallel_tools && !sections});
      const bool score_prompt = r.echo && r.logprobs >= 0;
      engine::TurnStatus st;
      try {
        st = api == Api::kChat   ? session_.begin_messages(r.messages)
             : r.prompts[i].text ? session_.begin_text(*r.prompts[i].text, score_prompt)
                                 : session_.begin_tokens(r.prompts[i].ids, score_prompt);
      } catch (const Error& e) {
        // A bad value (a token id the vocabulary lacks, an empty prompt ...) is the request's;
        // the rest (an I/O error of the tiers) is the server's.
        reply_error(res, api, e.kind() == ErrorKind::kBadValue ? 400 : 500, e.what());
        return false;
      }
      if (st == engine::TurnStatus::kPromptTooLong) {
        // (Anthropic's wording for a Messages request: its clients compact the conversation on
        // "prompt is too long".)
        reply_error(res, api, 400,
                    messages_api
                        ? fmt::format("prompt is too long: {} tokens > {} maximum (strata serve "
                                      "--ctx)",
                                      session_.last_stats().n_prompt, session_.n_ctx())
                        : fmt::format("the {} is {} tokens; the context holds {} (strata serve "
                                      "--ctx)",
                                      api == Api::kChat ? "conversation" : "prompt",
                                      session_.last_stats().n_prompt, session_.n_ctx()));
        return false;
      }
      if (r.echo)
        echo = echo_prompt(
            tok_, session_.kv_tokens(),
            score_prompt ? session_.prompt_scores() : std::span<const engine::TokenScore>());
      return true;
    };
    const char* object = api == Api::kChat ? "chat.completion" : "text_completion";
    const char* chunk_object = api == Api::kChat ? "chat.completion.chunk" : "text_completion";
    if (!r.stream) {
      json choices = json::array();
      engine::TurnStats total;
      for (size_t i = 0; i < std::max<size_t>(r.prompts.size(), 1); ++i) {
        const auto t_begin = std::chrono::steady_clock::now();
        EchoedPrompt echo;
        if (!begin(i, echo)) return;
        StopFilter filter(r.stop);
        ScoredTokens scored;
        DecodeClock clock(prof_, session_);
        std::string text;
        engine::ReasoningSplitter split = session_.reply_splitter();
        const engine::TurnResult t = session_.generate(
            r.max_tokens,
            [&](std::string_view piece, const engine::TokenScore* score) {
              clock.tick();
              if (score) scored.add(piece, *score);
              text += filter.add(piece);
              if (filter.stopped()) stop_reply_.store(true);
            },
            &stop_reply_, r.logprobs);
        if (!filter.stopped()) text += filter.flush();
        std::vector<ScoredToken> toks = std::move(echo.tokens);
        for (ScoredToken& x : after(scored.take(text.size(), true), echo.text.size()))
          toks.push_back(std::move(x));
        std::string reasoning, answer;  // (a chat reply; a raw completion is all answer)
        split.feed(text, reasoning, answer);
        split.finish(reasoning, answer);
        const char* finish = finish_reason(t.status, filter.stopped());
        json calls = nullptr;
        if (!r.tools.empty()) {
          // A forced call's prompt ended with its opening.
          // (harmony: the reply as written, its headers naming the calls)
          const std::string& written = tool_format_ == engine::ToolFormat::kHarmony ? text : answer;
          engine::ParsedCalls parsed = engine::parse_calls(
              tool_format_,
              r.tool_forced ? std::string(engine::forced_call_head(tool_format_)) + written
                            : written,
              r.tools);
          if (!parsed.calls.empty()) {
            calls = tool_calls_json(parsed.calls, id.substr(id.find('-') + 1), false);
            answer = std::move(parsed.content);
            if (t.status == engine::TurnStatus::kEndOfGeneration && !filter.stopped())
              finish = "tool_calls";
          }
        }
        choices.push_back(choice(i, echo.text + answer, finish, false, logprobs(toks), reasoning,
                                 std::move(calls)));
        // (strata's addition: which stop string ended the reply; Anthropic's stop_sequence)
        if (filter.stopped()) choices.back()["stop_sequence"] = filter.matched();
        add_stats(total, t.stats);
        log(api, t.stats, t_begin, "");
        if (filter.stopped()) stop_reply_.store(false);  // the next prompt's reply runs
      }
      json out = {{"id", id},
                  {"object", object},
                  {"created", unix_now()},
                  {"model", model_id_},
                  {"choices", std::move(choices)},
                  {"usage", usage(total)},
                  {"timings", timings(total)}};
      res.set_content(dump(out), "application/json");
      return;
    }
    EchoedPrompt echo;
    if (!begin(0, echo)) return;
    res.set_header("Cache-Control", "no-cache");
    // Anthropic's events, from the chunks (null: OpenAI's chunks as they are).
    std::shared_ptr<anthropic::Stream> events;
    if (messages_api)
      events = std::make_shared<anthropic::Stream>(id, model_id_, session_.last_stats().n_prompt);
    res.set_chunked_content_provider("text/event-stream", [this, r, id, lock, t0, choice,
                                                           chunk_object, echo, logprobs, events](
                                                              size_t, httplib::DataSink& sink) {
      const auto event = [&](const json& c) {
        if (events) {
          const std::string lines = events->chunk(c);
          return lines.empty() || sink.write(lines.data(), lines.size());
        }
        const json chunk = {{"id", id},
                            {"object", chunk_object},
                            {"created", unix_now()},
                            {"model", model_id_},
                            {"choices", {c}}};
        const std::string line = "data: " + dump(chunk) + "\n\n";
        return sink.write(line.data(), line.size());
      };
      // A chat stream opens with the assistant's role (OpenAI's first delta).
      bool gone =
          r.api == Api::kChat && !event({{"index", 0},
                                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                                         {"logprobs", nullptr},
                                         {"finish_reason", nullptr}});
      // An echoed prompt is the first text event.
      if (r.echo && !gone)
        gone = !event(choice(0, echo.text, nullptr, true, logprobs(echo.tokens)));
      StopFilter filter(r.stop);
      ScoredTokens scored;
      size_t sent = 0;  // reply bytes sent
      DecodeClock clock(prof_, session_);
      engine::ReasoningSplitter split = session_.reply_splitter();
      std::string reasoning, answer;  // the split's parts of the last piece
      // With tools: a call's text held (from a <tool_call> on; harmony: its message).
      ToolStream tool_stream(tool_format_, r.tools, r.tool_forced);
      const bool tools = !r.tools.empty();
      engine::TurnResult t;
      try {
        t = session_.generate(
            r.max_tokens,
            [&](std::string_view piece, const engine::TokenScore* score) {
              clock.tick();
              if (score) scored.add(piece, *score);
              const std::string text = filter.add(piece);
              sent += text.size();
              const std::vector<ScoredToken> toks =
                  after(scored.take(sent, false), echo.text.size());
              reasoning.clear();
              answer.clear();
              split.feed(text, reasoning, answer);
              if (tools) answer = tool_stream.feed(answer, text);
              if ((!answer.empty() || !reasoning.empty() || !toks.empty()) && !gone)
                gone = !event(choice(0,
                                     answer.empty() && !reasoning.empty()
                                         ? std::nullopt
                                         : std::optional<std::string>(answer),
                                     nullptr, true, logprobs(toks), reasoning));
              if (filter.stopped() || gone) stop_reply_.store(true);  // client left: stop
            },
            &stop_reply_, r.logprobs);
      } catch (const std::exception& e) {
        // The headers are gone: the error is the stream's last event.
        const std::string line =
            events ? anthropic::Stream::error_event(e.what())
                   : "data: " + error_body(e.what(), "server_error") + "\n\ndata: [DONE]\n\n";
        if (!gone) sink.write(line.data(), line.size());
        fmt::print(stderr, "serve: POST {} (streamed) failed: {}\n", api_path(r.api), e.what());
        lock->unlock();
        return false;
      }
      if (!gone) {
        const std::string rest = filter.stopped() ? std::string() : filter.flush();
        const std::vector<ScoredToken> toks =
            after(scored.take(sent + rest.size(), true), echo.text.size());
        reasoning.clear();
        answer.clear();
        split.feed(rest, reasoning, answer);
        split.finish(reasoning, answer);
        engine::ParsedCalls parsed;
        if (tools) {
          answer = tool_stream.feed(answer, rest);
          parsed = tool_stream.finish();
          answer += parsed.content;
        }
        if (!answer.empty() || !reasoning.empty() || !toks.empty())
          gone = !event(choice(0,
                               answer.empty() && !reasoning.empty()
                                   ? std::nullopt
                                   : std::optional<std::string>(answer),
                               nullptr, true, logprobs(toks), reasoning));
        const char* finish = finish_reason(t.status, filter.stopped());
        if (!parsed.calls.empty() && !gone) {
          gone = !event(choice(0, std::nullopt, nullptr, true, nullptr, {},
                               tool_calls_json(parsed.calls, id.substr(id.find('-') + 1), true)));
          if (t.status == engine::TurnStatus::kEndOfGeneration && !filter.stopped())
            finish = "tool_calls";
        }
        if (!gone) {
          json last = choice(0, std::nullopt, finish, true, nullptr);
          if (filter.stopped()) last["stop_sequence"] = filter.matched();
          event(last);
        }
        const std::string done =
            events ? events->finish(t.stats.n_generated) : std::string("data: [DONE]\n\n");
        sink.write(done.data(), done.size());
        sink.done();
      }
      log(r.api, t.stats, t0, gone ? " (client gone: stopped)" : " (streamed)");
      lock->unlock();
      return !gone;
    });
  }

  // A request's totals over its prompts.
  static void add_stats(engine::TurnStats& a, const engine::TurnStats& b) {
    a.n_prompt += b.n_prompt;
    a.n_matched += b.n_matched;
    a.n_reused += b.n_reused;
    a.n_prefilled += b.n_prefilled;
    a.n_generated += b.n_generated;
    a.prefill_s += b.prefill_s;
    a.decode_s += b.decode_s;
    a.sample_s += b.sample_s;
    a.from_stash = a.from_stash || b.from_stash;
  }
  static json usage(const engine::TurnStats& s) {
    return {{"prompt_tokens", s.n_prompt},
            {"completion_tokens", s.n_generated},
            {"total_tokens", s.n_prompt + s.n_generated}};
  }
  // llama-server's names, plus what the KV cache kept.
  static json timings(const engine::TurnStats& s) {
    return {{"prompt_n", s.n_prefilled},        {"prompt_reused", s.n_reused},
            {"prompt_ms", s.prefill_s * 1e3},   {"predicted_n", s.n_generated},
            {"predicted_ms", s.decode_s * 1e3}, {"prompt_from_stash", s.from_stash}};
  }
  void log(Api api, const engine::TurnStats& s, std::chrono::steady_clock::time_point t0,
           const char* how) {
    if (prof_ && prof_->enabled()) {
      prof_->add_prefill(s.n_prefilled, s.prefill_s);
      prof_->counters().sampling_seconds += s.sample_s;
    }
    fmt::print(stderr,
               "serve: POST {} 200{}: prompt {} tokens ({} kept in the KV cache{}, {} "
               "prefilled at {:.1f} tok/s), reply {} tokens at {:.1f} tok/s, {:.2f} s\n",
               api_path(api), how, s.n_prompt, s.n_reused, s.from_stash ? " from the stash" : "",
               s.n_prefilled, s.prefill_tok_s(), s.n_generated, s.decode_tok_s(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  static void reply_error(httplib::Response& res, Api api, int status, const std::string& message) {
    res.status = status;
    res.set_content(error_body(message, "invalid_request_error"), "application/json");
    fmt::print(stderr, "serve: POST {} {}: {}\n", api_path(api), status, message);
  }

  const ServeOptions& o_;
  engine::ChatSession& session_;
  const engine::Tokenizer& tok_;
  std::string model_id_;
  engine::Profiler* prof_;
  UsageRecorder* usage_;
  engine::ExpertSource* experts_;
  int64_t started_ = unix_now();
  httplib::Server http_;
  engine::ToolFormat tool_format_;  // the model's template's tool-call format (tool_calls.h)
  int32_t tool_trigger_;  // <tool_call>'s token, or kNoToken (calls parsed, not constrained)
  std::mutex mu_;         // one reply at a time
  std::atomic<bool> stop_reply_{false};
};

int run_serve(ServeOptions o) {
  if (o.port < 0 || o.port > 65535) fail(ErrorKind::kBadValue, "--port {}: 0 to 65535", o.port);
  const engine::Knobs knobs = load_knobs(o.knobs);
  const int threads = static_cast<int>(
      knobs.int_opt("THREADS").value_or(int64_t(kernels::physical_core_cpus().size())));
  const engine::LookupParams lookup = engine::lookup_params(knobs);
  engine::Model model = engine::Model::load(o.model);
  const engine::ModelConfig& cfg = model.config();
  const engine::Tokenizer tok = engine::Tokenizer::from_gguf(model.file());
  const engine::ChatFamily family =
      engine::chat_family_choice(o.chat_template, tok.vocab().chat_template());

  // SIGINT / SIGTERM go to one thread that stops the server: blocked here, before any other
  // thread starts, so every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  engine::ForwardOptions fo;
  fo.n_ctx =
      o.ctx.value_or(cfg.n_ctx_train > 0 ? std::min(cfg.n_ctx_train, kDefaultCtx) : kDefaultCtx);
  warn_context_beyond_training(fo.n_ctx, model);
  fo.n_ubatch = o.ubatch;
  fo.n_threads = threads;
  // RAM_GB auto leaves room for the KV cache, and for the stash's copies of up to as much each.
  const uint64_t kv_positions = uint64_t{fo.n_ctx} * (1 + uint64_t{o.stash});
  if (kv_positions > std::numeric_limits<uint32_t>::max())
    fail(ErrorKind::kBadValue, "--ctx {} with --stash {}: {} KV positions, more than {}", fo.n_ctx,
         o.stash, kv_positions, std::numeric_limits<uint32_t>::max());
  const TierSetup tiers = make_tier_setup(model, knobs, uint32_t(kv_positions),
                                          /*progress_bar=*/true, /*record_usage=*/false,
                                          /*learn=*/true);
  fo.experts = tiers.experts.get();
  fo.kv_type = tiers.kv_type;
  fo.route_trace = tiers.trace.get();
  fo.prof = tiers.prof.get();
  engine::Forward fwd(model, fo);
  engine::ChatSession session(fwd, tok, family, o.sampling, {}, lookup);
  session.set_stash(o.stash);
  const std::string think = knobs.get_string("THINK");
  o.thinking = think != "off";
  o.show_reasoning = think != "hide";
  o.thinking_budget = int32_t(knobs.int_opt("THINK_BUDGET").value_or(-1));
  const std::string id = !o.alias.empty()
                             ? o.alias
                             : model.file()
                                   .get_string_opt("general.name")
                                   .value_or(std::filesystem::path(o.model).stem().string());

  Server server(o, session, tok, id, tiers.prof.get(), tiers.usage.get(), tiers.experts.get());
  const int port = server.bind();
  fmt::print(stderr,
             "serve: listening on http://{}:{} — model \"{}\" ({}, {} layers, {} experts, context "
             "{} tokens: KV cache {:.0f} MiB{}, template {}, {} threads); POST "
             "/v1/chat/completions and /v1/completions; Ctrl-C stops\n",
             o.host, port, id, cfg.arch_name, cfg.n_layer, cfg.n_expert, fwd.n_ctx(),
             double(fwd.kv().n_bytes()) / (1 << 20),
             o.stash == 0   ? std::string()
             : o.stash == 1 ? std::string(" + a stash of up to as much (--stash N)")
                            : fmt::format(" + a stash of up to {} times as much", o.stash),
             engine::chat_family_name(family), threads);
  if (const engine::ReasoningFormat f = session.reasoning_style().format;
      f != engine::ReasoningFormat::kNone)
    fmt::print(stderr,
               "serve: a thinking model ({}): THINK={} (replies' reasoning in reasoning_content; "
               "per request: reasoning_format \"none\", chat_template_kwargs.enable_thinking)\n",
               engine::reasoning_format_name(f), think);
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    fmt::print(stderr, "serve: {} received: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
  });
  server.run();
  // Stopped by a signal (the waiter has it), or listen failed: wake the waiter either way.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  finish_prof(*tiers.prof);
  return 0;
}

}  // namespace

void add_serve(CLI::App& app, CommandFn& run) {
  auto* cmd = app.add_subcommand(
      "serve",
      "OpenAI-compatible HTTP server (POST /v1/chat/completions and /v1/completions, streaming "
      "too)");
  auto o = std::make_shared<ServeOptions>();
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("--host", o->host, "Address to listen on (default 127.0.0.1: this host only)");
  cmd->add_option("--port", o->port, "TCP port (default 8080; 0 picks a free one, printed)");
  cmd->add_option("--alias", o->alias,
                  "Model id in responses and /v1/models (default: general.name, else the file "
                  "name)");
  cmd->add_option(
      "--chat-template", o->chat_template,
      "Built-in chat format instead of the model's template: " + engine::chat_family_names());
  add_sampling_flags(cmd, o->sampling);  // the defaults of requests that do not say
  cmd->add_option("--ubatch", o->ubatch, "Prefill chunk size in tokens (default 512)");
  cmd->add_option(
      "--ctx", o->ctx,
      "KV cache size in tokens; 0 is the model's training context (default: that, at most 4096)");
  cmd->add_option("--stash", o->stash,
                  "Conversations whose KV rows are kept in RAM beside the cache, least recently "
                  "used leaving first (default 1: a side request — a front end's title — does "
                  "not cost the main conversation a full prefill; one per user of a shared "
                  "server; each up to one KV cache)")
      ->check(CLI::Range(0, 64));
  cmd->add_flag_callback(
      "--no-stash", [o] { o->stash = 0; }, "Keep only the last request's KV cache (--stash 0)");
  cmd->add_option("--learn-every", o->learn_every,
                  "Seconds between additions of the replies' expert usage to USAGE_AUTO's "
                  "learned profile, checked as a request starts (default 300; 0: every request); "
                  "the rest is added when the server stops")
      ->check(CLI::Range(0, 86400));
  cmd->add_option("--max-body-mib", o->max_body_mib,
                  "Largest request body in MiB; a larger one is refused with a 413 before it is "
                  "read (default 32)")
      ->check(CLI::Range(1, 4096));
  add_knob_flags(cmd, o->knobs);
  cmd->callback([&run, o] { run = [o] { return run_serve(*o); }; });
}

}  // namespace strata::tools
