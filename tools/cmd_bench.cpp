// `strata bench -m MODEL [-p 512] [-n 128] [-d 0] [-r 5] [-t T[,T...]] [-o md|json]`:
// llama-bench's measurement on strata, so the two tables read side by side. Each test runs from
// an empty KV cache (after -d tokens of context, prefilled untimed): ppP prefills P random tokens
// (a BOS first when the vocabulary adds one and there is no context) in --ubatch chunks, tgN
// decodes N random tokens one at a time (no sampling, as llama-bench); one untimed warm-up run
// (a tg warm-up decodes one token), then -r timed repetitions; the result is tokens/s, mean ±
// sample standard deviation over the repetitions. The random tokens come from a fixed seed, so
// two runs feed the same tokens. Lists (-p 128,512 -t 1,2) run every combination, threads
// outermost. Knobs as for `run` (RAM_GB, VRAM_GB, PIN, PROF ...; PROF=1 reports the tiers and the
// roofline over all the tests at the end, of the timed parts only: the -d prefills and warm-ups
// are Profiler::begin_untimed() / end_untimed() intervals). Tested by tests/test_bench_cli.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "engine/model.h"
#include "engine/model_info.h"
#include "engine/tokenizer.h"
#include "io/check.h"
#include "io/ggml_type.h"
#include "io/gguf.h"
#include "kernels/threadpool.h"
#include "tools/cli.h"
#include "tools/knob_flags.h"
#include "tools/placement_setup.h"
#include "tools/progress.h"
#include "tools/tier_setup.h"

namespace strata::tools {
namespace {

struct BenchOptions {
  std::string model;
  std::vector<int> n_prompt{512};
  std::vector<int> n_gen{128};
  std::vector<int> depth{0};
  std::vector<int> threads;  // empty: THREADS, else the physical cores
  int reps = 5;
  uint32_t ubatch = 512;
  std::string output = "md";
  bool no_warmup = false;
  KnobOverrides knobs;
};

struct Test {
  int threads = 0;
  int n_prompt = 0;  // a pp test, or
  int n_gen = 0;     // a tg test
  int depth = 0;
  std::vector<double> seconds;  // per repetition

