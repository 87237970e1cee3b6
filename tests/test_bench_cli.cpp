// `strata bench` end to end on tiny-qwen3moe Q8_0: llama-bench's tests (ppN, tgN, @ dN) for every
// combination of the lists, threads outermost; the JSON carries llama-bench's fields with one
// sample per repetition and their mean and standard deviation; the markdown table has a row per
// test; bad values are one-line errors. Rates are only checked to be positive (never timed).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const fs::path kModel = fs::path(STRATA_FIXTURES_DIR) / "tiny-qwen3moe" / "tiny-qwen3moe-Q8_0.gguf";
const fs::path kStrata = fs::path(STRATA_BINARY_DIR) / "tools" / "strata";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kModel)) GTEST_SKIP() << "fixture not found at " << kModel;
    if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
    dir_ = fs::temp_directory_path() / fmt::format("strata_bench_{}", ::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // `strata bench -m MODEL ARGS`: exit code; stdout and stderr in out_ / err_.
  int bench(const std::string& args, const std::string& env = "VRAM_GB=0") {
    const std::string cmd =
        fmt::format("{} '{}' bench -m '{}' {} > '{}' 2> '{}'", env, kStrata.string(),
                    kModel.string(), args, (dir_ / "out").string(), (dir_ / "err").string());
    const int rc = std::system(cmd.c_str());
    out_ = slurp(dir_ / "out");
    err_ = slurp(dir_ / "err");
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  fs::path dir_;
  std::string out_, err_;
};

TEST_F(BenchCli, JsonHasEveryCombinationWithItsSamples) {
  ASSERT_EQ(bench("-p 16 -n 4 -d 0,8 -r 3 -t 1,2 -o json"), 0) << err_;
  const json r = json::parse(out_);
  ASSERT_EQ(r.size(), 8u);  // 2 threads x 2 depths x (pp16, tg4)
  size_t i = 0;
  for (int t : {1, 2})
    for (int d : {0, 8})
      for (int pp : {1, 0}) {
        const json& e = r[i++];
        EXPECT_EQ(e["n_threads"], t);
        EXPECT_EQ(e["n_depth"], d);
        EXPECT_EQ(e["n_prompt"], pp ? 16 : 0);
        EXPECT_EQ(e["n_gen"], pp ? 0 : 4);
        EXPECT_EQ(e["model_type"], "qwen3moe Q8_0");
        EXPECT_EQ(e["backends"], "CPU");
        EXPECT_EQ(e["model_size"], fs::file_size(kModel));
        EXPECT_GT(e["model_n_params"].get<uint64_t>(), 0u);
        const auto ts = e["samples_ts"].get<std::vector<double>>();
        const auto ns = e["samples_ns"].get<std::vector<uint64_t>>();
        ASSERT_EQ(ts.size(), 3u);
        ASSERT_EQ(ns.size(), 3u);
        double mean = 0;
        for (size_t k = 0; k < 3; ++k) {
          EXPECT_GT(ts[k], 0);
          EXPECT_NEAR(ts[k], (pp ? 16 : 4) / (double(ns[k]) * 1e-9), ts[k] * 1e-3);
          mean += ts[k] / 3;
        }
        EXPECT_NEAR(e["avg_ts"].get<double>(), mean, mean * 1e-9);
        double ss = 0;
        for (double x : ts) ss += (x - mean) * (x - mean);
        EXPECT_NEAR(e["stddev_ts"].get<double>(), std::sqrt(ss / 2), mean * 1e-9);
      }
  // One progress line per repetition on stderr.
  EXPECT_EQ(count(err_, ": repetition "), 8u * 3u);
}

// The -d context is prefilled once per thread count and shared: every repetition, warm-up and
// test at a depth truncates back to it, a deeper one extends it, a shallower one reuses its start.
TEST_F(BenchCli, DepthIsFilledOnceAndExtended) {
  ASSERT_EQ(bench("-p 4 -n 2 -d 8,32,16 -r 3 -t 1,2"), 0) << err_;
  EXPECT_EQ(count(err_, ": repetition "), 2u * 3u * 2u * 3u);
  for (int t : {1, 2}) {
    EXPECT_EQ(count(err_, fmt::format("bench: t={}: filling the context to depth 8 (8 tokens", t)),
              1u)
        << err_;
    EXPECT_EQ(
        count(err_, fmt::format("bench: t={}: filling the context to depth 32 (24 tokens", t)), 1u)
        << err_;
  }
  EXPECT_EQ(count(err_, "filling the context"), 4u) << err_;
  // Each fill ends with one summary line (a bar only on a terminal).
  EXPECT_EQ(count(err_, "bench: t=2: depth 32 tokens: 24 in "), 1u) << err_;
  EXPECT_EQ(count(err_, "exceeds the model's training context"), 0u) << err_;
}

// A context past the model's context_length (512 for the fixture) runs, with one warning line.
TEST_F(BenchCli, DepthPastTheTrainingContextWarns) {
  ASSERT_EQ(bench("-p 0 -n 1 -d 520 -r 1 -t 2"), 0) << err_;
  EXPECT_EQ(count(err_, "strata: warning: context 521 exceeds the model's training context 512\n"),
            1u)
      << err_;
}

TEST_F(BenchCli, MarkdownTableAndProf) {
  ASSERT_EQ(bench("-p 8 -n 2 -r 1 -t 2", "VRAM_GB=0 PROF=1"), 0) << err_;
  EXPECT_NE(out_.find("| model | size | params | backend | threads | test | t/s |"),
            std::string::npos)
      << out_;
  EXPECT_NE(out_.find("| qwen3moe Q8_0 | 7.57 MiB |"), std::string::npos) << out_;
  EXPECT_NE(out_.find("| CPU | 2 | pp8 | "), std::string::npos) << out_;
  EXPECT_NE(out_.find("| CPU | 2 | tg2 | "), std::string::npos) << out_;
  EXPECT_NE(err_.find("prof:"), std::string::npos) << "PROF=1 reports at the end";
}

// PROF counts the timed parts only: the -d context's prefills and the warm-up run are untimed, so
// the report's expert uses are exactly those of the timed decode tokens (2 repetitions x 4 tokens
// x 4 MoE layers x top-4), and no prefill is reported.
TEST_F(BenchCli, ProfCountsTheTimedTokensOnly) {
  const fs::path pj = dir_ / "prof.json";
  ASSERT_EQ(bench("-p 0 -n 4 -d 16 -r 2 -t 2", "VRAM_GB=0 PROF=1 PROF_JSON='" + pj.string() + "'"),
            0)
      << err_;
  const json j = json::parse(slurp(pj));
  EXPECT_EQ(j["decode_tokens"].get<uint64_t>(), 8u);
  EXPECT_EQ(j["prefill_tokens"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["hit_rates"]["expert_uses"].get<uint64_t>(), 2u * 4 * 4 * 4);
}

TEST_F(BenchCli, BadValuesAreOneLineErrors) {
  const std::pair<const char*, const char*> bad[] = {
      {"-r 0", "strata: error: -r 0: at least one repetition\n"},
      {"-p 0 -n 0", "strata: error: nothing to run: every -p and -n is 0\n"},
      {"-o csv", "strata: error: -o csv: md or json\n"},
      {"-t 0", "strata: error: -t 0: must be >= 1\n"},
      {"-p -5", "strata: error: -p -5: must be >= 0\n"},
  };
  for (const auto& [args, want] : bad) {
    EXPECT_EQ(bench(args), 1) << args;
    EXPECT_EQ(err_, want) << args;
    EXPECT_TRUE(out_.empty()) << args;
  }
}

}  // namespace
