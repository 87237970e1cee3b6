// A chat session: the conversation, its formatting with the model's chat template, and the KV cache
// kept across turns. Each turn formats the whole conversation, tokenizes it and prefills only the
// tokens past the longest prefix already in the cache (llama.cpp's server does the same
// common-prefix reuse). Exercised by tests/test_session.cpp and, through `strata chat`, by
// tests/test_chat_cli.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_template.h"
#include "engine/forward.h"
#include "engine/json_schema.h"
#include "engine/lookup.h"
#include "engine/perplexity.h"
#include "engine/reasoning.h"
#include "engine/sampler.h"
#include "engine/token_constraint.h"
#include "engine/tokenizer.h"

namespace strata::engine {

enum class TurnStatus {
  kEndOfGeneration,  // the model ended its turn with an end-of-generation token
  kMaxTokens,        // the reply reached max_tokens
  kInterrupted,      // the stop flag was raised; the reply so far is kept
  kContextFull,      // no KV position left for the next token; the reply so far is kept
  kPromptTooLong,    // the conversation with the new message does not fit; nothing changed
};
std::string_view turn_status_name(TurnStatus s);

struct TurnStats {
  uint32_t n_prompt = 0;       // tokens of the formatted conversation when the reply started
  uint32_t n_matched = 0;      // of those, the longest prefix the KV cache already held
  uint32_t n_reused = 0;       // of those, kept in the cache (n_matched, or 0 after a rollback)
  uint32_t n_prefilled = 0;    // tokens prefilled this turn (n_prompt - n_reused)
  uint32_t n_generated = 0;    // reply tokens sampled (the end-of-generation token not counted)
  uint32_t n_reasoning = 0;    // of those, the reasoning's (a split reply's)
  bool budget_closed = false;  // the thinking budget closed the reasoning (set_reasoning_budget)
  double prefill_s = 0;
  double decode_s = 0;      // from the first sample to the last, seconds
  double sample_s = 0;      // of decode_s, the time spent in the sampler
  bool from_stash = false;  // the kept prefix came from the stash (set_stash) this turn
  double prefill_tok_s() const { return prefill_s > 0 ? n_prefilled / prefill_s : 0; }
  double decode_tok_s() const { return decode_s > 0 ? n_generated / decode_s : 0; }
};

struct TurnResult {
  TurnStatus status = TurnStatus::kEndOfGeneration;
  std::string text;  // the reply as streamed (special tokens not rendered)
  // A thinking model's reply in its two parts (reasoning.h; set_reasoning): the reasoning, and
  // the answer, which is what joins the conversation. Without reasoning, answer == text.
  std::string reasoning;
  std::string answer;
  TurnStats stats;
};

// Receives each reply piece as it is generated (bytes; a UTF-8 character may span pieces).
using PieceFn = std::function<void(std::string_view piece)>;
// The same with the piece's token and its logprobs (generate's top_n >= 0; else null).
using TokenFn = std::function<void(std::string_view piece, const TokenScore* score)>;

class ChatSession {
 public:
  // fwd must be fresh or reset; the session owns its KV contents from here on. fwd and tok must
  // outlive the session.
  // lookup: LOOKUP's drafting for the replies (max_draft 0: plain decode steps).
  ChatSession(Forward& fwd, const Tokenizer& tok, ChatFamily family, const SamplerParams& sampling,
              std::string system_prompt = {}, const LookupParams& lookup = {});
  ChatSession(const ChatSession&) = delete;
  ChatSession& operator=(const ChatSession&) = delete;

