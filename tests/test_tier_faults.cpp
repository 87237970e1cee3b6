// Faults through the engine's tiers: RAM_GB below the minimum names the minimum; bad tier knob
// values name the knob and range; a model file truncated or replaced under a run is an error (no
// hang, no SIGBUS: the dense weights are resident); injected read errors name file and offset;
// a forced io_uring failure falls back to pread with one notice and the same logits. Also the
// /proc/meminfo and /proc/self/cgroup parsers behind the automatic RAM_GB.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "engine/expert_source.h"
#include "engine/forward.h"
#include "engine/knobs.h"
#include "engine/model.h"
#include "engine/session.h"
#include "engine/sysmem.h"
#include "engine/tokenizer.h"
#include "io/check.h"
#include "placement/plan.h"
#include "tier_test_util.h"

namespace strata::tier_test {
namespace {

using engine::ExpertSource;
using engine::Forward;
using engine::Model;
using engine::TierOptions;

const fs::path kQwen = kFixtures / "tiny-qwen3moe" / "tiny-qwen3moe-Q8_0.gguf";

class TierFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kQwen)) GTEST_SKIP() << "fixtures not found at " << kQwen;
    model_path_ = dir_ / "model.gguf";
    fs::copy_file(kQwen, model_path_);
  }

  TierOptions min_options(const Model& m) {
    TierOptions o;
    o.ram_bytes = placement::min_ram_bytes(engine::expert_sizes(m));
    o.notice = [this](const std::string& line) { notices_.push_back(line); };
    return o;
  }

  static engine::ForwardOptions forward_options(ExpertSource* experts) {
    engine::ForwardOptions fo;
    fo.n_ctx = 128;
    fo.n_ubatch = 8;
    fo.n_threads = 2;
    fo.experts = experts;
    return fo;
  }

  // Decodes up to n tokens; returns the first error's message ("" when none).
  static std::string decode_until_error(Forward& fwd, uint32_t n_vocab, int n) {
    return error_of([&] {
      for (int32_t id : tokens(n_vocab, n, 99)) fwd.decode(id);
    });
  }

  void chat_recovers(bool vram);

  ScratchDir dir_{"tier_faults"};
  fs::path model_path_;
  std::vector<std::string> notices_;
};

