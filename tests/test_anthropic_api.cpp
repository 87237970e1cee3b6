// Anthropic's Messages API over serve's chat completions (tools/anthropic_api.h): a Messages
// request as a chat completions request, a completion as a Message, errors, and a streamed
// completion's chunks as Anthropic's events.
#include "tools/anthropic_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/check.h"

using namespace strata;
using namespace strata::tools;
using json = nlohmann::json;

namespace {

TEST(AnthropicApi, RequestBecomesAChatRequest) {
  const std::string out = anthropic::chat_request(R"({
    "model": "claude-sonnet-4-5", "max_tokens": 64, "temperature": 0.5, "stream": true,
    "stop_sequences": ["END"], "metadata": {"user_id": "x"},
    "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
               {"type": "text", "text": " Really."}],
    "tools": [{"name": "weather", "description": "Weather", "input_schema": {"type": "object",
               "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "thinking": {"type": "disabled"},
    "messages": [
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hm", "signature": "s"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"zeta": "Oslo"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "4 C"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
         "content": [{"type": "text", "text": "timeout"}, {"type": "image", "source": {}}]},
        {"type": "text", "text": "And tomorrow?"}]}]})");
  // The tools' schemas keep their key order (the prompt writes them as the client did).
  EXPECT_NE(out.find(R"("properties":{"zeta":{"type":"string"},"alpha")"), std::string::npos)
      << out;
  const json r = json::parse(out);
  EXPECT_EQ(r["max_tokens"], 64);
  EXPECT_EQ(r["temperature"], 0.5);
  EXPECT_EQ(r["stream"], true);
  EXPECT_EQ(r["stop"], json({"END"}));
  EXPECT_FALSE(r.contains("metadata"));
  EXPECT_FALSE(r.contains("model"));
  EXPECT_EQ(r["tool_choice"], "required");
  EXPECT_EQ(r["parallel_tool_calls"], false);
  EXPECT_EQ(r["chat_template_kwargs"]["enable_thinking"], false);
  ASSERT_EQ(r["tools"].size(), 1u);
  EXPECT_EQ(r["tools"][0]["type"], "function");
  EXPECT_EQ(r["tools"][0]["function"]["name"], "weather");
  EXPECT_EQ(r["tools"][0]["function"]["description"], "Weather");
  EXPECT_EQ(r["tools"][0]["function"]["parameters"]["type"], "object");
  const json& m = r["messages"];
  ASSERT_EQ(m.size(), 6u) << m;
  EXPECT_EQ(m[0], json({{"role", "system"}, {"content", "Be brief. Really."}}));
  EXPECT_EQ(m[1], json({{"role", "user"}, {"content", "Weather in Oslo?"}}));
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "Checking.");
  EXPECT_EQ(m[2]["reasoning_content"], "hm");  // the thinking block's text
  ASSERT_EQ(m[2]["tool_calls"].size(), 1u);
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["name"], "weather");
  EXPECT_EQ(json::parse(m[2]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"zeta", "Oslo"}}));
  EXPECT_EQ(m[3], json({{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "4 C"}}));
  // An image in a tool's result: a line saying so, and the turn goes on.
  EXPECT_EQ(m[4]["content"], "Error: timeout[image not shown: this model reads text only]");
  EXPECT_EQ(m[5], json({{"role", "user"}, {"content", "And tomorrow?"}}));

  // tool_choice's other forms; thinking on.
  const auto choice = [](const char* c) {
    return json::parse(anthropic::chat_request(
        std::string(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": )") + c +
        R"(, "thinking": {"type": "enabled", "budget_tokens": 1024}})"));
  };
  EXPECT_EQ(choice(R"({"type": "auto"})")["tool_choice"], "auto");
  EXPECT_EQ(choice(R"({"type": "none"})")["tool_choice"], "none");
  EXPECT_EQ(choice(R"({"type": "tool", "name": "weather"})")["tool_choice"]["function"]["name"],
            "weather");
  EXPECT_EQ(choice(R"({"type": "auto"})")["chat_template_kwargs"]["enable_thinking"], true);
  // The thinking budget caps the reasoning (serve's thinking_budget).
  EXPECT_EQ(choice(R"({"type": "auto"})")["thinking_budget"], 1024);
  EXPECT_FALSE(json::parse(anthropic::chat_request(
                               R"({"messages": [{"role": "user", "content": "x"}],
                                   "thinking": {"type": "disabled", "budget_tokens": 5}})"))
                   .contains("thinking_budget"));
}

