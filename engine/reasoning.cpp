// Thinking models' replies: reasoning apart from the answer (reasoning.h).
#include "engine/reasoning.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <initializer_list>
#include <optional>
#include <vector>

#include "engine/vocab.h"

namespace strata::engine {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kEnd = "<|end|>";

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

size_t first_non_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

std::string_view rtrim(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The length of the longest tail of s that is a proper prefix of one of the markers: bytes to
// hold back until the next piece says whether a marker starts there.
size_t partial_marker(std::string_view s, std::initializer_list<std::string_view> markers) {
  size_t best = 0;
  for (std::string_view m : markers)
    for (size_t k = std::min(s.size(), m.size() - 1); k > best; --k)
      if (s.substr(s.size() - k) == m.substr(0, k)) {
        best = k;
        break;
      }
  return best;
}

// A harmony header's channel: the word after its last <|channel|>, else its first word
// ("assistant" when a header names no channel).
std::string_view header_channel(std::string_view header) {
  if (const size_t c = header.rfind(kChannel); c != std::string_view::npos)
    header.remove_prefix(c + kChannel.size());
  header.remove_prefix(first_non_space(header));
  size_t n = 0;
  while (n < header.size() && !is_space(header[n]) && header[n] != '<') ++n;
  return header.substr(0, n);
}

// The string literals of an expression, joined (MiniMax-M2's ']~b]ai' ~ '\n' ~ '<think>' ~ '\n').
std::string joined_literals(std::string_view expr) {
  std::string out;
  for (size_t q = expr.find_first_of("'\""); q != std::string_view::npos;
       q = expr.find_first_of("'\"", q + 1))
    out += jinja_string(expr, q, &q);
  return out;
}

}  // namespace

std::string_view reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::kNone:
      return "none";
    case ReasoningFormat::kThinkTags:
      return "<think> tags";
    case ReasoningFormat::kHarmony:
      return "harmony channels";
  }
  return "?";
}

namespace {

// The first string literal of the `{{ ... }}` after position `from` (a tag's end), when no other
// tag comes first; *end: where that expression ends.
std::optional<std::string> branch_literal(std::string_view tmpl, size_t from, size_t* end) {
  const size_t expr = tmpl.find("{{", from);
  const size_t next_tag = tmpl.find("{%", from);
  if (expr == std::string_view::npos || (next_tag != std::string_view::npos && next_tag < expr))
    return std::nullopt;
  const size_t expr_end = tmpl.find("}}", expr);
  if (expr_end == std::string_view::npos) return std::nullopt;
  const std::string_view body = tmpl.substr(expr, expr_end - expr);
  const size_t q = body.find_first_of("'\"");
  if (q == std::string_view::npos) return std::nullopt;
  *end = expr_end;
  return jinja_string(body, q);
}

// A test of thinking being off and what it writes.
struct NoThinkTest {
  size_t at = 0;
  bool inline_if = false;  // 'X' if (test) else '' (else an `{% if %}` tag)
  size_t branch_end = 0;   // the tag form: where its branch's expression ends
  std::string text;
};

// The literal a test of thinking being off at `at` writes: the first of the `{{ ... }}` its
// `{% if %}` branch opens with, or, inside an expression, the one before its inline `if`
// ('X' if (... not enable_thinking) else ''). nullopt: neither.
std::optional<NoThinkTest> no_think_branch(std::string_view tmpl, size_t at) {
  const size_t open_expr = tmpl.rfind("{{", at);
  const size_t close_expr = tmpl.rfind("}}", at);
  const size_t open_tag = tmpl.rfind("{%", at);
  if (open_expr != std::string_view::npos &&
      (close_expr == std::string_view::npos || close_expr < open_expr) &&
      (open_tag == std::string_view::npos || open_tag < open_expr)) {
    std::string_view expr = tmpl.substr(open_expr + 2, at - open_expr - 2);
    if (!expr.empty() && expr[0] == '-') expr.remove_prefix(1);
    expr.remove_prefix(first_non_space(expr));
    if (expr.empty() || (expr[0] != '\'' && expr[0] != '"')) return std::nullopt;
    const size_t end = expr.find(expr[0], 1);
    if (end == std::string_view::npos) return std::nullopt;
    std::string_view rest = expr.substr(end + 1);
    rest.remove_prefix(first_non_space(rest));
    if (!rest.starts_with("if")) return std::nullopt;
    return NoThinkTest{at, true, 0, jinja_string(expr, 0)};
  }
  const size_t tag_end = tmpl.find("%}", at);
  if (tag_end == std::string_view::npos) return std::nullopt;
  size_t branch_end = 0;
  std::optional<std::string> text = branch_literal(tmpl, tag_end, &branch_end);
  if (!text) return std::nullopt;
  return NoThinkTest{at, false, branch_end, std::move(*text)};
}

// The template's tests of thinking being off (enable_thinking, or DeepSeek-V3.1's `thinking`
// set from it) that write something, in the template's order ("not enable_thinking is defined"
// asks something else).
std::vector<NoThinkTest> no_think_tests(std::string_view tmpl) {
  std::vector<size_t> at;
  for (std::string_view test : {"enable_thinking is false", "not enable_thinking",
                                "enable_thinking == false", "not thinking"}) {
    for (size_t p = tmpl.find(test); p != std::string_view::npos; p = tmpl.find(test, p + 1)) {
      const std::string_view after = tmpl.substr(p + test.size());
      const bool word_ends = after.empty() || !(std::isalnum(uint8_t(after[0])) || after[0] == '_');
      if (word_ends && !after.substr(first_non_space(after)).starts_with("is defined"))
        at.push_back(p);
    }
  }
  std::sort(at.begin(), at.end());
  std::vector<NoThinkTest> tests;
  for (const size_t p : at)
    if (std::optional<NoThinkTest> t = no_think_branch(tmpl, p)) tests.push_back(std::move(*t));
  return tests;
}

// The generation prompt's: the first after the template's last mention of add_generation_prompt
// (GLM's template also tests it in its user turns), else the first.
std::optional<NoThinkTest> no_think_test(std::string_view tmpl) {
  const size_t prompt = tmpl.rfind("add_generation_prompt");
  std::vector<NoThinkTest> tests = no_think_tests(tmpl);
  for (NoThinkTest& t : tests)
    if (prompt != std::string_view::npos && t.at > prompt) return std::move(t);
  if (tests.empty()) return std::nullopt;
  return std::move(tests.front());
}

// The `<think>` opening in `text` with what follows it, when no `</think>` closes it there.
std::string opening_in(std::string_view text) {
  const size_t open = text.find(kThinkOpen);
  if (open == std::string_view::npos) return {};
  text.remove_prefix(open);
  return text.find(kThinkClose) == std::string_view::npos ? std::string(text) : std::string();
}

}  // namespace

