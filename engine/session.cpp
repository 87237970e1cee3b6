// ChatSession: conversation + template formatting + common-prefix KV reuse across turns.
// Exercised by tests/test_session.cpp and tests/test_chat_cli.cpp.
#include "engine/session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <utility>

#include "engine/token_constraint.h"
#include "io/check.h"

namespace strata::engine {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A token that opens the reasoning block, or one the answer's constraint allows.
struct OpenOrAnswer final : TokenFilter {
  explicit OpenOrAnswer(int32_t open) : open(open) {}
  bool allows(int32_t id) override { return id == open || answer->allows(id); }
  void mask(std::span<float> logits) override {
    const float keep = logits[size_t(open)];
    answer->mask(logits);
    logits[size_t(open)] = keep;
  }
  int32_t open;
  TokenFilter* answer = nullptr;
};

// After a tool call's close (parallel calls): the end of the turn, or the "\n" before another.
struct EndOrNext final : TokenFilter {
  EndOrNext(const Vocab& v, int32_t newline) : vocab(v), newline(newline) {}
  bool allows(int32_t id) override {
    return id == newline || (id >= 0 && id < vocab.n_tokens() && vocab.is_eog(id));
  }
  void mask(std::span<float> logits) override {
    for (size_t i = 0; i < logits.size(); ++i)
      if (!allows(int32_t(i))) logits[i] = -INFINITY;
  }
  const Vocab& vocab;
  int32_t newline;
};

}  // namespace

std::string_view turn_status_name(TurnStatus s) {
  switch (s) {
    case TurnStatus::kEndOfGeneration:
      return "end of generation";
    case TurnStatus::kMaxTokens:
      return "max tokens";
    case TurnStatus::kInterrupted:
      return "interrupted";
    case TurnStatus::kContextFull:
      return "context full";
    case TurnStatus::kPromptTooLong:
      return "prompt too long";
  }
  return "?";
}

ChatSession::ChatSession(Forward& fwd, const Tokenizer& tok, ChatFamily family,
                         const SamplerParams& sampling, std::string system_prompt,
                         const LookupParams& lookup)
    : fwd_(fwd),
      tok_(tok),
      family_(family),
      system_(std::move(system_prompt)),
      sampler_(sampling),
      lookup_(fwd, lookup),
      reasoning_(engine::reasoning_style(family, tok.vocab(), tok.vocab().chat_template())),
      default_system_(default_system_message(family, tok.vocab().chat_template())) {
  const std::vector<int32_t> nl = tok_.tokenize("\n", false, true);
  newline_ = nl.size() == 1 ? nl[0] : -1;
  reset();
}

void ChatSession::reset() {
  messages_.clear();
  if (!system_.empty()) messages_.push_back({"system", system_});
  fwd_.reset();
  lookup_.settle();
  kv_tokens_.clear();
  scores_.clear();
  stash_ = {};
  sampler_.reset();
  logits_ = {};
  turn_open_ = false;
  adopted_ = false;
  stats_ = {};
}

void ChatSession::adopt_kv(std::span<const int32_t> tokens) {
  STRATA_ASSERT(kv_tokens_.empty() && fwd_.n_past() == tokens.size(),
                "adopt_kv: {} tokens restored, the cache holds {} and the session {}",
                tokens.size(), fwd_.n_past(), kv_tokens_.size());
  kv_tokens_.assign(tokens.begin(), tokens.end());
  scores_.clear();
  lookup_.settle();
  adopted_ = !tokens.empty();
}

void ChatSession::append_message(ChatMessage m) {
  messages_.push_back(std::move(m));
  turn_open_ = false;
}

