// End to end through the built `strata chat` on tiny-qwen3moe Q8_0: one-shot `-p`, interactive
// mode fed from a pipe (two messages, /commands, EOF with and without a final newline), a full
// context, the template errors, PROF_PROBE_EVERY's passes within a reply, LOOKUP's replies and
// PROMPT_CACHE across runs (chat and run).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

const fs::path kModel = fs::path(STRATA_FIXTURES_DIR) / "tiny-qwen3moe" / "tiny-qwen3moe-Q8_0.gguf";
const fs::path kStrata = fs::path(STRATA_BINARY_DIR) / "tools" / "strata";

struct Result {
  int rc;
  std::string out;
  std::string err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

class ChatCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kModel)) GTEST_SKIP() << "fixture not found at " << kModel;
    if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
    dir_ = fs::temp_directory_path() / fmt::format("strata_chat_{}", ::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Runs `strata chat -m MODEL -t 2 --temp 0 ARGS` with stdin from a file holding `input`.
  Result chat(const std::string& args, const std::string& input = "") {
    {
      std::ofstream in(dir_ / "in.txt", std::ios::binary);
      in << input;
    }
    const std::string cmd =
        fmt::format("'{}' chat -m '{}' -t 2 --temp 0 {} < '{}' > '{}' 2> '{}'", kStrata.string(),
                    kModel.string(), args, (dir_ / "in.txt").string(), (dir_ / "out.txt").string(),
                    (dir_ / "err.txt").string());
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir_ / "out.txt"),
            slurp(dir_ / "err.txt")};
  }

  fs::path dir_;
};

TEST_F(ChatCli, OneShotPrintsTheReply) {
  const Result r = chat("-p 'Hello!' -n 8");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_GT(r.out.size(), 1u);
  EXPECT_NE(r.err.find("chat: qwen3moe, 4 layers, 16 experts (top 4), 2 threads"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("template chatml"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
}

TEST_F(ChatCli, PipedStdinTwoMessages) {
  const Result one = chat("-p 'Hello!' -n 8");
  ASSERT_EQ(one.rc, 0) << one.err;
  const Result r = chat("-n 8", "Hello!\nHow are you?\n");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.err, "[reply cut at -n 8 tokens]"), 2u) << r.err;  // both messages answered
  // No prompt marker on a pipe; a fresh conversation's first reply does not depend on the mode.
  EXPECT_EQ(r.out.substr(0, one.out.size()), one.out);
  EXPECT_GT(r.out.size(), one.out.size());
  EXPECT_EQ(r.err.find("error"), std::string::npos) << r.err;
}

// LOOKUP: the same replies, turn after turn; /stats and the one-shot summary say what the drafts
// did.
TEST_F(ChatCli, LookupGivesTheSameReplies) {
  const std::string input = "Hello hello hello!\nSay it again: hello hello hello\n/stats\n";
  const Result plain = chat("-n 24", input);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  const Result lk = chat("-n 24 --lookup 4 --lookup-ngram 1", input);
  ASSERT_EQ(lk.rc, 0) << lk.err;
  EXPECT_EQ(lk.out, plain.out);
  EXPECT_NE(lk.err.find("LOOKUP=4, this session: "), std::string::npos) << lk.err;
  EXPECT_EQ(plain.err.find("LOOKUP="), std::string::npos) << plain.err;
  const Result one = chat("-p 'Hello hello hello!' -n 16 --lookup 4");
  ASSERT_EQ(one.rc, 0) << one.err;
  EXPECT_NE(one.err.find("chat: LOOKUP=4: "), std::string::npos) << one.err;
}

// PROMPT_CACHE through the CLI: the second chat with the same system prompt restores the first's
// conversation and keeps the prefix it shares; replies as without the cache. `run` restores all
// but the last prompt token and prints what it printed without the file; another model's file is
// not used, says why and is replaced.
TEST_F(ChatCli, PromptCacheAcrossRuns) {
  const std::string cache = (dir_ / "pc.kv").string();
  const std::string sys = "-s 'You answer in short sentences about foxes and dogs.' -n 12";
  const Result first = chat(sys + " -p 'Tell me about foxes.' --prompt-cache '" + cache + "'");
  ASSERT_EQ(first.rc, 0) << first.err;
  EXPECT_NE(first.err.find("none yet"), std::string::npos) << first.err;
  EXPECT_NE(first.err.find("chat: prompt cache " + cache + ": saved "), std::string::npos)
      << first.err;
  EXPECT_TRUE(fs::exists(cache));
  EXPECT_FALSE(fs::exists(cache + ".tmp"));
  const Result plain = chat(sys + " -p 'And dogs?'");
  const Result cached = chat(sys + " -p 'And dogs?' --prompt-cache '" + cache + "'");
  ASSERT_EQ(cached.rc, 0) << cached.err;
  EXPECT_EQ(cached.out, plain.out);
  EXPECT_NE(cached.err.find("tokens restored in"), std::string::npos) << cached.err;

  const auto run = [&](const std::string& model, const std::string& args) {
    const std::string cmd =
        fmt::format("'{}' run -m '{}' -t 2 --temp 0 -n 8 {} > '{}' 2> '{}'", kStrata.string(),
                    model, args, (dir_ / "out.txt").string(), (dir_ / "err.txt").string());
    const int status = std::system(cmd.c_str());
    return Result{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir_ / "out.txt"),
                  slurp(dir_ / "err.txt")};
  };
  const std::string prompt = "-p 'The quick brown fox jumps over the lazy dog' ";
  const Result r0 = run(kModel.string(), prompt);
  ASSERT_EQ(r0.rc, 0) << r0.err;
  const Result r1 = run(kModel.string(), prompt + "--prompt-cache '" + cache + "'");
  ASSERT_EQ(r1.rc, 0) << r1.err;
  // The chat's file was another prompt: restored nothing of this one and replaced it.
  EXPECT_NE(r1.err.find("run: prompt cache " + cache + ": 0 of the prompt's"), std::string::npos)
      << r1.err;
  const Result r2 = run(kModel.string(), prompt + "--prompt-cache '" + cache + "'");
  ASSERT_EQ(r2.rc, 0) << r2.err;
  EXPECT_EQ(r2.out, r0.out);
  EXPECT_NE(r2.err.find("run: prefill 1 tokens"), std::string::npos) << r2.err;
  EXPECT_EQ(r2.err.find("saved"), std::string::npos) << r2.err;  // it holds this prompt already
  const fs::path other =
      fs::path(STRATA_FIXTURES_DIR) / "tiny-qwen3moe" / "tiny-qwen3moe-Q4_0.gguf";
  const Result r3 = run(other.string(), prompt + "--prompt-cache '" + cache + "'");
  ASSERT_EQ(r3.rc, 0) << r3.err;
  EXPECT_NE(r3.err.find("not used (written for another model"), std::string::npos) << r3.err;
  EXPECT_NE(r3.err.find("saved"), std::string::npos) << r3.err;
}

