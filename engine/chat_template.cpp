// Chat family detection and the built-in formatters, following llama.cpp's src/llama-chat.cpp
// rule for rule (see chat_template.h). Exercised by tests/test_chat_template.cpp.
#include "engine/chat_template.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

#include "io/check.h"

namespace strata::engine {

namespace {

constexpr std::array<std::pair<std::string_view, ChatFamily>, 50> kNames = {{
    {"chatml", ChatFamily::kChatml},
    {"llama2", ChatFamily::kLlama2},
    {"llama2-sys", ChatFamily::kLlama2Sys},
    {"llama2-sys-bos", ChatFamily::kLlama2SysBos},
    {"llama2-sys-strip", ChatFamily::kLlama2SysStrip},
    {"mistral-v1", ChatFamily::kMistralV1},
    {"mistral-v3", ChatFamily::kMistralV3},
    {"mistral-v3-tekken", ChatFamily::kMistralV3Tekken},
    {"mistral-v7", ChatFamily::kMistralV7},
    {"mistral-v7-tekken", ChatFamily::kMistralV7Tekken},
    {"phi3", ChatFamily::kPhi3},
    {"phi4", ChatFamily::kPhi4},
    {"falcon3", ChatFamily::kFalcon3},
    {"zephyr", ChatFamily::kZephyr},
    {"monarch", ChatFamily::kMonarch},
    {"gemma", ChatFamily::kGemma},
    {"orion", ChatFamily::kOrion},
    {"openchat", ChatFamily::kOpenchat},
    {"vicuna", ChatFamily::kVicuna},
    {"vicuna-orca", ChatFamily::kVicunaOrca},
    {"deepseek", ChatFamily::kDeepseek},
    {"deepseek2", ChatFamily::kDeepseek2},
    {"deepseek3", ChatFamily::kDeepseek3},
    {"command-r", ChatFamily::kCommandR},
    {"llama3", ChatFamily::kLlama3},
    {"chatglm3", ChatFamily::kChatglm3},
    {"chatglm4", ChatFamily::kChatglm4},
    {"glmedge", ChatFamily::kGlmEdge},
    {"minicpm", ChatFamily::kMinicpm},
    {"exaone3", ChatFamily::kExaone3},
    {"exaone4", ChatFamily::kExaone4},
    {"rwkv-world", ChatFamily::kRwkvWorld},
    {"granite", ChatFamily::kGranite},
    {"gigachat", ChatFamily::kGigachat},
    {"megrez", ChatFamily::kMegrez},
    {"yandex", ChatFamily::kYandex},
    {"bailing", ChatFamily::kBailing},
    {"bailing-think", ChatFamily::kBailingThink},
    {"bailing2", ChatFamily::kBailing2},
    {"llama4", ChatFamily::kLlama4},
    {"smolvlm", ChatFamily::kSmolvlm},
    {"dots1", ChatFamily::kDots1},
    {"hunyuan-moe", ChatFamily::kHunyuanMoe},
    {"gpt-oss", ChatFamily::kGptOss},
    {"hunyuan-dense", ChatFamily::kHunyuanDense},
    {"kimi-k2", ChatFamily::kKimiK2},
    {"seed_oss", ChatFamily::kSeedOss},
    {"grok-2", ChatFamily::kGrok2},
    {"minimax-m2", ChatFamily::kMinimaxM2},
    {"ernie4.5", ChatFamily::kErnie45},
}};

// Leading and trailing C-locale whitespace removed (llama-chat.cpp's trim).
std::string trim(std::string_view s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// Fullwidth-bar DeepSeek / Hunyuan markers.
constexpr std::string_view kDsUser = "<\xef\xbd\x9cUser\xef\xbd\x9c>";
constexpr std::string_view kDsAssistant =
    "<\xef\xbd\x9c"
    "Assistant\xef\xbd\x9c>";
constexpr std::string_view kDsEos =
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
constexpr std::string_view kHyAssistant = "<\xef\xbd\x9chy_Assistant\xef\xbd\x9c>";
constexpr std::string_view kHyUser = "<\xef\xbd\x9chy_User\xef\xbd\x9c>";
constexpr std::string_view kHyHolder2 =
    "<\xef\xbd\x9chy_place\xe2\x96\x81holder\xe2\x96\x81no\xe2\x96\x81"
    "2\xef\xbd\x9c>";
constexpr std::string_view kHyHolder3 =
    "<\xef\xbd\x9chy_place\xe2\x96\x81holder\xe2\x96\x81no\xe2\x96\x81"
    "3\xef\xbd\x9c>";
constexpr std::string_view kMinicpmUser = "<\xe7\x94\xa8\xe6\x88\xb7>";  // <用户>

}  // namespace

std::string_view chat_family_name(ChatFamily f) {
  for (const auto& [name, family] : kNames) {
    if (family == f) return name;
  }
  return "?";
}

std::optional<ChatFamily> chat_family_from_name(std::string_view name) {
  for (const auto& [n, family] : kNames) {
    if (n == name) return family;
  }
  return std::nullopt;
}

std::string chat_family_names() {
  std::string out;
  for (const auto& entry : kNames) {
    if (!out.empty()) out += ", ";
    out += entry.first;
  }
  return out;
}

std::optional<ChatFamily> detect_chat_family(std::string_view tmpl) {
  if (const auto f = chat_family_from_name(tmpl)) return f;
  const auto has = [&](std::string_view s) { return tmpl.find(s) != std::string_view::npos; };
  using F = ChatFamily;
  if (has("<|im_start|>")) {
    if (has("<|im_sep|>")) return F::kPhi4;
    if (has("<end_of_utterance>")) return F::kSmolvlm;  // <|im_start|> as BOS, not chatml
    return F::kChatml;
  }
  if (tmpl.starts_with("mistral") || has("[INST]")) {
    if (has("[SYSTEM_PROMPT]")) return F::kMistralV7;
    if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
      if (has(" [INST]")) return F::kMistralV1;
      if (has("\"[INST]\"")) return F::kMistralV3Tekken;
      return F::kMistralV3;
    }
    if (has("content.strip()")) return F::kLlama2SysStrip;
    if (has("bos_token + '[INST]")) return F::kLlama2SysBos;
    if (has("<<SYS>>")) return F::kLlama2Sys;
    return F::kLlama2;
  }
  if (has("<|assistant|>") && has("<|end|>")) return F::kPhi3;
  if (has("[gMASK]<sop>")) return F::kChatglm4;
  if (has("<|assistant|>") && has("<|user|>")) return has("</s>") ? F::kFalcon3 : F::kGlmEdge;
  if (has("<|{{ item['role'] }}|>") && has("<|begin_of_image|>")) return F::kGlmEdge;
  if (has("<|user|>") && has("<|endoftext|>")) return F::kZephyr;
  if (has("bos_token + message['role']")) return F::kMonarch;
  if (has("<start_of_turn>")) return F::kGemma;
  if (has("'\\n\\nAssistant: ' + eos_token")) return F::kOrion;
  if (has("GPT4 Correct ")) return F::kOpenchat;
  if (has("USER: ") && has("ASSISTANT: ")) return has("SYSTEM: ") ? F::kVicunaOrca : F::kVicuna;
  if (has("### Instruction:") && has("<|EOT|>")) return F::kDeepseek;
  if (has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>")) return F::kCommandR;
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return F::kLlama3;
  if (has("[gMASK]sop")) return F::kChatglm3;
  if (has(kMinicpmUser)) return F::kMinicpm;
  if (has("'Assistant: ' + message['content'] + eos_token")) return F::kDeepseek2;
  if (has(kDsAssistant) && has(kDsUser) && has(kDsEos)) return F::kDeepseek3;
  if (has("[|system|]") && has("[|assistant|]") && has("[|endofturn|]")) {
    return has("[|tool|]") ? F::kExaone4 : F::kExaone3;
  }
  if (has("rwkv-world") || has("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}")) {
    return F::kRwkvWorld;
  }
  if (has("<|start_of_role|>")) return F::kGranite;
  if (has("message['role'] + additional_special_tokens[0] + message['content'] + "
          "additional_special_tokens[1]")) {
    return F::kGigachat;
  }
  if (has("<|role_start|>")) return F::kMegrez;
  if (has(" \xd0\x90\xd1\x81\xd1\x81\xd0\xb8\xd1\x81\xd1\x82\xd0\xb5\xd0\xbd\xd1\x82:")) {
    return F::kYandex;  // " Ассистент:"
  }
  if (has("<role>ASSISTANT</role>") && has("'HUMAN'")) return F::kBailing;
  if (has("<role>ASSISTANT</role>") && has("\"HUMAN\"") && has("<think>")) return F::kBailingThink;
  if (has("<role>ASSISTANT</role>") && has("<role>HUMAN</role>") && has("<|role_end|>"))
    return F::kBailing2;
  if (has("<|header_start|>") && has("<|header_end|>")) return F::kLlama4;
  if (has("<|endofuserprompt|>")) return F::kDots1;
  if (has("<|extra_0|>") && has("<|extra_4|>")) return F::kHunyuanMoe;
  if (has("<|start|>") && has("<|channel|>")) return F::kGptOss;
  if (has(kHyAssistant) && has(kHyHolder3)) return F::kHunyuanDense;
  if (has("<|im_assistant|>assistant<|im_middle|>")) return F::kKimiK2;
  if (has("<seed:bos>")) return F::kSeedOss;
  if (has("'Assistant: '  + message['content'] + '<|separator|>")) return F::kGrok2;
  if (has("]~!b[") && has("]~b]ai")) return F::kMinimaxM2;  // (strata's: llama.cpp has none)
  if (has("<|begin_of_sentence|>") && has("Assistant: ")) return F::kErnie45;  // (strata's)
  return std::nullopt;
}

ChatFamily chat_family_choice(std::string_view override_name, std::string_view model_template) {
  if (override_name.empty()) return chat_family_for_template(model_template);
  const auto f = chat_family_from_name(override_name);
  if (!f)
    fail(ErrorKind::kBadValue, "--chat-template: unknown name '{}'; accepted: {}", override_name,
         chat_family_names());
  return *f;
}

ChatFamily chat_family_for_template(std::string_view tmpl) {
  if (const auto f = detect_chat_family(tmpl)) return *f;
  if (tmpl.empty()) {
    fail(ErrorKind::kUnsupported,
         "the model has no chat template (tokenizer.chat_template); choose one with "
         "--chat-template NAME, one of: {}",
         chat_family_names());
  }
  fail(ErrorKind::kUnsupported,
       "unrecognised chat template (tokenizer.chat_template, {} bytes, starts '{}'); choose a "
       "built-in one with --chat-template NAME, one of: {}",
       tmpl.size(), tmpl.substr(0, 40), chat_family_names());
}

std::string format_chat(std::string_view family_name, std::span<const ChatMessage> msgs,
                        bool add_assistant) {
  const auto f = chat_family_from_name(family_name);
  if (!f) {
    fail(ErrorKind::kBadValue, "unknown chat template name '{}'; accepted: {}", family_name,
         chat_family_names());
  }
  return format_chat(*f, msgs, add_assistant);
}

bool after_tool_output(ChatFamily family, std::span<const ChatMessage> msgs) {
  return family == ChatFamily::kDeepseek3 && !msgs.empty() && msgs.back().role == "tool";
}

std::string format_chat(ChatFamily family, std::span<const ChatMessage> msgs, bool add_assistant) {
  std::string ss;
  using F = ChatFamily;
  switch (family) {
    case F::kChatml:
      for (const ChatMessage& m : msgs) {
        ss += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      }
      if (add_assistant) ss += "<|im_start|>assistant\n";
      break;
    case F::kMistralV7:
    case F::kMistralV7Tekken: {
      const std::string sp = family == F::kMistralV7 ? " " : "";
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss += "[SYSTEM_PROMPT]" + sp + m.content + "[/SYSTEM_PROMPT]";
        } else if (m.role == "user") {
          ss += "[INST]" + sp + m.content + "[/INST]";
        } else {
          ss += sp + m.content + "</s>";
        }
      }
      break;
    }
    case F::kMistralV1:
    case F::kMistralV3:
    case F::kMistralV3Tekken: {
      const std::string leading = family == F::kMistralV1 ? " " : "";
      const std::string trailing = family == F::kMistralV3Tekken ? "" : " ";
      const bool trim_assistant = family == F::kMistralV3;
      bool inside_turn = false;
      for (const ChatMessage& m : msgs) {
        if (!inside_turn) {
          ss += leading + "[INST]" + trailing;
          inside_turn = true;
        }
        if (m.role == "system") {
          ss += m.content + "\n\n";
        } else if (m.role == "user") {
          ss += m.content + leading + "[/INST]";
        } else {
          ss += trailing + (trim_assistant ? trim(m.content) : m.content) + "</s>";
          inside_turn = false;
        }
      }
      break;
    }
    case F::kLlama2:
    case F::kLlama2Sys:
    case F::kLlama2SysBos:
    case F::kLlama2SysStrip: {
      const bool system_block = family != F::kLlama2;
      const bool bos_inside = family == F::kLlama2SysBos;
      const bool strip = family == F::kLlama2SysStrip;
      bool inside_turn = true;  // no BOS text at the start
      ss += "[INST] ";
      for (const ChatMessage& m : msgs) {
        const std::string content = strip ? trim(m.content) : m.content;
        if (!inside_turn) {
          inside_turn = true;
          ss += bos_inside ? "<s>[INST] " : "[INST] ";
        }
        if (m.role == "system") {
          // Without <<SYS>> support the system text still opens the first user turn.
          ss += system_block ? "<<SYS>>\n" + content + "\n<</SYS>>\n\n" : content + "\n";
        } else if (m.role == "user") {
          ss += content + " [/INST]";
        } else {
          ss += content + "</s>";
          inside_turn = false;
        }
      }
      break;
    }
    case F::kPhi3:
      for (const ChatMessage& m : msgs) ss += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
      if (add_assistant) ss += "<|assistant|>\n";
      break;
    case F::kPhi4:
      for (const ChatMessage& m : msgs) {
        ss += "<|im_start|>" + m.role + "<|im_sep|>" + m.content + "<|im_end|>";
      }
      if (add_assistant) ss += "<|im_start|>assistant<|im_sep|>";
      break;
    case F::kFalcon3:
      for (const ChatMessage& m : msgs) ss += "<|" + m.role + "|>\n" + m.content + "\n";
      if (add_assistant) ss += "<|assistant|>\n";
      break;
    case F::kZephyr:
      for (const ChatMessage& m : msgs) {
        ss += "<|" + m.role + "|>\n" + m.content + "<|endoftext|>\n";
      }
      if (add_assistant) ss += "<|assistant|>\n";
      break;
    case F::kMonarch:
      for (size_t i = 0; i < msgs.size(); ++i) {
        ss += (i == 0 ? "" : "<s>") + msgs[i].role + "\n" + msgs[i].content + "</s>\n";
      }
      if (add_assistant) ss += "<s>assistant\n";
      break;
    case F::kGemma: {
      std::string system_prompt;
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          system_prompt += trim(m.content);
          continue;
        }
        const std::string role = m.role == "assistant" ? "model" : m.role;
        ss += "<start_of_turn>" + role + "\n";
        if (!system_prompt.empty() && role != "model") {
          ss += system_prompt + "\n\n";
          system_prompt.clear();
        }
        ss += trim(m.content) + "<end_of_turn>\n";
      }
      if (add_assistant) ss += "<start_of_turn>model\n";
      break;
    }
    case F::kOrion: {
      std::string system_prompt;
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          system_prompt += m.content;
        } else if (m.role == "user") {
          ss += "Human: ";
          if (!system_prompt.empty()) {
            ss += system_prompt + "\n\n";
            system_prompt.clear();
          }
          ss += m.content + "\n\nAssistant: </s>";
        } else {
          ss += m.content + "</s>";
        }
      }
      break;
    }
    case F::kOpenchat:
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss += m.content + "<|end_of_turn|>";
        } else {
          std::string role = m.role;
          if (!role.empty()) role[0] = static_cast<char>(std::toupper(role[0]));
          ss += "GPT4 Correct " + role + ": " + m.content + "<|end_of_turn|>";
        }
      }
      if (add_assistant) ss += "GPT4 Correct Assistant:";
      break;
    case F::kVicuna:
    case F::kVicunaOrca:
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss += family == F::kVicunaOrca ? "SYSTEM: " + m.content + "\n" : m.content + "\n\n";
        } else if (m.role == "user") {
          ss += "USER: " + m.content + "\n";
        } else if (m.role == "assistant") {
          ss += "ASSISTANT: " + m.content + "</s>\n";
        }
      }
      if (add_assistant) ss += "ASSISTANT:";
      break;
    case F::kDeepseek:
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss += m.content;
        } else if (m.role == "user") {
          ss += "### Instruction:\n" + m.content + "\n";
        } else if (m.role == "assistant") {
          ss += "### Response:\n" + m.content + "\n<|EOT|>\n";
        }
      }
      if (add_assistant) ss += "### Response:\n";
      break;
    case F::kCommandR:
      for (const ChatMessage& m : msgs) {
        const char* who = m.role == "system"      ? "<|SYSTEM_TOKEN|>"
                          : m.role == "user"      ? "<|USER_TOKEN|>"
                          : m.role == "assistant" ? "<|CHATBOT_TOKEN|>"
                                                  : nullptr;
        if (who)
          ss += std::string("<|START_OF_TURN_TOKEN|>") + who + trim(m.content) +
                "<|END_OF_TURN_TOKEN|>";
      }
      if (add_assistant) ss += "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>";
      break;
    case F::kLlama3:
      for (const ChatMessage& m : msgs) {
        ss += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) +
              "<|eot_id|>";
      }
      if (add_assistant) ss += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case F::kChatglm3:
      ss += "[gMASK]sop";
      for (const ChatMessage& m : msgs) ss += "<|" + m.role + "|>\n " + m.content;
      if (add_assistant) ss += "<|assistant|>";
      break;
    case F::kChatglm4:
      ss += "[gMASK]<sop>";
      for (const ChatMessage& m : msgs) ss += "<|" + m.role + "|>\n" + m.content;
      if (add_assistant) ss += "<|assistant|>\n";
      break;
    case F::kGlmEdge:
      // No newline after the content and no EOS; the generation prompt has no newline either.
      for (const ChatMessage& m : msgs) ss += "<|" + m.role + "|>\n" + m.content;
      if (add_assistant) ss += "<|assistant|>";
      break;
    case F::kMinicpm:
      for (const ChatMessage& m : msgs) {
        if (m.role == "user") {
          ss += std::string(kMinicpmUser) + trim(m.content) + "<AI>";
        } else {
          ss += trim(m.content);
        }
      }
      break;
    case F::kDeepseek2:
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss += m.content + "\n\n";
        } else if (m.role == "user") {
          ss += "User: " + m.content + "\n\n";
        } else if (m.role == "assistant") {
          ss += "Assistant: " + m.content + std::string(kDsEos);
        }
      }
      if (add_assistant) ss += "Assistant:";
      break;
    case F::kDeepseek3: {
      // (Tool results as DeepSeek-V3.1's template writes them: the model goes on after one, with
      // no assistant opener.)
      bool after_tool = false;
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss += m.content + "\n\n";
        } else if (m.role == "user") {
          ss += std::string(kDsUser) + m.content;
        } else if (m.role == "assistant") {
          if (!after_tool) ss += kDsAssistant;
          ss += m.content + std::string(kDsEos);
        } else if (m.role == "tool") {
          ss += "<｜tool▁output▁begin｜>" + m.content + "<｜tool▁output▁end｜>";
        }
        after_tool = m.role == "tool";
      }
      if (add_assistant && !after_tool) ss += kDsAssistant;
      break;
    }
    case F::kExaone3:
    case F::kExaone4:
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss += "[|system|]" + trim(m.content) + "[|endofturn|]\n";
        } else if (m.role == "user") {
          ss += "[|user|]" + trim(m.content) + "\n";
        } else if (m.role == "assistant") {
          ss += "[|assistant|]" + trim(m.content) + "[|endofturn|]\n";
        } else if (m.role == "tool" && family == F::kExaone4) {
          ss += "[|tool|]" + trim(m.content) + "[|endofturn|]\n";
        }
      }
      if (add_assistant) ss += "[|assistant|]";
      break;
    case F::kRwkvWorld:
      for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (m.role == "system") {
          ss += "System: " + trim(m.content) + "\n\n";
        } else if (m.role == "user") {
          ss += "User: " + trim(m.content) + "\n\n";
          if (i + 1 == msgs.size()) ss += "Assistant:";
        } else if (m.role == "assistant") {
          ss += "Assistant: " + trim(m.content) + "\n\n";
        }
      }
      break;
    case F::kGranite:
      for (const ChatMessage& m : msgs) {
        ss += "<|start_of_role|>" + m.role + "<|end_of_role|>";
        if (m.role == "assistant_tool_call") ss += "<|tool_call|>";
        ss += m.content + "<|end_of_text|>\n";
      }
      if (add_assistant) ss += "<|start_of_role|>assistant<|end_of_role|>\n";
      break;
    case F::kGigachat: {
      const bool has_system = !msgs.empty() && msgs[0].role == "system";
      ss += has_system ? "<s>" + msgs[0].content + "<|message_sep|>" : "<s>";
      for (size_t i = has_system ? 1 : 0; i < msgs.size(); ++i) {
        if (msgs[i].role == "user") {
          ss += "user<|role_sep|>" + msgs[i].content +
                "<|message_sep|>available functions<|role_sep|>[]<|message_sep|>";
        } else if (msgs[i].role == "assistant") {
          ss += "assistant<|role_sep|>" + msgs[i].content + "<|message_sep|>";
        }
      }
      if (add_assistant) ss += "assistant<|role_sep|>";
      break;
    }
    case F::kMegrez:
      for (const ChatMessage& m : msgs) {
        ss += "<|role_start|>" + m.role + "<|role_end|>" + m.content + "<|turn_end|>";
      }
      if (add_assistant) ss += "<|role_start|>assistant<|role_end|>";
      break;
    case F::kYandex: {
      // " Пользователь: " / " Ассистент: "
      const std::string user =
          " \xd0\x9f\xd0\xbe\xd0\xbb\xd1\x8c\xd0\xb7\xd0\xbe\xd0\xb2\xd0\xb0\xd1\x82\xd0\xb5\xd0"
          "\xbb"
          "\xd1\x8c: ";
      const std::string assistant =
          " \xd0\x90\xd1\x81\xd1\x81\xd0\xb8\xd1\x81\xd1\x82\xd0\xb5\xd0\xbd\xd1\x82:";
      for (const ChatMessage& m : msgs) {
        if (m.role == "user") {
          ss += user + m.content + "\n\n";
        } else if (m.role == "assistant") {
          ss += assistant + " " + m.content + "\n\n";
        }
      }
      if (add_assistant) ss += assistant + "[SEP]";
      break;
    }
    case F::kBailing:
    case F::kBailingThink:
    case F::kBailing2: {
      // (Ling 2.0's: a default system turn, each turn closed by <|role_end|>; Ring's: the prompt
      // opens the reasoning.)
      const bool ling2 = family == F::kBailing2;
      if (ling2 && (msgs.empty() || msgs[0].role != "system"))
        ss += "<role>SYSTEM</role>detailed thinking off<|role_end|>";
      for (const ChatMessage& m : msgs) {
        std::string role = m.role;
        if (role == "user") {
          role = "HUMAN";
        } else {
          std::transform(role.begin(), role.end(), role.begin(),
                         [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
        }
        ss += "<role>" + role + "</role>" + m.content + (ling2 ? "<|role_end|>" : "");
      }
      if (add_assistant) ss += "<role>ASSISTANT</role>";
      if (add_assistant && family == F::kBailingThink) ss += "<think>";
      break;
    }
    case F::kLlama4:
      for (const ChatMessage& m : msgs) {
        ss += "<|header_start|>" + m.role + "<|header_end|>\n\n" + trim(m.content) + "<|eot|>";
      }
      if (add_assistant) ss += "<|header_start|>assistant<|header_end|>\n\n";
      break;
    case F::kSmolvlm:
      ss += "<|im_start|>";
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss += m.content + "\n\n";
        } else if (m.role == "user") {
          ss += "User: " + m.content + "<end_of_utterance>\n";
        } else {
          ss += "Assistant: " + m.content + "<end_of_utterance>\n";
        }
      }
      if (add_assistant) ss += "Assistant:";
      break;
    case F::kDots1:
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss += "<|system|>" + m.content + "<|endofsystem|>";
        } else if (m.role == "user") {
          ss += "<|userprompt|>" + m.content + "<|endofuserprompt|>";
        } else {
          ss += "<|response|>" + m.content + "<|endofresponse|>";
        }
      }
      if (add_assistant) ss += "<|response|>";
      break;
    case F::kHunyuanMoe:
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss += "<|startoftext|>" + m.content + "<|extra_4|>";
        } else if (m.role == "assistant") {
          ss += m.content + "<|eos|>";
        } else {
          ss += "<|startoftext|>" + m.content + "<|extra_0|>";
        }
      }
      break;
    case F::kGptOss:
      // Harmony; the assistant turn ends with <|return|>, and no <|channel|> is written. (A
      // role may carry a header's recipient and channel, as function calling's do: a call, to=,
      // ends with <|call|>.)
      for (const ChatMessage& m : msgs) {
        ss += "<|start|>" + m.role + "<|message|>" + m.content;
        ss += m.role == "assistant"                 ? "<|return|>"
              : m.role.starts_with("assistant to=") ? "<|call|>"
                                                    : "<|end|>";
      }
      if (add_assistant) ss += "<|start|>assistant";
      break;
    case F::kHunyuanDense:
      for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (i == 0 && m.role == "system") ss += m.content + std::string(kHyHolder3);
        if (m.role == "assistant") {
          ss += std::string(kHyAssistant) + m.content + std::string(kHyHolder2);
        } else if (m.role == "user") {
          ss += std::string(kHyUser) + m.content + std::string(kHyAssistant);
        }
      }
      break;
    case F::kKimiK2:
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss += "<|im_system|>system<|im_middle|>";
        } else if (m.role == "user") {
          ss += "<|im_user|>user<|im_middle|>";
        } else if (m.role == "assistant") {
          ss += "<|im_assistant|>assistant<|im_middle|>";
        } else if (m.role == "tool") {
          ss += "<|im_system|>tool<|im_middle|>";
        } else if (m.role == "tool_declare") {  // strata's: the tools (render_kimi)
          ss += "<|im_system|>tool_declare<|im_middle|>";
        }
        ss += m.content + "<|im_end|>";
      }
      if (add_assistant) ss += "<|im_assistant|>assistant<|im_middle|>";
      break;
    case F::kSeedOss:
      for (const ChatMessage& m : msgs) {
        ss += "<seed:bos>" + m.role + "\n" + (m.role == "assistant" ? trim(m.content) : m.content) +
              "<seed:eos>";
      }
      if (add_assistant) ss += "<seed:bos>assistant\n";
      break;
    case F::kGrok2:  // roles other than system / user / assistant are left out, as llama.cpp does
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss += "System: " + trim(m.content) + "<|separator|>\n\n";
        } else if (m.role == "user") {
          ss += "Human: " + trim(m.content) + "<|separator|>\n\n";
        } else if (m.role == "assistant") {
          ss += "Assistant: " + m.content + "<|separator|>\n\n";
        }
      }
      if (add_assistant) ss += "Assistant:";
      break;
    case F::kMinimaxM2: {
      // MiniMax-M2's template, which llama.cpp runs only as Jinja: the first message's system
      // text (the session gives the template's default when there is none) in the turn that
      // opens the conversation, each turn "]~b]ROLE\n…[e~[\n" (the assistant's role "ai"), a run
      // of tool results one tool turn of "\n<response>…</response>"; other system messages are
      // left out, as the template leaves them.
      ss += "]~!b[]~b]system\n";
      if (!msgs.empty() && msgs[0].role == "system") ss += msgs[0].content;
      ss += "[e~[\n";
      for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (m.role == "user") {
          ss += "]~b]user\n" + m.content + "[e~[\n";
        } else if (m.role == "assistant") {
          ss += "]~b]ai\n" + m.content + "[e~[\n";
        } else if (m.role == "tool") {
          if (i == 0 || msgs[i - 1].role != "tool") ss += "]~b]tool";
          ss += "\n<response>" + m.content + "</response>";
          if (i + 1 == msgs.size() || msgs[i + 1].role != "tool") ss += "[e~[\n";
        }
      }
      if (add_assistant) ss += "]~b]ai\n";
      break;
    }
    case F::kErnie45:
      // ERNIE 4.5's template: <|begin_of_sentence|>, then each system message's text and "\n",
      // each user's "User: …\n", each assistant's "Assistant: …<|end_of_sentence|>".
      ss += "<|begin_of_sentence|>";
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss += m.content + "\n";
        } else if (m.role == "user") {
          ss += "User: " + m.content + "\n";
        } else if (m.role == "assistant") {
          ss += "Assistant: " + m.content + "<|end_of_sentence|>";
        }
      }
      if (add_assistant) ss += "Assistant: ";
      break;
  }
  return ss;
}

std::string jinja_string(std::string_view s, size_t quote_at, size_t* end) {
  const char quote = s[quote_at];
  std::string out;
  size_t i = quote_at + 1;
  for (; i < s.size() && s[i] != quote; ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char e = s[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
    } else {
      out += s[i];
    }
  }
  if (end) *end = i;
  return out;
}

std::string default_system_message(ChatFamily family, std::string_view chat_template) {
  if (family != ChatFamily::kMinimaxM2) return {};
  // {%- set model_identity = "…" -%}
  constexpr std::string_view kSet = "set model_identity";
  const size_t at = chat_template.find(kSet);
  if (at == std::string_view::npos) return {};
  const size_t q = chat_template.find_first_of("'\"", at + kSet.size());
  const size_t eq = chat_template.find('=', at + kSet.size());
  if (q == std::string_view::npos || eq == std::string_view::npos || eq > q) return {};
  size_t end = 0;
  std::string out = jinja_string(chat_template, q, &end);
  return end < chat_template.size() ? out : std::string();
}

}  // namespace strata::engine
