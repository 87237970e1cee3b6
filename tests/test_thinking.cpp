// Thinking models end to end (engine/reasoning.h through ChatSession, `strata chat` and `strata
// serve`). The fixtures have no <think> tokens, so the test writes copies of tiny-qwen3moe Q8_0
// whose vocabulary has them (two tokens no merge uses, renamed, user-defined as in Qwen3's) and
// whose chat template has Qwen3's enable_thinking switch. In one copy the output head's rows are
// moved so that the random model thinks: <think> takes the row of its greedy reply's first token
// and </think> the row of a later one (the old rows zeroed), so the greedy reply opens a block,
// reasons and closes it, deterministically. Checked: the no-think prompt; the split of replies and
// what joins the conversation; structured output leaving the reasoning free (the same greedy
// tokens as without a schema) and constraining the answer; `chat`'s display (THINK on / hide) and
// `serve`'s reasoning_content, streamed and whole, reasoning_format "none", enable_thinking false.
// A third copy is given <tool_call> / </tool_call> too, and <tool_call> the row of its greedy
// reply's first token to a prompt with tools: `serve` then returns a constrained tool call. Copies
// of tiny-glm4moe given the same tokens and GLM-4.5's call format do the same in GLM's XML.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "deepseek_v31_prompt.h"
#include "engine/chat_template.h"
#include "engine/forward.h"
#include "engine/json_schema.h"
#include "engine/model.h"
#include "engine/model_info.h"
#include "engine/reasoning.h"
#include "engine/session.h"
#include "engine/tokenizer.h"
#include "engine/tool_calls.h"
#include "io/gguf.h"

extern char** environ;

using namespace strata;
using namespace strata::engine;
namespace fs = std::filesystem;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

const fs::path kFixture =
    fs::path(STRATA_FIXTURES_DIR) / "tiny-qwen3moe" / "tiny-qwen3moe-Q8_0.gguf";
const fs::path kGlmFixture =
    fs::path(STRATA_FIXTURES_DIR) / "tiny-glm4moe" / "tiny-glm4moe-Q4_0.gguf";
const fs::path kStrata = fs::path(STRATA_BINARY_DIR) / "tools" / "strata";
const std::string kUser = "Tell me about foxes.";
constexpr uint32_t kXmlCtx = 2048;  // Qwen3-Coder's tools prompt is longer than the fixture's 512
const char* kTools = R"([
  {"type": "function", "function": {"name": "weather", "parameters": {"type": "object",
   "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}}])";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What serve's JSON makes of raw reply bytes (the fixture's text is random bytes).
std::string as_json_text(const std::string& raw) {
  return json::parse(json(raw).dump(-1, ' ', false, json::error_handler_t::replace))
      .get<std::string>();
}

struct SpecialIds {
  int32_t open = -1, close = -1, call_open = -1, call_close = -1;
};

// What the copies' templates end with: Qwen3's no-think branch and a mention of the Hermes call
// format; kXmlTail names Qwen3-Coder's XML one.
const char* kHermesTail =
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- "
    "'<think>\\n\\n</think>\\n\\n' }}{%- endif %}{#- calls: <tool_call> -#}";
const char* kXmlTail = "{#- calls: '<tool_call>\\n<function=' + name, tools: '<parameters>' -#}";
// Qwen3-Thinking-2507's generation prompt, which opens the reasoning itself.
const char* kOpensTail =
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}";
// (GLM-4.5's, appended to tiny-glm4moe's chatglm4 template.)
const char* kGlmTail = "{#- calls: '<tool_call>' + name + '\\n<arg_key>' -#}";

// What a copy of a fixture changes.
struct CopyEdits {
  std::vector<std::string> tokens = {};  // the vocabulary's texts (empty: as they are)
  std::vector<int32_t> types = {};       // its token types (empty: as they are)
  std::string template_tail = {};        // appended to the chat template
  // Output rows (to, from): each of `moves` moved (row `from` zeroed), then each of `copies`
  // copied.
  std::vector<std::pair<int32_t, int32_t>> moves = {}, copies = {};
  std::string chat_template = {};  // the chat template instead (empty: the fixture's, and tail)
};

void write_copy(const fs::path& from, const fs::path& out, const CopyEdits& e) {
  const io::GgufFile in = io::GgufFile::open(from.string());
  io::GgufWriter w(in.alignment());
  for (const io::GgufKv& kv : in.metadata()) {
    if (kv.key == "tokenizer.ggml.tokens" && !e.tokens.empty()) {
      w.set(kv.key, io::gguf_string_array(e.tokens));
    } else if (kv.key == "tokenizer.ggml.token_type" && !e.types.empty()) {
      w.set(kv.key, io::gguf_i32_array(e.types));
    } else if (kv.key == "tokenizer.chat_template") {
      w.set(kv.key,
            e.chat_template.empty() ? *kv.value.as_string() + e.template_tail : e.chat_template);
    } else {
      w.set(kv.key, kv.value);
    }
  }
  for (const io::GgufTensorInfo& t : in.tensors())
    w.add_tensor(t.name, t.type, std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims));
  // The output head (or the tied embeddings): [n_embd, n_vocab], a row per token.
  const io::GgufTensorInfo* head = in.find_tensor("output.weight");
  if (!head) head = in.find_tensor("token_embd.weight");
  w.write(out.string(), [&](size_t i, std::span<std::byte> dst) {
    const io::GgufTensorInfo& t = in.tensors()[i];
    std::memcpy(dst.data(), in.tensor_data(t), dst.size());
    if (&t != head) return;
    const uint64_t rb = t.row_bytes();
    for (const auto& [to, src] : e.moves) {
      std::memcpy(dst.data() + to * rb, in.tensor_data(t) + src * rb, rb);
      std::memset(dst.data() + src * rb, 0, rb);
    }
    for (const auto& [to, src] : e.copies)
      std::memcpy(dst.data() + to * rb, dst.data() + src * rb, rb);
  });
}

// The fixture's vocabulary (texts, types) with `names` given to its last normal tokens that no
// merge builds on and that no merge makes (a merge's result is the concatenation of its halves),
// each of the type paired with it; returns their ids.
std::vector<int32_t> rename_spare_tokens(const io::GgufFile& in,
                                         const std::vector<std::pair<std::string, int32_t>>& names,
                                         std::vector<std::string>& tok_text,
                                         std::vector<int32_t>& tok_type) {
  const io::GgufArray& tokens = in.get_array("tokenizer.ggml.tokens");
  const io::GgufArray& types = in.get_array("tokenizer.ggml.token_type");
  const io::GgufArray& merges = in.get_array("tokenizer.ggml.merges");
  std::set<std::string> in_merges, made;
  for (const io::GgufValue& m : merges.items) {
    std::string s = *m.as_string();
    const size_t sp = s.find(' ');
    in_merges.insert(s.substr(0, sp));
    in_merges.insert(s.substr(sp + 1));
    s.erase(sp, 1);
    made.insert(s);
  }
  tok_text.clear();
  tok_type.clear();
  for (size_t i = 0; i < tokens.items.size(); ++i) {
    tok_text.push_back(*tokens.items[i].as_string());
    tok_type.push_back(int32_t(*types.items[i].as_int()));
  }
  std::vector<int32_t> ids;
  for (size_t i = tok_text.size(); i-- > 0 && ids.size() < names.size();) {
    if (tok_type[i] != 1 || in_merges.count(tok_text[i]) || made.count(tok_text[i])) continue;
    if (tok_text[i].size() < 2) continue;  // keep the ASCII bytes
    // A byte token (one character of the byte-level alphabet): only a byte valid UTF-8 never
    // holds (0xC0, 0xC1, 0xF5 to 0xFF, each its own character there), whose token no text needs.
    const std::string& t = tok_text[i];
    if (t.size() == 2 && (uint8_t(t[0]) & 0xE0) == 0xC0) {
      const uint32_t cp = (uint32_t(uint8_t(t[0])) & 0x1F) << 6 | (uint8_t(t[1]) & 0x3F);
      if (cp != 0xC0 && cp != 0xC1 && (cp < 0xF5 || cp > 0xFF)) continue;
    }
    tok_text[i] = names[ids.size()].first;
    tok_type[i] = names[ids.size()].second;
    ids.push_back(int32_t(i));
  }
  EXPECT_EQ(ids.size(), names.size());
  return ids;
}

// A copy of the fixture (tiny-qwen3moe, or `from`) with <think>, </think>, <tool_call> and
// </tool_call> tokens (user-defined, as in Qwen3's GGUF) and `tail` at the end of its template;
// for each (to, from) of `moves` output row `from` moved to row `to` (row `from` zeroed), then for
// each of `copies` copied. Returns the four tokens' ids.
SpecialIds write_thinking_model(const fs::path& out,
                                const std::vector<std::pair<int32_t, int32_t>>& moves = {},
                                const char* tail = kHermesTail,
                                const std::vector<std::pair<int32_t, int32_t>>& copies = {},
                                const fs::path& from = kFixture) {
  const io::GgufFile in = io::GgufFile::open(from.string());
  std::vector<std::string> tok_text;
  std::vector<int32_t> tok_type;
  const std::vector<int32_t> ids = rename_spare_tokens(
      in, {{"</think>", 4}, {"<think>", 4}, {"</tool_call>", 4}, {"<tool_call>", 4}}, tok_text,
      tok_type);
  if (ids.size() != 4) return {};
  write_copy(from, out, {tok_text, tok_type, tail, moves, copies});
  return {.open = ids[1], .close = ids[0], .call_open = ids[3], .call_close = ids[2]};
}

// Kimi-K2's chat template, the parts strata reads (the family's markers, tool_declare, the
// default system message, the empty <think></think> of assistant turns).
const char* kKimiTemplate =
    "{%- if tools -%}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson() }}<|im_end|>"
    "{%- endif -%}{%- if messages|length == 0 or messages[0]['role'] != 'system' -%}"
    "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI."
    "<|im_end|>{%- endif -%}{%- for message in messages -%}{%- if message['role'] == 'assistant' "
    "-%}<|im_assistant|>assistant<|im_middle|><think></think>{{ message['content'] }}"
    "<|tool_calls_section_begin|>{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}"
    "<|im_assistant|>assistant<|im_middle|>{%- endif -%}";

// DeepSeek-V3.1's chat template, the parts strata reads: the family's markers, the "</think>"
// that opens each answer to a user, the calls' form, the generation prompt's thinking switch.
const char* kDeepseekTemplate =
    "{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages -%}{%- if message['role'] == "
    "'user' -%}{{'<｜User｜>' + message['content']}}{%- endif -%}{%- if message['role'] == "
    "'assistant' -%}{{'<｜Assistant｜></think>'}}{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ "
    "tool['function']['name'] + '<｜tool▁sep｜>' + tool['function']['arguments'] + "
    "'<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif -%}"
    "{%- endfor -%}{%- if add_generation_prompt and ns.is_last_user and not ns.is_tool -%}"
    "{{'<｜Assistant｜>'}}{%- if not thinking -%}{{'</think>'}}{%- else -%}{{'<think>'}}"
    "{%- endif -%}{%- endif %}";

