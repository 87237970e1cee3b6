// End to end through the built `strata` binary: `strata replay` dumps match llama.cpp's references
// (logits and routing of tiny-qwen3moe F32 streams 0 and 1), bad token files fail with one line
// naming line:column and write nothing, and a greedy `strata run` prints the reference
// continuation up to the first end-of-generation token.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/logit_dump.h"
#include "engine/perplexity.h"

namespace fs = std::filesystem;
using namespace strata::engine;

namespace {

const fs::path kModelDir = fs::path(STRATA_FIXTURES_DIR) / "tiny-qwen3moe";
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

class StrataCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kModelDir)) GTEST_SKIP() << "fixtures not found at " << kModelDir;
    if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
    dir_ = fs::temp_directory_path() / fmt::format("strata_replay_{}", ::getpid());
    fs::create_directories(dir_);
    std::ifstream in(kModelDir / "ref" / "F32" / "ref.json");
    ref_ = nlohmann::json::parse(in);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Result strata(const std::string& args) {
    const std::string cmd = fmt::format("'{}' {} > '{}' 2> '{}'", kStrata.string(), args,
                                        (dir_ / "out.txt").string(), (dir_ / "err.txt").string());
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir_ / "out.txt"),
            slurp(dir_ / "err.txt")};
  }
  std::string model(const char* variant = "F32") const {
    return (kModelDir / fmt::format("tiny-qwen3moe-{}.gguf", variant)).string();
  }

  fs::path dir_;
  nlohmann::json ref_;
};

