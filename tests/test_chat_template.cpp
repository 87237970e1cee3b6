// Chat template detection and the built-in formatters (engine/chat_template), checked against
// the prompts llama.cpp's llama_chat_apply_template produced for the fixture templates (inline,
// and from every fixture ref.json when the fixtures are present).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "io/check.h"

namespace strata::engine {
namespace {

namespace fs = std::filesystem;

const std::vector<ChatMessage> kConversation = {
    {"system", "You are a helpful assistant."},
    {"user", "Hello!"},
    {"assistant", "Hi there. How can I help?"},
    {"user", "What is 2+2?"},
};

struct Case {
  const char* name;
  std::string tmpl;
  ChatFamily family;
  std::string formatted;  // add_assistant = true
};

// The fixtures' embedded templates and llama.cpp's output for kConversation.
std::vector<Case> fixture_cases() {
  return {
      {"qwen3moe",
       "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
       "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
       "%}{{ '<|im_start|>assistant\\n' }}{% endif %}",
       ChatFamily::kChatml,
       "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|"
       "im_end|>\n<|im_start|>assistant\nHi there. How can I help?<|im_end|>\n<|im_start|>user\n"
       "What is 2+2?<|im_end|>\n<|im_start|>assistant\n"},
      {"mixtral",
       "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] "
       "' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
       "message['content'] + eos_token }}{% endif %}{% endfor %}",
       ChatFamily::kLlama2,
       "[INST] You are a helpful assistant.\nHello! [/INST]Hi there. How can I help?</s>[INST] "
       "What is 2+2? [/INST]"},
      {"deepseek2",
       "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ "
       "message['content'] + '\\n\\n' }}{% elif message['role'] == 'user' %}{{ "
       "'<\xef\xbd\x9cUser\xef\xbd\x9c>' + message['content'] }}{% elif message['role'] == "
       "'assistant' %}{{ '<\xef\xbd\x9c"
       "Assistant\xef\xbd\x9c>' + message['content'] + "
       "'<\xef\xbd\x9c"
       "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>' }}{% endif %}{% endfor "
       "%}{% if add_generation_prompt %}{{ '<\xef\xbd\x9c"
       "Assistant\xef\xbd\x9c>' }}{% endif %}",
       ChatFamily::kDeepseek3,
       "You are a helpful assistant.\n\n<\xef\xbd\x9cUser\xef\xbd\x9c>Hello!<\xef\xbd\x9c"
       "Assistant\xef\xbd\x9c>Hi there. How can I help?<\xef\xbd\x9c"
       "end\xe2\x96\x81of\xe2\x96\x81"
       "sentence\xef\xbd\x9c><\xef\xbd\x9cUser\xef\xbd\x9c>What is 2+2?<\xef\xbd\x9c"
       "Assistant\xef\xbd\x9c>"},
      {"glm4moe",
       "[gMASK]<sop>{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] }}{% "
       "endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}",
       ChatFamily::kChatglm4,
       "[gMASK]<sop><|system|>\nYou are a helpful assistant.<|user|>\nHello!<|assistant|>\nHi "
       "there. How can I help?<|user|>\nWhat is 2+2?<|assistant|>\n"},
      {"olmoe",
       "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ "
       "'<|system|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'user' %}{{ "
       "'<|user|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'assistant' %}{{ "
       "'<|assistant|>\\n' + message['content'] + eos_token + '\\n' }}{% endif %}{% if loop.last "
       "and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}",
       ChatFamily::kGlmEdge,
       "<|system|>\nYou are a helpful assistant.<|user|>\nHello!<|assistant|>\nHi there. How can "
       "I help?<|user|>\nWhat is 2+2?<|assistant|>"},
      {"gpt-oss",
       "{%- for message in messages -%}{%- if message['role'] == 'assistant' -%}{{ "
       "'<|start|>assistant<|channel|>final<|message|>' + message['content'] + '<|end|>' }}{%- "
       "else -%}{{ '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' "
       "}}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|start|>assistant' }}{%- "
       "endif -%}",
       ChatFamily::kGptOss,
       "<|start|>system<|message|>You are a helpful assistant.<|end|><|start|>user<|message|>"
       "Hello!<|end|><|start|>assistant<|message|>Hi there. How can I help?<|return|><|start|>"
       "user<|message|>What is 2+2?<|end|><|start|>assistant"},
  };
}

TEST(ChatTemplate, DetectsAndFormatsFixtureTemplates) {
  for (const Case& c : fixture_cases()) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(detect_chat_family(c.tmpl), c.family)
        << "got " << chat_family_name(*detect_chat_family(c.tmpl));
    EXPECT_EQ(format_chat(c.family, kConversation, true), c.formatted);
  }
}

TEST(ChatTemplate, MatchesEveryFixtureReference) {
  const fs::path root = STRATA_FIXTURES_DIR;
  if (!fs::is_directory(root)) GTEST_SKIP() << "no fixtures at " << root;
  int n = 0;
  for (const auto& model : fs::directory_iterator(root)) {
    if (!fs::is_directory(model.path() / "ref")) continue;
    for (const auto& variant : fs::directory_iterator(model.path() / "ref")) {
      const fs::path p = variant.path() / "ref.json";
      if (!fs::exists(p)) continue;
      SCOPED_TRACE(p.string());
      std::ifstream in(p);
      const nlohmann::json chat = nlohmann::json::parse(in).at("chat");
      std::vector<ChatMessage> msgs;
      for (const auto& m : chat.at("conversation")) {
        msgs.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
      }
      const ChatFamily f = chat_family_for_template(chat.at("template").get<std::string>());
      EXPECT_EQ(format_chat(f, msgs, true), chat.at("formatted").get<std::string>());
      ++n;
    }
  }
  EXPECT_GT(n, 0);
}

TEST(ChatTemplate, NamesAreOverrides) {
  for (const char* name : {"chatml", "llama3", "mistral-v7", "deepseek3", "gpt-oss", "glmedge"}) {
    const auto f = chat_family_from_name(name);
    ASSERT_TRUE(f.has_value()) << name;
    EXPECT_EQ(chat_family_name(*f), name);
    EXPECT_EQ(detect_chat_family(name), f);  // a bare name is accepted as a template
  }
  EXPECT_EQ(format_chat("llama3", kConversation, true),
            "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
            "assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|><|"
            "start_header_id|>assistant<|end_header_id|>\n\nHi there. How can I "
            "help?<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is "
            "2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, UnknownNameAndTemplateAreErrorsListingNames) {
  try {
    (void)format_chat("no-such-template", kConversation, true);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chatml"), std::string::npos) << e.what();
  }
  try {
    (void)chat_family_for_template("{{ messages }} something custom");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unrecognised chat template"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gpt-oss"), std::string::npos) << msg;
  }
  EXPECT_THROW((void)chat_family_for_template(""), Error);
}