// MiniMax-M2's chat template, the parts strata reads: its default system message, the markers,
// the generation prompt that opens the reasoning.
const char* kMinimaxTemplate =
    "{%- set model_identity = \"You are a helpful assistant. Your name is MiniMax-M2.1 and is "
    "built by MiniMax.\" -%}{{- ']~!b[' ~ ']~b]system' ~ '\\n' }}{%- for message in messages -%}"
    "{{- ']~b]user' ~ '\\n' }}{{- '[e~[' ~ '\\n' }}{%- endfor -%}{%- if add_generation_prompt -%}"
    "{{- ']~b]ai' ~ '\\n' ~ '<think>' ~ '\\n' }}{%- endif -%}";
const std::vector<std::pair<std::string, int32_t>> kMinimaxTokens = {
    {"]~!b[", 3}, {"]~b]", 3}, {"[e~[", 3}, {"<think>", 4}, {"</think>", 4}};
// The same with its tool-call section (the template's words for it, and its markers: control
// tokens here, which strata renders; the first is the section's opening).
const std::string kMinimaxToolsTemplate =
    std::string(kMinimaxTemplate) + "{#- calls: '<minimax:tool_call>' ~ '\\n<invoke name=\"' -#}";
const std::vector<std::pair<std::string, int32_t>> kMinimaxToolTokens = {
    {"<minimax:tool_call>", 3},
    {"</minimax:tool_call>", 3},
    {"]~!b[", 3},
    {"]~b]", 3},
    {"[e~[", 3},
    {"<think>", 4},
    {"</think>", 4}};

// The markers of a copy with Kimi-K2's or DeepSeek-V3.1's template: their tool-call markers
// are control tokens here (strata renders them); the first is the section's opening.
const std::vector<std::pair<std::string, int32_t>> kKimiTokens = {
    {"<|tool_calls_section_begin|>", 3},
    {"<|tool_calls_section_end|>", 3},
    {"<|tool_call_begin|>", 3},
    {"<|tool_call_argument_begin|>", 3},
    {"<|tool_call_end|>", 3},
    {"<think>", 4},
    {"</think>", 4}};
const std::vector<std::pair<std::string, int32_t>> kDeepseekTokens = {
    {"<｜tool▁calls▁begin｜>", 3},
    {"<｜tool▁calls▁end｜>", 3},
    {"<｜tool▁call▁begin｜>", 3},
    {"<｜tool▁sep｜>", 3},
    {"<｜tool▁call▁end｜>", 3},
    {"<｜tool▁output▁begin｜>", 3},
    {"<｜tool▁output▁end｜>", 3},
    {"<｜User｜>", 3},
    {"<｜Assistant｜>", 3},
    {"<｜end▁of▁sentence｜>", 3},
    {"<think>", 4},
    {"</think>", 4}};