// replay's closing perplexity line names want's prediction count and mean NLL (within tol).
void expect_perplexity(const std::string& err, const NllStats& want, double tol) {
  const std::regex line(
      R"(perplexity ([0-9.]+) \+/- [0-9.]+ over (\d+) predictions \(mean NLL ([0-9.]+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(err, m, line)) << err;
  EXPECT_EQ(std::stoul(m[2]), want.count());
  EXPECT_NEAR(std::stod(m[3]), want.mean_nll(), tol);
}

TEST_F(StrataCli, ReplayMatchesReference) {
  std::ofstream tokens(dir_ / "streams.txt");
  for (const auto& s : ref_["streams"]) {
    for (int id : s["ids"]) tokens << id << ' ';
    tokens << "\n\n";  // blank lines are skipped
  }
  tokens.close();
  const Result r =
      strata(fmt::format("replay -m '{}' --tokens '{}' --dump-logits '{}' "
                         "--dump-routing '{}' -t 2 --ubatch 24",
                         model(), (dir_ / "streams.txt").string(), (dir_ / "logits").string(),
                         (dir_ / "routing").string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
  // The perplexity of both streams is the one llama.cpp's own logits give (every prediction).
  NllStats want_nll;
  for (int s = 0; s < 2; ++s) {
    const LogitDump want =
        read_logit_dump((kModelDir / "ref/F32" / fmt::format("stream{}.logits.bin", s)).string());
    want_nll.add_stream(want.tokens, want.logits, want.n_vocab, 0);
  }
  expect_perplexity(r.err, want_nll, 1e-5);
  for (int s = 0; s < 2; ++s) {
    const auto name = [s](const char* kind) { return fmt::format("stream{}.{}.bin", s, kind); };
    const LogitDump got = read_logit_dump((dir_ / "logits" / name("logits")).string());
    const LogitDump want = read_logit_dump((kModelDir / "ref/F32" / name("logits")).string());
    ASSERT_EQ(got.tokens, want.tokens);
    ASSERT_EQ(got.n_vocab, want.n_vocab);
    double max_abs = 0;
    for (size_t i = 0; i < want.logits.size(); ++i)
      max_abs = std::max(max_abs, std::fabs(double(got.logits[i]) - want.logits[i]));
    EXPECT_LE(max_abs, 1e-4) << "stream " << s;

    const RoutingTrace gr = read_routing_dump((dir_ / "routing" / name("routing")).string());
    const RoutingTrace wr = read_routing_dump((kModelDir / "ref/F32" / name("routing")).string());
    ASSERT_EQ(gr.n_layer, wr.n_layer);
    ASSERT_EQ(gr.n_pos, wr.n_pos);
    ASSERT_EQ(gr.n_expert, wr.n_expert);
    ASSERT_EQ(gr.k, wr.k);
    double max_prob = 0;
    for (uint32_t il = 0; il < wr.n_layer; ++il)
      for (uint32_t p = 0; p < wr.n_pos; ++p)
        for (uint32_t e = 0; e < wr.n_expert; ++e)
          max_prob =
              std::max(max_prob, std::fabs(double(gr.prob_at(il, p)[e]) - wr.prob_at(il, p)[e]));
    EXPECT_LE(max_prob, 1e-5) << "stream " << s;
    // Identical top-k ids except where the reference's top k+1 probabilities have a gap < 1e-4
    // (a near-tie that float rounding may order differently).
    for (uint32_t il = 0; il < wr.n_layer; ++il) {
      for (uint32_t p = 0; p < wr.n_pos; ++p) {
        std::vector<float> sorted(wr.prob_at(il, p), wr.prob_at(il, p) + wr.n_expert);
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        bool tie = false;
        for (uint32_t j = 0; j < wr.k; ++j) tie |= sorted[j] - sorted[j + 1] < 1e-4f;
        if (tie) continue;
        EXPECT_TRUE(std::equal(wr.topk_at(il, p), wr.topk_at(il, p) + wr.k, gr.topk_at(il, p)))
            << "stream " << s << " layer " << il << " pos " << p;
      }
    }
  }
}

TEST_F(StrataCli, ReplayRejectsBadTokensWithLineAndColumn) {
  const std::pair<const char*, const char*> cases[] = {
      {"1 2 3\n4 five 6\n", ":2:3: 'five' is not a token id"},
      {"1 2\n\n 7 600\n", ":3:4: token id 600 is out of range (n_vocab 600)"},
      {"1 -3\n", ":1:3: token id -3 is out of range"},
  };
  for (const auto& [text, needle] : cases) {
    std::ofstream(dir_ / "bad.txt") << text;
    const Result r = strata(fmt::format("replay -m '{}' --tokens '{}' --dump-logits '{}'", model(),
                                        (dir_ / "bad.txt").string(), (dir_ / "bad_out").string()));
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "bad_out" / "stream0.logits.bin"));
  }
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// --text: the file tokenized once and cut into llama-perplexity's chunks (BOS first when the
// vocabulary adds one), the second half of each scored; the printed perplexity is the one the
// chunks' dumped logits give.
TEST_F(StrataCli, ReplayTextScoresChunksAsLlamaPerplexity) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "The quick brown fox jumps over the lazy dog. ";
  std::ofstream(dir_ / "text.txt") << text;
  const Result r =
      strata(fmt::format("replay -m '{}' --text '{}' --chunk 16 --chunks 3 --dump-logits '{}' -t 2",
                         model("Q8_0"), (dir_ / "text.txt").string(), (dir_ / "tl").string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("3 chunks of 16"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stream 3/3: perplexity so far"), std::string::npos) << r.err;
  NllStats want;
  for (int s = 0; s < 3; ++s) {
    const LogitDump d =
        read_logit_dump((dir_ / "tl" / fmt::format("stream{}.logits.bin", s)).string());
    ASSERT_EQ(d.tokens.size(), 16u);
    want.add_stream(d.tokens, d.logits, d.n_vocab, 8);
  }
  EXPECT_EQ(want.count(), 3u * 7u);
  expect_perplexity(r.err, want, 1e-6);

  // Too short a text for one chunk, and a missing file: one line each, non-zero.
  std::ofstream(dir_ / "short.txt") << "fox";
  for (const auto& [file, needle] :
       {std::pair{dir_ / "short.txt", std::string("fewer than one chunk of 16")},
        std::pair{dir_ / "nope.txt", std::string("cannot open text file")}}) {
    const Result e =
        strata(fmt::format("replay -m '{}' --text '{}' --chunk 16", model("Q8_0"), file.string()));
    EXPECT_NE(e.rc, 0);
    EXPECT_NE(e.err.find(needle), std::string::npos) << e.err;
  }
}

// --kl-base: the KL divergence from llama.cpp's own F32 dumps (the fixture's reference: the
// same MOEL files replay writes) — near 0 for the F32 file, small but not 0 for Q8_0; streams
// that are not the dumps' are a one-line error.
TEST_F(StrataCli, ReplayKlDivergenceFromReferenceDumps) {
  std::ofstream tokens(dir_ / "streams.txt");
  for (const auto& s : ref_["streams"]) {
    for (int id : s["ids"]) tokens << id << ' ';
    tokens << "\n";
  }
  tokens.close();
  const std::regex kl_line(
      R"(KL divergence from .*: mean ([0-9.e-]+) \+/- [0-9.e-]+, max ([0-9.e-]+); same top token at )"
      R"(([0-9.]+)% of (\d+) positions)");
  double mean_f32 = 0, mean_q8 = 0;
  for (const char* variant : {"F32", "Q8_0"}) {
    const Result r =
        strata(fmt::format("replay -m '{}' --tokens '{}' --kl-base '{}' -t 2", model(variant),
                           (dir_ / "streams.txt").string(), (kModelDir / "ref/F32").string()));
    ASSERT_EQ(r.rc, 0) << r.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.err, m, kl_line)) << r.err;
    const bool f32 = std::string(variant) == "F32";
    (f32 ? mean_f32 : mean_q8) = std::stod(m[1]);
    if (f32) {
      EXPECT_GE(std::stod(m[3]), 99.0) << r.err;
    }
  }
  EXPECT_LT(mean_f32, 1e-6);
  EXPECT_GT(mean_q8, mean_f32);
  EXPECT_LT(mean_q8, 0.1);

  std::ofstream(dir_ / "other.txt") << "1 2 3 4\n";
  const Result bad =
      strata(fmt::format("replay -m '{}' --tokens '{}' --kl-base '{}'", model(),
                         (dir_ / "other.txt").string(), (kModelDir / "ref/F32").string()));
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("not this stream's"), std::string::npos) << bad.err;
  const Result nodir = strata(fmt::format("replay -m '{}' --tokens '{}' --kl-base '{}'", model(),
                                          (dir_ / "other.txt").string(), (dir_ / "nope").string()));
  EXPECT_NE(nodir.rc, 0);
  EXPECT_NE(nodir.err.find("not a directory"), std::string::npos) << nodir.err;
}

TEST_F(StrataCli, GreedyRunPrintsReferenceContinuation) {
  const auto& g = ref_["greedy"][0];
  const std::string prompt = g["prompt"];
  const std::string text = from_hex(g["generated_text_hex"]);
  // The reference kept generating past <|endoftext|> (rendered in its text); `run` stops there.
  const std::string until_eog = text.substr(0, text.find("<|endoftext|>"));
  const Result r =
      strata(fmt::format("run -m '{}' -p '{}' -n 32 --temp 0 -t 2", model("Q8_0"), prompt));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, prompt + until_eog + "\n");
  EXPECT_NE(r.err.find("prefill 13 tokens"), std::string::npos) << r.err;

  // LOOKUP: the same text, and the line that says what the drafts did.
  const Result lk = strata(
      fmt::format("run -m '{}' -p '{}' -n 32 --temp 0 -t 2 --lookup 4", model("Q8_0"), prompt));
  ASSERT_EQ(lk.rc, 0) << lk.err;
  EXPECT_EQ(lk.out, r.out);
  EXPECT_NE(lk.err.find("run: LOOKUP=4: "), std::string::npos) << lk.err;
  const Result bad = strata(fmt::format("run -m '{}' -p x --lookup 99", model("Q8_0")));
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("LOOKUP"), std::string::npos) << bad.err;
  EXPECT_EQ(bad.out, "");
}

}  // namespace