  // Adds the user message and brings the KV cache to tokenize(format_chat(conversation, true)):
  // positions that already hold the same tokens are kept, the rest is prefilled. Returns
  // kPromptTooLong (and changes nothing) when that does not fit in n_ctx; otherwise
  // kEndOfGeneration meaning "ready", and logits() holds the first reply token's logits.
  TurnStatus begin_turn(std::string_view user);
  // The same for a whole conversation given at once (`strata serve`: each request carries its
  // messages, the system prompt included): replaces the conversation, then brings the cache to
  // it as begin_turn does, keeping the prefix the cache shares.
  TurnStatus begin_messages(std::vector<ChatMessage> messages);
  // The tokens begin_messages would bring the cache to for `messages`, with thinking on or off
  // and a forced call's opening (ToolCalls::forced_prompt; empty: none) as a request would set
  // them (serve's count_tokens).
  std::vector<int32_t> turn_tokens(std::span<const ChatMessage> messages, bool thinking,
                                   std::string_view forced_prompt = {}) const;
  // A raw completion (`strata serve`'s /v1/completions): the cache is brought to `text`
  // tokenized as it stands (BOS as the vocabulary says, control strings as their ids) — no chat
  // template — keeping the prefix it shares; the conversation is emptied (the reply then joins
  // it as an assistant message, as after begin_turn). begin_tokens takes the ids themselves;
  // an empty prompt is an Error (kBadValue), ids outside the vocabulary too.
  // score_prompt: prompt_scores() then holds every prompt token's logprob and kMaxTopLogprobs
  // alternatives (the logits of every position are computed; positions whose scores an earlier
  // scored prompt left are kept, the rest is prefilled again from the first unscored one).
  TurnStatus begin_text(std::string_view text, bool score_prompt = false);
  TurnStatus begin_tokens(std::vector<int32_t> tokens, bool score_prompt = false);
  static constexpr size_t kMaxTopLogprobs = 20;
  // After a scored begin_text / begin_tokens: one score per prompt token (the first's logprob is
  // NaN and its list empty: nothing predicts it).
  std::span<const TokenScore> prompt_scores() const { return scores_; }
  // New sampling parameters (and seed) for the next replies; the sampler hears the tokens the
  // cache keeps at the next turn, as a fresh session's would.
  void set_sampling(const SamplerParams& sampling);
  // Structured output: the replies from here on are JSON documents the schema accepts (null:
  // free text, the default). Each reply is sampled among the tokens that keep it a viable prefix
  // (TokenConstraint) and ends, kEndOfGeneration, as soon as the document is complete; a reply
  // cut by max_tokens, the stop flag or the context stays an unfinished document.
  void set_json_schema(std::shared_ptr<const JsonSchema> schema) { schema_ = std::move(schema); }
  // Function calling (tool_calls.h): once the answer samples `open` (<tool_call>) — or, without
  // that token, once the reply writes `open_text` (harmony's " to=functions.") in a header: with
  // no `header_end` (<|message|>) after the last `header_start` (<|start|>) or the reply's
  // start — the tokens after it are constrained by a filter from `body` (a call's
  // JSON, XML or harmony), and when that call is complete the reply ends — or, `parallel` (with
  // `open`), `close` ("\n</tool_call>"; empty where the body holds it, GLM's) follows, and the
  // model then either ends its turn or writes "\n", which is followed by `open` and another call.
  // No body: off (the default). Not with set_json_schema. `forced` (OpenAI's tool_choice "required"
  // or a named function): chat turns' prompts end with `forced_prompt`, so the reply is a call from
  // its first token (not split).
  struct ToolCalls {
    int32_t open = -1;
    std::string open_text = {};
    std::string header_start = "<|start|>";
    std::string header_end = "<|message|>";
    DocumentFilterFn body = {};
    std::string close = "\n</tool_call>";
    std::string forced_prompt = "<tool_call>\n";
    bool forced = false;
    bool parallel = false;
  };
  void set_tool_calls(ToolCalls calls);
  // An exception from a forward pass (begin_turn's prefill, a reply step) leaves the session
  // usable: the KV cache keeps the prefix it and the session agree on, begin_turn's message is
  // withdrawn, generate's reply is dropped.
  // Samples the reply after begin_turn: streams pieces to on_piece, stops at an end-of-generation
  // token, after max_tokens (< 0: no limit), when *stop becomes true (checked before each token),
  // or when the context is full. The reply (even a partial one) joins the conversation.
  TurnResult generate(int32_t max_tokens, const PieceFn& on_piece,
                      const std::atomic<bool>* stop = nullptr);
  // The same, and top_n >= 0 scores each reply token (score_token: its logprob under the raw
  // logits and the top_n most likely) for on_token.
  TurnResult generate(int32_t max_tokens, const TokenFn& on_token, const std::atomic<bool>* stop,
                      int top_n);
  // begin_turn + generate.
  TurnResult send(std::string_view user, int32_t max_tokens, const PieceFn& on_piece,
                  const std::atomic<bool>* stop = nullptr);