TEST(ChatTemplate, MistralVariants) {
  EXPECT_EQ(detect_chat_family("{{ ' [INST] ' + system_message }} [INST]"), ChatFamily::kMistralV1);
  EXPECT_EQ(detect_chat_family("[AVAILABLE_TOOLS][INST]"), ChatFamily::kMistralV3);
  EXPECT_EQ(detect_chat_family("[AVAILABLE_TOOLS]\"[INST]\""), ChatFamily::kMistralV3Tekken);
  EXPECT_EQ(detect_chat_family("[SYSTEM_PROMPT] [INST]"), ChatFamily::kMistralV7);
  EXPECT_EQ(detect_chat_family("<<SYS>> [INST]"), ChatFamily::kLlama2Sys);
  EXPECT_EQ(detect_chat_family("bos_token + '[INST]"), ChatFamily::kLlama2SysBos);
  EXPECT_EQ(detect_chat_family("[INST] content.strip()"), ChatFamily::kLlama2SysStrip);
  EXPECT_EQ(format_chat(ChatFamily::kMistralV1, kConversation, true),
            " [INST] You are a helpful assistant.\n\nHello! [/INST] Hi there. How can I "
            "help?</s> [INST] What is 2+2? [/INST]");
  EXPECT_EQ(format_chat(ChatFamily::kMistralV7, kConversation, true),
            "[SYSTEM_PROMPT] You are a helpful assistant.[/SYSTEM_PROMPT][INST] Hello![/INST] Hi "
            "there. How can I help?</s>[INST] What is 2+2?[/INST]");
}

