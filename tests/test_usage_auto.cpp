// USAGE_AUTO end to end through the built `strata`, on a `synth --preset tiny` model at a RAM
// budget that leaves most experts on SSD, with CACHE_DIR in a scratch directory: `run` adds its
// usage to the model's learned profile at exit; the next run plans from it (a line says so; the
// same share of expert uses served by RAM homes as PIN=the profile, more than the default plan's),
// gives the same tokens, and `strata plan` shows that plan without writing; chat learns too and
// its placement line says what chose the homes; `replay`, USAGE_AUTO=0 and a profile under the
// minimum leave the plan alone, and only run/chat/serve write the profile; PIN wins over it but
// the run still learns; concurrent runs add up (flock); a profile past 2^20 tokens is halved; a
// broken profile is replaced with a notice, never a failed run. And PROMPT_PLACE in `run`: on for a
// first run's long prompt, off for a short reply or a learned plan.
#include <gtest/gtest.h>

#include "engine/expert_source.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "placement/plan.h"
#include "placement/usage_stats.h"
#include "tier_test_util.h"

namespace strata::tier_test {
namespace {

constexpr const char* kPlacedBy = "placed by this model's usage in earlier runs";

class UsageAuto : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir("usage_auto");
    model_path_ = new fs::path(*dir_ / "synth-tiny.gguf");
    engine::SynthOptions so;
    so.preset = *engine::find_synth_preset("tiny");
    so.n_threads = 2;
    engine::SynthModel(so).write(model_path_->string());
    const engine::Model model = engine::Model::load(model_path_->string());
    const placement::ExpertSizes sizes = engine::expert_sizes(model);
    // The minimum cache plus room for a quarter of the experts: most stream from SSD.
    ram_ = new std::string(ram_gb(placement::min_ram_bytes(sizes) + sizes.total_bytes() / 4));
    const placement::ModelIdentity id = placement::model_identity(model.file());
    profile_name_ = new std::string(fmt::format("{}-{:016x}.stats", id.name, id.fingerprint));
    for (char& c : *profile_name_)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  static void TearDownTestSuite() {
    delete ram_;
    delete profile_name_;
    delete model_path_;
    delete dir_;
  }

  // A fresh cache directory per test.
  void SetUp() override {
    cache_ = *dir_ / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(cache_);
    fs::create_directories(cache_);
  }
  fs::path profile() const { return cache_ / "usage" / *profile_name_; }

  // `strata CMD -m MODEL ARGS` with this test's cache, RAM budget and USAGE_AUTO.
  Result strata(const std::string& cmd, const std::string& args, const std::string& usage_auto,
                const std::string& env = "") const {
    return run_strata(
        cache_, fmt::format("{} -m '{}' --ram-gb {} {}", cmd, model_path_->string(), *ram_, args),
        fmt::format("CACHE_DIR='{}' USAGE_AUTO={} {}", cache_.string(), usage_auto, env));
  }
  Result run(const std::string& usage_auto = "16", const std::string& env = "",
             const std::string& more = "") const {
    return strata("run", "-p 'The quick brown fox jumps over the lazy dog' -n 12 --temp 0 " + more,
                  usage_auto, env);
  }
  // A run's share of expert uses served by RAM homes (PROF_JSON hit_rates.ram_pinned).
  double pinned_share(const std::string& usage_auto, const std::string& env = "") const {
    const fs::path json = cache_ / "prof.json";
    const Result r = run(usage_auto, env, "--prof-json '" + json.string() + "'");
    EXPECT_EQ(r.rc, 0) << r.err;
    return nlohmann::json::parse(slurp(json))["hit_rates"]["ram_pinned"].get<double>();
  }
  placement::UsageStats learned() const { return placement::UsageStats::load(profile().string()); }