TEST_F(TierFaults, RamGbBelowTheMinimumNamesIt) {
  const Model m = Model::load(model_path_.string());
  const uint64_t min = placement::min_ram_bytes(engine::expert_sizes(m));
  // Printed rounded up, so the number shown is itself a budget that works.
  const std::string min_gib =
      fmt::format("{:.4f} GiB", std::ceil(static_cast<double>(min) / (1 << 30) * 1e4) / 1e4);
  TierOptions o = min_options(m);
  o.ram_bytes = min - 4096;
  const std::string msg = error_of([&] { ExpertSource src(m, o); });
  EXPECT_NE(msg.find("knob RAM_GB (--ram-gb)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("below this model's minimum of " + min_gib), std::string::npos) << msg;
  o.ram_bytes = min;
  EXPECT_EQ(error_of([&] { ExpertSource src(m, o); }), "");
  o.cache_bytes = 2 * min;
  EXPECT_NE(error_of([&] { ExpertSource src(m, o); }).find("knob CACHE_GB (--cache-gb)"),
            std::string::npos);

  // Through the CLI: one line, exit code 1, the minimum in GiB.
  write_streams(dir_ / "s.txt", m.config().n_vocab, {5});
  const Result r = run_strata(
      dir_.path(), fmt::format("replay -m '{}' --tokens '{}' --ram-gb {}", model_path_.string(),
                               (dir_ / "s.txt").string(), ram_gb(min / 2)));
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("minimum of " + min_gib), std::string::npos) << r.err;
}

TEST_F(TierFaults, BadTierKnobValuesNameTheKnobAndRange) {
  const std::pair<const char*, const char*> cases[][2] = {
      {{"RAM_GB", "-1"}, {"RAM_GB", "allowed: 0.."}},
      {{"RAM_GB", "lots"}, {"RAM_GB", "not a number"}},
      {{"DIRECT", "2"}, {"DIRECT", "allowed: 0|1"}},
      {{"URING", "maybe"}, {"URING", "allowed: 0|1"}},
      {{"NUMA", "far"}, {"NUMA", "allowed: interleave|local|off"}},
      {{"PROF", "3"}, {"PROF", "allowed: 0..2"}},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of([&] {
      engine::Knobs::from_values({{c[0].first, c[0].second}});
    });
    EXPECT_NE(msg.find(std::string("knob ") + c[1].first), std::string::npos) << msg;
    EXPECT_NE(msg.find(c[1].second), std::string::npos) << msg;
  }
  const Result r = run_strata(dir_.path(), "replay -m x --tokens y", "DIRECT=7");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("knob DIRECT (--direct): bad value '7'"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(TierFaults, FileTruncatedWhileRunningIsAnError) {
  const Model m = Model::load(model_path_.string());
  ExpertSource src(m, min_options(m));
  Forward fwd(m, forward_options(&src));
  fwd.prefill(tokens(m.config().n_vocab, 8, 1));
  fs::resize_file(model_path_, fs::file_size(model_path_) / 2);
  const std::string msg = decode_until_error(fwd, m.config().n_vocab, 64);
  EXPECT_NE(msg.find(model_path_.string() + ": model file changed while running (its size changed"),
            std::string::npos)
      << msg;
}

TEST_F(TierFaults, FileReplacedWhileRunningIsAnError) {
  const Model m = Model::load(model_path_.string());
  ExpertSource src(m, min_options(m));
  Forward fwd(m, forward_options(&src));
  fwd.prefill(tokens(m.config().n_vocab, 8, 2));
  const fs::path other = dir_ / "other.gguf";
  fs::copy_file(kQwen, other);
  fs::rename(other, model_path_);
  const std::string msg = decode_until_error(fwd, m.config().n_vocab, 64);
  EXPECT_NE(msg.find("model file changed while running (it was replaced by another file"),
            std::string::npos)
      << msg;
}

TEST_F(TierFaults, InjectedReadErrorsNameFileAndOffset) {
  const Model m = Model::load(model_path_.string());
  for (int kind = 0; kind < 2; ++kind) {
    TierOptions o = min_options(m);
    (kind == 0 ? o.faults.fail_read : o.faults.truncated_read) = 7;
    ExpertSource src(m, o);
    Forward fwd(m, forward_options(&src));
    const std::string msg = error_of([&] { fwd.prefill(tokens(m.config().n_vocab, 16, 3)); });
    EXPECT_NE(msg.find(model_path_.string() + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(kind == 0 ? "at offset" : "short read at offset"), std::string::npos) << msg;
  }
}

// A read error inside a chat turn — `strata serve` keeps serving after one — leaves the session
// usable: the next request gets a fresh session's reply, whether the error struck the prefill or
// a reply step, and the KV cache and the session agree (no assertion at the next turn).
// With VRAM homes too (the emulated GPU lane): the error strikes while the lane's launch is in
// flight; recovery waits for it, so the next launch finds the lane idle.
TEST_F(TierFaults, ChatSessionRecoversFromAReadError) {
  for (const bool vram : {false, true}) {
    SCOPED_TRACE(vram ? "with an emulated GPU lane" : "CPU only");
    chat_recovers(vram);
  }
}

void TierFaults::chat_recovers(bool vram) {
  const Model m = Model::load(model_path_.string());
  const auto options = [&] {
    TierOptions o = min_options(m);
    if (vram) {
      o.vram_emulate = true;
      o.vram_gb = fmt::format("{:.12f}", double(engine::expert_sizes(m).total_bytes()) / 3 /
                                             (1024.0 * 1024.0 * 1024.0));
    }
    return o;
  };
  const engine::Tokenizer tok = engine::Tokenizer::from_gguf(m.file());
  const engine::ChatFamily family = engine::chat_family_for_template(tok.vocab().chat_template());
  engine::SamplerParams sp;
  sp.temperature = 0;
  const std::vector<engine::ChatMessage> conv = {{"system", "Be brief."},
                                                 {"user", "Tell me about foxes."}};
  std::string want;
  uint64_t prefill_reads = 0, all_reads = 0;
  {
    ExpertSource src(m, options());
    if (vram) {
      ASSERT_NE(src.gpu_lane(), nullptr);
    }
    Forward fwd(m, forward_options(&src));
    engine::ChatSession s(fwd, tok, family, sp);
    s.begin_messages(conv);
    prefill_reads = src.store()->counters().reads;
    want = s.generate(16, nullptr).text;
    all_reads = src.store()->counters().reads;
  }
  ASSERT_GT(all_reads, prefill_reads + 4);
  for (const uint64_t at : {prefill_reads / 2, (prefill_reads + all_reads) / 2}) {
    SCOPED_TRACE(at < prefill_reads ? "in the prefill" : "in a reply step");
    TierOptions o = options();
    o.faults.fail_read = int64_t(at);
    ExpertSource src(m, o);
    Forward fwd(m, forward_options(&src));
    engine::ChatSession s(fwd, tok, family, sp);
    const std::string msg = error_of([&] {
      s.begin_messages(conv);
      s.generate(16, nullptr);
    });
    EXPECT_NE(msg.find("Input/output error"), std::string::npos) << msg;
    EXPECT_EQ(s.kv_tokens().size(), fwd.n_past());
    ASSERT_EQ(s.begin_messages(conv), engine::TurnStatus::kEndOfGeneration);
    EXPECT_EQ(s.generate(16, nullptr).text, want);
  }
}

TEST_F(TierFaults, UringFailureFallsBackToPreadWithOneNoticeAndTheSameLogits) {
  const Model m = Model::load(model_path_.string());
  const std::vector<int32_t> ids = tokens(m.config().n_vocab, 30, 4);
  std::vector<float> want(ids.size() * m.config().n_vocab);
  {
    Forward ref(m, forward_options(nullptr));  // experts from the mapping
    ref.prefill(ids, want.data());
  }
  TierOptions o = min_options(m);
  o.faults.fail_uring_setup = true;
  ExpertSource src(m, o);
  EXPECT_FALSE(src.store()->uring());
  Forward fwd(m, forward_options(&src));
  std::vector<float> got(want.size());
  fwd.prefill(ids, got.data());
  for (int32_t id : tokens(m.config().n_vocab, 5, 5)) fwd.decode(id);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  int uring_notices = 0;
  for (const auto& n : notices_) uring_notices += n.find("io_uring") != std::string::npos;
  EXPECT_EQ(uring_notices, 1) << fmt::format("{}", fmt::join(notices_, "\n"));
  EXPECT_GT(src.store()->counters().ssd.loads, 0u);
}

TEST_F(TierFaults, AutoBudgetFitsTheMachineAndTheModel) {
  const Model m = Model::load(model_path_.string());
  const placement::ExpertSizes sizes = engine::expert_sizes(m);
  engine::RamBudgetInputs in;
  in.available = 64ull << 30;
  EXPECT_EQ(engine::auto_ram_budget(in, sizes), placement::all_ram_bytes(sizes));
  in.available = 1ull << 30;
  in.kv_bytes = 100ull << 20;
  in.dense_bytes = 50ull << 20;
  // 1 GiB - 100 MiB - 50 MiB - (512 MiB + 5%), capped at every expert.
  const uint64_t room = (1ull << 30) - (150ull << 20) - (512ull << 20) - (1ull << 30) / 20;
  EXPECT_EQ(engine::auto_ram_budget(in, sizes), std::min(room, placement::all_ram_bytes(sizes)));
  in.available = 256ull << 20;
  EXPECT_EQ(engine::auto_ram_budget(in, sizes), 0u);
  // An explicit RAM_GB: what fits in what is available passes (no headroom asked), more is a
  // one-line error naming the most that fits, not an OOM kill during the load.
  in.available = 1ull << 30;
  engine::check_explicit_ram_budget((1ull << 30) - (150ull << 20), in, sizes);
  try {
    engine::check_explicit_ram_budget((1ull << 30) - (149ull << 20), in, sizes);
    ADD_FAILURE() << "a budget past what is available was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find("plus the dense weights and the KV cache (150.0 MiB) is "
                                         "more than the 1.0 GiB of memory available"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("at most 0.85 GiB fits"), std::string::npos) << e.what();
  }
  // Auto on this machine: the tiny model fits in RAM.
  TierOptions o = min_options(m);
  o.ram_bytes.reset();
  ExpertSource src(m, o);
  EXPECT_EQ(src.plan()->count(placement::HomeKind::kSsd), 0);
}

TEST(SysMem, ParsesMeminfoAndCgroups) {
  EXPECT_EQ(engine::parse_meminfo_available("MemTotal:       24000000 kB\n"
                                            "MemFree:         1000 kB\n"
                                            "MemAvailable:   22000000 kB\n"),
            22000000ull * 1024);
  EXPECT_EQ(engine::parse_meminfo_available("MemTotal: 1 kB\n"), 0u);
  const auto v1 = engine::parse_memory_cgroup(
      "9:name=systemd:/\n4:memory:/process_api/abc\n3:cpuset:/\n0::/\n");
  ASSERT_TRUE(v1.has_value());
  EXPECT_EQ(v1->first, "/process_api/abc");
  EXPECT_FALSE(v1->second);
  const auto joined = engine::parse_memory_cgroup("5:cpu,memory:/x\n");
  ASSERT_TRUE(joined.has_value());
  EXPECT_EQ(joined->first, "/x");
  const auto v2 = engine::parse_memory_cgroup("0::/user.slice/strata.scope\n");
  ASSERT_TRUE(v2.has_value());
  EXPECT_EQ(v2->first, "/user.slice/strata.scope");
  EXPECT_TRUE(v2->second);
  EXPECT_FALSE(engine::parse_memory_cgroup("").has_value());
  const engine::MemoryInfo now = engine::memory_info();
  EXPECT_GT(now.mem_available, 0u);
  EXPECT_LE(now.available(), now.mem_available);
}

}  // namespace
}  // namespace strata::tier_test