TEST_F(ChatCli, LastLineWithoutNewlineAndCommands) {
  const Result r = chat("-n 4 -s 'You are terse.'",
                        "/help\n\nHello!\n/stats\n/save-usage\n/nonsense\n/reset\n/stats\nBye");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.err, "[reply cut at -n 4 tokens]"), 2u) << r.err;  // "Hello!" and "Bye"
  EXPECT_GT(r.out.size(), 2u);
  EXPECT_NE(r.err.find("/reset"), std::string::npos) << r.err;                    // /help
  EXPECT_NE(r.err.find("last reply: 4 tokens"), std::string::npos) << r.err;      // /stats
  EXPECT_NE(r.err.find("/save-usage: give a file"), std::string::npos) << r.err;  // /save-usage
  EXPECT_NE(r.err.find("unknown command /nonsense"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("conversation cleared"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("context: 0 of 512 tokens used, 1 messages"), std::string::npos)
      << r.err;  // after /reset only the system prompt is left
}

TEST_F(ChatCli, ContextFullIsReported) {
  const Result r = chat("--ctx 24 -n -1", "Hello!\nMore please.\n");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("the context is full"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/reset"), std::string::npos) << r.err;
}

TEST_F(ChatCli, OneShotPromptTooLongFails) {
  const Result r = chat("--ctx 8 -p 'Hello there, how are you today?'");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("strata: error:"), std::string::npos) << r.err;
  EXPECT_EQ(count(r.err.substr(r.err.find("strata: error:")), "\n"), 1u) << r.err;
}

// A context whose KV cache cannot fit in memory is refused before anything is allocated (the
// fixture's KV takes 4 KiB a position: 2^32 - 1 positions are 16 TiB), explicit RAM_GB or not.
TEST_F(ChatCli, ContextPastMemoryIsAnError) {
  for (const char* ram : {"auto", "1"}) {
    const Result r = chat(fmt::format("--ctx 4294967295 -p hi --ram-gb {}", ram));
    EXPECT_EQ(r.rc, 1) << ram;
    EXPECT_NE(r.err.find("strata: error: the KV cache of 4294967295 positions takes 16.0 TiB"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("lower --ctx or set KV_TYPE=f16"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(ChatCli, UnknownTemplateNameIsAnError) {
  const Result r = chat("--chat-template nonsense -p hi");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("unknown name 'nonsense'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("chatml"), std::string::npos) << r.err;  // lists the accepted names
  EXPECT_EQ(r.out, "");
}

TEST_F(ChatCli, ExplicitTemplateOverridesTheModels) {
  const Result r = chat("--chat-template llama2 -p 'Hello!' -n 4");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("template llama2"), std::string::npos) << r.err;
}

// PROF_PROBE_EVERY in a reply: real passes (real threads over a real buffer) after the first
// piece and after every 2 decoded tokens, windows between them; without PROF_PROBE, an error.
// --json / --json-schema (chat and run): the reply is a JSON document the schema accepts; bad
// schemas and files are one-line errors before the model loads.
TEST_F(ChatCli, JsonSchemaRepliesAndErrors) {
  const std::string schema =
      R"({"type":"object","properties":{"ok":{"type":"boolean"},"n":{"enum":[1,2,3]}},)"
      R"("required":["ok","n"]})";
  const Result r = chat("-p 'JSON please' -n 200 --json-schema '" + schema + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string out = r.out;
  if (!out.empty() && out.back() == '\n') out.pop_back();
  const nlohmann::json v = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << out;
  EXPECT_TRUE(v["ok"].is_boolean()) << out;
  EXPECT_TRUE(v["n"] == 1 || v["n"] == 2 || v["n"] == 3) << out;
  EXPECT_EQ(v.size(), 2u) << out;
  // The same schema from a file, through `run`.
  {
    std::ofstream f(dir_ / "schema.json");
    f << schema;
  }
  const std::string cmd = fmt::format(
      "'{}' run -m '{}' -t 2 --temp 0.7 --seed 4 -n 200 --no-display-prompt -p 'JSON:' "
      "--json-schema '{}' > '{}' 2> '{}'",
      kStrata.string(), kModel.string(), (dir_ / "schema.json").string(),
      (dir_ / "out.txt").string(), (dir_ / "err.txt").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(dir_ / "err.txt");
  std::string run_out = slurp(dir_ / "out.txt");
  if (!run_out.empty() && run_out.back() == '\n') run_out.pop_back();
  const nlohmann::json w = nlohmann::json::parse(run_out, nullptr, false);
  ASSERT_FALSE(w.is_discarded()) << run_out;
  EXPECT_TRUE(w["ok"].is_boolean()) << run_out;

  const std::pair<std::string, std::string> bad[] = {
      {"--json-schema /nonexistent/s.json", "no such file"},
      {"--json --json-schema '{}'", "pick one"},
      {"--json-schema '{\"type\":\"string\",\"pattern\":\"(x)\\\\1\"}'", "a backreference"},
      {"--json-schema '{\"type\":'", "not valid JSON"},
  };
  for (const auto& [args, want] : bad) {
    const Result e = chat("-p hi -n 4 " + args);
    EXPECT_EQ(e.rc, 1) << args;
    EXPECT_NE(e.err.find(want), std::string::npos) << args << " -> " << e.err;
    EXPECT_EQ(count(e.err, "\n"), 1u) << e.err;  // one line, before the model loads
  }
}

TEST_F(ChatCli, ProfProbeEveryTakesPassesInTheReply) {
  const fs::path json = dir_ / "prof.json";
  const Result r =
      chat(fmt::format("-p 'Hello!' -n 9 --prof 1 --prof-probe 64 "
                       "--prof-probe-every 2 --prof-json '{}'",
                       json.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  const int64_t tokens = j["decode_tokens"].get<int64_t>();
  ASSERT_GE(tokens, 2) << r.err;  // the reply decoded at least one window's worth
  const nlohmann::json p = j["run_probe"];
  ASSERT_TRUE(p.is_object()) << slurp(json);
  EXPECT_EQ(p["every"].get<int>(), 2);
  EXPECT_EQ(p["passes"].get<int64_t>(), 1 + tokens / 2);
  EXPECT_EQ(p["windows"].get<int64_t>(), tokens / 2);
  EXPECT_GT(p["gb_s"]["median"].get<double>(), 0.0);
  EXPECT_NE(r.err.find("prof: in-run probe: "), std::string::npos) << r.err;

  const Result bare = chat("-p 'Hello!' -n 4 --prof 1 --prof-probe-every 2");
  EXPECT_NE(bare.rc, 0);
  EXPECT_NE(bare.err.find("PROF_PROBE_EVERY=2 needs PROF_PROBE"), std::string::npos) << bare.err;
  EXPECT_EQ(bare.out, "");
}

}  // namespace