std::string ChatSession::prompt_text(std::span<const ChatMessage> messages, bool add_assistant,
                                     bool thinking) const {
  std::string text;
  const std::string& suffix = reasoning_.user_no_think;
  const std::string& open = reasoning_.answer_open;
  // MiniMax-M2's template's own system message when the conversation has none (or an empty one).
  const bool no_system = messages.empty() || messages[0].role != "system";
  const bool add_system = !default_system_.empty() && (no_system || messages[0].content.empty());
  if ((!thinking && !suffix.empty()) || !open.empty() || add_system) {
    std::vector<ChatMessage> marked(messages.begin(), messages.end());
    if (add_system && no_system) marked.insert(marked.begin(), {"system", default_system_});
    if (add_system && !no_system) marked[0].content = default_system_;
    for (size_t i = 0; i < marked.size(); ++i) {
      ChatMessage& m = marked[i];
      // GLM's "/nothink" after each user message
      if (!thinking && !suffix.empty() && m.role == "user" && !m.content.ends_with(suffix))
        m.content += suffix;
      // DeepSeek-V3.1's "</think>" before each answer to a user
      if (!open.empty() && m.role == "assistant" && i > 0 && marked[i - 1].role == "user")
        m.content.insert(0, open);
    }
    text = format_chat(family_, marked, add_assistant);
  } else {
    text = format_chat(family_, messages, add_assistant);
  }
  // (After a tool's result the model goes on from it: no tail, as no opener.)
  if (add_assistant && !after_tool_output(family_, messages))
    text = end_prompt(std::move(text), reasoning_.prompt_tail(thinking));
  return text;
}

std::string ChatSession::format_text(bool add_assistant) const {
  return prompt_text(messages_, add_assistant, thinking_);
}

std::vector<int32_t> ChatSession::format_tokens(bool add_assistant) const {
  // parse_special: the template's control strings (<|im_start|>, </s> ...) must become their ids,
  // as llama.cpp's chat tokenizes the formatted prompt.
  return tok_.tokenize(format_text(add_assistant), true, true);
}

std::vector<int32_t> ChatSession::turn_tokens(std::span<const ChatMessage> messages, bool thinking,
                                              std::string_view forced_prompt) const {
  std::string text = prompt_text(messages, true, thinking);
  if (!forced_prompt.empty()) text = forced_call_text(std::move(text), forced_prompt);
  return tok_.tokenize(text, true, true);
}

std::string ChatSession::forced_call_text(std::string prompt, std::string_view forced) const {
  // A prompt that opened the reasoning (think_open) has it closed first: the call comes at once.
  std::string_view end = prompt;
  while (!end.empty() && (end.back() == '\n' || end.back() == ' ')) end.remove_suffix(1);
  if (reasoning_.format == ReasoningFormat::kThinkTags && end.ends_with("<think>")) {
    // (Where the template can turn thinking off, its thinking-off prompt: DeepSeek-V3.1's calls
    // follow "</think>".)
    const std::string& open = reasoning_.think_open;
    if (!reasoning_.no_think.empty() && !open.empty() && prompt.ends_with(open)) {
      prompt = end_prompt(prompt.substr(0, prompt.size() - open.size()), reasoning_.no_think);
    } else {
      prompt += reasoning_.budget_close;
    }
  }
  return prompt += forced;
}

std::vector<int32_t> ChatSession::format_turn() {
  std::string text = format_text(true);
  turn_in_call_ = tools_.forced;
  if (turn_in_call_) text = forced_call_text(std::move(text), tools_.forced_prompt);
  turn_format_ = split_reasoning_ && !turn_in_call_ ? reasoning_.format : ReasoningFormat::kNone;
  std::string_view end = text;
  while (!end.empty() && (end.back() == '\n' || end.back() == ' ')) end.remove_suffix(1);
  turn_opened_ = turn_format_ == ReasoningFormat::kThinkTags && end.ends_with("<think>");
  return tok_.tokenize(text, true, true);
}

namespace {
size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  return size_t(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}
}  // namespace

void ChatSession::set_tool_calls(ToolCalls calls) {
  tools_ = std::move(calls);
  if (!tools_.body) {
    tools_.open = -1;
    tools_.open_text.clear();
  }
  tools_.forced = tools_.forced && tools_.body;
  tool_close_.clear();
  if (tools_.open >= 0) tool_close_ = tok_.tokenize(tools_.close, false, true);
  tools_.parallel = tools_.parallel && tools_.open >= 0 && newline_ >= 0;
}