// A copy of tiny-qwen3moe with a chat template and the tokens it needs (kKimiTokens with
// Kimi-K2's, kDeepseekTokens with DeepSeek-V3.1's); `moves` as write_thinking_model's. Returns
// the first token's id.
int32_t write_section_model(const fs::path& out, const char* chat_template,
                            const std::vector<std::pair<std::string, int32_t>>& names,
                            const std::vector<std::pair<int32_t, int32_t>>& moves = {}) {
  const io::GgufFile in = io::GgufFile::open(kFixture.string());
  std::vector<std::string> tok_text;
  std::vector<int32_t> tok_type;
  const std::vector<int32_t> ids = rename_spare_tokens(in, names, tok_text, tok_type);
  if (ids.size() != names.size()) return -1;
  CopyEdits e{tok_text, tok_type, "", moves};
  e.chat_template = chat_template;
  write_copy(kFixture, out, e);
  return ids[0];
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

class Thinking : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(kFixture)) return;
    dir_ = fs::temp_directory_path() / fmt::format("strata_thinking_{}", ::getpid());
    fs::create_directories(dir_);
    const SpecialIds ids = write_thinking_model(dir_ / "qwen3.gguf");
    // The greedy reply's first token's row to <think>; then a later token of that reply's to
    // </think>.
    const std::vector<int32_t> first = greedy_reply(dir_ / "qwen3.gguf", 8);
    write_thinking_model(dir_ / "step.gguf", {{ids.open, first[0]}});
    const std::vector<int32_t> second = greedy_reply(dir_ / "step.gguf", 8);
    write_thinking_model(dir_ / "thinks.gguf", {{ids.open, first[0]}, {ids.close, second[5]}});
    write_thinking_model(dir_ / "opens.gguf", {}, kOpensTail);
    fs::remove(dir_ / "step.gguf");
    // A model that calls a tool: <tool_call> takes the row of the first token of its greedy reply
    // to the prompt with the tools.
    Loaded m(dir_ / "qwen3.gguf");
    ChatSession s = m.session();
    const TurnStatus st =
        s.begin_messages(render_hermes({{"user", kUser, {}}}, parse_tools(ojson::parse(kTools))));
    ASSERT_EQ(st, TurnStatus::kEndOfGeneration) << s.last_stats().n_prompt << " prompt tokens";
    const TurnResult r = s.generate(2, PieceFn{});
    write_thinking_model(dir_ / "calls.gguf", {{ids.call_open, s.kv_tokens()[r.stats.n_prompt]}});
    // Parallel calls: copies whose end-of-turn token has the output row of "\n", so that after a
    // call's close the model ends its turn or goes on to another as likely (sampled); one with
    // Hermes' template, one with Qwen3-Coder's XML, whose <tool_call> takes the row of its greedy
    // reply's first token to the tools' prompt.
    const std::vector<std::pair<int32_t, int32_t>> nl_end = {
        {m.tok.vocab().text_to_token("<|im_end|>"), m.tok.tokenize("\n", false, false).at(0)}};
    write_thinking_model(dir_ / "hermes_nl.gguf", {}, kHermesTail, nl_end);
    write_thinking_model(dir_ / "xml_nl.gguf", {}, kXmlTail, nl_end);
    Loaded x(dir_ / "xml_nl.gguf", kXmlCtx);
    ChatSession xs = x.session();
    ASSERT_EQ(xs.begin_messages(
                  render_qwen_xml({{"user", kUser, {}}}, parse_tools(ojson::parse(kTools)))),
              TurnStatus::kEndOfGeneration);
    const TurnResult xr = xs.generate(2, PieceFn{});
    write_thinking_model(dir_ / "coder.gguf", {{ids.call_open, xs.kv_tokens()[xr.stats.n_prompt]}},
                         kXmlTail, nl_end);
    // Kimi-K2's and DeepSeek-V3.1's: the section's opening takes the row of the greedy reply's
    // first token.
    for (const auto& [name, tmpl, names, format] :
         {std::tuple("kimi", kKimiTemplate, kKimiTokens, ToolFormat::kKimi),
          std::tuple("deepseek", kDeepseekTemplate, kDeepseekTokens, ToolFormat::kDeepseek)}) {
      const fs::path copy = dir_ / fmt::format("{}.gguf", name);
      const int32_t section = write_section_model(copy, tmpl, names);
      Loaded k(copy, kXmlCtx);
      ChatSession ks = k.session();
      ks.set_thinking(false);  // (as serve offers DeepSeek tools)
      ASSERT_EQ(ks.begin_messages(render_tools(format, {{"user", kUser, {}}},
                                               parse_tools(ojson::parse(kTools)), "", tmpl)),
                TurnStatus::kEndOfGeneration);
      const uint32_t n = ks.generate(2, PieceFn{}).stats.n_prompt;
      write_section_model(dir_ / fmt::format("{}_calls.gguf", name), tmpl, names,
                          {{section, ks.kv_tokens()[n]}});
    }
    write_section_model(dir_ / "minimax.gguf", kMinimaxTemplate, kMinimaxTokens);
    // MiniMax-M2's, whose replies open in the reasoning: </think> takes the row of the greedy
    // reply's first token, then the section's opening that of the token after it.
    {
      const std::string& tmpl = kMinimaxToolsTemplate;
      const fs::path copy = dir_ / "minimax_tools.gguf";
      int32_t section = -1, close = -1;
      // The greedy reply's token `at` on a copy with `moves`.
      const auto reply_token = [&](const std::vector<std::pair<int32_t, int32_t>>& moves,
                                   size_t at) {
        section = write_section_model(copy, tmpl.c_str(), kMinimaxToolTokens, moves);
        Loaded k(copy, kXmlCtx);
        close = k.tok.vocab().text_to_token("</think>");
        ChatSession ks = k.session();
        EXPECT_EQ(ks.begin_messages(render_tools(ToolFormat::kMinimax, {{"user", kUser, {}}},
                                                 parse_tools(ojson::parse(kTools)), "", tmpl)),
                  TurnStatus::kEndOfGeneration);
        const uint32_t n = ks.generate(3, PieceFn{}).stats.n_prompt;
        return ks.kv_tokens()[n + at];
      };
      const int32_t first = reply_token({}, 0);
      const int32_t next = reply_token({{close, first}}, 1);
      fs::remove(copy);
      write_section_model(dir_ / "minimax_calls.gguf", tmpl.c_str(), kMinimaxToolTokens,
                          {{close, first}, {section, next}});
    }
    // The same two for GLM-4.5's XML, on copies of tiny-glm4moe (chatglm4). In the sampled one
    // the end-of-turn tokens (<|endoftext|>, <|user|>, <|observation|>) take the row of "\n". In
    // the greedy one, where <tool_call> takes the row of the reply's first token, they take the
    // row of the token the model would write after its first call ("now"), so that it ends its
    // turn there (a tie with "\n" would go on with calls to the reply's limit).
    if (!fs::exists(kGlmFixture)) return;
    const SpecialIds glm_ids =
        write_thinking_model(dir_ / "glm.gguf", {}, kGlmTail, {}, kGlmFixture);
    Loaded g(dir_ / "glm.gguf", kXmlCtx);
    const std::vector<ChatMessage> glm_prompt =
        render_glm({{"user", kUser, {}}}, parse_tools(ojson::parse(kTools)));
    ChatSession gs = g.session();
    ASSERT_EQ(gs.begin_messages(glm_prompt), TurnStatus::kEndOfGeneration);
    const uint32_t n_tools_prompt = gs.generate(2, PieceFn{}).stats.n_prompt;
    const int32_t opener = gs.kv_tokens()[n_tools_prompt];
    ChatSession after_call = g.session();
    ASSERT_EQ(after_call.begin_text(format_chat(ChatFamily::kChatglm4, glm_prompt, true) +
                                    "<tool_call>now\n</tool_call>"),
              TurnStatus::kEndOfGeneration);
    const size_t n_prompt = after_call.kv_tokens().size();
    after_call.generate(2, PieceFn{});
    const int32_t next = after_call.kv_tokens()[n_prompt];
    const int32_t nl = g.tok.tokenize("\n", false, false).at(0);
    ASSERT_NE(next, nl) << "the model goes on with a call: pick another ending";
    std::vector<std::pair<int32_t, int32_t>> nl_ends, call_ends;
    for (const int32_t eog : g.tok.vocab().eog_ids()) {
      nl_ends.emplace_back(eog, nl);
      call_ends.emplace_back(eog, next == opener ? glm_ids.call_open : next);
    }
    write_thinking_model(dir_ / "glm_nl.gguf", {}, kGlmTail, nl_ends, kGlmFixture);
    write_thinking_model(dir_ / "glm_calls.gguf", {{glm_ids.call_open, opener}}, kGlmTail,
                         call_ends, kGlmFixture);
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (!fs::exists(kFixture)) GTEST_SKIP() << "fixture not found: " << kFixture;
  }

  struct Loaded {
    // n_ctx: the fixture's training context, serve's default here; Qwen3-Coder's tools prompt
    // needs more.
    explicit Loaded(const fs::path& p, uint32_t n_ctx = 512)
        : model(Model::load(p.string())), tok(Tokenizer::from_gguf(model.file())) {
      ForwardOptions fo;
      fo.n_ctx = n_ctx;
      fo.n_threads = 2;
      fwd = std::make_unique<Forward>(model, fo);
    }
    ChatSession session() {
      SamplerParams greedy;
      greedy.temperature = 0;
      return ChatSession(*fwd, tok, chat_family_choice("", tok.vocab().chat_template()), greedy);
    }
    Model model;
    Tokenizer tok;
    std::unique_ptr<Forward> fwd;
  };

  // The reply tokens of a fresh session's greedy reply to kUser (the last one not run).
  static std::vector<int32_t> greedy_reply(const fs::path& p, int n) {
    Loaded m(p);
    ChatSession s = m.session();
    const TurnResult r = s.send(kUser, n, {});
    const std::span<const int32_t> kv = s.kv_tokens();
    return std::vector<int32_t>(kv.begin() + r.stats.n_prompt, kv.end());
  }

  // A `strata serve` process, killed when this goes out of scope; port 0: it did not start
  // (serve.err says why).
  struct Served {
    pid_t pid = -1;
    int port = 0;
    Served(pid_t p, int port) : pid(p), port(port) {}
    Served(const Served&) = delete;
    Served& operator=(const Served&) = delete;
    ~Served() {
      if (pid <= 0) return;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  };
  // `strata serve` on a free port.
  static Served start_serve(const fs::path& model, uint32_t n_ctx = 0) {
    const std::string err = (dir_ / "serve.err").string();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    std::vector<std::string> args = {kStrata.string(), "serve", "-m", model.string(),
                                     "--port",         "0",     "-t", "2",
                                     "--vram-gb",      "0"};
    if (n_ctx) args.insert(args.end(), {"--ctx", std::to_string(n_ctx)});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return Served(-1, 0);
    int port = 0;
    const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
    for (int i = 0; i < 600 && port == 0; ++i) {
      std::smatch mt;
      const std::string text = slurp(err);
      if (std::regex_search(text, mt, listening))
        port = std::stoi(mt[1]);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return Served(pid, port);
  }

  static inline fs::path dir_;
};

TEST_F(Thinking, StyleAndTheNoThinkPrompt) {
  Loaded m(dir_ / "qwen3.gguf");
  ChatSession s = m.session();
  const ReasoningStyle& style = s.reasoning_style();
  ASSERT_EQ(style.format, ReasoningFormat::kThinkTags);
  EXPECT_EQ(style.no_think, "<think>\n\n</think>\n\n");
  EXPECT_TRUE(s.can_disable_thinking());
  s.append_message({"user", kUser});
  const std::vector<int32_t> on = s.format_tokens(true);
  s.set_thinking(false);
  const std::vector<int32_t> off = s.format_tokens(true);
  // The same prompt, then the empty block: <think>, "\n\n", </think>, "\n\n".
  ASSERT_GT(off.size(), on.size());
  EXPECT_TRUE(std::equal(on.begin(), on.end(), off.begin()));
  const std::vector<int32_t> tail(off.begin() + std::ptrdiff_t(on.size()), off.end());
  ASSERT_GE(tail.size(), 3u);
  EXPECT_EQ(tail.front(), style.open_token);
  EXPECT_NE(std::find(tail.begin(), tail.end(), style.close_token), tail.end());
  // Without the assistant opener nothing is appended.
  const std::vector<int32_t> no_opener = s.format_tokens(false);
  s.set_thinking(true);
  EXPECT_EQ(s.format_tokens(false), no_opener);

  // The fixture itself does not think; gpt-oss's harmony format is recognised from its template.
  const Model plain = Model::load(kFixture.string());
  const Tokenizer plain_tok = Tokenizer::from_gguf(plain.file());
  EXPECT_EQ(reasoning_style(chat_family_choice("", plain_tok.vocab().chat_template()),
                            plain_tok.vocab(), plain_tok.vocab().chat_template())
                .format,
            ReasoningFormat::kNone);
  const fs::path oss = fs::path(STRATA_FIXTURES_DIR) / "tiny-gpt-oss" / "tiny-gpt-oss-F32.gguf";
  if (fs::exists(oss)) {
    const Model g = Model::load(oss.string());
    const Tokenizer gt = Tokenizer::from_gguf(g.file());
    const ReasoningStyle h = reasoning_style(chat_family_choice("", gt.vocab().chat_template()),
                                             gt.vocab(), gt.vocab().chat_template());
    EXPECT_EQ(h.format, ReasoningFormat::kHarmony);
    EXPECT_GE(h.open_token, 0);
    EXPECT_GE(h.close_token, 0);
    EXPECT_TRUE(h.no_think.empty());
  }
}

// A template whose generation prompt opens the reasoning (Qwen3-Thinking-2507's "<think>\n"):
// the prompt ends with it, thinking on or (no switch) off; the reply is reasoning from its first
// token; a forced call closes the block first.
TEST_F(Thinking, PromptOpensTheReasoning) {
  Loaded m(dir_ / "opens.gguf");
  ChatSession s = m.session();
  const ReasoningStyle& style = s.reasoning_style();
  EXPECT_EQ(style.think_open, "<think>\n");
  EXPECT_FALSE(s.can_disable_thinking());
  const std::vector<ChatMessage> msgs = {{"user", kUser}};
  const auto text_of = [&](std::span<const int32_t> ids) {
    std::string t;
    for (const int32_t id : ids) t += m.tok.token_to_piece(id, true);
    return t;
  };
  const std::string on = text_of(s.turn_tokens(msgs, true));
  EXPECT_TRUE(on.ends_with("<|im_start|>assistant\n<think>\n")) << on;
  EXPECT_EQ(text_of(s.turn_tokens(msgs, false)), on);
  EXPECT_TRUE(text_of(s.turn_tokens(msgs, true, "<tool_call>\n"))
                  .ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n"));
  const TurnResult r = s.send(kUser, 12, {});
  ASSERT_EQ(r.stats.n_prompt, s.turn_tokens(msgs, true).size());
  const size_t close = r.text.find("</think>");
  EXPECT_EQ(r.reasoning, trim(r.text.substr(0, close)));
  if (close == std::string::npos) {
    EXPECT_EQ(r.answer, "");
  }
  EXPECT_GT(r.stats.n_reasoning, 0u);
}

// GLM-4.5's thinking switch: off, each user message ends with "/nothink" and the prompt with the
// empty block, as its template writes them (llama.cpp's formatter's "\n" after <|assistant|>
// joined to the block's).
TEST_F(Thinking, GlmNoThinkMarksTheUserTurns) {
  if (!fs::exists(kGlmFixture)) GTEST_SKIP() << "fixture not found: " << kGlmFixture;
  const char* tail =
      "{%- if m.role == 'user' -%}<|user|>\n{{ m.content }}{{- '/nothink' if (enable_thinking is "
      "defined and not enable_thinking and not m.content.endswith(\"/nothink\")) else '' -}}"
      "{%- endif -%}{%- if add_generation_prompt -%}<|assistant|>{{- '\\n<think></think>' if "
      "(enable_thinking is defined and not enable_thinking) else '' -}}{%- endif -%}";
  write_thinking_model(dir_ / "glm_think.gguf", {}, tail, {}, kGlmFixture);
  Loaded m(dir_ / "glm_think.gguf");
  ChatSession s = m.session();
  EXPECT_EQ(s.reasoning_style().no_think, "\n<think></think>");
  EXPECT_EQ(s.reasoning_style().user_no_think, "/nothink");
  const auto text_of = [&](std::span<const int32_t> ids) {
    std::string t;
    for (const int32_t id : ids) t += m.tok.token_to_piece(id, true);
    return t;
  };
  const std::vector<ChatMessage> msgs = {{"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
  EXPECT_TRUE(text_of(s.turn_tokens(msgs, false))
                  .ends_with("<|user|>\nHi/nothink<|assistant|>\nHello.<|user|>\nBye/nothink"
                             "<|assistant|>\n<think></think>"))
      << text_of(s.turn_tokens(msgs, false));
  EXPECT_TRUE(text_of(s.turn_tokens(msgs, true)).ends_with("<|user|>\nBye<|assistant|>\n"));
}

// `strata inspect` says how chat turns run: the thinking format, its switches, the tool format.
TEST_F(Thinking, InspectSaysHowChatRuns) {
  const auto info = [&](const fs::path& p) {
    return summarize_model(io::GgufFile::open(p.string())).tokenizer;
  };
  const TokenizerInfo q = info(dir_ / "qwen3.gguf");
  EXPECT_EQ(q.reasoning, "<think> tags");
  EXPECT_TRUE(q.no_think_switch);
  EXPECT_FALSE(q.prompt_opens_reasoning);
  EXPECT_EQ(q.tool_format, "hermes");
  const TokenizerInfo o = info(dir_ / "opens.gguf");
  EXPECT_TRUE(o.prompt_opens_reasoning);
  EXPECT_FALSE(o.no_think_switch);
  EXPECT_EQ(info(dir_ / "coder.gguf").tool_format, "qwen3-coder xml");
  EXPECT_EQ(info(dir_ / "kimi.gguf").tool_format, "kimi-k2");
  const TokenizerInfo d = info(dir_ / "deepseek.gguf");
  EXPECT_EQ(d.tool_format, "deepseek-v3.1");
  EXPECT_TRUE(d.no_think_switch);
  EXPECT_TRUE(d.prompt_opens_reasoning);
  const TokenizerInfo mm = info(dir_ / "minimax_calls.gguf");
  EXPECT_EQ(mm.tool_format, "minimax-m2");
  EXPECT_FALSE(mm.no_think_switch);
  EXPECT_TRUE(mm.prompt_opens_reasoning);
  EXPECT_EQ(info(dir_ / "minimax.gguf").tool_format, "none");
  if (fs::exists(dir_ / "glm_calls.gguf")) {
    EXPECT_EQ(info(dir_ / "glm_calls.gguf").tool_format, "glm xml");
  }
  const TokenizerInfo plain = info(kFixture);
  EXPECT_EQ(plain.reasoning, "none");
  EXPECT_EQ(plain.tool_format, "none");
}

TEST_F(Thinking, RepliesSplitAndTheSchemaConstrainsTheAnswerOnly) {
  Loaded m(dir_ / "thinks.gguf");
  ChatSession s = m.session();
  const TurnResult free = s.send(kUser, 24, {});
  EXPECT_EQ(free.stats.n_generated, 24u);
  // The copy's greedy reply opens a block, reasons, closes it and answers.
  const size_t open = free.text.find("<think>"), close = free.text.find("</think>");
  ASSERT_NE(open, std::string::npos) << free.text;
  ASSERT_NE(close, std::string::npos) << free.text;
  EXPECT_EQ(trim(free.text.substr(0, open)), "");
  EXPECT_EQ(free.reasoning, trim(free.text.substr(open + 7, close - open - 7)));
  EXPECT_FALSE(free.reasoning.empty());
  std::string answer = free.text.substr(close + 8);
  answer.erase(0, std::min(answer.size(), answer.find_first_not_of(" \t\r\n")));
  EXPECT_EQ(free.answer, answer);
  // The conversation keeps the answer only.
  EXPECT_EQ(s.messages().back().role, "assistant");
  EXPECT_EQ(s.messages().back().content, free.answer);

  // With a schema the reasoning is the same greedy tokens, unconstrained; the answer is the start
  // of a JSON object.
  s.reset();
  s.set_json_schema(JsonSchema::any_object());
  const TurnResult constrained = s.send(kUser, 64, {});
  EXPECT_EQ(constrained.text.substr(0, close + 8), free.text.substr(0, close + 8));
  EXPECT_EQ(constrained.reasoning, free.reasoning);
  const std::string a = trim(constrained.answer);
  ASSERT_FALSE(a.empty()) << constrained.text;
  EXPECT_EQ(a.front(), '{') << constrained.text;

  // Split off: the reply as written joins the conversation.
  s.reset();
  s.set_json_schema(nullptr);
  s.set_reasoning(false);
  const TurnResult raw = s.send(kUser, 24, {});
  EXPECT_EQ(raw.text, free.text);
  EXPECT_EQ(raw.answer, raw.text);
  EXPECT_TRUE(raw.reasoning.empty());
  EXPECT_EQ(s.messages().back().content, raw.text);

  // Thinking off: the prompt holds the empty block, and the reply is another one.
  s.reset();
  s.set_reasoning(true);
  s.set_thinking(false);
  const TurnResult off = s.send(kUser, 24, {});
  EXPECT_GT(off.stats.n_prompt, free.stats.n_prompt);
}

// A thinking budget: the reasoning's tokens counted; when they are spent the block's close is
// given and the model answers (its reasoning the budget's first tokens of the free reply's).
TEST_F(Thinking, BudgetClosesTheReasoning) {
  Loaded m(dir_ / "thinks.gguf");
  ChatSession s = m.session();
  const TurnResult free = s.send(kUser, 24, {});
  ASSERT_FALSE(free.stats.budget_closed);
  ASSERT_GT(free.stats.n_reasoning, 3u) << free.text;
  for (const int32_t budget : {3, 1}) {
    SCOPED_TRACE(budget);
    s.reset();
    s.set_reasoning_budget(budget);
    const TurnResult r = s.send(kUser, 24, {});
    EXPECT_TRUE(r.stats.budget_closed);
    EXPECT_EQ(r.stats.n_reasoning, uint32_t(budget));
    // The same tokens up to the budget, then "\n</think>\n\n" and an answer.
    const size_t open = free.text.find("<think>");
    ASSERT_NE(open, std::string::npos);
    const size_t close = r.text.find("\n</think>\n\n");
    ASSERT_NE(close, std::string::npos) << r.text;
    EXPECT_TRUE(free.text.starts_with(r.text.substr(0, close))) << r.text;
    EXPECT_EQ(r.reasoning, trim(r.text.substr(open + 7, close - open - 7)));
    EXPECT_FALSE(r.answer.empty()) << r.text;
    EXPECT_EQ(r.stats.n_generated, 24u);
    EXPECT_EQ(s.messages().back().content, r.answer);
  }
  // A budget the reasoning stays within changes nothing.
  s.reset();
  s.set_reasoning_budget(int32_t(free.stats.n_reasoning) + 1);
  const TurnResult within = s.send(kUser, 24, {});
  EXPECT_EQ(within.text, free.text);
  EXPECT_FALSE(within.stats.budget_closed);
}

TEST_F(Thinking, SchemaWithThinkingOnStartsWithTheBlockOrTheAnswer) {
  Loaded m(dir_ / "qwen3.gguf");
  ChatSession s = m.session();
  s.set_json_schema(JsonSchema::any_object());
  const TurnResult r = s.send(kUser, 16, {});
  const std::string t = trim(r.text);
  ASSERT_FALSE(t.empty());
  // Either the model opened its reasoning, or its answer is the constrained document.
  if (!t.starts_with("<think>")) {
    EXPECT_EQ(t.front(), '{') << r.text;
    EXPECT_EQ(r.answer, r.text);
  }
}

// `strata chat -p` with THINK on, hide and off, stdout not a terminal.
TEST_F(Thinking, ChatShowsOrHidesTheReasoning) {
  if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
  const auto engine_reply = [&](bool thinking, int32_t budget = -1) {
    Loaded m(dir_ / "thinks.gguf");
    ChatSession s = m.session();
    s.set_thinking(thinking);
    s.set_reasoning_budget(budget);
    return s.send(kUser, 16, {});
  };
  const auto run = [&](const char* think, const char* env = "") {
    const std::string cmd = fmt::format(
        "VRAM_GB=0 {} '{}' chat -m '{}' -t 2 -p '{}' -n 16 --temp 0 --think {} > '{}' 2> '{}'", env,
        kStrata.string(), (dir_ / "thinks.gguf").string(), kUser, think,
        (dir_ / "chat.out").string(), (dir_ / "chat.err").string());
    EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(dir_ / "chat.err");
    return std::pair(slurp(dir_ / "chat.out"), slurp(dir_ / "chat.err"));
  };
  const TurnResult want = engine_reply(true);
  ASSERT_FALSE(want.reasoning.empty());
  const auto [shown, shown_err] = run("on");
  EXPECT_EQ(shown, "<think>\n" + want.reasoning + "\n</think>\n\n" + want.answer + "\n");
  EXPECT_NE(shown_err.find("a thinking model (<think> tags): THINK=on"), std::string::npos)
      << shown_err;
  // hide: the answer only, and a line on stderr.
  const auto [hidden, hidden_err] = run("hide");
  EXPECT_EQ(hidden, want.answer + "\n");
  EXPECT_NE(hidden_err.find("[thought for "), std::string::npos) << hidden_err;
  // /think in a conversation (stdin a pipe): hide, then on again.
  const std::string piped = fmt::format(
      "printf '/think hide\\n{}\\n/think on\\n/reset\\n{}\\n' | VRAM_GB=0 '{}' chat -m '{}' -t 2 "
      "-n 16 --temp 0 > '{}' 2> '{}'",
      kUser, kUser, kStrata.string(), (dir_ / "thinks.gguf").string(), (dir_ / "pipe.out").string(),
      (dir_ / "pipe.err").string());
  EXPECT_EQ(std::system(piped.c_str()), 0) << slurp(dir_ / "pipe.err");
  EXPECT_EQ(slurp(dir_ / "pipe.out"), want.answer + "\n" + shown);
  EXPECT_NE(slurp(dir_ / "pipe.err").find("thinking: hide"), std::string::npos);
  // off: the prompt's empty block; the reply as the engine gives it.
  const TurnResult no_think = engine_reply(false);
  const auto [off, off_err] = run("off");
  const std::string framed = no_think.reasoning.empty()
                                 ? std::string()
                                 : "<think>\n" + no_think.reasoning + "\n</think>\n\n";
  EXPECT_EQ(off, framed + no_think.answer + "\n");
  // THINK_BUDGET: the reasoning closed after 2 tokens, as the engine does it.
  const TurnResult budget = engine_reply(true, 2);
  ASSERT_TRUE(budget.stats.budget_closed);
  EXPECT_EQ(run("on", "THINK_BUDGET=2").first,
            "<think>\n" + budget.reasoning + "\n</think>\n\n" + budget.answer + "\n");
}

// `strata serve` on the thinking copy: reasoning_content apart, whole and streamed;
// reasoning_format "none" gives the reply as written; enable_thinking false adds the empty block;
// thinking_budget closes the reasoning; bad values are 400s.
TEST_F(Thinking, ServeReturnsReasoningContent) {
  if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
  Loaded m(dir_ / "thinks.gguf");
  ChatSession s = m.session();
  const TurnResult want = s.send(kUser, 12, {});
  ASSERT_FALSE(want.reasoning.empty());

  const Served server = start_serve(dir_ / "thinks.gguf");
  ASSERT_GT(server.port, 0) << "the server did not start: " << slurp(dir_ / "serve.err");
  httplib::Client c("127.0.0.1", server.port);
  c.set_read_timeout(120, 0);
  json body = {{"max_tokens", 12},
               {"temperature", 0},
               {"messages", {{{"role", "user"}, {"content", kUser}}}}};
  const auto post = [&](const json& b) {
    const auto res = c.Post("/v1/chat/completions", b.dump(), "application/json");
    EXPECT_TRUE(res);
    return res ? std::pair(res->status, res->body) : std::pair(0, std::string());
  };
  {
    const auto [status, text] = post(body);
    ASSERT_EQ(status, 200) << text;
    const json msg = json::parse(text)["choices"][0]["message"];
    EXPECT_EQ(msg["content"], as_json_text(want.answer));
    EXPECT_EQ(msg["reasoning_content"], as_json_text(want.reasoning));
  }
  {  // streamed: the deltas add up to the same parts
    json sb = body;
    sb["stream"] = true;
    const auto [status, text] = post(sb);
    ASSERT_EQ(status, 200);
    std::string reasoning, content;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (!line.starts_with("data: ") || line == "data: [DONE]") continue;
      const json d = json::parse(line.substr(6))["choices"][0]["delta"];
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content")) content += d["content"].get<std::string>();
    }
    // (Pieces that split a UTF-8 character turn into U+FFFD each, so compare the raw bytes'
    // rendering only where the reply is whole.)
    EXPECT_FALSE(reasoning.empty());
    EXPECT_EQ(content.empty(), want.answer.empty());
  }
  {  // reasoning_format none: the reply as written
    json nb = body;
    nb["reasoning_format"] = "none";
    const auto [status, text] = post(nb);
    ASSERT_EQ(status, 200);
    const json msg = json::parse(text)["choices"][0]["message"];
    EXPECT_EQ(msg["content"], as_json_text(want.text));
    EXPECT_FALSE(msg.contains("reasoning_content"));
  }
  {  // enable_thinking false: the prompt ends with the empty block
    json tb = body;
    tb["chat_template_kwargs"] = {{"enable_thinking", false}, {"other", 1}};
    const auto [status, text] = post(tb);
    ASSERT_EQ(status, 200);
    const json r = json::parse(text);
    EXPECT_GT(r["usage"]["prompt_tokens"].get<int>(), int(want.stats.n_prompt));
  }
  {  // thinking_budget: the reasoning closed after 2 tokens, as the session does it
    s.reset();
    s.set_reasoning_budget(2);
    const TurnResult budget = s.send(kUser, 12, {});
    ASSERT_TRUE(budget.stats.budget_closed);
    json bb = body;
    bb["thinking_budget"] = 2;
    const auto [status, text] = post(bb);
    ASSERT_EQ(status, 200) << text;
    const json msg = json::parse(text)["choices"][0]["message"];
    EXPECT_EQ(msg["reasoning_content"], as_json_text(budget.reasoning));
    EXPECT_EQ(msg["content"], as_json_text(budget.answer));
  }
  for (const auto& [field, value, msg] :
       {std::tuple<const char*, json, const char*>{"reasoning_format", "deep", "reasoning_format"},
        {"chat_template_kwargs", "x", "must be an object"},
        {"chat_template_kwargs", json{{"enable_thinking", "no"}}, "enable_thinking"},
        {"thinking_budget", -1, "'thinking_budget' is -1"},
        {"thinking_budget", "many", "'thinking_budget' must be an integer"}}) {
    json bb = body;
    bb[field] = value;
    const auto [status, text] = post(bb);
    EXPECT_EQ(status, 400) << text;
    EXPECT_NE(text.find(msg), std::string::npos) << text;
  }
}

}  // namespace

namespace {

// `strata serve` on the copy that calls a tool: the reply's <tool_call> JSON is constrained to the
// tools' schemas and comes back as OpenAI tool_calls (finish_reason "tool_calls"), whole and
// streamed; the conversation goes on with the call and its result; tools on a model whose
// template has no tool format are a 400.
TEST_F(Thinking, ServeCallsTools) {
  if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
  const Served server = start_serve(dir_ / "calls.gguf");
  ASSERT_GT(server.port, 0) << "the server did not start: " << slurp(dir_ / "serve.err");
  httplib::Client c("127.0.0.1", server.port);
  c.set_read_timeout(120, 0);
  // The tools as written (their key order is the prompt's).
  const std::string messages = R"([{"role": "user", "content": ")" + kUser + R"("}])";
  const auto body = [&](const std::string& msgs, bool stream) {
    return R"({"max_tokens": 120, "temperature": 0, "stream": )" +
           std::string(stream ? "true" : "false") + R"(, "messages": )" + msgs + R"(, "tools": )" +
           kTools + "}";
  };
  const auto res = c.Post("/v1/chat/completions", body(messages, false), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json r = json::parse(res->body);
  const json& choice = r["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << res->body;
  const json& msg = choice["message"];
  ASSERT_TRUE(msg.contains("tool_calls")) << res->body;
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  const json& call = msg["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_TRUE(call["id"].get<std::string>().starts_with("call_"));
  const std::string name = call["function"]["name"];
  EXPECT_TRUE(name == "weather" || name == "now") << name;
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  ASSERT_TRUE(args.is_object());
  if (name == "weather") {
    ASSERT_TRUE(args.contains("city") && args["city"].is_string()) << args;
  }
  EXPECT_TRUE(msg["content"].is_null()) << res->body;

  // Streamed: the same call in a tool_calls delta, then the finish reason.
  const auto sres = c.Post("/v1/chat/completions", body(messages, true), "application/json");
  ASSERT_TRUE(sres);
  json streamed_call;
  std::string finish;
  std::istringstream lines(sres->body);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("data: ") || line == "data: [DONE]") continue;
    const json ch = json::parse(line.substr(6))["choices"][0];
    if (ch["delta"].contains("tool_calls")) streamed_call = ch["delta"]["tool_calls"][0];
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(streamed_call["index"], 0);
  EXPECT_EQ(streamed_call["function"], call["function"]);

  // The conversation goes on: the call, its result, a longer prompt.
  const std::string more = R"([{"role": "user", "content": ")" + kUser +
                           R"("}, {"role": "assistant", "content": null, "tool_calls": [)" +
                           call.dump() + R"(]}, {"role": "tool", "tool_call_id": ")" +
                           call["id"].get<std::string>() + R"(", "content": "sunny"}])";
  const auto next = c.Post("/v1/chat/completions", body(more, false), "application/json");
  ASSERT_TRUE(next);
  ASSERT_EQ(next->status, 200) << next->body;
  EXPECT_GT(json::parse(next->body)["usage"]["prompt_tokens"].get<int>(),
            r["usage"]["prompt_tokens"].get<int>());

  // tool_choice: a named function is called, streamed or not; "required" calls one of them.
  const auto forced = [&](const std::string& choice, bool stream) {
    std::string b = body(messages, stream);
    b.insert(b.size() - 1, R"(, "tool_choice": )" + choice);
    const auto res = c.Post("/v1/chat/completions", b, "application/json");
    EXPECT_TRUE(res);
    return res ? res->body : std::string();
  };
  const json named = json::parse(
      forced(R"({"type": "function", "function": {"name": "weather"}})", false))["choices"][0];
  EXPECT_EQ(named["finish_reason"], "tool_calls") << named;
  ASSERT_TRUE(named["message"].contains("tool_calls")) << named;
  EXPECT_EQ(named["message"]["tool_calls"][0]["function"]["name"], "weather");
  EXPECT_TRUE(
      json::parse(named["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>())
          .contains("city"));
  std::string streamed_name;
  std::istringstream named_lines(
      forced(R"({"type": "function", "function": {"name": "now"}})", true));
  for (std::string line; std::getline(named_lines, line);) {
    if (!line.starts_with("data: ") || line == "data: [DONE]") continue;
    const json ch = json::parse(line.substr(6))["choices"][0];
    if (ch["delta"].contains("tool_calls"))
      streamed_name = ch["delta"]["tool_calls"][0]["function"]["name"];
  }
  EXPECT_EQ(streamed_name, "now");
  const json required = json::parse(forced(R"("required")", false))["choices"][0];
  EXPECT_EQ(required["finish_reason"], "tool_calls") << required;

  // Bad requests.
  for (const auto& [b, want] : std::vector<std::pair<std::string, std::string>>{
           {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "x"}]})",
            "tools[0] must be"},
           {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
            "asks for a call, but the request has no 'tools'"},
           {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "any"})",
            "'tool_choice': "},
           {R"({"messages": [{"role": "user", "content": "x"}], "tools": )" + std::string(kTools) +
                R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}}})",
            "names 'nope', which is not in 'tools'"},
           {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]})",
            "needs a function with a string 'name'"},
           {R"({"messages": [{"role": "user", "content": "x"}], "tools": )" + std::string(kTools) +
                R"(, "response_format": {"type": "json_object"}})",
            "together are not supported"}}) {
    const auto bad = c.Post("/v1/chat/completions", b, "application/json");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400) << b;
    EXPECT_NE(bad->body.find(want), std::string::npos) << bad->body;
  }
}