TEST(AnthropicApi, UnsupportedRequestsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"[1]", "not a JSON object"},
      {R"({"messages": []})", "'messages' must be a non-empty list"},
      {R"({"messages": [{"role": "system", "content": "x"}]})", "user or assistant"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})",
       "'image' blocks are not supported"},
      {R"({"messages": [{"role": "user", "content": [{"type": "tool_use", "name": "a"}]}]})",
       "'tool_use' blocks are not supported in a user message"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "web_search_20250305", "name": "web_search"}]})",
       "only client tools with an input_schema"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "x"}})",
       "'tool_choice'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "x"}})",
       "'thinking'"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "thinking": {"type": "enabled", "budget_tokens": "lots"}})",
       "'thinking.budget_tokens' must be a non-negative integer"},
      {R"({"system": [{"type": "image"}], "messages": [{"role": "user", "content": "x"}]})",
       "only text blocks"},
      {R"({"messages": [{"role": "user", "content": [{"type": 5}]}]})",
       "messages[0].content[0].type must be a string"},
      {R"({"messages": [{"role": "user", "content": [{"type": "tool_result", "is_error": "yes",
           "content": "x"}]}]})",
       "is_error must be true or false"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"name": "a", "type": [1],
           "input_schema": {}}]})",
       "tools[0].type must be a string"},
  };
  for (const auto& [body, want] : cases) {
    try {
      anthropic::chat_request(body);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(AnthropicApi, CompletionBecomesAMessage) {
  const json completion = json::parse(R"({"id": "chatcmpl-1", "model": "m",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
      "content": "Let me look.", "reasoning_content": "think",
      "tool_calls": [{"id": "call_1", "type": "function",
                      "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}})");
  const json m = anthropic::message(completion);
  EXPECT_EQ(m["id"], "msg_chatcmpl-1");
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["usage"], json({{"input_tokens", 12}, {"output_tokens", 7}}));
  ASSERT_EQ(m["content"].size(), 3u);
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][0]["thinking"], "think");
  EXPECT_EQ(m["content"][1], json({{"type", "text"}, {"text", "Let me look."}}));
  EXPECT_EQ(m["content"][2], json({{"type", "tool_use"},
                                   {"id", "call_1"},
                                   {"name", "weather"},
                                   {"input", {{"city", "Oslo"}}}}));
  // Kimi-K2's call ids (functions.NAME:IDX) are not Anthropic ids ([A-Za-z0-9_-]+): they go out
  // as toolu_x and their bytes in hex, and come back in tool_use / tool_result as they were.
  json kimi = completion;
  kimi["choices"][0]["message"]["tool_calls"][0]["id"] = "functions.weather:0";
  const std::string out_id = anthropic::message(kimi)["content"][2]["id"];
  EXPECT_EQ(out_id, "toolu_x66756e6374696f6e732e776561746865723a30");
  const json back = json::parse(anthropic::chat_request(
      json({{"max_tokens", 8},
            {"messages",
             {{{"role", "user"}, {"content", "Weather?"}},
              {{"role", "assistant"},
               {"content",
                {{{"type", "tool_use"}, {"id", out_id}, {"name", "weather"}, {"input", {}}}}}},
              {{"role", "user"},
               {"content",
                {{{"type", "tool_result"}, {"tool_use_id", out_id}, {"content", "4 C"}}}}}}}})
          .dump()));
  EXPECT_EQ(back["messages"][1]["tool_calls"][0]["id"], "functions.weather:0");
  EXPECT_EQ(back["messages"][2]["tool_call_id"], "functions.weather:0");
  // A plain reply; the stop reasons.
  json plain = completion;
  plain["choices"][0]["message"] = {{"role", "assistant"}, {"content", ""}};
  for (const auto& [finish, want] : std::vector<std::pair<const char*, const char*>>{
           {"stop", "end_turn"}, {"length", "max_tokens"}}) {
    plain["choices"][0]["finish_reason"] = finish;
    const json p = anthropic::message(plain);
    EXPECT_EQ(p["stop_reason"], want);
    EXPECT_TRUE(p["stop_sequence"].is_null());
    EXPECT_EQ(p["content"], json::array({{{"type", "text"}, {"text", ""}}}));
  }
  // A stop string ended it (serve's stop_sequence beside finish_reason "stop").
  plain["choices"][0]["finish_reason"] = "stop";
  plain["choices"][0]["stop_sequence"] = "END";
  EXPECT_EQ(anthropic::message(plain)["stop_reason"], "stop_sequence");
  EXPECT_EQ(anthropic::message(plain)["stop_sequence"], "END");
  // Errors.
  const json e = json::parse(
      anthropic::error(R"({"error": {"message": "bad", "type": "invalid_request_error"}})", 400));
  EXPECT_EQ(e, json({{"type", "error"},
                     {"error", {{"type", "invalid_request_error"}, {"message", "bad"}}}}));
  EXPECT_EQ(json::parse(anthropic::error("{}", 500))["error"]["type"], "api_error");
}

// The events of a stream as (name, data) pairs.
std::vector<std::pair<std::string, json>> events(const std::string& text) {
  std::vector<std::pair<std::string, json>> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << text;
    if (end == std::string::npos) break;
    const std::string ev = text.substr(at, end - at);
    const size_t nl = ev.find('\n');
    EXPECT_TRUE(ev.starts_with("event: ") && ev.substr(nl + 1).starts_with("data: ")) << ev;
    out.emplace_back(ev.substr(7, nl - 7), json::parse(ev.substr(nl + 7)));
    EXPECT_EQ(out.back().second["type"], out.back().first);
    at = end + 2;
  }
  return out;
}