  // Thinking models (reasoning.h): how this model's replies reason, from its template and
  // vocabulary.
  const ReasoningStyle& reasoning_style() const { return reasoning_; }
  // Whether chat turns (begin_turn, begin_messages) split replies into reasoning and answer (the
  // default): the answer alone joins the conversation, as the models' own templates keep it, and
  // structured output constrains the answer, letting the model reason first. Off: the reply as
  // written, as for raw completions (begin_text, begin_tokens), which never split.
  void set_reasoning(bool split) { split_reasoning_ = split; }
  // Thinking off: chat turns' prompts end with the template's no-think text (an empty <think>
  // block for Qwen3), so the model answers at once. Only where the template has that switch
  // (can_disable_thinking); elsewhere it changes nothing.
  void set_thinking(bool on) { thinking_ = on; }
  bool can_disable_thinking() const { return !reasoning_.no_think.empty(); }
  // A thinking budget (THINK_BUDGET, Anthropic's budget_tokens): once a split reply's reasoning
  // has taken `tokens` tokens, the reasoning is closed for it (ReasoningStyle::budget_close, given
  // as reply tokens without sampling) and the model answers. < 0: no limit (the default).
  void set_reasoning_budget(int32_t tokens) { reasoning_budget_ = tokens; }
  // A splitter for the open turn's reply (kNone unless it is split), for callers that show the
  // streamed pieces' two parts.
  ReasoningSplitter reply_splitter() const { return ReasoningSplitter(turn_format_, turn_opened_); }

  // Adds a message without running anything (a restored conversation, a scripted reply); the next
  // begin_turn prefills it with the rest of the new suffix.
  void append_message(ChatMessage m);

  // `strata serve`: keeps up to `slots` more token sequences' KV rows in RAM, the stash (0: off,
  // the default). When a turn's tokens share a longer prefix with a stashed sequence than with
  // the cache (by kStashMinDrop positions at least), the two trade places (the rows are copied,
  // nothing is prefilled); when a turn
  // would drop more than half of the cache's positions (at least kStashMinDrop) — another
  // conversation, a chat front end's title request — the cache's rows are stashed first, the
  // least recently used sequence leaving when the stash is full (and a stashed sequence the new
  // one extends leaving at once). The sampler then hears the kept prefix as after set_sampling.
  void set_stash(size_t slots);
  static constexpr size_t kStashMinDrop = 32;
  // Bytes the stash holds now, and the sequences in it.
  uint64_t stash_bytes() const;
  size_t stash_size() const { return stash_.size(); }

  // Forgets the conversation (the system prompt stays), empties the KV cache, reseeds the sampler.
  void reset();
  // PROMPT_CACHE: the Forward's first tokens.size() positions were restored to hold `tokens`
  // (load_prompt_cache, on a session with no turn yet). The next begin_turn keeps the prefix of
  // the conversation they share and prefills the rest; the sampler then hears the kept tokens as
  // if they had been prefilled, so the replies are a fresh session's.
  void adopt_kv(std::span<const int32_t> tokens);

  // Next-token logits [n_vocab] after begin_turn (valid until the next call into the session).
  std::span<const float> logits() const { return logits_; }
  std::span<const ChatMessage> messages() const { return messages_; }
  // The tokens whose K/V rows are in the cache, position order (size == n_past()).
  std::span<const int32_t> kv_tokens() const { return kv_tokens_; }
  uint32_t n_past() const { return lookup_.n_past(); }  // drafted positions not yet used excluded
  uint32_t n_ctx() const { return fwd_.n_ctx(); }
  ChatFamily family() const { return family_; }
  const std::string& system_prompt() const { return system_; }
  // The tokens the conversation would have now, formatted with the assistant opener (and the
  // no-think text when thinking is off).
  std::vector<int32_t> format_tokens(bool add_assistant) const;
  // Stats of the last turn (begin_turn fills the prefill part, generate the rest).
  const TurnStats& last_stats() const { return stats_; }
  // LOOKUP: whether the last reply token's step ran a forward pass, the draft it ran, totals.
  const LookupDecoder& lookup() const { return lookup_; }