  std::string name() const {
    std::string s = n_prompt > 0 ? fmt::format("pp{}", n_prompt) : fmt::format("tg{}", n_gen);
    if (depth > 0) s += fmt::format(" @ d{}", depth);
    return s;
  }
  int tokens() const { return n_prompt > 0 ? n_prompt : n_gen; }
  std::vector<double> rates() const {
    std::vector<double> r;
    for (double s : seconds) r.push_back(s > 0 ? tokens() / s : 0.0);
    return r;
  }
  double mean() const {
    const std::vector<double> r = rates();
    double sum = 0;
    for (double x : r) sum += x;
    return r.empty() ? 0.0 : sum / double(r.size());
  }
  double stddev() const {  // sample standard deviation, as llama-bench
    const std::vector<double> r = rates();
    if (r.size() < 2) return 0.0;
    const double m = mean();
    double ss = 0;
    for (double x : r) ss += (x - m) * (x - m);
    return std::sqrt(ss / double(r.size() - 1));
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// "qwen3moe Q4_0": the architecture and the type holding most of the bytes.
std::string model_desc(const engine::ModelInfo& info) {
  std::string type = "?";
  if (!info.types.empty()) type = std::string(ggml_type_name(info.types.front().type));
  return fmt::format("{} {}", info.arch.empty() ? "?" : info.arch, type);
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line
                                        : line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown CPU";
}

class Bench {
 public:
  Bench(engine::Model& model, const engine::Tokenizer& tok, const BenchOptions& o,
        const TierSetup& tiers, uint32_t n_ctx)
      : model_(model),
        o_(o),
        tiers_(tiers),
        n_ctx_(n_ctx),
        bos_(tok.vocab().add_bos() ? tok.vocab().bos() : -1) {
    n_vocab_ = int32_t(std::min<uint64_t>(tok.vocab().n_tokens(), model.config().n_vocab));
  }

  // Runs every test at `threads` (one Forward, one thread pool); stops early when asked.
  void run(std::vector<Test*> tests, int threads, const StopSignals& sigint) {
    engine::ForwardOptions fo;
    fo.n_ctx = n_ctx_;
    fo.n_ubatch = o_.ubatch;
    fo.n_threads = threads;
    fo.experts = tiers_.experts.get();
    fo.kv_type = tiers_.kv_type;
    fo.prof = tiers_.prof.get();
    engine::Forward fwd(model_, fo);
    filled_ = 0;
    for (Test* t : tests) {
      if (t->depth > 0 && !sigint.requested()) fill_depth(fwd, uint32_t(t->depth), threads);
      if (!o_.no_warmup && !sigint.requested()) {
        Test warm = *t;
        if (warm.n_gen > 0) warm.n_gen = 1;
        (void)once(fwd, warm, /*record=*/false);
      }
      for (int r = 0; r < o_.reps && !sigint.requested(); ++r) {
        t->seconds.push_back(once(fwd, *t, /*record=*/true));
        fmt::print(stderr, "bench: {} t={}: repetition {}/{}: {:.2f} tok/s\n", t->name(), threads,
                   r + 1, o_.reps, t->tokens() / t->seconds.back());
      }
    }
  }

 private:
  std::vector<int32_t> random_tokens(size_t n, bool bos_first) {
    std::uniform_int_distribution<int32_t> pick(0, n_vocab_ - 1);
    std::vector<int32_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = i == 0 && bos_first && bos_ >= 0 ? bos_ : pick(rng_);
    return t;
  }

  // The -d context: random tokens at positions 0 .. depth - 1, prefilled once per thread count
  // and shared by every repetition and test at that depth (each truncates back to it; a deeper
  // test extends it). Untimed and outside PROF, like llama-bench's; it says what it does, since a
  // deep context on a big model takes minutes.
  void fill_depth(engine::Forward& fwd, uint32_t depth, int threads) {
    if (depth <= filled_) return;
    engine::Profiler* prof = tiers_.prof.get();
    if (prof) prof->begin_untimed();
    fmt::print(stderr, "bench: t={}: filling the context to depth {} ({} tokens, untimed) ...\n",
               threads, depth, depth - filled_);
    // A bar on a terminal (a deep context on a big model takes minutes), then one summary line:
    // "bench: t=2: depth 4096 tokens: 4096 in 41 s (99.9/s)".
    Progress bar(fmt::format("bench: t={}: depth {} tokens", threads, depth), depth - filled_,
                 ProgressUnit::kItems);
    fwd.truncate(filled_);
    fwd.set_prefill_progress([&bar](size_t done, size_t) { bar.update(done); });
    (void)fwd.prefill(random_tokens(size_t(depth - filled_), filled_ == 0));
    fwd.set_prefill_progress({});
    bar.update(depth - filled_);  // a fill of one chunk reports nothing on the way
    bar.finish();
    filled_ = depth;
    if (prof) prof->end_untimed();
  }

  // One repetition: seconds of the timed part. PROF counts the timed part of a recorded
  // repetition only: the -d context's prefill (fill_depth) and a whole warm-up run are untimed.
  double once(engine::Forward& fwd, const Test& t, bool record) {
    engine::Profiler* prof = tiers_.prof.get();
    if (prof && !record) prof->begin_untimed();
    // Positions from the depth on are rewritten: only the context below it stays filled.
    const uint32_t depth = uint32_t(t.depth);
    STRATA_ASSERT(depth <= filled_, "bench: depth {} was not filled ({})", depth, filled_);
    fwd.truncate(depth);
    filled_ = depth;
    double s = 0;
    if (t.n_prompt > 0) {
      const std::vector<int32_t> tokens = random_tokens(size_t(t.n_prompt), t.depth == 0);
      const auto t0 = std::chrono::steady_clock::now();
      (void)fwd.prefill(tokens);
      s = seconds_since(t0);
      if (prof && record) prof->add_prefill(tokens.size(), s);
    } else {
      const std::vector<int32_t> tokens = random_tokens(size_t(t.n_gen), t.depth == 0);
      const auto t0 = std::chrono::steady_clock::now();
      for (const int32_t id : tokens) {
        const auto t_token = std::chrono::steady_clock::now();
        (void)fwd.decode(id);
        if (record && prof) prof->add_decode_token(seconds_since(t_token), fwd.n_past());
      }
      s = seconds_since(t0);
    }
    if (prof && !record) prof->end_untimed();
    return s;
  }

  engine::Model& model_;
  const BenchOptions& o_;
  const TierSetup& tiers_;
  uint32_t n_ctx_;
  uint32_t filled_ = 0;  // positions 0 .. filled_ - 1 hold the -d context
  int32_t bos_;
  int32_t n_vocab_ = 1;
  std::mt19937 rng_{1234};
};

// llama-bench's units: GiB / MiB, B / M parameters.
std::string size_text(uint64_t bytes) {
  return bytes >= (1ull << 30) ? fmt::format("{:.2f} GiB", double(bytes) / double(1ull << 30))
                               : fmt::format("{:.2f} MiB", double(bytes) / double(1ull << 20));
}
std::string params_text(uint64_t n) {
  return n >= 1000000000 ? fmt::format("{:.2f} B", double(n) / 1e9)
                         : fmt::format("{:.2f} M", double(n) / 1e6);
}

void print_markdown(const std::vector<Test>& tests, const std::string& desc, uint64_t size,
                    uint64_t params, const std::string& backend) {
  fmt::print("| model | size | params | backend | threads | test | t/s |\n");
  fmt::print("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
  for (const Test& t : tests) {
    if (t.seconds.empty()) continue;
    fmt::print("| {} | {} | {} | {} | {} | {} | {:.2f} ± {:.2f} |\n", desc, size_text(size),
               params_text(params), backend, t.threads, t.name(), t.mean(), t.stddev());
  }
}

// llama-bench's JSON field names where they apply.
void print_json(const std::vector<Test>& tests, const BenchOptions& o, const std::string& desc,
                uint64_t size, uint64_t params, const std::string& backend) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  const std::string cpu = cpu_name();
  for (const Test& t : tests) {
    if (t.seconds.empty()) continue;
    nlohmann::ordered_json j;
    j["build"] = "strata 0.1.0";
    j["cpu_info"] = cpu;
    j["backends"] = backend;
    j["model_filename"] = o.model;
    j["model_type"] = desc;
    j["model_size"] = size;
    j["model_n_params"] = params;
    j["n_ubatch"] = o.ubatch;
    j["n_threads"] = t.threads;
    j["n_prompt"] = t.n_prompt;
    j["n_gen"] = t.n_gen;
    j["n_depth"] = t.depth;
    nlohmann::ordered_json ns = nlohmann::ordered_json::array();
    for (double s : t.seconds) ns.push_back(uint64_t(std::llround(s * 1e9)));
    j["avg_ns"] = uint64_t(std::llround(std::accumulate(t.seconds.begin(), t.seconds.end(), 0.0) /
                                        double(t.seconds.size()) * 1e9));
    j["avg_ts"] = t.mean();
    j["stddev_ts"] = t.stddev();
    j["samples_ns"] = std::move(ns);
    j["samples_ts"] = t.rates();
    out.push_back(std::move(j));
  }
  fmt::print("{}\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
}

int run_bench(BenchOptions o) {
  if (o.output != "md" && o.output != "json")
    fail(ErrorKind::kBadValue, "-o {}: md or json", o.output);
  if (o.reps < 1) fail(ErrorKind::kBadValue, "-r {}: at least one repetition", o.reps);
  const auto check_list = [](const std::vector<int>& v, const char* flag, int lo) {
    for (int x : v)
      if (x < lo) fail(ErrorKind::kBadValue, "{} {}: must be >= {}", flag, x, lo);
  };
  check_list(o.n_prompt, "-p", 0);
  check_list(o.n_gen, "-n", 0);
  check_list(o.depth, "-d", 0);
  check_list(o.threads, "-t", 1);
  const engine::Knobs knobs = load_knobs(o.knobs);
  if (o.threads.empty())
    o.threads = {
        int(knobs.int_opt("THREADS").value_or(int64_t(kernels::physical_core_cpus().size())))};

  // The tests, threads outermost (llama-bench's order: pp before tg for each thread count).
  std::vector<Test> tests;
  for (int t : o.threads)
    for (int d : o.depth) {
      for (int p : o.n_prompt)
        if (p > 0) tests.push_back({t, p, 0, d, {}});
      for (int n : o.n_gen)
        if (n > 0) tests.push_back({t, 0, n, d, {}});
    }
  if (tests.empty()) fail(ErrorKind::kBadValue, "nothing to run: every -p and -n is 0");
  uint32_t n_ctx = 1;
  for (const Test& t : tests) n_ctx = std::max<uint32_t>(n_ctx, uint32_t(t.depth + t.tokens()));

  engine::Model model = engine::Model::load(o.model);
  const engine::Tokenizer tok = engine::Tokenizer::from_gguf(model.file());
  const engine::ModelInfo info = engine::summarize_model(model.file());
  uint64_t params = 0;
  for (const auto& t : model.file().tensors()) params += t.n_elements();
  warn_context_beyond_training(n_ctx, model);
  const TierSetup tiers = make_tier_setup(model, knobs, n_ctx);
  // VRAM homes or CUDA_DENSE put part of the work on a GPU (VRAM_EMULATE's lane too).
  const std::string backend =
      tiers.experts->gpu_lane() != nullptr || tiers.experts->gpu_dense() != nullptr ? "CPU+CUDA"
                                                                                    : "CPU";
  const std::string desc = model_desc(info);

  const StopSignals sigint;  // Ctrl-C, SIGTERM, SIGHUP: the table of what finished
  Bench bench(model, tok, o, tiers, n_ctx);
  for (int t : o.threads) {
    std::vector<Test*> mine;
    for (Test& x : tests)
      if (x.threads == t) mine.push_back(&x);
    bench.run(mine, t, sigint);
  }
  if (o.output == "md")
    print_markdown(tests, desc, info.file_size, params, backend);
  else
    print_json(tests, o, desc, info.file_size, params, backend);
  finish_prof(*tiers.prof);
  return sigint.requested() ? sigint.exit_status() : 0;
}

}  // namespace

void add_bench(CLI::App& app, CommandFn& run) {
  auto* cmd = app.add_subcommand(
      "bench", "llama-bench's measurement: prefill (ppN) and decode (tgN) tokens/s, mean ± sd");
  auto o = std::make_shared<BenchOptions>();
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens of the pp tests (default 512)")
      ->delimiter(',');
  cmd->add_option("-n,--n-gen", o->n_gen, "Tokens decoded by the tg tests (default 128)")
      ->delimiter(',');
  cmd->add_option("-d,--n-depth", o->depth,
                  "Context tokens before each test (default 0): prefilled once per thread count, "
                  "untimed, and shared by the repetitions")
      ->delimiter(',');
  cmd->add_option("-t,--threads", o->threads,
                  "Thread counts (default: THREADS, else the physical cores)")
      ->delimiter(',');
  cmd->add_option("-r,--repetitions", o->reps, "Timed repetitions of each test (default 5)");
  cmd->add_option("--ubatch", o->ubatch, "Prefill chunk size in tokens (default 512)");
  cmd->add_option("-o,--output", o->output, "md (a table, default) or json");
  cmd->add_flag("--no-warmup", o->no_warmup, "Skip the untimed warm-up run of each test");
  add_knob_flags(cmd, o->knobs, /*threads_flag=*/false);
  cmd->callback([&run, o] { run = [o] { return run_bench(*o); }; });
}

}  // namespace strata::tools