// Grok-2's (llama.cpp's grok-2 format and the line it detects in the model's Jinja template):
// user and system text trimmed, each turn closed by <|separator|> and a blank line.
TEST(ChatTemplate, Grok2) {
  EXPECT_EQ(detect_chat_family("{%- for message in messages %}{{ 'Assistant: '  + "
                               "message['content'] + '<|separator|>\n\n' }}{%- endfor %}"),
            ChatFamily::kGrok2);
  EXPECT_EQ(chat_family_from_name("grok-2"), ChatFamily::kGrok2);
  const std::vector<ChatMessage> conv = {{"system", " Be brief. "},
                                         {"user", "Hello!\n"},
                                         {"assistant", " Hi. "},
                                         {"tool", "ignored"},
                                         {"user", "2+2?"}};
  EXPECT_EQ(format_chat(ChatFamily::kGrok2, conv, true),
            "System: Be brief.<|separator|>\n\nHuman: Hello!<|separator|>\n\nAssistant:  Hi. "
            "<|separator|>\n\nHuman: 2+2?<|separator|>\n\nAssistant:");
  EXPECT_EQ(format_chat(ChatFamily::kGrok2, conv, false) + "Assistant:",
            format_chat(ChatFamily::kGrok2, conv, true));
}

// MiniMax-M2's (strata's own format: llama.cpp runs its template only as Jinja): the turns as its
// template, run by Jinja on this conversation, wrote them (the tool call's own text is the tool
// format's); later system messages left out; the template's default system message read from it.
TEST(ChatTemplate, MinimaxM2) {
  const std::string tmpl =
      "{%- set model_identity = \"You are a helpful assistant. Your name is MiniMax-M2.1 and is "
      "built by MiniMax.\" -%}{{- ']~!b[' ~ ']~b]system' ~ '\\n' }}{{- ']~b]ai' ~ '\\n' }}";
  EXPECT_EQ(detect_chat_family(tmpl), ChatFamily::kMinimaxM2);
  EXPECT_EQ(chat_family_from_name("minimax-m2"), ChatFamily::kMinimaxM2);
  EXPECT_EQ(default_system_message(ChatFamily::kMinimaxM2, tmpl),
            "You are a helpful assistant. Your name is MiniMax-M2.1 and is built by MiniMax.");
  EXPECT_EQ(default_system_message(ChatFamily::kMinimaxM2, "set model_identity = 'A \\'b\\''"),
            "A 'b'");
  EXPECT_EQ(default_system_message(ChatFamily::kMinimaxM2, "]~!b["), "");
  EXPECT_EQ(default_system_message(ChatFamily::kChatml, tmpl), "");
  const std::vector<ChatMessage> conv = {
      {"system", "Be brief."}, {"user", "Hi"},       {"assistant", "Hello."},
      {"system", "ignored"},   {"user", "Weather?"}, {"assistant", "Checking."},
      {"tool", "sunny"},       {"tool", "warm"},     {"assistant", "Sunny."}};
  EXPECT_EQ(format_chat(ChatFamily::kMinimaxM2, conv, true),
            "]~!b[]~b]system\nBe brief.[e~[\n]~b]user\nHi[e~[\n]~b]ai\nHello.[e~[\n]~b]user\n"
            "Weather?[e~[\n]~b]ai\nChecking.[e~[\n]~b]tool\n<response>sunny</response>\n"
            "<response>warm</response>[e~[\n]~b]ai\nSunny.[e~[\n]~b]ai\n");
  EXPECT_EQ(format_chat(ChatFamily::kMinimaxM2, {}, false), "]~!b[]~b]system\n[e~[\n");
}

