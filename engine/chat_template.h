// Chat formatting the way llama.cpp's llama_chat_apply_template does it: the Jinja template in
// tokenizer.chat_template is not run; its family is recognised by substrings and a built-in
// formatter writes the prompt. Exercised by tests/test_chat_template.cpp and the `chat` cases
// of tests/test_tokenizer.cpp.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::engine {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

// llama.cpp's built-in formats (llm_chat_template); chat_family_name gives the override name.
enum class ChatFamily {
  kChatml,
  kLlama2,
  kLlama2Sys,
  kLlama2SysBos,
  kLlama2SysStrip,
  kMistralV1,
  kMistralV3,
  kMistralV3Tekken,
  kMistralV7,
  kMistralV7Tekken,
  kPhi3,
  kPhi4,
  kFalcon3,
  kZephyr,
  kMonarch,
  kGemma,
  kOrion,
  kOpenchat,
  kVicuna,
  kVicunaOrca,
  kDeepseek,
  kDeepseek2,
  kDeepseek3,
  kCommandR,
  kLlama3,
  kChatglm3,
  kChatglm4,
  kGlmEdge,
  kMinicpm,
  kExaone3,
  kExaone4,
  kRwkvWorld,
  kGranite,
  kGigachat,
  kMegrez,
  kYandex,
  kBailing,
  kBailingThink,
  kBailing2,
  kLlama4,
  kSmolvlm,
  kDots1,
  kHunyuanMoe,
  kGptOss,
  kHunyuanDense,
  kKimiK2,
  kSeedOss,
  kGrok2,
  kMinimaxM2,  // strata's own (llama.cpp runs MiniMax-M2's template only as Jinja)
  kErnie45,    // strata's own (ERNIE 4.5's template: llama.cpp has no built-in format for it)
};

std::string_view chat_family_name(ChatFamily f);
std::optional<ChatFamily> chat_family_from_name(std::string_view name);
// Every accepted override name, comma-separated (for error messages and --help).
std::string chat_family_names();

// llm_chat_detect_template: a family name, else the first substring rule that matches the Jinja
// text; nullopt when none does.
std::optional<ChatFamily> detect_chat_family(std::string_view tmpl);
// The same, but an unrecognised template throws strata::Error (kUnsupported) saying so and
// listing the names a --chat-template override accepts.
ChatFamily chat_family_for_template(std::string_view tmpl);
// What `--chat-template NAME` asks for, else the model's template (chat_family_for_template); an
// unknown name is Error(kBadValue) listing the accepted ones.
ChatFamily chat_family_choice(std::string_view override_name, std::string_view model_template);

// Whether the next message follows a tool's result that the model goes on from: DeepSeek-V3's
// format writes no assistant opener after one (deepseek3, the last message a tool's).
bool after_tool_output(ChatFamily family, std::span<const ChatMessage> msgs);

// A Jinja string literal whose opening quote is s[quote_at]: its value with \n, \t, \r and \<c>
// resolved; *end (when given) is its closing quote's index, s.size() when it is not closed.
std::string jinja_string(std::string_view s, size_t quote_at, size_t* end = nullptr);

// The system message a family's template writes when the conversation has none, read from the
// template: MiniMax-M2's model_identity; empty for the others (llama.cpp's formats write none).
std::string default_system_message(ChatFamily family, std::string_view chat_template);

// The prompt for msgs; add_assistant appends the assistant turn opener (add_generation_prompt).
std::string format_chat(ChatFamily family, std::span<const ChatMessage> msgs, bool add_assistant);
// With an explicit family name (--chat-template NAME); an unknown name throws strata::Error.
std::string format_chat(std::string_view family_name, std::span<const ChatMessage> msgs,
                        bool add_assistant);

}  // namespace strata::engine
