// Thinking models: a reply that starts with the model's reasoning, then gives its answer. Qwen3,
// DeepSeek-R1 and GLM-4.5 wrap the reasoning in <think> ... </think>; gpt-oss writes harmony
// messages, its reasoning on the analysis channel and its answer on the final one. The
// ReasoningSplitter separates the two parts of a reply streamed in pieces, for `chat`'s display,
// `serve`'s reasoning_content and the conversation (which keeps the answer only, as these
// models' own templates do). Tested by tests/test_reasoning.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/chat_template.h"

namespace strata::engine {

class Vocab;

enum class ReasoningFormat {
  kNone,       // no reasoning: the whole reply is the answer
  kThinkTags,  // <think> reasoning </think> answer
  kHarmony,    // <|channel|>analysis<|message|>reasoning<|start|>assistant<|channel|>final...
};
std::string_view reasoning_format_name(ReasoningFormat f);

// How a model thinks, from its chat format, vocabulary and template text.
struct ReasoningStyle {
  ReasoningFormat format = ReasoningFormat::kNone;
  // The tokens that open and close the reasoning when each is one token of the vocabulary
  // (<think> / </think>; harmony: <|channel|> / <|message|>), else -1. Structured output needs
  // both to let the model think before the constrained answer.
  int32_t open_token = -1;
  int32_t close_token = -1;
  // What the template appends to the generation prompt when thinking is off (Qwen3's
  // "<think>\n\n</think>\n\n"); empty when the template has no such switch.
  std::string no_think;
  // What the template appends to each user message when thinking is off (GLM-4.5's "/nothink");
  // empty for most.
  std::string user_no_think;
  // What the template's generation prompt opens the reasoning with when thinking is on
  // (Qwen3-Thinking-2507's, QwQ's and MiniMax-M2's "<think>\n", DeepSeek-V3.1's "<think>"), which
  // llama.cpp's built-in formats do not write; empty for most.
  std::string think_open;
  // What the template writes before each earlier answer that follows a user's message
  // (DeepSeek-V3.1's "</think>", after its <｜Assistant｜>); empty for most.
  std::string answer_open;
  // What a chat turn's prompt ends with: thinking on, or no switch to turn it off, think_open;
  // else no_think.
  std::string_view prompt_tail(bool thinking) const {
    return thinking || no_think.empty() ? think_open : no_think;
  }
  // What closes the reasoning when a thinking budget is spent: "\n</think>\n\n"; harmony: the
  // analysis message's end and a final message's header.
  std::string budget_close;
};

// kHarmony for gpt-oss's format; kThinkTags when the vocabulary has a <think> and a </think>
// token; else kNone.
ReasoningStyle reasoning_style(ChatFamily family, const Vocab& vocab,
                               std::string_view chat_template);

// The text a Jinja chat template writes after the generation prompt when enable_thinking is
// false. At a test of thinking being off ("enable_thinking is false", "not enable_thinking",
// "enable_thinking == false"; DeepSeek-V3.1's "not thinking"): the first string literal of the
// first `{{ ... }}` its `{% if %}` opens, or the literal before the inline `if` of the
// expression it is in (GLM's '\n<think></think>' if (... not enable_thinking) else ''), with its
// escapes resolved; the first such test after the template's last mention of
// add_generation_prompt, else the first. Empty when there is none. The template is not run
// (chat_template.h).
std::string no_think_text(std::string_view chat_template);
// What a template appends to each user message when thinking is off: the literal of an inline
// `'X' if (... not enable_thinking ...) else ''` test other than the generation prompt's (GLM's
// "/nothink"), when it holds no <think> tag. Empty when there is none.
std::string user_no_think_text(std::string_view chat_template);
// The text a template's generation prompt opens the reasoning with, thinking on: a `<think>`
// (and what follows it, no `</think>`) in the literals of the first `{{ … }}` after its last
// mention of add_generation_prompt, joined, or in the else branch of its thinking-off test
// (no_think_text's).
std::string think_open_text(std::string_view chat_template);
// The prompt with `tail` (a no-think or think-open text) after it; a tail that starts with a
// newline takes the prompt's own (llama.cpp's chatglm4 formatter ends the prompt with "\n",
// GLM's template not).
std::string end_prompt(std::string prompt, std::string_view tail);

// Splits a reply, fed piece by piece, into reasoning and answer. A reply is taken to reason only
// when it starts with the format's opening (<think>, or a harmony header), leading whitespace
// aside, or when the prompt already opened the block (`open`: a template that ends its
// generation prompt with <think>). Markers split over pieces are held back until known.
// Whitespace around the reasoning and at the start of the answer is dropped (<think> models
// write "</think>\n\n").
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(ReasoningFormat format = ReasoningFormat::kNone, bool open = false);

  // Appends to `reasoning` and `answer` the bytes of `piece` (with any held back before it)
  // that are now known to be either.
  void feed(std::string_view piece, std::string& reasoning, std::string& answer);
  // The reply ended: whatever was held back goes where it stood.
  void finish(std::string& reasoning, std::string& answer);

  // The answer has begun: the reasoning block is closed, or the reply has none.
  bool answering() const { return state_ == State::kAnswer || state_ == State::kHarmonyAnswer; }
  bool reasoning() const { return state_ == State::kReasoning || state_ == State::kHarmonyBody; }
  // Nothing but whitespace yet: the reply may still open a reasoning block or start its answer.
  bool undecided() const { return state_ == State::kStart; }
  // Bytes of reasoning so far (the whole reply's, with finish's).
  size_t reasoning_bytes() const { return n_reasoning_; }

 private:
  enum class State {
    kStart,           // nothing but whitespace (or a marker's prefix) yet
    kReasoning,       // inside <think>
    kAnswer,          // the answer (to the end of the reply)
    kHarmonyHeader,   // a harmony header, up to <|message|>
    kHarmonyBody,     // an analysis message
    kHarmonyAnswer,   // a final (or other non-analysis) message
    kHarmonyBetween,  // after a message's end, before the next header
  };
  void step(std::string& reasoning, std::string& answer, bool last);
  void emit(std::string_view s, bool to_reasoning, std::string& reasoning, std::string& answer);

  ReasoningFormat format_;
  State state_ = State::kStart;
  std::string pending_;  // bytes not yet placed
  std::string header_;   // the harmony header so far
  bool trim_ = false;    // drop whitespace before the next byte placed
  size_t n_reasoning_ = 0;
};

}  // namespace strata::engine