// Whether a call is one of kTools' with arguments its parameters accept.
bool valid_call(const ToolCall& c) {
  static const auto weather = JsonSchema::parse(
      R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
          "required": ["city"], "additionalProperties": false})");
  static const auto now =
      JsonSchema::parse(R"({"type": "object", "properties": {}, "additionalProperties": false})");
  if (c.name != "weather" && c.name != "now") return false;
  JsonMatcher m(c.name == "weather" ? weather : now);
  return m.feed(c.arguments) && m.accepting();
}

// Parallel calls, sampled, in the three <tool_call> formats: after a call's close the model ends
// its turn or writes another (the copies make both as likely), every call is valid; parallel off,
// one call.
TEST_F(Thinking, ParallelCallsEndOrGoOn) {
  const std::vector<ToolSpec> tools = parse_tools(ojson::parse(kTools));
  for (const auto& [file, format] : {std::pair{"hermes_nl.gguf", ToolFormat::kHermes},
                                     std::pair{"xml_nl.gguf", ToolFormat::kQwenXml},
                                     std::pair{"glm_nl.gguf", ToolFormat::kGlmXml}}) {
    SCOPED_TRACE(file);
    if (!fs::exists(dir_ / file)) continue;  // (tiny-glm4moe missing)
    Loaded m(dir_ / file, kXmlCtx);
    const std::string_view tmpl = m.tok.vocab().chat_template();
    ASSERT_EQ(tool_format(chat_family_choice("", tmpl), tmpl), format);
    ChatSession s = m.session();
    size_t single = 0, several = 0;
    for (const bool parallel : {true, false}) {
      s.set_tool_calls({.open = m.tok.vocab().text_to_token("<tool_call>"),
                        .body = call_filters(format, tools),
                        .close = format == ToolFormat::kGlmXml ? "" : "\n</tool_call>",
                        .forced_prompt = std::string(forced_call_prompt(format)),
                        .forced = true,
                        .parallel = parallel});
      for (uint64_t seed = 1; seed <= (parallel ? 24u : 8u); ++seed) {
        SamplerParams p;
        p.temperature = 1.0f;
        p.seed = seed;
        s.set_sampling(p);
        ASSERT_EQ(s.begin_messages(render_tools(format, {{"user", kUser, {}}}, tools)),
                  TurnStatus::kEndOfGeneration);
        const TurnResult r = s.generate(200, PieceFn{});
        if (r.status != TurnStatus::kEndOfGeneration) continue;  // cut in a call
        const ParsedCalls calls =
            parse_calls(format, std::string(forced_call_head(format)) + r.answer, tools);
        ASSERT_FALSE(calls.calls.empty()) << r.answer;
        for (const ToolCall& c : calls.calls)
          EXPECT_TRUE(valid_call(c)) << c.name << " " << c.arguments << "\n" << r.answer;
        EXPECT_EQ(calls.content, "") << r.answer;
        if (!parallel) {
          EXPECT_EQ(calls.calls.size(), 1u) << r.answer;
          EXPECT_EQ(r.answer.find("<tool_call>"), std::string::npos) << r.answer;
        } else if (calls.calls.size() == 1) {
          ++single;
        } else {
          ++several;
          EXPECT_NE(r.answer.find("</tool_call>\n<tool_call>"), std::string::npos) << r.answer;
        }
      }
    }
    EXPECT_GT(single, 0u);
    EXPECT_GT(several, 0u);
  }
}