void ChatSession::set_stash(size_t slots) {
  stash_slots_ = slots;
  if (stash_.size() > slots) stash_.resize(slots);
}

uint64_t ChatSession::stash_bytes() const {
  uint64_t n = 0;
  for (const Stash& s : stash_) n += s.rows.size();
  return n;
}

void ChatSession::use_stash(const std::vector<int32_t>& tokens) {
  const size_t live = common_prefix(kv_tokens_, tokens);
  // A trade copies both row sets: worth it for at least kStashMinDrop more kept positions.
  size_t best = stash_.size(), best_common = live + kStashMinDrop - 1;
  for (size_t i = 0; i < stash_.size(); ++i)
    if (const size_t c = common_prefix(stash_[i].tokens, tokens); c > best_common) {
      best = i;
      best_common = c;
    }
  const size_t drop = kv_tokens_.size() - live;
  const bool trade = best < stash_.size();
  if (!trade && !(drop >= kStashMinDrop && 2 * drop > kv_tokens_.size())) return;
  // The cache's rows leave for the stash (a trade, or a turn that drops most of them).
  Stash out{kv_tokens_, {}};
  fwd_.kv().copy_rows(uint32_t(kv_tokens_.size()), out.rows);
  if (trade) {
    // The stashed sequence comes back.
    Stash in = std::move(stash_[best]);
    stash_.erase(stash_.begin() + ptrdiff_t(best));
    const auto n = uint32_t(in.tokens.size());
    fwd_.kv().restore_rows(n, in.rows);
    fwd_.restored(n);
    kv_tokens_ = std::move(in.tokens);
    scores_.clear();  // the stash keeps no scores
    lookup_.settle();
    // The sampler hears the kept prefix as after set_sampling (serve sets it every request).
    sampler_.reset();
    adopted_ = !kv_tokens_.empty();
    stats_.from_stash = true;
  }
  // A stashed sequence the leaving one extends (an earlier state of it) is worth nothing now.
  std::erase_if(stash_, [&](const Stash& s) {
    return common_prefix(s.tokens, out.tokens) == s.tokens.size();
  });
  if (!out.tokens.empty()) stash_.insert(stash_.begin(), std::move(out));
  if (stash_.size() > stash_slots_) stash_.resize(stash_slots_);
}