// ERNIE 4.5's (strata's own format: llama.cpp has no built-in one): its template's turns, system
// text first after <|begin_of_sentence|>, "User: …\n", "Assistant: …<|end_of_sentence|>".
TEST(ChatTemplate, Ernie45) {
  const std::string tmpl =
      "{%- if not cls_token is defined -%}{%- set cls_token = \"<|begin_of_sentence|>\" -%}"
      "{%- endif -%}{{- cls_token -}}{%- for message in messages -%}{%- if message[\"role\"] == "
      "\"user\" -%}{{- \"User: \" + message[\"content\"] + \"\n\" -}}{%- elif "
      "message[\"role\"] == \"assistant\" -%}{{- \"Assistant: \" + message[\"content\"] + "
      "sep_token -}}{%- endif -%}{%- endfor -%}";
  EXPECT_EQ(detect_chat_family(tmpl), ChatFamily::kErnie45);
  EXPECT_EQ(detect_chat_family("'<|begin_of_sentence|>' ... 'Assistant: ' + content"),
            ChatFamily::kErnie45);
  EXPECT_EQ(chat_family_from_name("ernie4.5"), ChatFamily::kErnie45);
  const std::vector<ChatMessage> conv = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "2+2?"}};
  EXPECT_EQ(format_chat(ChatFamily::kErnie45, conv, true),
            "<|begin_of_sentence|>Be brief.\nUser: Hi\nAssistant: Hello.<|end_of_sentence|>User: "
            "2+2?\nAssistant: ");
  EXPECT_EQ(format_chat(ChatFamily::kErnie45, conv, false) + "Assistant: ",
            format_chat(ChatFamily::kErnie45, conv, true));
}

// Ling's and Ring's (llama.cpp's bailing-think and bailing2): Ring's prompt opens the
// reasoning; Ling 2.0's closes each turn with <|role_end|> and, with no system message, writes
// its own "detailed thinking off".
TEST(ChatTemplate, BailingThinkAndBailing2) {
  EXPECT_EQ(detect_chat_family("<role>ASSISTANT</role> {% if role == \"HUMAN\" %} <think>"),
            ChatFamily::kBailingThink);
  EXPECT_EQ(detect_chat_family("<role>HUMAN</role> ... <role>ASSISTANT</role> ... <|role_end|>"),
            ChatFamily::kBailing2);
  EXPECT_EQ(chat_family_from_name("bailing-think"), ChatFamily::kBailingThink);
  EXPECT_EQ(chat_family_from_name("bailing2"), ChatFamily::kBailing2);
  const std::vector<ChatMessage> conv = {{"user", "Hi"}, {"assistant", "Hello."}, {"user", "2+2?"}};
  EXPECT_EQ(format_chat(ChatFamily::kBailingThink, conv, true),
            "<role>HUMAN</role>Hi<role>ASSISTANT</role>Hello.<role>HUMAN</role>2+2?"
            "<role>ASSISTANT</role><think>");
  EXPECT_EQ(format_chat(ChatFamily::kBailing2, conv, true),
            "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Hi<|role_end|>"
            "<role>ASSISTANT</role>Hello.<|role_end|><role>HUMAN</role>2+2?<|role_end|>"
            "<role>ASSISTANT</role>");
  EXPECT_EQ(format_chat(ChatFamily::kBailing2,
                        std::vector<ChatMessage>{{"system", "Be brief."}, {"user", "Hi"}}, false),
            "<role>SYSTEM</role>Be brief.<|role_end|><role>HUMAN</role>Hi<|role_end|>");
}

TEST(ChatTemplate, GenerationPromptIsOptional) {
  const std::string with = format_chat(ChatFamily::kChatml, kConversation, true);
  const std::string without = format_chat(ChatFamily::kChatml, kConversation, false);
  EXPECT_EQ(with, without + "<|im_start|>assistant\n");
}

}  // namespace
}  // namespace strata::engine