// `strata serve` on copies with Qwen3-Coder's and GLM-4.5's XML call formats: the calls come back
// as OpenAI tool_calls, whole and streamed; the conversation goes on with them;
// parallel_tool_calls false keeps one call.
TEST_F(Thinking, ServeCallsToolsInXml) {
  if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
  for (const char* file : {"coder.gguf", "glm_calls.gguf"}) {
    if (!fs::exists(dir_ / file)) continue;  // (tiny-glm4moe missing)
    SCOPED_TRACE(file);
    const Served server = start_serve(dir_ / file, kXmlCtx);
    ASSERT_GT(server.port, 0) << "the server did not start: " << slurp(dir_ / "serve.err");
    httplib::Client c("127.0.0.1", server.port);
    c.set_read_timeout(120, 0);
    const std::string messages = R"([{"role": "user", "content": ")" + kUser + R"("}])";
    const auto body = [&](const std::string& msgs, bool stream, const std::string& extra = "") {
      return R"({"max_tokens": 160, "temperature": 0, "stream": )" +
             std::string(stream ? "true" : "false") + R"(, "messages": )" + msgs +
             R"(, "tools": )" + kTools + extra + "}";
    };
    const auto calls_of = [](const json& tool_calls) {
      std::vector<ToolCall> out;
      for (const json& tc : tool_calls)
        out.push_back({tc["id"], tc["function"]["name"], tc["function"]["arguments"]});
      return out;
    };
    const auto res = c.Post("/v1/chat/completions", body(messages, false), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json r = json::parse(res->body);
    const json& choice = r["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << res->body;
    ASSERT_TRUE(choice["message"].contains("tool_calls")) << res->body;
    const std::vector<ToolCall> calls = calls_of(choice["message"]["tool_calls"]);
    ASSERT_FALSE(calls.empty());
    for (const ToolCall& call : calls) EXPECT_TRUE(valid_call(call)) << call.arguments;

    // Streamed: the same calls, each a delta with its index.
    const auto sres = c.Post("/v1/chat/completions", body(messages, true), "application/json");
    ASSERT_TRUE(sres);
    json streamed = json::array();
    std::istringstream lines(sres->body);
    for (std::string line; std::getline(lines, line);) {
      if (!line.starts_with("data: ") || line == "data: [DONE]") continue;
      const json ch = json::parse(line.substr(6))["choices"][0];
      if (ch["delta"].contains("tool_calls"))
        for (const json& tc : ch["delta"]["tool_calls"]) streamed.push_back(tc);
    }
    ASSERT_EQ(streamed.size(), calls.size()) << sres->body;
    for (size_t k = 0; k < calls.size(); ++k) {
      EXPECT_EQ(streamed[k]["index"], k);
      EXPECT_EQ(streamed[k]["function"], choice["message"]["tool_calls"][k]["function"]);
    }

    // parallel_tool_calls false: one call.
    const auto one =
        c.Post("/v1/chat/completions", body(messages, false, R"(, "parallel_tool_calls": false)"),
               "application/json");
    ASSERT_TRUE(one);
    ASSERT_EQ(one->status, 200) << one->body;
    EXPECT_EQ(json::parse(one->body)["choices"][0]["message"]["tool_calls"].size(), 1u);

    // The conversation goes on: the calls and their results in the XML form, a longer prompt.
    json more = json::parse(messages);
    more.push_back({{"role", "assistant"},
                    {"content", nullptr},
                    {"tool_calls", choice["message"]["tool_calls"]}});
    for (const ToolCall& call : calls)
      more.push_back({{"role", "tool"}, {"tool_call_id", call.id}, {"content", "sunny"}});
    const auto next = c.Post("/v1/chat/completions", body(more.dump(), false), "application/json");
    ASSERT_TRUE(next);
    ASSERT_EQ(next->status, 200) << next->body;
    EXPECT_GT(json::parse(next->body)["usage"]["prompt_tokens"].get<int>(),
              r["usage"]["prompt_tokens"].get<int>());

    // A named function, and bad requests.
    const auto named =
        c.Post("/v1/chat/completions",
               body(messages, false,
                    R"(, "tool_choice": {"type": "function", "function": {"name": "now"}})"),
               "application/json");
    ASSERT_TRUE(named);
    const json nc = json::parse(named->body)["choices"][0]["message"]["tool_calls"];
    ASSERT_GE(nc.size(), 1u) << named->body;
    for (const json& tc : nc) EXPECT_EQ(tc["function"]["name"], "now");
    for (const auto& [b, want] : std::vector<std::pair<std::string, std::string>>{
             {body(messages, false, R"(, "parallel_tool_calls": "yes")"),
              "'parallel_tool_calls' must be true or false"},
             {R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "a",
                "type": "function", "function": {"name": "now", "arguments": "[1]"}}]}]})",
              "are not a JSON object"}}) {
      const auto bad = c.Post("/v1/chat/completions", b, "application/json");
      ASSERT_TRUE(bad);
      EXPECT_EQ(bad->status, 400) << b;
      EXPECT_NE(bad->body.find(want), std::string::npos) << bad->body;
    }
  }
}

