// Anthropic's Messages API (POST /v1/messages, what Claude Code and the other Anthropic clients
// speak) for `strata serve`, as a translation to and from the OpenAI chat completions it serves:
// a Messages request becomes a chat completions request (system blocks, text / tool_use /
// tool_result content blocks, tools with input_schema, tool_choice, thinking on or off with its
// budget_tokens), and a
// chat completion (whole, or streamed chunk by chunk) becomes a Message (thinking / text /
// tool_use content blocks, stop_reason, usage) or its server-sent events (message_start,
// content_block_start / _delta / _stop, message_delta, message_stop). Tested by
// tests/test_anthropic_api.cpp, and end to end by tests/test_thinking.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace strata::tools::anthropic {

// The request as a chat completions request body (JSON text; the tools' schemas keep their key
// order). Error (kBadValue) naming what is malformed or not supported (images, documents, server
// tools).
std::string chat_request(std::string_view body);

// A chat completion (one choice) as a Message.
nlohmann::json message(const nlohmann::json& completion);

// An OpenAI error body ({"error": {"message", "type"}}) as Anthropic's
// ({"type": "error", "error": {"type", "message"}}), for an HTTP status.
std::string error(std::string_view openai_error_body, int status);

// A streamed Message's events from the chat completion chunks' choices.
class Stream {
 public:
  Stream(std::string id, std::string model, uint32_t input_tokens)
      : id_(std::move(id)), model_(std::move(model)), input_tokens_(input_tokens) {}
  // The events for one chunk's choice (the first call also starts the message).
  std::string chunk(const nlohmann::json& choice);
  // The last events: the open block's stop, message_delta (stop_reason, output tokens),
  // message_stop.
  std::string finish(uint32_t output_tokens);
  // An error event (the stream's last).
  static std::string error_event(std::string_view message);

 private:
  enum class Block { kNone, kThinking, kText };
  std::string start();
  std::string open(Block b);  // closes the open block, opens one of kind b
  std::string close();        // content_block_stop of the open block, if any
  static std::string event(const char* name, const nlohmann::json& data);

  std::string id_, model_;
  uint32_t input_tokens_;
  bool started_ = false;
  Block block_ = Block::kNone;
  int index_ = -1;  // the open (or last) block's index
  std::string stop_reason_ = "end_turn";
  nlohmann::json stop_sequence_;  // the stop string that ended the reply (null: none)
};

}  // namespace strata::tools::anthropic
