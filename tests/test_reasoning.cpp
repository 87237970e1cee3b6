// Thinking models' replies split into reasoning and answer (engine/reasoning.h): <think> tags
// and harmony channels, fed whole, byte by byte and in random pieces (the same parts every
// time); the no-think text of real templates' enable_thinking switches.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/reasoning.h"

using namespace strata::engine;

namespace {

struct Parts {
  std::string reasoning, answer;
  bool operator==(const Parts&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Parts& p) {
  return os << "{reasoning '" << p.reasoning << "', answer '" << p.answer << "'}";
}

// The reply fed in pieces ending at the given cuts.
Parts split(ReasoningFormat f, std::string_view reply, const std::vector<size_t>& cuts,
            bool open = false) {
  ReasoningSplitter s(f, open);
  Parts p;
  size_t at = 0;
  for (size_t c : cuts) {
    s.feed(reply.substr(at, c - at), p.reasoning, p.answer);
    at = c;
  }
  s.feed(reply.substr(at), p.reasoning, p.answer);
  s.finish(p.reasoning, p.answer);
  return p;
}

// Every way of feeding the reply gives `want`: whole, byte by byte, every single cut, and random
// pieces.
void expect_split(ReasoningFormat f, std::string_view reply, const Parts& want, bool open = false) {
  EXPECT_EQ(split(f, reply, {}, open), want) << "whole: " << reply;
  std::vector<size_t> bytes;
  for (size_t i = 1; i < reply.size(); ++i) bytes.push_back(i);
  EXPECT_EQ(split(f, reply, bytes, open), want) << "byte by byte: " << reply;
  for (size_t i = 1; i < reply.size(); ++i)
    EXPECT_EQ(split(f, reply, {i}, open), want) << "cut at " << i << ": " << reply;
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < reply.size(); ++i)
      if (rng() % 4 == 0) cuts.push_back(i);
    EXPECT_EQ(split(f, reply, cuts, open), want) << "random round " << round << ": " << reply;
  }
}

constexpr auto kThink = ReasoningFormat::kThinkTags;
constexpr auto kHarmony = ReasoningFormat::kHarmony;

TEST(Reasoning, ThinkTags) {
  expect_split(kThink, "<think>\nFirst, 2+2.\nIt is 4.\n</think>\n\nThe answer is 4.",
               {"First, 2+2.\nIt is 4.", "The answer is 4."});
  // Leading whitespace before the block; an empty block (Qwen3 with thinking off writes none,
  // but a model may).
  expect_split(kThink, "\n <think>why</think>yes", {"why", "yes"});
  expect_split(kThink, "<think>\n\n</think>\n\nHi", {"", "Hi"});
  // No block at the start: all answer, as written (a <think> later on is text).
  expect_split(kThink, "Hello <think>x</think> there", {"", "Hello <think>x</think> there"});
  expect_split(kThink, "  <thinking>no</thinking>", {"", "  <thinking>no</thinking>"});
  expect_split(kThink, "<thi", {"", "<thi"});
  expect_split(kThink, "", {"", ""});
  expect_split(kThink, " \n", {"", " \n"});
  // Cut inside the reasoning (max_tokens): all reasoning, a partial closing tag included.
  expect_split(kThink, "<think>still going </thi", {"still going </thi", ""});
  expect_split(kThink, "<think>a < b and </ or </thinker>", {"a < b and </ or </thinker>", ""});
  // Inner whitespace stays; the reasoning's ends are trimmed.
  expect_split(kThink, "<think> a \n\n b  </think>  c  ", {"a \n\n b", "c  "});
}

TEST(Reasoning, OpenedByThePrompt) {
  // DeepSeek-R1's template ends the generation prompt with <think>: the reply starts inside.
  expect_split(kThink, "\nreason</think>\n\nanswer", {"reason", "answer"}, true);
  expect_split(kThink, "never closed", {"never closed", ""}, true);
  // Harmony has no such state: `open` is ignored there.
  expect_split(kHarmony, "plain", {"", "plain"}, true);
}