 private:
  // Makes the cache hold exactly `tokens`: keeps the common prefix, prefills the rest (score:
  // scores every token, keeping only the prefix whose scores are known).
  void sync_kv(const std::vector<int32_t>& tokens, bool score = false);
  // sync_kv's prefill of tokens[keep ..] with the logits of every position scored into scores_.
  void prefill_scored(const std::vector<int32_t>& tokens, size_t keep);
  // begin_turn's work once messages_ holds the conversation (tokens: it formatted, or a raw
  // prompt); `undo` restores messages_ when the tokens do not fit, or their prefill throws.
  TurnStatus begin_formatted(const std::vector<int32_t>& tokens, const std::function<void()>& undo,
                             bool score = false);
  // After an exception from a forward pass (an I/O error of the tiers): the cache and the mirror
  // keep the positions both hold, so the next turn works.
  void recover();

  // set_stash: swaps a stashed sequence in, or stashes the cache, for the turn's tokens.
  void use_stash(const std::vector<int32_t>& tokens);
  // format_tokens' text.
  std::string format_text(bool add_assistant) const;
  // A conversation's prompt: the user messages marked when thinking is off and the template asks
  // it (ReasoningStyle::user_no_think), and, with the assistant's opener, the prompt's tail.
  std::string prompt_text(std::span<const ChatMessage> messages, bool add_assistant,
                          bool thinking) const;
  // A turn's prompt ended with a forced call's opening.
  std::string forced_call_text(std::string prompt, std::string_view forced) const;
  // begin_turn / begin_messages: formats the conversation and notes how its reply reasons.
  std::vector<int32_t> format_turn();

  struct Stash {
    std::vector<int32_t> tokens;
    std::vector<std::byte> rows;  // KvCache::copy_rows of tokens.size() positions
  };

  Forward& fwd_;
  const Tokenizer& tok_;
  ChatFamily family_;
  std::string system_;
  Sampler sampler_;
  std::shared_ptr<const JsonSchema> schema_;  // set_json_schema
  std::shared_ptr<const TokenTexts> texts_;   // the vocabulary's bytes, once a schema is used
  ToolCalls tools_;                           // set_tool_calls
  std::vector<int32_t> tool_close_;           // tools_.close's tokens
  int32_t newline_ = -1;                      // "\n"'s token (-1: not one token)
  LookupDecoder lookup_;  // every reply step goes through it; settled between turns
  std::vector<ChatMessage> messages_;
  std::vector<int32_t> kv_tokens_;  // [n_past] mirror of what the cache holds
  // scores_[j]: token kv_tokens_[j] scored after kv_tokens_[0 .. j) (kMaxTopLogprobs kept);
  // valid for j < scores_.size() <= kv_tokens_.size() (empty when no prompt was scored).
  std::vector<TokenScore> scores_;
  std::vector<float> all_logits_;  // prefill_scored's rows
  std::span<const float> logits_;  // [n_vocab] from the last prefill/decode
  bool turn_open_ = false;         // begin_turn succeeded, generate not yet run
  bool adopted_ = false;  // the cache's kept tokens not yet given to the sampler (adopt_kv,
                          // set_sampling)
  TurnStats stats_;
  ReasoningStyle reasoning_;
  std::string default_system_;  // default_system_message of the family's template
  bool split_reasoning_ = true;
  bool thinking_ = true;
  int32_t reasoning_budget_ = -1;                         // set_reasoning_budget
  ReasoningFormat turn_format_ = ReasoningFormat::kNone;  // the open turn's reply's
  bool turn_opened_ = false;   // its prompt ends with <think>: the reply starts in the reasoning
  bool turn_in_call_ = false;  // its prompt ends with <tool_call> (a forced call)
  size_t stash_slots_ = 0;
  std::vector<Stash> stash_;  // most recently used first
};

}  // namespace strata::engine