// Kimi-K2's, DeepSeek-V3.1's and MiniMax-M2's sections, sampled: a forced section holds calls
// the parser reads back, each valid, one only when not parallel.
TEST_F(Thinking, SectionsHoldValidCalls) {
  const std::vector<ToolSpec> tools = parse_tools(ojson::parse(kTools));
  for (const auto& [model, format] : {std::pair("kimi.gguf", ToolFormat::kKimi),
                                      std::pair("deepseek.gguf", ToolFormat::kDeepseek),
                                      std::pair("minimax_calls.gguf", ToolFormat::kMinimax)}) {
    Loaded m(dir_ / model, kXmlCtx);
    const std::string_view tmpl = m.tok.vocab().chat_template();
    ASSERT_EQ(tool_format(chat_family_choice("", tmpl), tmpl), format);
    ChatSession s = m.session();
    size_t calls = 0;
    for (const bool parallel : {true, false}) {
      s.set_tool_calls({.open = m.tok.vocab().text_to_token(call_opening(format)),
                        .body = call_filters(format, tools, parallel),
                        .close = "",
                        .forced_prompt = std::string(forced_call_prompt(format)),
                        .forced = true});
      for (uint64_t seed = 1; seed <= 12; ++seed) {
        SamplerParams p;
        p.temperature = 1.0f;
        p.seed = seed;
        s.set_sampling(p);
        ASSERT_EQ(s.begin_messages(render_tools(format, {{"user", kUser, {}}}, tools, "", tmpl)),
                  TurnStatus::kEndOfGeneration);
        const TurnResult r = s.generate(300, PieceFn{});
        if (r.status != TurnStatus::kEndOfGeneration) continue;  // cut in the section
        const ParsedCalls parsed =
            parse_calls(format, std::string(forced_call_head(format)) + r.answer, tools);
        ASSERT_FALSE(parsed.calls.empty()) << r.answer;
        EXPECT_EQ(parsed.content, "") << r.answer;
        for (const ToolCall& c : parsed.calls) EXPECT_TRUE(valid_call(c)) << c.arguments;
        if (!parallel) {
          EXPECT_EQ(parsed.calls.size(), 1u) << r.answer;
        }
        calls += parsed.calls.size();
      }
    }
    EXPECT_GT(calls, 0u) << model;
  }
}

// DeepSeek-V3.1's prompts are its template's (run by Jinja on deepseek_conversation(),
// deepseek_v31_prompt.h): "</think>" before each answer to a user, tool
// results the model goes on from (no opener, thinking on or off), the thinking switch after an
// opener; a forced call follows "</think>", thinking on too. A chat with thinking off keeps its
// cache across turns (the template's "</think>" before the earlier answer is the cache's).
TEST_F(Thinking, DeepseekPromptsAsItsTemplate) {
  Loaded m(dir_ / "deepseek.gguf", kXmlCtx);
  const std::string_view tmpl = m.tok.vocab().chat_template();
  ASSERT_EQ(chat_family_choice("", tmpl), ChatFamily::kDeepseek3);
  ChatSession s = m.session();
  EXPECT_EQ(s.reasoning_style().answer_open, "</think>");
  EXPECT_EQ(s.reasoning_style().no_think, "</think>");
  EXPECT_EQ(s.reasoning_style().think_open, "<think>");
  std::vector<ToolMessage> msgs = test::deepseek_conversation();
  const std::string& head = test::kDeepseekPromptHead;
  const std::string all = head + test::kDeepseekPromptRest;
  const auto tokens = [&](const std::string& text) { return m.tok.tokenize(text, true, true); };
  for (const bool thinking : {false, true})
    EXPECT_EQ(s.turn_tokens(render_deepseek(msgs, {}), thinking), tokens(all)) << thinking;
  msgs.resize(6);
  const std::vector<ChatMessage> to_user = render_deepseek(msgs, {});
  EXPECT_EQ(s.turn_tokens(to_user, false), tokens(head + "<｜Assistant｜></think>"));
  EXPECT_EQ(s.turn_tokens(to_user, true), tokens(head + "<｜Assistant｜><think>"));
  for (const bool thinking : {false, true})
    EXPECT_EQ(s.turn_tokens(to_user, thinking, forced_call_prompt(ToolFormat::kDeepseek)),
              tokens(head + "<｜Assistant｜></think><｜tool▁calls▁begin｜>"))
        << thinking;
  // Chat turns, thinking off: the second prompt keeps the whole first one.
  ChatSession chat = m.session();
  chat.set_thinking(false);
  const TurnResult first = chat.send(kUser, 6, {});
  ASSERT_EQ(chat.begin_turn("More."), TurnStatus::kEndOfGeneration);
  EXPECT_GE(chat.last_stats().n_matched, first.stats.n_prompt);
}