void ChatSession::sync_kv(const std::vector<int32_t>& tokens, bool score) {
  STRATA_ASSERT(!tokens.empty(), "empty formatted conversation");
  STRATA_ASSERT(kv_tokens_.size() == fwd_.n_past(), "KV mirror {} != n_past {}", kv_tokens_.size(),
                fwd_.n_past());
  if (stash_slots_ > 0) use_stash(tokens);
  const size_t matched = common_prefix(kv_tokens_, tokens);
  size_t common = matched;
  stats_.n_matched = uint32_t(common);
  // The last token is always run again when everything is cached: its logits start the reply.
  // Scoring, the first token whose score is unknown needs the logits of the position before it.
  const size_t known = std::min(scores_.size(), common);
  common = score ? (known > 0 ? known - 1 : 0) : std::min(common, tokens.size() - 1);
  if (common < kv_tokens_.size()) {
    // Roll the cache back to the common prefix; the differing tail is prefilled again.
    fwd_.truncate(uint32_t(common));
    kv_tokens_.resize(common);
  }
  scores_.resize(std::min(scores_.size(), matched));  // a score holds while its prefix does
  if (adopted_) {
    // The restored prefix kept: the sampler hears it as a fresh session's prefill would.
    for (size_t i = 0; i < common; ++i) sampler_.accept(tokens[i]);
    adopted_ = false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::span<const int32_t> suffix(tokens.data() + common, tokens.size() - common);
  if (score)
    prefill_scored(tokens, common);
  else
    logits_ = fwd_.prefill(suffix);
  lookup_.settle();  // its next step starts at the new end of the cache
  stats_.prefill_s = seconds_since(t0);
  for (int32_t t : suffix) sampler_.accept(t);
  kv_tokens_ = tokens;
  stats_.n_prompt = uint32_t(tokens.size());
  stats_.n_reused = uint32_t(common);
  stats_.n_prefilled = uint32_t(suffix.size());
}

void ChatSession::prefill_scored(const std::vector<int32_t>& tokens, size_t keep) {
  // Rows of logits at a time: at most 128 MiB of them (a 152k vocabulary: 220 rows), at most
  // a prefill chunk.
  const size_t n_vocab = fwd_.model().config().n_vocab;  // a logits row's width
  const size_t rows =
      std::clamp<size_t>((size_t(128) << 20) / (sizeof(float) * n_vocab), 1, fwd_.n_ubatch());
  const size_t n = tokens.size();
  scores_.resize(n);
  scores_[0] = {tokens[0], std::numeric_limits<float>::quiet_NaN(), {}};
  for (size_t start = keep; start < n; start += rows) {
    const size_t len = std::min(rows, n - start);
    all_logits_.resize(len * n_vocab);
    logits_ =
        fwd_.prefill(std::span<const int32_t>(tokens.data() + start, len), all_logits_.data());
    // Position p's logits score token p + 1.
    for (size_t p = start; p < start + len && p + 1 < n; ++p)
      scores_[p + 1] =
          score_token(std::span<const float>(all_logits_.data() + (p - start) * n_vocab, n_vocab),
                      tokens[p + 1], kMaxTopLogprobs);
  }
}

TurnStatus ChatSession::begin_turn(std::string_view user) {
  messages_.push_back({"user", std::string(user)});
  return begin_formatted(format_turn(), [this] { messages_.pop_back(); });
}

TurnStatus ChatSession::begin_messages(std::vector<ChatMessage> messages) {
  std::vector<ChatMessage> before = std::exchange(messages_, std::move(messages));
  return begin_formatted(format_turn(), [&] { messages_ = std::move(before); });
}

TurnStatus ChatSession::begin_text(std::string_view text, bool score_prompt) {
  // As llama.cpp's server tokenizes a completion prompt: BOS as the vocabulary says, and
  // control strings as their ids.
  return begin_tokens(tok_.tokenize(text, true, true), score_prompt);
}

TurnStatus ChatSession::begin_tokens(std::vector<int32_t> tokens, bool score_prompt) {
  if (tokens.empty()) fail(ErrorKind::kBadValue, "the prompt is empty: nothing to continue");
  for (size_t i = 0; i < tokens.size(); ++i)  // before the cache is touched
    if (!tok_.vocab().valid_id(tokens[i]))
      fail(ErrorKind::kBadValue, "prompt token {} (at {}) is not in the vocabulary ({} tokens)",
           tokens[i], i, tok_.vocab().n_tokens());
  std::vector<ChatMessage> before = std::exchange(messages_, {});
  turn_format_ = ReasoningFormat::kNone;
  turn_opened_ = false;
  turn_in_call_ = false;
  return begin_formatted(
      tokens, [&] { messages_ = std::move(before); }, score_prompt);
}

void ChatSession::set_sampling(const SamplerParams& sampling) {
  sampler_ = Sampler(sampling);
  adopted_ = !kv_tokens_.empty();
}

TurnStatus ChatSession::begin_formatted(const std::vector<int32_t>& tokens,
                                        const std::function<void()>& undo, bool score) {
  if (tokens.size() > fwd_.n_ctx()) {
    undo();
    stats_ = {};
    stats_.n_prompt = uint32_t(tokens.size());
    return TurnStatus::kPromptTooLong;
  }
  stats_ = {};
  try {
    sync_kv(tokens, score);
  } catch (...) {
    undo();
    recover();
    throw;
  }
  turn_open_ = true;
  return TurnStatus::kEndOfGeneration;
}

void ChatSession::recover() {
  fwd_.recover();
  lookup_.settle();
  const auto n = uint32_t(std::min<size_t>(kv_tokens_.size(), fwd_.n_past()));
  fwd_.truncate(n);
  kv_tokens_.resize(n);
  scores_.resize(std::min<size_t>(scores_.size(), n));
  lookup_.settle();
  logits_ = {};
  turn_open_ = false;
}

TurnResult ChatSession::generate(int32_t max_tokens, const PieceFn& on_piece,
                                 const std::atomic<bool>* stop) {
  return generate(
      max_tokens,
      [&](std::string_view piece, const TokenScore*) {
        if (on_piece) on_piece(piece);
      },
      stop, -1);
}

TurnResult ChatSession::generate(int32_t max_tokens, const TokenFn& on_token,
                                 const std::atomic<bool>* stop, int top_n) {
  STRATA_ASSERT(turn_open_, "generate() without a successful begin_turn()");
  turn_open_ = false;
  TurnResult r;
  const Vocab& vocab = tok_.vocab();
  const auto t0 = std::chrono::steady_clock::now();
  std::string piece;
  ReasoningSplitter split(turn_format_, turn_opened_);
  std::optional<TokenConstraint> constraint;
  if ((schema_ || tools_.body) && !texts_) texts_ = std::make_shared<const TokenTexts>(tok_);
  if (schema_) constraint.emplace(schema_, texts_);
  // A tool call's body, from the answer's <tool_call> on (set_tool_calls), or from the first
  // token when the prompt opened the call.
  std::unique_ptr<DocumentFilter> call;
  if (turn_in_call_) call = tools_.body(texts_);
  // Tokens the reply takes without sampling (a call's close, the <tool_call> of the next), and
  // whether, once they are in, the model chooses between ending and another call.
  std::vector<int32_t> queue;
  size_t queued = 0;
  bool choosing = false;
  EndOrNext end_or_next(vocab, newline_);
  // Structured output with a thinking model: its reasoning runs free and the schema constrains
  // the answer. Before the reply has opened a reasoning block or begun its answer, a token is
  // either the block's opening or the answer's start (OpenOrAnswer). Needs the opening and
  // closing markers to be single tokens, so the answer starts exactly at a token.
  const bool think_first = constraint && turn_format_ != ReasoningFormat::kNone &&
                           reasoning_.open_token >= 0 && reasoning_.close_token >= 0;
  bool fresh = true;  // the constraint has seen only the answer's tokens
  OpenOrAnswer open_or_answer(reasoning_.open_token);
  for (;;) {
    if (max_tokens >= 0 && int64_t(stats_.n_generated) >= max_tokens) {
      r.status = TurnStatus::kMaxTokens;
      break;
    }
    if (stop && stop->load(std::memory_order_relaxed)) {
      r.status = TurnStatus::kInterrupted;
      break;
    }
    TokenFilter* filter = nullptr;
    const bool given = queued < queue.size();
    int32_t id = -1;
    if (given) {
      id = queue[queued++];
      sampler_.accept(id);
    } else {
      if (call) {
        filter = call.get();
      } else if (choosing) {
        filter = &end_or_next;
      } else if (constraint) {
        if (think_first && !split.answering()) {
          if (split.undecided()) {
            open_or_answer.answer = &*constraint;
            filter = &open_or_answer;
          }
        } else {
          if (!fresh) constraint.emplace(schema_, texts_);  // the answer starts after reasoning
          fresh = true;
          filter = &*constraint;
        }
      }
      const auto t_sample = std::chrono::steady_clock::now();
      id = sampler_.sample(logits_, filter);
      stats_.sample_s += seconds_since(t_sample);
      if (id < 0 || vocab.is_eog(id)) {  // < 0: the schema allows no token of this vocabulary
        r.status = TurnStatus::kEndOfGeneration;
        break;
      }
    }
    const bool constrained = !given && !call && constraint &&
                             (filter == &*constraint || (filter && id != reasoning_.open_token));
    if (call && !given) {
      call->accept(id);
    } else if (constrained) {
      constraint->accept(id);
    } else if (constraint && !given) {
      fresh = false;
    }
    piece.clear();
    tok_.append_piece(piece, id, false);
    r.text += piece;
    split.feed(piece, r.reasoning, r.answer);
    ++stats_.n_generated;
    if (split.reasoning() && !given) {
      ++stats_.n_reasoning;
      if (reasoning_budget_ >= 0 && int64_t(stats_.n_reasoning) >= reasoning_budget_ &&
          !stats_.budget_closed) {  // the budget is spent: the block's close comes next
        queue = tok_.tokenize(reasoning_.budget_close, false, true);
        queued = 0;
        stats_.budget_closed = true;
      }
    }
    if (top_n >= 0) {
      const TokenScore score = score_token(logits_, id, size_t(top_n));
      if (on_token) on_token(piece, &score);
    } else if (on_token) {
      on_token(piece, nullptr);
    }
    if (constrained && constraint->finished()) {  // the document is complete
      r.status = TurnStatus::kEndOfGeneration;
      break;
    }
    if (call && call->finished()) {  // the call is complete: the reply ends, or it is closed
      call.reset();
      if (!tools_.parallel) {
        r.status = TurnStatus::kEndOfGeneration;
        break;
      }
      queue = tool_close_;
      queued = 0;
      choosing = true;
    } else if (choosing && !given) {  // the model wrote "\n": another call
      choosing = false;
      queue = {tools_.open};
      queued = 0;
    } else if (!call && id == tools_.open && !schema_ && split.answering()) {
      call = tools_.body(texts_);
    } else if (!call && !tools_.open_text.empty() && !schema_) {
      // The opening text may end inside this piece: the filter takes what follows it.
      const std::string& o = tools_.open_text;
      const size_t from = r.text.size() - piece.size();
      const size_t at = r.text.find(o, from >= o.size() ? from - o.size() + 1 : 0);
      const size_t start = at == std::string::npos ? 0 : r.text.rfind(tools_.header_start, at);
      const size_t header = start == std::string::npos ? 0 : start;
      if (at != std::string::npos &&
          std::string_view(r.text).substr(header, at - header).find(tools_.header_end) ==
              std::string_view::npos) {
        call = tools_.body(texts_);
        if (!call->feed_text(std::string_view(r.text).substr(at + o.size()))) call.reset();
      }
    }
    // The sampled token is kept in the reply; it is not run (its K/V would need a position), so
    // the next turn prefills it with the rest of the new suffix.
    if (max_tokens >= 0 && int64_t(stats_.n_generated) >= max_tokens) {
      r.status = TurnStatus::kMaxTokens;
      break;
    }
    if (lookup_.n_past() >= fwd_.n_ctx()) {
      r.status = TurnStatus::kContextFull;
      break;
    }
    kv_tokens_.push_back(id);
    try {
      logits_ = lookup_.decode(id, kv_tokens_);
    } catch (...) {
      recover();  // the reply so far is dropped with the exception
      throw;
    }
  }
  // Drafted positions the reply did not use leave the cache: it mirrors kv_tokens_ again.
  lookup_.settle();
  stats_.decode_s = seconds_since(t0);
  split.finish(r.reasoning, r.answer);
  messages_.push_back({"assistant", r.answer});
  r.stats = stats_;
  return r;
}

TurnResult ChatSession::send(std::string_view user, int32_t max_tokens, const PieceFn& on_piece,
                             const std::atomic<bool>* stop) {
  if (begin_turn(user) == TurnStatus::kPromptTooLong) {
    TurnResult r;
    r.status = TurnStatus::kPromptTooLong;
    r.stats = stats_;
    return r;
  }
  return generate(max_tokens, on_piece, stop);
}

}  // namespace strata::engine