std::string no_think_text(std::string_view tmpl) {
  std::optional<NoThinkTest> t = no_think_test(tmpl);
  return t ? std::move(t->text) : std::string();
}

std::string user_no_think_text(std::string_view tmpl) {
  const std::optional<NoThinkTest> prompt_test = no_think_test(tmpl);
  for (const NoThinkTest& t : no_think_tests(tmpl)) {
    if (!t.inline_if || (prompt_test && t.at == prompt_test->at)) continue;
    if (t.text.empty() || t.text.find("think>") != std::string::npos) continue;
    return t.text;
  }
  return {};
}

std::string think_open_text(std::string_view tmpl) {
  // The generation prompt's own text (Qwen3-Thinking-2507, QwQ:
  // '<|im_start|>assistant\n<think>\n'; MiniMax-M2's ']~b]ai' ~ '\n' ~ '<think>' ~ '\n').
  if (const size_t p = tmpl.rfind("add_generation_prompt"); p != std::string_view::npos) {
    const size_t expr = tmpl.find("{{", p);
    const size_t expr_end = expr == std::string_view::npos ? expr : tmpl.find("}}", expr);
    if (expr_end != std::string_view::npos) {
      const std::string_view body = tmpl.substr(expr, expr_end - expr);
      if (std::string open = opening_in(joined_literals(body)); !open.empty()) return open;
    }
  }
  // The thinking-off test's else branch (DeepSeek-V3.1: {% if not thinking %}'</think>'{% else
  // %}'<think>').
  const std::optional<NoThinkTest> t = no_think_test(tmpl);
  if (!t || t->inline_if) return {};
  const size_t tag = tmpl.find("{%", t->branch_end);
  const size_t tag_end = tag == std::string_view::npos ? tag : tmpl.find("%}", tag);
  if (tag_end == std::string_view::npos) return {};
  std::string_view words = tmpl.substr(tag + 2, tag_end - tag - 2);
  while (!words.empty() && (words.front() == '-' || is_space(words.front())))
    words.remove_prefix(1);
  while (!words.empty() && (words.back() == '-' || is_space(words.back()))) words.remove_suffix(1);
  if (words != "else") return {};
  size_t end = 0;
  const std::optional<std::string> text = branch_literal(tmpl, tag_end, &end);
  return text ? opening_in(*text) : std::string();
}

std::string end_prompt(std::string prompt, std::string_view tail) {
  if (tail.starts_with('\n') && prompt.ends_with('\n')) tail.remove_prefix(1);
  return prompt += tail;
}

ReasoningStyle reasoning_style(ChatFamily family, const Vocab& vocab,
                               std::string_view chat_template) {
  ReasoningStyle s;
  const auto one_token = [&](std::string_view text) {
    const int32_t id = vocab.text_to_token(text);
    return id == kNoToken ? -1 : id;
  };
  if (family == ChatFamily::kGptOss) {
    s.format = ReasoningFormat::kHarmony;
    s.open_token = one_token(kChannel);
    s.close_token = one_token(kMessage);
    s.budget_close = "<|end|><|start|>assistant<|channel|>final<|message|>";
    return s;
  }
  s.open_token = one_token(kThinkOpen);
  s.close_token = one_token(kThinkClose);
  if (s.open_token < 0 || s.close_token < 0) return ReasoningStyle{};
  s.format = ReasoningFormat::kThinkTags;
  s.no_think = no_think_text(chat_template);
  s.user_no_think = user_no_think_text(chat_template);
  s.think_open = think_open_text(chat_template);
  // DeepSeek-V3.1's template opens each earlier answer with "</think>" (its thinking was dropped).
  if (family == ChatFamily::kDeepseek3 &&
      chat_template.find("<｜Assistant｜></think>") != std::string_view::npos)
    s.answer_open = "</think>";
  s.budget_close = "\n</think>\n\n";
  return s;
}