// MiniMax-M2's prompts: the template's default system message when the conversation has none (or
// an empty one), the conversation's own otherwise; the generation prompt opens the reasoning, so a
// reply is reasoning until it writes </think>.
TEST_F(Thinking, MinimaxPromptsAsItsTemplate) {
  Loaded m(dir_ / "minimax.gguf");
  const std::string_view tmpl = m.tok.vocab().chat_template();
  ASSERT_EQ(chat_family_choice("", tmpl), ChatFamily::kMinimaxM2);
  ChatSession s = m.session();
  EXPECT_EQ(s.reasoning_style().think_open, "<think>\n");
  EXPECT_FALSE(s.can_disable_thinking());
  const auto tokens = [&](const std::string& text) { return m.tok.tokenize(text, true, true); };
  EXPECT_EQ(s.turn_tokens(std::vector<ChatMessage>{{"user", "Hi"}}, true),
            tokens("]~!b[]~b]system\nYou are a helpful assistant. Your name is MiniMax-M2.1 and "
                   "is built by MiniMax.[e~[\n]~b]user\nHi[e~[\n]~b]ai\n<think>\n"));
  // (An empty system message: the default, as the template writes it.)
  EXPECT_EQ(s.turn_tokens(std::vector<ChatMessage>{{"system", ""}, {"user", "Hi"}}, true),
            s.turn_tokens(std::vector<ChatMessage>{{"user", "Hi"}}, true));
  EXPECT_EQ(s.turn_tokens(std::vector<ChatMessage>{{"system", "Be brief."}, {"user", "Hi"}}, true),
            tokens("]~!b[]~b]system\nBe brief.[e~[\n]~b]user\nHi[e~[\n]~b]ai\n<think>\n"));
  const TurnResult r = s.send(kUser, 6, {});
  EXPECT_TRUE(r.answer.empty() || r.text.find("</think>") != std::string::npos) << r.text;
  if (!r.text.starts_with("</think>")) {
    EXPECT_GT(r.stats.n_reasoning, 0u) << r.text;
  }
}

// `strata serve` on copies with Kimi-K2's, DeepSeek-V3.1's and MiniMax-M2's templates, whose
// tool-call markers are control tokens (rendered all the same): the model opens a section
// (MiniMax's after its reasoning), the call in it is constrained and comes back — Kimi-K2's with
// the id the model wrote (functions.NAME:IDX), the others with serve's — whole and streamed; the
// conversation goes on with the result under that id (DeepSeek's model going on from it); a named
// function is forced.
TEST_F(Thinking, ServeCallsToolsInSections) {
  if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
  // (model_ids: the call's id is the model's, the same streamed; else serve's, each reply's own.)
  for (const auto& [model, id_form, model_ids] :
       {std::tuple("kimi_calls.gguf", "functions\\.{}:[0-9]+", true),
        std::tuple("deepseek_calls.gguf", "call_.+", false),
        std::tuple("minimax_calls.gguf", "call_.+", false)}) {
    SCOPED_TRACE(model);
    const Served server = start_serve(dir_ / model, kXmlCtx);
    ASSERT_GT(server.port, 0) << "the server did not start: " << slurp(dir_ / "serve.err");
    httplib::Client c("127.0.0.1", server.port);
    c.set_read_timeout(120, 0);
    json body = {{"max_tokens", 160},
                 {"temperature", 0},
                 {"parallel_tool_calls", false},
                 {"messages", {{{"role", "user"}, {"content", kUser}}}},
                 {"tools", json::parse(kTools)}};
    const auto post = [&](const json& b) {
      const auto res = c.Post("/v1/chat/completions", b.dump(), "application/json");
      EXPECT_TRUE(res);
      return res ? std::pair(res->status, res->body) : std::pair(0, std::string());
    };
    const auto [status, text] = post(body);
    ASSERT_EQ(status, 200) << text;
    const json r = json::parse(text);
    const json& choice = r["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << text;
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << text;
    const json call = choice["message"]["tool_calls"][0];
    const std::string name = call["function"]["name"];
    EXPECT_TRUE(valid_call({"", name, call["function"]["arguments"]})) << call;
    EXPECT_TRUE(std::regex_match(call["id"].get<std::string>(),
                                 std::regex(fmt::format(fmt::runtime(id_form), name))))
        << call;
    // Streamed: the same call.
    json sb = body;
    sb["stream"] = true;
    const auto [sstatus, stext] = post(sb);
    ASSERT_EQ(sstatus, 200);
    json streamed = json::array();
    std::istringstream lines(stext);
    for (std::string line; std::getline(lines, line);) {
      if (!line.starts_with("data: ") || line == "data: [DONE]") continue;
      const json ch = json::parse(line.substr(6))["choices"][0];
      if (ch["delta"].contains("tool_calls"))
        for (const json& tc : ch["delta"]["tool_calls"]) streamed.push_back(tc);
    }
    ASSERT_EQ(streamed.size(), 1u) << stext;
    if (model_ids) {
      EXPECT_EQ(streamed[0]["id"], call["id"]);
    }
    EXPECT_EQ(streamed[0]["function"], call["function"]);
    // The conversation goes on: the result under the call's id, a longer prompt.
    json more = body;
    more["messages"].push_back(
        {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}});
    more["messages"].push_back(
        {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "sunny"}});
    const auto [nstatus, ntext] = post(more);
    ASSERT_EQ(nstatus, 200) << ntext;
    EXPECT_GT(json::parse(ntext)["usage"]["prompt_tokens"].get<int>(),
              r["usage"]["prompt_tokens"].get<int>());
    // The call's reasoning sent back (reasoning_content): MiniMax-M2's template writes a tool
    // loop's, the others leave it out.
    json reasoned = more;
    reasoned["messages"][1]["reasoning_content"] = "The weather first.";
    const auto [rstatus, rtext] = post(reasoned);
    ASSERT_EQ(rstatus, 200) << rtext;
    const int with = json::parse(rtext)["usage"]["prompt_tokens"].get<int>();
    const int without = json::parse(ntext)["usage"]["prompt_tokens"].get<int>();
    if (std::string_view(model) == "minimax_calls.gguf") {
      EXPECT_GT(with, without);
    } else {
      EXPECT_EQ(with, without);
    }
    // A named function: the prompt opens the section, the call is that function's.
    json named = body;
    named["tool_choice"] = {{"type", "function"}, {"function", {{"name", "now"}}}};
    const auto [fstatus, ftext] = post(named);
    ASSERT_EQ(fstatus, 200) << ftext;
    const json fc = json::parse(ftext)["choices"][0]["message"]["tool_calls"];
    ASSERT_EQ(fc.size(), 1u) << ftext;
    EXPECT_EQ(fc[0]["function"]["name"], "now");
  }
}

// Anthropic's Messages API (POST /v1/messages): a tool call as tool_use blocks, whole and as
// events; the conversation goes on with tool_result blocks; count_tokens agrees with usage;
// errors in Anthropic's shape; a thinking model's reasoning as a thinking block.
TEST_F(Thinking, ServeSpeaksAnthropicMessages) {
  if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
  const Served server = start_serve(dir_ / "calls.gguf", kXmlCtx);
  ASSERT_GT(server.port, 0) << "the server did not start: " << slurp(dir_ / "serve.err");
  httplib::Client c("127.0.0.1", server.port);
  c.set_read_timeout(120, 0);
  json tools = json::array();
  for (const json& t : json::parse(kTools)) {
    json a = {{"name", t["function"]["name"]}};
    // (A tool without parameters: an object with none.)
    a["input_schema"] =
        t["function"].value("parameters", json{{"type", "object"}, {"properties", json::object()}});
    tools.push_back(std::move(a));
  }
  json body = {{"model", "claude-any"},
               {"max_tokens", 120},
               {"temperature", 0},
               {"messages", {{{"role", "user"}, {"content", kUser}}}},
               {"tools", tools}};
  const auto post = [&](const char* path, const json& b) {
    const auto res = c.Post(path, b.dump(), "application/json");
    EXPECT_TRUE(res);
    return res ? std::pair(res->status, res->body) : std::pair(0, std::string());
  };
  const auto [status, text] = post("/v1/messages", body);
  ASSERT_EQ(status, 200) << text;
  const json m = json::parse(text);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["stop_reason"], "tool_use") << text;
  json uses = json::array();
  for (const json& b : m["content"])
    if (b["type"] == "tool_use") uses.push_back(b);
  ASSERT_FALSE(uses.empty()) << text;
  for (const json& u : uses) {
    EXPECT_TRUE(valid_call({"", u["name"], u["input"].dump()})) << u;
    EXPECT_TRUE(u["id"].is_string());
  }
  const int input_tokens = m["usage"]["input_tokens"];
  EXPECT_GT(input_tokens, 0);

  // count_tokens: the same prompt.
  const auto [cstatus, ctext] = post("/v1/messages/count_tokens", body);
  ASSERT_EQ(cstatus, 200) << ctext;
  EXPECT_EQ(json::parse(ctext)["input_tokens"], input_tokens);
  // With tool_choice any the prompt ends with the call's opening; count_tokens counts it too.
  json any = body;
  any["tool_choice"] = {{"type", "any"}};
  const auto [astatus, atext] = post("/v1/messages", any);
  ASSERT_EQ(astatus, 200) << atext;
  const int any_tokens = json::parse(atext)["usage"]["input_tokens"];
  EXPECT_GT(any_tokens, input_tokens);
  EXPECT_EQ(json::parse(post("/v1/messages/count_tokens", any).second)["input_tokens"], any_tokens);

  // Streamed: Anthropic's events, the same tool_use blocks.
  json sbody = body;
  sbody["stream"] = true;
  const auto [sstatus, stext] = post("/v1/messages", sbody);
  ASSERT_EQ(sstatus, 200);
  std::vector<std::string> names;
  json streamed = json::array();
  std::istringstream lines(stext);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("event: ")) names.push_back(line.substr(7));
    if (!line.starts_with("data: ")) continue;
    const json ev = json::parse(line.substr(6));
    if (ev["type"] == "content_block_start" && ev["content_block"]["type"] == "tool_use")
      streamed.push_back(ev["content_block"]);
    if (ev["type"] == "content_block_delta" && ev["delta"]["type"] == "input_json_delta")
      streamed.back()["input"] = json::parse(ev["delta"]["partial_json"].get<std::string>());
    if (ev["type"] == "message_delta") {
      EXPECT_EQ(ev["delta"]["stop_reason"], "tool_use");
    }
  }
  ASSERT_GE(names.size(), 3u) << stext;
  EXPECT_EQ(names.front(), "message_start");
  EXPECT_EQ(names[names.size() - 2], "message_delta");
  EXPECT_EQ(names.back(), "message_stop");
  ASSERT_EQ(streamed.size(), uses.size()) << stext;
  for (size_t k = 0; k < uses.size(); ++k) {
    EXPECT_EQ(streamed[k]["name"], uses[k]["name"]);
    EXPECT_EQ(streamed[k]["input"], uses[k]["input"]);
  }

  // The conversation goes on: the assistant's content back, a tool_result per call.
  json more = body;
  more["messages"].push_back({{"role", "assistant"}, {"content", m["content"]}});
  json results = json::array();
  for (const json& u : uses)
    results.push_back({{"type", "tool_result"}, {"tool_use_id", u["id"]}, {"content", "sunny"}});
  more["messages"].push_back({{"role", "user"}, {"content", results}});
  const auto [nstatus, ntext] = post("/v1/messages", more);
  ASSERT_EQ(nstatus, 200) << ntext;
  EXPECT_GT(json::parse(ntext)["usage"]["input_tokens"].get<int>(), input_tokens);

  // A stop string: stop_reason stop_sequence, and which.
  const json plain = {{"max_tokens", 16},
                      {"temperature", 0},
                      {"messages", {{{"role", "user"}, {"content", "Hello"}}}}};
  const auto [pstatus, ptext] = post("/v1/messages", plain);
  ASSERT_EQ(pstatus, 200) << ptext;
  const std::string said = json::parse(ptext)["content"][0]["text"];
  const auto letter = std::find_if(said.begin() + std::min<size_t>(1, said.size()), said.end(),
                                   [](char ch) { return std::isalpha(uint8_t(ch)) != 0; });
  if (letter != said.end()) {
    json stopped = plain;
    stopped["stop_sequences"] = {std::string(1, *letter)};
    const auto [sstatus2, stext2] = post("/v1/messages", stopped);
    ASSERT_EQ(sstatus2, 200) << stext2;
    const json sm = json::parse(stext2);
    EXPECT_EQ(sm["stop_reason"], "stop_sequence") << said << " / " << stext2;
    EXPECT_EQ(sm["stop_sequence"], std::string(1, *letter));
  }

  // Errors in Anthropic's shape; a conversation over the context in Anthropic's words.
  json lengthy = body;
  lengthy["messages"][0]["content"] = std::string(12000, 'x');
  const auto [lstatus, ltext] = post("/v1/messages", lengthy);
  EXPECT_EQ(lstatus, 400);
  EXPECT_NE(ltext.find("prompt is too long: "), std::string::npos) << ltext;
  json bad = body;
  bad["messages"][0]["content"] = json::array({{{"type", "image"}, {"source", json::object()}}});
  for (const char* path : {"/v1/messages", "/v1/messages/count_tokens"}) {
    const auto [estatus, etext] = post(path, bad);
    EXPECT_EQ(estatus, 400) << path;
    const json e = json::parse(etext);
    EXPECT_EQ(e["type"], "error") << etext;
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    EXPECT_NE(e["error"]["message"].get<std::string>().find("'image' blocks"), std::string::npos);
  }

  // A thinking model: its reasoning as a thinking block before the text.
  const Served thinker = start_serve(dir_ / "thinks.gguf");
  ASSERT_GT(thinker.port, 0) << "the server did not start: " << slurp(dir_ / "serve.err");
  httplib::Client t("127.0.0.1", thinker.port);
  t.set_read_timeout(120, 0);
  const auto tres = t.Post("/v1/messages",
                           json({{"max_tokens", 12},
                                 {"temperature", 0},
                                 {"messages", {{{"role", "user"}, {"content", kUser}}}}})
                               .dump(),
                           "application/json");
  ASSERT_TRUE(tres);
  ASSERT_EQ(tres->status, 200) << tres->body;
  const json tm = json::parse(tres->body);
  ASSERT_GE(tm["content"].size(), 1u) << tres->body;
  EXPECT_EQ(tm["content"][0]["type"], "thinking") << tres->body;
  EXPECT_FALSE(tm["content"][0]["thinking"].get<std::string>().empty());
}