TEST(Reasoning, Harmony) {
  // gpt-oss as rendered: <|end|> is a control token (not in the text), <|start|>, <|channel|>,
  // <|message|> are.
  expect_split(kHarmony,
               "<|channel|>analysis<|message|>User greets. Reply.<|start|>assistant<|channel|>"
               "final<|message|>Hello!",
               {"User greets. Reply.", "Hello!"});
  // With <|end|> rendered, and whitespace between messages.
  expect_split(kHarmony,
               "<|channel|>analysis<|message|>A<|end|>\n<|start|>assistant<|channel|>final "
               "<|message|>B",
               {"A", "B"});
  // Two analysis messages; a commentary message is answer (not reasoning).
  expect_split(kHarmony,
               "<|channel|>analysis<|message|>x<|start|>assistant<|channel|>analysis<|message|>y"
               "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json"
               "<|message|>{}",
               {"xy", "{}"});
  // Straight to the final channel; a header naming no channel.
  expect_split(kHarmony, "<|channel|>final<|message|>ok", {"", "ok"});
  expect_split(kHarmony, "<|start|>assistant<|message|>ok", {"", "ok"});
  // Not harmony at all: the reply as written.
  expect_split(kHarmony, "Just text <|channel|>", {"", "Just text <|channel|>"});
  // A thinking budget's close (ReasoningStyle::budget_close) as the reply renders it (<|end|>
  // not shown) ends the analysis and opens the final message.
  expect_split(kHarmony,
               "<|channel|>analysis<|message|>half a thou<|start|>assistant<|channel|>final"
               "<|message|>Answer.",
               {"half a thou", "Answer."});
  // Cut inside the analysis, inside a header.
  expect_split(kHarmony, "<|channel|>analysis<|message|>thinking <|sta", {"thinking <|sta", ""});
  expect_split(kHarmony, "<|channel|>analysis<|message|>a<|start|>assistant<|chan", {"a", ""});
}

TEST(Reasoning, NoneIsAllAnswer) {
  expect_split(ReasoningFormat::kNone, "<think>x</think>y", {"", "<think>x</think>y"});
}

TEST(Reasoning, AnsweringFlipsAtTheClosingMarker) {
  ReasoningSplitter s(kThink);
  std::string r, a;
  EXPECT_FALSE(s.answering());
  s.feed("<think>", r, a);
  EXPECT_TRUE(s.reasoning());
  EXPECT_FALSE(s.answering());
  s.feed("hmm\n", r, a);
  s.feed("</think>", r, a);
  EXPECT_TRUE(s.answering());
  EXPECT_EQ(r, "hmm");
  EXPECT_EQ(s.reasoning_bytes(), 3u);
  s.feed("\n\n{", r, a);
  EXPECT_EQ(a, "{");

  ReasoningSplitter h(kHarmony);
  for (std::string_view piece : {"<|channel|>", "analysis", "<|message|>", "x", "<|start|>",
                                 "assistant", "<|channel|>", "final"}) {
    h.feed(piece, r, a);
    EXPECT_FALSE(h.answering()) << piece;
  }
  h.feed("<|message|>", r, a);
  EXPECT_TRUE(h.answering());

  // A reply that does not open a block is answering from its first non-space byte.
  ReasoningSplitter n(kThink);
  n.feed("\n", r, a);
  EXPECT_FALSE(n.answering());
  n.feed("{", r, a);
  EXPECT_TRUE(n.answering());
}

// What the generation prompt opens the reasoning with, thinking on.
TEST(Reasoning, ThinkOpenText) {
  // Qwen3-Thinking-2507 and QwQ: the prompt's own literal.
  EXPECT_EQ(think_open_text("{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n"
                            "<think>\\n' }}\n{%- endif %}"),
            "<think>\n");
  // MiniMax-M2: the literals of the prompt's expression, joined.
  EXPECT_EQ(think_open_text("{#- Generation prompt -#}\n{%- if add_generation_prompt -%}\n"
                            "{{- ']~b]ai' ~ '\\n' ~ '<think>' ~ \"\\n\" }}\n{%- endif -%}"),
            "<think>\n");
  // DeepSeek-V3.1: the else branch of its thinking-off test.
  EXPECT_EQ(think_open_text("{%- if add_generation_prompt -%}{{'<｜Assistant｜>'}}{%- if not "
                            "thinking -%}{{'</think>'}}{%- else -%}{{'<think>'}}{%- endif -%}"
                            "{%- endif %}"),
            "<think>");
  // Qwen3's hybrid template opens nothing; GLM's literal closes its block; an else branch with
  // no <think>; no template.
  EXPECT_EQ(think_open_text("{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                            "{%- if enable_thinking is defined and enable_thinking is false %}"
                            "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"),
            "");
  EXPECT_EQ(think_open_text("{%- if add_generation_prompt -%}<|assistant|>{{- '\\n<think></think>' "
                            "if (enable_thinking is defined and not enable_thinking) else '' -}}"
                            "{%- endif -%}"),
            "");
  EXPECT_EQ(think_open_text("{% if not enable_thinking %}{{ 'a' }}{% else %}{{ 'b' }}{% endif %}"),
            "");
  EXPECT_EQ(think_open_text(""), "");
  EXPECT_EQ(think_open_text("{% if add_generation_prompt %}{{ '<think>"), "");
}