ReasoningSplitter::ReasoningSplitter(ReasoningFormat format, bool open) : format_(format) {
  if (format == ReasoningFormat::kNone) {
    state_ = State::kAnswer;
  } else if (open && format == ReasoningFormat::kThinkTags) {
    state_ = State::kReasoning;
    trim_ = true;
  }
}

void ReasoningSplitter::emit(std::string_view s, bool to_reasoning, std::string& reasoning,
                             std::string& answer) {
  if (trim_) {
    s.remove_prefix(first_non_space(s));
    if (s.empty()) return;
    trim_ = false;
  }
  if (to_reasoning) {
    reasoning += s;
    n_reasoning_ += s.size();
  } else {
    answer += s;
  }
}

void ReasoningSplitter::feed(std::string_view piece, std::string& reasoning, std::string& answer) {
  pending_ += piece;
  step(reasoning, answer, false);
}

void ReasoningSplitter::finish(std::string& reasoning, std::string& answer) {
  step(reasoning, answer, true);
}

void ReasoningSplitter::step(std::string& reasoning, std::string& answer, bool last) {
  for (;;) {
    const std::string_view p = pending_;
    switch (state_) {
      case State::kStart:
      case State::kHarmonyBetween: {
        const size_t i = first_non_space(p);
        const std::string_view rest = p.substr(i);
        if (rest.empty() && !last) return;
        const std::array<std::string_view, 2> openers = format_ == ReasoningFormat::kHarmony
                                                            ? std::array{kChannel, kStart}
                                                            : std::array{kThinkOpen, kThinkOpen};
        bool opened = false;
        for (std::string_view m : openers)
          if (rest.starts_with(m)) {
            pending_.erase(0, i + m.size());
            header_.clear();
            state_ =
                format_ == ReasoningFormat::kHarmony ? State::kHarmonyHeader : State::kReasoning;
            trim_ = state_ == State::kReasoning;
            opened = true;
            break;
          }
        if (opened) continue;
        if (!last && std::any_of(openers.begin(), openers.end(),
                                 [&](std::string_view m) { return m.starts_with(rest); }))
          return;  // the opening may still come
        // No reasoning here: the rest is the answer, as written.
        state_ = state_ == State::kStart ? State::kAnswer : State::kHarmonyAnswer;
        continue;
      }
      case State::kReasoning: {
        if (const size_t c = p.find(kThinkClose); c != std::string_view::npos) {
          emit(rtrim(p.substr(0, c)), true, reasoning, answer);
          pending_.erase(0, c + kThinkClose.size());
          state_ = State::kAnswer;
          trim_ = true;
          continue;
        }
        // Hold back a partial </think> and the whitespace before it (the reasoning's end is
        // trimmed).
        const size_t keep = last ? p.size() : p.size() - partial_marker(p, {kThinkClose});
        const std::string_view out = rtrim(p.substr(0, keep));
        emit(out, true, reasoning, answer);
        pending_.erase(0, last ? p.size() : out.size());
        return;
      }
      case State::kAnswer:
        emit(p, false, reasoning, answer);
        pending_.clear();
        return;
      case State::kHarmonyHeader: {
        const size_t m = p.find(kMessage);
        if (m == std::string_view::npos) {
          const size_t keep = last ? 0 : partial_marker(p, {kMessage});
          header_ += p.substr(0, p.size() - keep);
          pending_.erase(0, p.size() - keep);
          return;  // (a reply that ends inside a header writes nothing of it)
        }
        header_ += p.substr(0, m);
        pending_.erase(0, m + kMessage.size());
        state_ =
            header_channel(header_) == "analysis" ? State::kHarmonyBody : State::kHarmonyAnswer;
        continue;
      }
      case State::kHarmonyBody:
      case State::kHarmonyAnswer: {
        const bool to_reasoning = state_ == State::kHarmonyBody;
        size_t at = std::string_view::npos;
        std::string_view marker;
        for (std::string_view m : {kStart, kChannel, kEnd})
          if (const size_t f = p.find(m); f < at) {
            at = f;
            marker = m;
          }
        if (at == std::string_view::npos) {
          const size_t keep = last ? 0 : partial_marker(p, {kStart, kChannel, kEnd});
          emit(p.substr(0, p.size() - keep), to_reasoning, reasoning, answer);
          pending_.erase(0, p.size() - keep);
          return;
        }
        emit(p.substr(0, at), to_reasoning, reasoning, answer);
        pending_.erase(0, at + marker.size());
        header_.clear();
        state_ = marker == kEnd ? State::kHarmonyBetween : State::kHarmonyHeader;
        continue;
      }
    }
  }
}

}  // namespace strata::engine
