// Route traces (ROUTE_TRACE): writer/reader round trip across many compress calls; every truncated
// prefix and every corrupted byte of a trace gives a one-line error naming the file and a byte
// offset (or, for a byte zstd does not need, the same records); foreign traces refused; the engine
// hook's trace turned into stats equals the usage hook's counts, and the routing equals the
// RoutingTrace; through the built `strata`: `stats --from-trace` equals USAGE_SAVE for run, replay
// and chat, SIGINT stops run / replay / chat and both files are still saved, and chat's
// /save-usage writes the stats.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "engine/expert_source.h"
#include "engine/forward.h"
#include "engine/logit_dump.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "io/check.h"
#include "placement/route_trace.h"
#include "placement/usage_stats.h"
#include "tier_test_util.h"

namespace strata::tier_test {
namespace {

using placement::RouteRecord;
using placement::RouteTraceHeader;
using placement::RouteTraceReader;
using placement::RouteTraceWriter;

RouteTraceHeader small_header(uint64_t fingerprint = 0x1234) {
  // Layer 0 dense, then three MoE layers of 8 experts, top-2.
  return placement::route_trace_header({"unit model", fingerprint}, {0, 8, 8, 8}, {1, 2, 2, 2});
}

// n records of random routing (tokens 1..max_n per record), written to path.
std::vector<RouteRecord> write_random(const std::string& path, const RouteTraceHeader& h, int n,
                                      uint32_t max_n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<RouteRecord> recs;
  RouteTraceWriter w(path, h);
  uint32_t pos = 0;
  for (int i = 0; i < n; ++i) {
    RouteRecord r;
    r.layer = 1 + static_cast<uint32_t>(i % 3);
    r.n_tokens = 1 + static_cast<uint32_t>(rng() % max_n);
    r.pos0 = pos;
    r.decode = r.n_tokens == 1;
    const uint32_t k = h.k[r.layer];
    for (uint32_t t = 0; t < r.n_tokens * k; ++t) {
      r.topk.push_back(static_cast<int32_t>(rng() % h.n_expert[r.layer]));
      r.weights.push_back(static_cast<float>(rng() % 1000) / 1000.0f);
    }
    w.add(r.layer, r.pos0, r.n_tokens, r.topk.data(), r.weights.data());
    if (r.layer == 3) pos += r.n_tokens;
    recs.push_back(std::move(r));
  }
  EXPECT_TRUE(fs::exists(path + ".tmp"));
  EXPECT_FALSE(fs::exists(path));  // only the temp file until finish
  w.finish();
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  return recs;
}

std::vector<RouteRecord> read_all(const std::string& path) {
  RouteTraceReader rd(path);
  std::vector<RouteRecord> out;
  RouteRecord r;
  while (rd.next(r)) out.push_back(r);
  return out;
}

bool same(const std::vector<RouteRecord>& a, const std::vector<RouteRecord>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].layer != b[i].layer || a[i].pos0 != b[i].pos0 || a[i].n_tokens != b[i].n_tokens ||
        a[i].decode != b[i].decode || a[i].topk != b[i].topk ||
        std::memcmp(a[i].weights.data(), b[i].weights.data(), a[i].weights.size() * 4) != 0 ||
        a[i].weights.size() != b[i].weights.size())
      return false;
  return true;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(RouteTrace, RoundTripAcrossManyCompressCalls) {
  const ScratchDir dir("route_rt");
  const std::string path = (dir / "a.rt").string();
  const RouteTraceHeader h = small_header();
  // ~3000 records of up to 300 tokens x 2 experts x 8 bytes: several MiB raw, many flushes.
  const auto recs = write_random(path, h, 3000, 300, 1);
  RouteTraceReader rd(path);
  EXPECT_EQ(rd.header().id.name, "unit model");
  EXPECT_EQ(rd.header().id.fingerprint, 0x1234u);
  EXPECT_EQ(rd.header().n_expert, (std::vector<uint32_t>{0, 8, 8, 8}));
  EXPECT_EQ(rd.header().k, (std::vector<uint32_t>{0, 2, 2, 2}));  // dense layer: k 0
  EXPECT_TRUE(same(read_all(path), recs));

  // Stats: every selection counted once, tokens from the first MoE layer (layer 1).
  const placement::UsageStats st = placement::usage_from_traces({path});
  uint64_t decode_tokens = 0, prefill_tokens = 0, selections = 0;
  for (const RouteRecord& r : recs)
    if (r.layer == 1) (r.decode ? decode_tokens : prefill_tokens) += r.n_tokens;
  for (uint64_t c : st.counts()) selections += c;
  EXPECT_EQ(st.decode_tokens(), decode_tokens);
  EXPECT_EQ(st.prefill_tokens(), prefill_tokens);
  uint64_t expect_sel = 0;
  for (const RouteRecord& r : recs) expect_sel += r.topk.size();
  EXPECT_EQ(selections, expect_sel);
}

TEST(RouteTrace, EveryTruncationIsAOneLineErrorNamingFileAndOffset) {
  const ScratchDir dir("route_trunc");
  const std::string path = (dir / "a.rt").string();
  write_random(path, small_header(), 20, 4, 2);
  const std::string bytes = slurp(path);
  ASSERT_GT(bytes.size(), 64u);
  const fs::path cut = dir / "cut.rt";
  // Every cut in the header and the last 64 bytes, every 3rd in between.
  for (size_t n = 0; n < bytes.size(); n += (n < 64 || n + 64 >= bytes.size()) ? 1 : 3) {
    write_bytes(cut, bytes.substr(0, n));
    try {
      read_all(cut.string());
      ADD_FAILURE() << "a trace cut at " << n << " of " << bytes.size() << " bytes was accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kBadFile) << m;
      EXPECT_NE(m.find(cut.string()), std::string::npos) << m;
      EXPECT_NE(m.find("at byte"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  // Bytes after the end are refused too.
  write_bytes(cut, bytes + "x");
  EXPECT_THROW(read_all(cut.string()), Error);
  write_bytes(cut, bytes + bytes);
  EXPECT_THROW(read_all(cut.string()), Error);
}

TEST(RouteTrace, CorruptedBytesAreRefusedOrHarmless) {
  const ScratchDir dir("route_corrupt");
  const std::string path = (dir / "a.rt").string();
  const auto recs = write_random(path, small_header(), 20, 4, 3);
  const std::string bytes = slurp(path);
  const fs::path bad = dir / "bad.rt";
  int refused = 0, tried = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (const unsigned char flip : {0xff, 0x01, 0x80}) {
      if (flip != 0xff && i % 4 != 0) continue;  // every byte inverted, every 4th bit-flipped
      ++tried;
      std::string b = bytes;
      b[i] = static_cast<char>(static_cast<unsigned char>(b[i]) ^ flip);
      write_bytes(bad, b);
      try {
        const auto got = read_all(bad.string());
        // Only a byte the decoder does not depend on (e.g. a larger window size) may pass, and
        // then the records are the same.
        EXPECT_TRUE(same(got, recs)) << "byte " << i << " ^ " << int(flip);
      } catch (const Error& e) {
        ++refused;
        const std::string m = e.what();
        EXPECT_NE(m.find(bad.string()), std::string::npos) << m;
        EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      }
    }
  }
  EXPECT_GT(refused, tried * 9 / 10);
}

TEST(RouteTrace, NotATraceAndForeignTraces) {
  const ScratchDir dir("route_foreign");
  const fs::path junk = dir / "junk.rt";
  for (const std::string& content : {std::string(), std::string("hello"), std::string(100, '\0'),
                                     std::string("STRTRACE not compressed at all")}) {
    write_bytes(junk, content);
    try {
      RouteTraceReader rd(junk.string());
      ADD_FAILURE() << "accepted junk";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(junk.string()), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(RouteTraceReader((dir / "missing.rt").string()), Error);

  const std::string a = (dir / "a.rt").string(), b = (dir / "b.rt").string(),
                    c = (dir / "c.rt").string();
  write_random(a, small_header(1), 10, 4, 4);
  write_random(b, small_header(2), 10, 4, 5);
  try {
    placement::usage_from_traces({a, b});
    ADD_FAILURE() << "merged traces of two models";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(b), std::string::npos) << e.what();
  }
  const placement::UsageStats forced = placement::usage_from_traces({a, b}, true);
  EXPECT_EQ(forced.identity().fingerprint, 1u);
  // Another shape is refused even with force.
  { RouteTraceWriter w(c, placement::route_trace_header({"other", 1}, {0, 8, 8}, {1, 2, 2})); }
  EXPECT_THROW(placement::usage_from_traces({a, c}, true), Error);
}

// The engine: the same run feeds the usage hook, a RoutingTrace and ROUTE_TRACE.
TEST(RouteTrace, EngineTraceEqualsUsageHookAndRouting) {
  const ScratchDir dir("route_engine");
  const fs::path model_path = dir / "synth-tiny.gguf";
  {
    engine::SynthOptions so;
    so.preset = *engine::find_synth_preset("tiny");
    so.n_threads = 2;
    engine::SynthModel(so).write(model_path.string());
  }
  const engine::Model model = engine::Model::load(model_path.string());
  const engine::ModelConfig& cfg = model.config();
  const placement::ExpertSizes sizes = engine::expert_sizes(model);
  const placement::ModelIdentity id = placement::model_identity(model.file());
  std::vector<uint32_t> k(cfg.n_layer);
  for (uint32_t l = 0; l < cfg.n_layer; ++l) k[l] = cfg.layer_n_expert_used(l);

  placement::UsageStats usage(id, sizes.n_expert);
  const std::string trace_path = (dir / "run.rt").string();
  std::vector<float> logits_traced, logits_plain;
  engine::RoutingTrace routing;
  std::mt19937 rng(9);
  std::vector<int32_t> ids(40);
  for (int32_t& t : ids) t = static_cast<int32_t>(rng() % cfg.n_vocab);
  for (const bool traced : {true, false}) {
    engine::TierOptions to;
    to.notice = [](const std::string&) {};
    to.n_ctx = 64;
    if (traced) to.usage = &usage;
    engine::ExpertSource src(model, to);
    std::unique_ptr<RouteTraceWriter> w;
    if (traced)
      w = std::make_unique<RouteTraceWriter>(trace_path,
                                             placement::route_trace_header(id, sizes.n_expert, k));
    engine::ForwardOptions fo;
    fo.n_ctx = 64;
    fo.n_ubatch = 16;
    fo.n_threads = 2;
    fo.experts = &src;
    fo.route_trace = w.get();
    engine::Forward fwd(model, fo);
    std::vector<float>& out = traced ? logits_traced : logits_plain;
    // Prefill in chunks of 16 (prefill counts), then decode 8 tokens (decode counts).
    routing.reset(cfg.n_layer, cfg.n_expert, cfg.n_expert_used);
    out.resize(ids.size() * cfg.n_vocab);
    fwd.prefill(std::span(ids).first(32), out.data(), &routing);
    for (size_t i = 32; i < ids.size(); ++i) {
      const auto l = fwd.decode(ids[i], &routing);
      std::copy(l.begin(), l.end(), out.begin() + static_cast<ptrdiff_t>(i * cfg.n_vocab));
    }
    if (w) w->finish();
  }
  EXPECT_EQ(std::memcmp(logits_traced.data(), logits_plain.data(), logits_plain.size() * 4), 0);

  const placement::UsageStats from = placement::usage_from_traces({trace_path});
  EXPECT_EQ(from.to_text(), usage.to_text());
  EXPECT_EQ(from.decode_tokens(), 8u);
  EXPECT_EQ(from.prefill_tokens(), 32u);

  // The records hold the router's ids and weights at every (position, MoE layer).
  RouteTraceReader rd(trace_path);
  RouteRecord r;
  size_t checked = 0;
  while (rd.next(r)) {
    const uint32_t kk = rd.header().k[r.layer];
    for (uint32_t t = 0; t < r.n_tokens; ++t) {
      ASSERT_TRUE(std::equal(r.topk.begin() + t * kk, r.topk.begin() + (t + 1) * kk,
                             routing.topk_at(r.layer, r.pos0 + t)));
      ASSERT_EQ(std::memcmp(r.weights.data() + t * kk, routing.weight_at(r.layer, r.pos0 + t),
                            kk * sizeof(float)),
                0);
      ++checked;
    }
  }
  uint32_t n_moe = 0;
  for (uint32_t l = 0; l < cfg.n_layer; ++l) n_moe += cfg.is_moe(l) ? 1 : 0;
  EXPECT_EQ(checked, ids.size() * n_moe);
}

// ---- the CLI ----

const fs::path kChatModel =
    fs::path(STRATA_FIXTURES_DIR) / "tiny-qwen3moe" / "tiny-qwen3moe-Q8_0.gguf";

class RouteTraceCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
    if (!fs::exists(kChatModel)) GTEST_SKIP() << "fixture not found at " << kChatModel;
    dir_ = std::make_unique<ScratchDir>("route_cli");
  }
  fs::path at(const std::string& name) const { return *dir_ / name; }

  // Trace -> stats equals the USAGE_SAVE file; no temp files left.
  void expect_trace_matches_usage(const std::string& tag) {
    ASSERT_TRUE(fs::exists(at("u.stats"))) << tag;
    ASSERT_TRUE(fs::exists(at("t.rt"))) << tag;
    EXPECT_FALSE(fs::exists(at("u.stats.tmp"))) << tag;
    EXPECT_FALSE(fs::exists(at("t.rt.tmp"))) << tag;
    const Result r =
        run_strata(dir_->path(), fmt::format("stats --from-trace '{}' -o '{}'", at("t.rt").string(),
                                             at("ft.stats").string()));
    ASSERT_EQ(r.rc, 0) << tag << r.err;
    EXPECT_EQ(slurp(at("ft.stats")), slurp(at("u.stats"))) << tag;
    fs::remove(at("u.stats"));
    fs::remove(at("t.rt"));
  }

  // Starts `strata args` with the knobs in env, stdin from a pipe (write end returned), stdout and
  // stderr to files.
  pid_t spawn(const std::string& args, int* stdin_w) {
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    const std::string cmd =
        fmt::format("ROUTE_TRACE='{}' USAGE_SAVE='{}' THREADS=2 exec '{}' {} > '{}' 2> '{}'",
                    at("t.rt").string(), at("u.stats").string(), kStrata.string(), args,
                    at("out.txt").string(), at("err.txt").string());
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(p[0], STDIN_FILENO);
      close(p[0]);
      close(p[1]);
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(p[0]);
    *stdin_w = p[1];
    return pid;
  }
  // Waits (at most ~60 s) until file holds one of `what` (or, for {}, anything); false when the
  // process ended first.
  bool wait_for(pid_t pid, const std::string& file, std::vector<std::string> what = {}) {
    for (int i = 0; i < 6000; ++i) {
      const std::string text = slurp(at(file));
      if (what.empty() && !text.empty()) return true;
      for (const std::string& w : what)
        if (text.find(w) != std::string::npos) return true;
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        reaped_ = status;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  int wait_exit(pid_t pid) {
    int status = reaped_;
    if (status < 0) waitpid(pid, &status, 0);
    reaped_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::unique_ptr<ScratchDir> dir_;
  int reaped_ = -1;
};

TEST_F(RouteTraceCli, RunReplayAndStatsTraceEqualsUsageSave) {
  const std::string knobs = fmt::format("ROUTE_TRACE='{}' USAGE_SAVE='{}' THREADS=2",
                                        at("t.rt").string(), at("u.stats").string());
  Result r = run_strata(
      dir_->path(),
      fmt::format("run -m '{}' -p 'Hello there' -n 12 --temp 0 --ignore-eos", kChatModel.string()),
      knobs);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("route trace of"), std::string::npos) << r.err;
  expect_trace_matches_usage("run");

  const engine::Model m = engine::Model::load(kChatModel.string());
  write_streams(at("tokens.txt"), m.config().n_vocab, {20, 9, 31});
  r = run_strata(dir_->path(),
                 fmt::format("replay -m '{}' --tokens '{}' --ubatch 8", kChatModel.string(),
                             at("tokens.txt").string()),
                 knobs + " RAM_GB=" + ram_gb(placement::min_ram_bytes(engine::expert_sizes(m))));
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_trace_matches_usage("replay");

  // A bad trace on the command line: one line, non-zero, no output file.
  write_bytes(at("bad.rt"), "STRTRACE");
  r = run_strata(dir_->path(), fmt::format("stats --from-trace '{}' -o '{}'", at("bad.rt").string(),
                                           at("x.stats").string()));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("bad.rt"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(at("x.stats")));
}

TEST_F(RouteTraceCli, SigintStopsRunAndSavesBoth) {
  int in = -1;
  const pid_t pid = spawn(fmt::format("run -m '{}' -p 'Hello there' -n 2000 --ctx 2048 --temp 0 "
                                      "--ignore-eos --no-display-prompt",
                                      kChatModel.string()),
                          &in);
  const bool started = wait_for(pid, "out.txt");  // any output: decoding has begun
  if (started) {
    for (int i = 0; i < 200 && slurp(at("out.txt")).size() < 8; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    kill(pid, SIGINT);
  }
  close(in);
  const int rc = wait_exit(pid);
  const std::string err = slurp(at("err.txt"));
  if (rc == 0) GTEST_SKIP() << "the run ended before the signal arrived";
  EXPECT_EQ(rc, 130) << err;
  EXPECT_NE(err.find("run: interrupted after"), std::string::npos) << err;
  expect_trace_matches_usage("run + SIGINT");
}

TEST_F(RouteTraceCli, SigintStopsReplayAndSavesBoth) {
  const engine::Model m = engine::Model::load(kChatModel.string());
  write_streams(at("tokens.txt"), m.config().n_vocab, {2000, 2000});
  int in = -1;
  const pid_t pid =
      spawn(fmt::format("replay -m '{}' --tokens '{}' --ubatch 1 --dump-logits '{}'",
                        kChatModel.string(), at("tokens.txt").string(), at("logits").string()),
            &in);
  if (wait_for(pid, "err.txt", {"strata: plan:"})) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(pid, SIGINT);
  }
  close(in);
  const int rc = wait_exit(pid);
  const std::string err = slurp(at("err.txt"));
  if (rc == 0) GTEST_SKIP() << "the replay ended before the signal arrived";
  EXPECT_EQ(rc, 130) << err;
  const size_t at_msg = err.find("replay: interrupted in stream ");
  ASSERT_NE(at_msg, std::string::npos) << err;
  // No dump of the cut stream (on a fast host stream 0 may finish before the signal arrives).
  const int cut = std::atoi(err.c_str() + at_msg + std::strlen("replay: interrupted in stream "));
  EXPECT_FALSE(fs::exists(at("logits") / fmt::format("stream{}.logits.bin", cut))) << err;
  expect_trace_matches_usage("replay + SIGINT");
}

// SIGTERM (a service manager, `timeout`) and SIGHUP (the terminal closed) leave as /exit does:
// run stops at the next token (exit 128 + the signal), chat stops the reply and exits 0, and the
// files are written on the way out.
TEST_F(RouteTraceCli, SigtermAndSighupStopAndSaveBoth) {
  int in = -1;
  pid_t pid = spawn(fmt::format("run -m '{}' -p 'Hello there' -n 2000 --ctx 2048 --temp 0 "
                                "--ignore-eos --no-display-prompt",
                                kChatModel.string()),
                    &in);
  if (wait_for(pid, "out.txt")) kill(pid, SIGTERM);
  close(in);
  int rc = wait_exit(pid);
  if (rc != 0) {  // else the run ended before the signal arrived
    EXPECT_EQ(rc, 128 + SIGTERM) << slurp(at("err.txt"));
    EXPECT_NE(slurp(at("err.txt")).find("run: interrupted after"), std::string::npos);
    expect_trace_matches_usage("run + SIGTERM");
  }
  for (const int sig : {SIGTERM, SIGHUP}) {
    fs::remove(at("t.rt"));
    fs::remove(at("u.stats"));
    fs::remove(at("out.txt"));
    pid = spawn(fmt::format("chat -m '{}' --temp 0 -n -1 --ctx 2048", kChatModel.string()), &in);
    const std::string msg = "Tell me a long story\n";
    ASSERT_EQ(write(in, msg.data(), msg.size()), static_cast<ssize_t>(msg.size()));
    ASSERT_TRUE(wait_for(pid, "out.txt")) << slurp(at("err.txt"));
    kill(pid, sig);  // mid-reply, or at the prompt if the reply ended first: chat leaves either way
    rc = wait_exit(pid);
    close(in);
    ASSERT_EQ(rc, 0) << strsignal(sig) << ": " << slurp(at("err.txt"));
    EXPECT_NE(slurp(at("err.txt")).find("chat: stopping (SIGTERM or SIGHUP)"), std::string::npos)
        << slurp(at("err.txt"));
    expect_trace_matches_usage(strsignal(sig));
  }
}

TEST_F(RouteTraceCli, ChatCtrlCStopsTheReplyThenExitSavesBoth) {
  int in = -1;
  const pid_t pid =
      spawn(fmt::format("chat -m '{}' --temp 0 -n -1 --ctx 2048", kChatModel.string()), &in);
  const std::string msg = "Tell me a long story\n/save-usage " + at("now.stats").string() + "\n";
  // The message, then Ctrl-C once the reply streams; the reply stops, chat stays.
  ASSERT_EQ(write(in, msg.data(), msg.find('\n') + 1), static_cast<ssize_t>(msg.find('\n') + 1));
  ASSERT_TRUE(wait_for(pid, "out.txt")) << slurp(at("err.txt"));
  kill(pid, SIGINT);
  // Stopped mid-reply, or (a reply that ended first) one Ctrl-C at the prompt: chat goes on.
  ASSERT_TRUE(wait_for(pid, "err.txt", {"[interrupted]", "(Ctrl-C again"})) << slurp(at("err.txt"));
  // /save-usage FILE writes the stats now (chat still runs).
  const std::string cmd = msg.substr(msg.find('\n') + 1);
  ASSERT_EQ(write(in, cmd.data(), cmd.size()), static_cast<ssize_t>(cmd.size()));
  ASSERT_TRUE(wait_for(pid, "err.txt", {"saved to " + at("now.stats").string()}))
      << slurp(at("err.txt"));
  const placement::UsageStats now = placement::UsageStats::load(at("now.stats").string());
  EXPECT_GT(now.tokens(), 0u);
  // Ctrl-C twice at the prompt leaves; both files are written on the way out.
  kill(pid, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  kill(pid, SIGINT);
  const int rc = wait_exit(pid);
  close(in);
  ASSERT_EQ(rc, 0) << slurp(at("err.txt"));
  expect_trace_matches_usage("chat + SIGINT");
}

TEST_F(RouteTraceCli, ChatSaveUsageWithoutAFileSaysHow) {
  write_bytes(at("in.txt"), "Hello!\n/save-usage\n");
  const Result r = run_strata(
      dir_->path(),
      fmt::format("chat -m '{}' --temp 0 -n 4 < '{}'", kChatModel.string(), at("in.txt").string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("/save-usage: give a file"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata::tier_test