  static ScratchDir* dir_;
  static fs::path* model_path_;
  static std::string* ram_;
  static std::string* profile_name_;
  fs::path cache_;
};

ScratchDir* UsageAuto::dir_ = nullptr;
fs::path* UsageAuto::model_path_ = nullptr;
std::string* UsageAuto::ram_ = nullptr;
std::string* UsageAuto::profile_name_ = nullptr;

// The plan line (`strata: plan: ...`: experts per tier) of a run's stderr.
std::string plan_line(const std::string& err) {
  const size_t at = err.find("strata: plan: ");
  return at == std::string::npos ? "" : err.substr(at + 14, err.find('\n', at) - at - 14);
}

TEST_F(UsageAuto, LearnsAcrossRunsAndPlacesFromTheProfile) {
  const Result first = run();
  ASSERT_EQ(first.rc, 0) << first.err;
  EXPECT_EQ(first.err.find(kPlacedBy), std::string::npos) << first.err;
  ASSERT_TRUE(fs::exists(profile())) << first.err;
  const uint64_t one_run = learned().tokens();
  EXPECT_GT(one_run, 12u);  // the prompt's tokens and the decode steps
  uint64_t selections = 0;
  for (uint64_t c : learned().counts()) selections += c;
  EXPECT_GT(selections, 0u);

  // The second run plans from it, says so, and gives the same tokens (placement never changes the
  // numbers); the profile now holds both runs.
  const Result second = run();
  ASSERT_EQ(second.rc, 0) << second.err;
  EXPECT_NE(
      second.err.find(fmt::format("{} ({} tokens, {}", kPlacedBy, one_run, profile().string())),
      std::string::npos)
      << second.err;
  EXPECT_EQ(second.out, first.out);
  EXPECT_EQ(learned().tokens(), 2 * one_run);

  // Its plan is PIN's from the same file (the same experts in RAM: the same share of uses served
  // there), and another than the usage-free default's.
  const std::string held = (cache_ / "held.stats").string();
  fs::copy_file(profile(), held);
  const double pin_share = pinned_share("0", "PIN='" + held + "'");
  const double learned_share = pinned_share("16");
  const double default_share = pinned_share("0");
  EXPECT_EQ(learned_share, pin_share);
  EXPECT_GT(learned_share, default_share);  // learned on this very prompt
  std::printf("RAM-homed share of expert uses: default %.3f, learned %.3f\n", default_share,
              learned_share);
  const std::string before_plan = slurp(profile());
  const Result plan = strata("plan", "", "16");
  ASSERT_EQ(plan.rc, 0) << plan.err;
  EXPECT_NE(plan.out.find("from the learned profile " + profile().string()), std::string::npos)
      << plan.out;
  EXPECT_NE(plan.out.find(plan_line(second.err)), std::string::npos) << plan.out;
  EXPECT_EQ(slurp(profile()), before_plan);  // plan reads, never writes
}

TEST_F(UsageAuto, ReplayAndUsageAutoZeroNeitherReadNorWrite) {
  ASSERT_EQ(run().rc, 0);
  const std::string after_run = slurp(profile());
  write_streams(cache_ / "streams.txt", 64, {20, 20});
  const Result replay =
      strata("replay", fmt::format("--tokens '{}'", (cache_ / "streams.txt").string()), "1");
  ASSERT_EQ(replay.rc, 0) << replay.err;
  EXPECT_EQ(replay.err.find(kPlacedBy), std::string::npos) << replay.err;
  const Result off = run("0");
  ASSERT_EQ(off.rc, 0) << off.err;
  EXPECT_EQ(off.err.find(kPlacedBy), std::string::npos) << off.err;
  EXPECT_EQ(slurp(profile()), after_run);
  // Under the minimum: learned from, not planned with.
  const Result few = run("1000000");
  ASSERT_EQ(few.rc, 0) << few.err;
  EXPECT_EQ(few.err.find(kPlacedBy), std::string::npos) << few.err;
  EXPECT_NE(slurp(profile()), after_run);
}

// chat's placement line says what chose the homes: nothing yet, then the learned profile.
TEST_F(UsageAuto, ChatSaysWhatPlacedTheExperts) {
  const Result first = strata("chat", "-p 'Hello there' -n 8 --temp 0", "16");
  ASSERT_EQ(first.rc, 0) << first.err;
  EXPECT_NE(first.err.find("; usage-free (USAGE_AUTO is learning this model's usage)"),
            std::string::npos)
      << first.err;
  const uint64_t tokens = learned().tokens();
  EXPECT_GT(tokens, 8u);  // chat learns too
  const Result second = strata("chat", "-p 'Hello there' -n 8 --temp 0", "16");
  ASSERT_EQ(second.rc, 0) << second.err;
  EXPECT_NE(
      second.err.find(fmt::format("; by this model's usage in earlier runs ({} tokens)", tokens)),
      std::string::npos)
      << second.err;
  EXPECT_EQ(second.out, first.out);
}

// PIN=learned names the profile where a command does not read it by itself (replay, and so ab and
// sweep arms); without one it is a one-line error.
TEST_F(UsageAuto, PinLearnedIsTheProfile) {
  write_streams(cache_ / "streams.txt", 64, {24, 24});
  const std::string replay =
      fmt::format("--tokens '{}' --prof-json '{}'", (cache_ / "streams.txt").string(),
                  (cache_ / "replay.json").string());
  const Result none = strata("replay", replay, "16", "PIN=learned");
  EXPECT_EQ(none.rc, 1);
  EXPECT_NE(none.err.find("PIN=learned: this model has no learned usage profile yet"),
            std::string::npos)
      << none.err;
  ASSERT_EQ(run().rc, 0);
  const std::string held = (cache_ / "held.stats").string();
  fs::copy_file(profile(), held);
  const auto share = [&](const std::string& env) {
    const Result r = strata("replay", replay, "16", env);
    EXPECT_EQ(r.rc, 0) << r.err;
    return nlohmann::json::parse(slurp(cache_ / "replay.json"))["hit_rates"]["ram_pinned"]
        .get<double>();
  };
  const double learned = share("PIN=learned");
  EXPECT_EQ(learned, share("PIN='" + held + "'"));
  EXPECT_NE(learned, share(""));
}

// PROMPT_PLACE through the CLI: a first run (no profile) with a long prompt places by it, said in
// PROF's line, with the same tokens as without; `-n` under 16 tokens (run, chat) does not; nor a
// run planned from the learned profile.
TEST_F(UsageAuto, PromptPlacementInRunAndWhenItIsSkipped) {
  std::string prompt;
  for (int i = 0; i < 8; ++i) prompt += "The quick brown fox jumps over the lazy dog. ";
  const auto go = [&](int n, const std::string& usage_auto, const std::string& env) {
    return strata("run", fmt::format("-p '{}' -n {} --temp 0", prompt, n), usage_auto,
                  "PROF=1 " + env);
  };
  const std::string line = "prof: prompt placement: ";
  const Result placed = go(20, "0", "");
  ASSERT_EQ(placed.rc, 0) << placed.err;
  EXPECT_NE(placed.err.find(line), std::string::npos) << placed.err;
  const Result off = go(20, "0", "PROMPT_PLACE=0");
  ASSERT_EQ(off.rc, 0) << off.err;
  EXPECT_EQ(off.err.find(line), std::string::npos) << off.err;
  EXPECT_EQ(placed.out, off.out);
  const Result short_reply = go(8, "0", "");
  ASSERT_EQ(short_reply.rc, 0) << short_reply.err;
  EXPECT_EQ(short_reply.err.find(line), std::string::npos) << short_reply.err;
  for (const int n : {8, 20}) {  // chat's -n caps every reply the same way
    const Result chat =
        strata("chat", fmt::format("-p '{}' -n {} --temp 0", prompt, n), "0", "PROF=1");
    ASSERT_EQ(chat.rc, 0) << chat.err;
    EXPECT_EQ(chat.err.find(line) != std::string::npos, n >= 16) << chat.err;
  }
  ASSERT_EQ(go(20, "16", "").rc, 0);  // learns a profile
  const Result learned = go(20, "16", "");
  ASSERT_EQ(learned.rc, 0) << learned.err;
  EXPECT_NE(learned.err.find(kPlacedBy), std::string::npos) << learned.err;
  EXPECT_EQ(learned.err.find(line), std::string::npos) << learned.err;
  EXPECT_EQ(learned.out, placed.out);
}

TEST_F(UsageAuto, PinWinsButTheRunStillLearns) {
  ASSERT_EQ(run().rc, 0);
  const uint64_t one_run = learned().tokens();
  const std::string held = (cache_ / "held.stats").string();
  fs::copy_file(profile(), held);
  const Result r = run("16", "PIN='" + held + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find(kPlacedBy), std::string::npos) << r.err;
  EXPECT_EQ(learned().tokens(), 2 * one_run);
}

TEST_F(UsageAuto, ConcurrentRunsAddUp) {
  ASSERT_EQ(run().rc, 0);
  const uint64_t one_run = learned().tokens();
  fs::remove(profile());
  // Three processes at once, each adding its counts under the profile's lock.
  const std::string one = fmt::format(
      "VRAM_GB=0 CACHE_DIR='{}' USAGE_AUTO=16 '{}' run -m '{}' --ram-gb {} -p 'The quick brown "
      "fox jumps over the lazy dog' -n 12 --temp 0 >/dev/null 2>&1",
      cache_.string(), kStrata.string(), model_path_->string(), *ram_);
  const std::string cmd = fmt::format("({0}) & ({0}) & ({0}) & wait", one);
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(learned().tokens(), 3 * one_run);
}

TEST_F(UsageAuto, AProfilePastTwoToTheTwentyTokensIsHalved) {
  ASSERT_EQ(run().rc, 0);
  const placement::UsageStats one = learned();
  // The same profile with 2^20 - 1 decode tokens: one more run passes 2^20, so all is halved.
  std::string text = slurp(profile());
  const std::string tokens_line =
      fmt::format("tokens {} {}\n", one.decode_tokens(), one.prefill_tokens());
  const size_t at = text.find(tokens_line);
  ASSERT_NE(at, std::string::npos) << text;
  const uint64_t big = (uint64_t{1} << 20) - 1;
  text.replace(at, tokens_line.size(), fmt::format("tokens {} 0\n", big));
  { std::ofstream(profile(), std::ios::binary) << text; }
  ASSERT_EQ(run().rc, 0);
  const placement::UsageStats halved = learned();
  EXPECT_EQ(halved.decode_tokens(), (big + one.decode_tokens()) / 2);
  EXPECT_EQ(halved.prefill_tokens(), one.prefill_tokens() / 2);
  const std::vector<uint64_t> c1 = one.counts(), c2 = halved.counts();
  ASSERT_EQ(c1.size(), c2.size());
  // Two runs of the same prompt, the same routing whatever the plan: twice the counts, halved.
  EXPECT_EQ(c2, c1);
}

TEST_F(UsageAuto, ABrokenProfileIsReplacedWithANotice) {
  fs::create_directories(profile().parent_path());
  { std::ofstream(profile()) << "strata-usage 1\nmodel x\nfingerprint zz\n"; }
  const Result r = run();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("USAGE_AUTO: the learned profile is not used ("), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("USAGE_AUTO: replacing the learned profile ("), std::string::npos) << r.err;
  EXPECT_GT(learned().tokens(), 0u);
  // An unwritable cache: the run still succeeds, with one line saying why nothing was learned.
  const Result ro = run("16", "CACHE_DIR=/proc/strata-no-such-dir");
  ASSERT_EQ(ro.rc, 0) << ro.err;
  EXPECT_NE(ro.err.find("strata: USAGE_AUTO: cannot create the usage profile directory"),
            std::string::npos)
      << ro.err;
}

}  // namespace
}  // namespace strata::tier_test