// gpt-oss's function calling (harmony): the fixture as it is, calls forced by tool_choice; and a
// copy whose greedy reply writes " to=functions." (its output rows moved, token by token), whose
// call is found in the header and constrained from there — whole and streamed.
const fs::path kGptOss = fs::path(STRATA_FIXTURES_DIR) / "tiny-gpt-oss" / "tiny-gpt-oss-F32.gguf";

// The last normal token that no merge builds on or makes (free to be renamed).
int32_t spare_token(const fs::path& model) {
  const io::GgufFile in = io::GgufFile::open(model.string());
  const io::GgufArray& tokens = in.get_array("tokenizer.ggml.tokens");
  const io::GgufArray& types = in.get_array("tokenizer.ggml.token_type");
  std::set<std::string> used;
  for (const io::GgufValue& m : in.get_array("tokenizer.ggml.merges").items) {
    std::string s = *m.as_string();
    const size_t sp = s.find(' ');
    used.insert(s.substr(0, sp));
    used.insert(s.substr(sp + 1));
    s.erase(sp, 1);
    used.insert(s);
  }
  for (size_t i = tokens.items.size(); i-- > 0;) {
    const std::string& t = *tokens.items[i].as_string();
    if (*types.items[i].as_int() == 1 && t.size() >= 2 && !used.count(t)) return int32_t(i);
  }
  return -1;
}

TEST_F(Thinking, ServeCallsToolsInHarmony) {
  if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
  if (!fs::exists(kGptOss)) GTEST_SKIP() << "fixture not found: " << kGptOss;
  const std::vector<ToolSpec> tools = parse_tools(ojson::parse(kTools));
  const std::vector<ToolMessage> ask = {{"user", kUser, {}}};
  // The copy: a spare token spelled " to=functions." takes the row of the greedy reply's first
  // token.
  const fs::path calls = dir_ / "oss_calls.gguf";
  {
    const int32_t spare = spare_token(kGptOss);
    ASSERT_GE(spare, 0);
    Loaded base(kGptOss, kXmlCtx);
    ChatSession s = base.session();
    ASSERT_EQ(tool_format(s.family(), base.tok.vocab().chat_template()), ToolFormat::kHarmony);
    ASSERT_EQ(s.begin_messages(render_tools(ToolFormat::kHarmony, ask, tools)),
              TurnStatus::kEndOfGeneration);
    const TurnResult r = s.generate(2, PieceFn{});
    std::vector<std::string> tokens;
    const io::GgufFile file = io::GgufFile::open(kGptOss.string());
    for (const io::GgufValue& t : file.get_array("tokenizer.ggml.tokens").items)
      tokens.push_back(*t.as_string());
    tokens[size_t(spare)] = "\u0120to=functions.";  // byte-level BPE: a space is "Ġ"
    write_copy(kGptOss, calls,
               {.tokens = tokens, .moves = {{spare, s.kv_tokens()[r.stats.n_prompt]}}});
  }
  const std::string messages = R"([{"role": "user", "content": ")" + kUser + R"("}])";
  const auto body = [&](bool stream, const std::string& extra = "") {
    return R"({"max_tokens": 400, "temperature": 0, "stream": )" +
           std::string(stream ? "true" : "false") + R"(, "messages": )" + messages +
           R"(, "tools": )" + kTools + extra + "}";
  };
  const auto stream_calls = [](const std::string& sse) {
    json out = json::array();
    std::istringstream lines(sse);
    for (std::string line; std::getline(lines, line);) {
      if (!line.starts_with("data: ") || line == "data: [DONE]") continue;
      const json ch = json::parse(line.substr(6))["choices"][0];
      if (ch["delta"].contains("tool_calls"))
        for (const json& tc : ch["delta"]["tool_calls"]) out.push_back(tc);
    }
    return out;
  };
  for (const fs::path& model : {kGptOss, calls}) {
    SCOPED_TRACE(model.string());
    const Served server = start_serve(model, kXmlCtx);
    ASSERT_GT(server.port, 0) << "the server did not start: " << slurp(dir_ / "serve.err");
    httplib::Client c("127.0.0.1", server.port);
    c.set_read_timeout(120, 0);
    // The fixture calls when tool_choice says so; the copy of its own accord.
    const std::string choice = model == kGptOss ? R"(, "tool_choice": "required")" : "";
    const auto res = c.Post("/v1/chat/completions", body(false, choice), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json r = json::parse(res->body);
    const json& msg = r["choices"][0]["message"];
    EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << res->body;
    ASSERT_TRUE(msg.contains("tool_calls")) << res->body;
    ASSERT_EQ(msg["tool_calls"].size(), 1u);
    const json& call = msg["tool_calls"][0];
    EXPECT_TRUE(valid_call({"", call["function"]["name"], call["function"]["arguments"]})) << call;
    // Streamed: the same call.
    const auto sres = c.Post("/v1/chat/completions", body(true, choice), "application/json");
    ASSERT_TRUE(sres);
    const json streamed = stream_calls(sres->body);
    ASSERT_EQ(streamed.size(), 1u) << sres->body;
    EXPECT_EQ(streamed[0]["function"], call["function"]);
    // The conversation goes on with the call and its result; a named function; effort.
    json more = json::parse(messages);
    more.push_back(
        {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", msg["tool_calls"]}});
    more.push_back({{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "sunny"}});
    const auto next = c.Post("/v1/chat/completions",
                             json({{"max_tokens", 8},
                                   {"messages", more},
                                   {"tools", json::parse(kTools)},
                                   {"reasoning_effort", "high"}})
                                 .dump(),
                             "application/json");
    ASSERT_TRUE(next);
    ASSERT_EQ(next->status, 200) << next->body;
    EXPECT_GT(json::parse(next->body)["usage"]["prompt_tokens"].get<int>(),
              r["usage"]["prompt_tokens"].get<int>());
    const auto named =
        c.Post("/v1/chat/completions",
               body(false, R"(, "tool_choice": {"type": "function", "function": {"name": "now"}})"),
               "application/json");
    ASSERT_TRUE(named);
    EXPECT_EQ(
        json::parse(named->body)["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "now")
        << named->body;
  }
  const Served server = start_serve(kGptOss, kXmlCtx);
  ASSERT_GT(server.port, 0);
  httplib::Client c("127.0.0.1", server.port);
  const auto bad = c.Post("/v1/chat/completions",
                          R"({"messages": [{"role": "user", "content": "x"}],
                              "reasoning_effort": "extreme"})",
                          "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("'reasoning_effort' must be"), std::string::npos) << bad->body;
  const auto effort = c.Post("/v1/chat/completions",
                             R"({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
                                 "reasoning_effort": "low"})",
                             "application/json");
  ASSERT_TRUE(effort);
  EXPECT_EQ(effort->status, 200) << effort->body;
}

}  // namespace