TEST(AnthropicApi, ChunksBecomeEvents) {
  anthropic::Stream s("chatcmpl-2", "m", 33);
  std::string text = s.chunk(json::parse(R"({"index": 0, "delta": {"role": "assistant",
                                                "content": ""}, "finish_reason": null})"));
  text += s.chunk(json::parse(R"({"delta": {"reasoning_content": "Hm"}, "finish_reason": null})"));
  text += s.chunk(json::parse(R"({"delta": {"reasoning_content": "m."}, "finish_reason": null})"));
  text += s.chunk(json::parse(R"({"delta": {"content": "Sure"}, "finish_reason": null})"));
  text += s.chunk(json::parse(R"({"delta": {"tool_calls": [
      {"index": 0, "id": "c0", "type": "function", "function": {"name": "a", "arguments": "{}"}},
      {"index": 1, "id": "c1", "type": "function",
       "function": {"name": "b", "arguments": "{\"k\":1}"}}]}, "finish_reason": null})"));
  text += s.chunk(json::parse(R"({"delta": {}, "finish_reason": "tool_calls"})"));
  text += s.finish(9);
  const auto ev = events(text);
  std::vector<std::string> names;
  for (const auto& [name, data] : ev) names.push_back(name);
  const std::vector<std::string> want = {
      "message_start",       "content_block_start", "content_block_delta", "content_block_delta",
      "content_block_stop",  "content_block_start", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_stop",  "content_block_start",
      "content_block_delta", "content_block_stop",  "message_delta",       "message_stop"};
  ASSERT_EQ(names, want) << text;
  EXPECT_EQ(ev[0].second["message"]["id"], "msg_chatcmpl-2");
  EXPECT_EQ(ev[0].second["message"]["usage"]["input_tokens"], 33);
  EXPECT_EQ(ev[1].second["content_block"]["type"], "thinking");
  EXPECT_EQ(ev[2].second["delta"], json({{"type", "thinking_delta"}, {"thinking", "Hm"}}));
  EXPECT_EQ(ev[5].second["index"], 1);
  EXPECT_EQ(ev[6].second["delta"], json({{"type", "text_delta"}, {"text", "Sure"}}));
  EXPECT_EQ(ev[8].second["index"], 2);
  EXPECT_EQ(ev[8].second["content_block"],
            json({{"type", "tool_use"}, {"id", "c0"}, {"name", "a"}, {"input", json::object()}}));
  EXPECT_EQ(ev[9].second["delta"], json({{"type", "input_json_delta"}, {"partial_json", "{}"}}));
  EXPECT_EQ(ev[12].second["delta"]["partial_json"], R"({"k":1})");
  EXPECT_EQ(ev[13].second["index"], 3);
  EXPECT_EQ(ev[14].second["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(ev[14].second["usage"]["output_tokens"], 9);
  // A stop string ends the stream: stop_sequence.
  anthropic::Stream stopped("y", "m", 1);
  std::string stop_text = stopped.chunk(
      json::parse(R"({"delta": {}, "finish_reason": "stop", "stop_sequence": "##"})"));
  stop_text += stopped.finish(2);
  const auto st = events(stop_text);
  EXPECT_EQ(st[st.size() - 2].second["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(st[st.size() - 2].second["delta"]["stop_sequence"], "##");
  // An empty reply still starts and stops the message; an error is one event.
  anthropic::Stream empty("x", "m", 1);
  const auto e = events(empty.finish(0));
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[1].second["delta"]["stop_reason"], "end_turn");
  const auto err = events(anthropic::Stream::error_event("disk gone"));
  ASSERT_EQ(err.size(), 1u);
  EXPECT_EQ(err[0].second["error"]["message"], "disk gone");
}

}  // namespace