TEST(Reasoning, NoThinkText) {
  // Qwen3's template (the generation prompt's end).
  EXPECT_EQ(no_think_text("{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n"
                          "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
                          "        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}\n"
                          "{%- endif %}"),
            "<think>\n\n</think>\n\n");
  // `not enable_thinking`, double quotes, escaped quote.
  EXPECT_EQ(no_think_text("{{- '<|assistant|>' -}}{%- if not enable_thinking -%}"
                          "{{- \"\\n<think></think>\" -}}{%- endif -%}"),
            "\n<think></think>");
  EXPECT_EQ(no_think_text("{% if enable_thinking == false %}{{ 'it\\'s off' }}{% endif %}"),
            "it's off");
  // GLM-4.5's: inline ifs, one in the user turns ('/nothink'), the generation prompt's after
  // add_generation_prompt.
  const std::string glm =
      "{%- if m.role == 'user' -%}<|user|>\n{{ m.content }}\n{{- '/nothink' if (enable_thinking "
      "is defined and not enable_thinking and not m.content.endswith(\"/nothink\")) else '' -}}"
      "{%- endif -%}{%- if add_generation_prompt -%}\n    <|assistant|>{{- '\\n<think></think>' "
      "if (enable_thinking is defined and not enable_thinking) else '' -}}\n{%- endif -%}";
  EXPECT_EQ(no_think_text(glm), "\n<think></think>");
  EXPECT_EQ(user_no_think_text(glm), "/nothink");
  // Without the generation prompt's test: the first.
  EXPECT_EQ(no_think_text(glm.substr(0, glm.find("{%- if add_generation_prompt"))), "/nothink");
  // An inline expression whose literal is not before its if: none.
  EXPECT_EQ(no_think_text("{{ x if not enable_thinking else 'y' }}"), "");
  // DeepSeek-V3.1's: its `thinking` (set from enable_thinking), an else branch.
  const std::string v31 =
      "{%- if add_generation_prompt and ns.is_last_user and not ns.is_tool "
      "-%}{{'<｜Assistant｜>'}}\n"
      "  {%- if not thinking -%}{{'</think>'}}\n    {%- else -%}{{'<think>'}}\n  {%- endif -%}\n"
      "{%- endif %}";
  EXPECT_EQ(no_think_text(v31), "</think>");
  EXPECT_EQ(user_no_think_text(v31), "");
  EXPECT_EQ(user_no_think_text(glm.substr(0, glm.find("{%- if add_generation_prompt"))), "");
  EXPECT_EQ(no_think_text("{% if not thinking_mode %}{{ 'x' }}{% endif %}"), "");
  // The no-think text after the prompt: a leading newline joins the prompt's own.
  EXPECT_EQ(end_prompt("<|assistant|>\n", "\n<think></think>"), "<|assistant|>\n<think></think>");
  EXPECT_EQ(end_prompt("<|assistant|>", "\n<think></think>"), "<|assistant|>\n<think></think>");
  EXPECT_EQ(end_prompt("a\n", "<think>\n\n</think>\n\n"), "a\n<think>\n\n</think>\n\n");
  // "not enable_thinking is defined" is not the switch; a branch that writes nothing first is
  // not one either.
  EXPECT_EQ(no_think_text("{%- if not enable_thinking is defined %}{{ 'x' }}{% endif %}"), "");
  EXPECT_EQ(no_think_text("{% if not enable_thinking %}{% set y = 1 %}{{ 'x' }}{% endif %}"), "");
  EXPECT_EQ(no_think_text("{% for m in messages %}{{ m.content }}{% endfor %}"), "");
  EXPECT_EQ(no_think_text(""), "");
  // Unterminated pieces of template do not read past the end.
  EXPECT_EQ(no_think_text("{% if not enable_thinking"), "");
  EXPECT_EQ(no_think_text("{% if not enable_thinking %}{{ 'abc"), "");
}

}  // namespace
