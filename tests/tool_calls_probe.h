// The check fuzz_tool_calls runs on each input, shared with test_tool_calls (which replays
// tests/data/tool_seeds/, the fuzzer's seeds and its fixed findings): the first byte picks one of
// function calling's parsers and matchers (engine/tool_calls.h, xml_call.h, section_call.h,
// harmony_call.h) or serve's Anthropic request translation (tools/anthropic_api.h), the rest is
// its input. Returns "" for a clean result or a strata::Error, else what broke: another
// exception, a call whose arguments are not a JSON object, a matcher's complete call the parser
// does not read back.
#pragma once

#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tool_calls.h"
#include "io/check.h"
#include "tools/anthropic_api.h"

namespace strata::test {

inline std::string probe_tool_calls(std::string_view input) {
  using namespace strata::engine;
  static const char* kTools = R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
     "days": {"type": "integer", "minimum": 1}, "opts": {"type": "object"},
     "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "now"}},
    {"type": "function", "function": {"name": "free", "parameters": {"type": "object"}}}])";
  static const std::vector<ToolSpec> tools = parse_tools(nlohmann::ordered_json::parse(kTools));
  static const auto xml = xml_call_spec(tools);
  static const auto glm = xml_call_spec(tools, kGlmSyntax);
  static const auto minimax = xml_call_spec(tools, kMinimaxSyntax);
  static const auto kimi = section_call_spec(tools, kKimiSyntax, true);
  static const auto deepseek_sections = section_call_spec(tools, kDeepseekSyntax, true);
  static const auto harmony = harmony_call_spec(tools);
  if (input.empty()) return "";
  const std::string_view in = input.substr(1);
  const auto objects_only = [](const ParsedCalls& p) {
    for (const ToolCall& c : p.calls)
      if (!nlohmann::json::parse(c.arguments, nullptr, false).is_object()) return false;
    return true;
  };
  // Cases 2, 4 (Qwen3-Coder's XML), 9 and 10 (Kimi-K2's sections): an odd quotient picks the
  // kin format (MiniMax-M2's XML section, DeepSeek-V3.1's sections).
  const bool kin = uint8_t(input[0]) / 11 % 2 == 1;
  try {
    switch (uint8_t(input[0]) % 11) {
      case 0:
        if (!nlohmann::json::parse(tools::anthropic::chat_request(in), nullptr, false).is_object())
          return "chat_request wrote no JSON object";
        break;
      case 1:
        parse_hermes_calls(in);
        break;
      case 2:
        if (!objects_only(kin ? parse_minimax_calls(in, tools) : parse_qwen_xml_calls(in, tools)))
          return "an XML call's arguments are not a JSON object";
        break;
      case 3:
        if (!objects_only(parse_harmony_calls(in)))
          return "a harmony call's arguments are not a JSON object";
        break;
      case 4: {
        XmlCallMatcher m(kin ? minimax : xml);
        for (size_t i = 0; i < in.size() && m.feed(uint8_t(in[i])); ++i) {
          if (!m.finished()) continue;
          const std::string text(in.substr(0, i + 1));
          const ParsedCalls p = kin ? parse_minimax_calls("<minimax:tool_call>" + text, tools)
                                    : parse_qwen_xml_calls("<tool_call>" + text, tools);
          if (p.calls.empty() || (!kin && p.calls.size() != 1) || !objects_only(p) ||
              !p.content.empty())
            return "a complete XML call does not parse back";
          break;
        }
        break;
      }
      case 5: {
        HarmonyCallMatcher m(harmony);
        for (size_t i = 0; i < in.size() && m.feed(uint8_t(in[i])); ++i) {
          if (!m.finished()) continue;
          const ParsedCalls p = parse_harmony_calls("<|channel|>commentary to=functions." +
                                                    std::string(in.substr(0, i + 1)));
          if (p.calls.size() != 1) return "a complete harmony call does not parse back";
          break;
        }
        break;
      }
      case 6: {
        // A conversation with tools and calls from the input, rendered in every format.
        const nlohmann::ordered_json j = nlohmann::ordered_json::parse(in, nullptr, false);
        if (!j.is_object()) break;
        const std::vector<ToolSpec> ts =
            j.contains("tools") ? parse_tools(j["tools"]) : std::vector<ToolSpec>{};
        std::vector<ToolMessage> msgs;
        if (j.contains("calls") && j["calls"].is_array())
          for (const auto& c : j["calls"])
            if (c.is_string()) msgs.push_back({"assistant", "", {{"", "f", c.get<std::string>()}}});
        msgs.push_back({"tool", "r", {}});
        for (const ToolFormat f :
             {ToolFormat::kHermes, ToolFormat::kQwenXml, ToolFormat::kGlmXml, ToolFormat::kHarmony,
              ToolFormat::kKimi, ToolFormat::kDeepseek, ToolFormat::kMinimax})
          try {
            render_tools(f, msgs, ts);
          } catch (const Error&) {
            // A call whose arguments the format cannot write: refused.
          }
        break;
      }
      case 7:
        if (!objects_only(parse_glm_calls(in, tools)))
          return "a GLM call's arguments are not a JSON object";
        break;
      case 8: {
        XmlCallMatcher m(glm);
        for (size_t i = 0; i < in.size() && m.feed(uint8_t(in[i])); ++i) {
          if (!m.finished()) continue;
          const ParsedCalls p =
              parse_glm_calls("<tool_call>" + std::string(in.substr(0, i + 1)), tools);
          if (p.calls.size() != 1 || !objects_only(p))
            return "a complete GLM call does not parse back";
          break;
        }
        break;
      }
      case 9:
      case 10: {
        // Kimi-K2's sections, or (an odd quotient) DeepSeek-V3.1's.
        const bool deepseek = kin;
        const SectionCallSyntax& syntax = deepseek ? kDeepseekSyntax : kKimiSyntax;
        if (uint8_t(input[0]) % 11 == 9) {
          if (!objects_only(parse_section_calls(in, syntax)))
            return "a section call's arguments are not a JSON object";
          break;
        }
        SectionCallMatcher m(deepseek ? deepseek_sections : kimi);
        for (size_t i = 0; i < in.size() && m.feed(uint8_t(in[i])); ++i) {
          if (!m.finished()) continue;
          const ParsedCalls p = parse_section_calls(
              std::string(syntax.section_begin) + std::string(in.substr(0, i + 1)), syntax);
          if (p.calls.empty() || !objects_only(p) || !p.content.empty())
            return "a complete tool-call section does not parse back";
          break;
        }
        break;
      }
    }
  } catch (const Error&) {
    return "";  // a clear refusal
  } catch (const std::exception& e) {
    return std::string("an exception other than strata::Error: ") + e.what();
  }
  return "";
}

}  // namespace strata::test
