// `strata ab -m MODEL --tokens FILE --a "KNOB=V ..." --b "KNOB=V ..." [--reps N] [--json FILE]`:
// held-out A/B of two knob settings. Each run is a fresh `strata replay` process (replay_child.h),
// interleaved A B B A A B B A ... so drift hits both arms alike; per arm the median tok/s and hit
// rate, the paired difference B - A with a 95% bootstrap interval (fixed seed), and whether the
// arms' logits were byte-identical (placement never changes the numbers, DESIGN.md invariant 1).
// Tested by tests/test_ab_sweep.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "io/check.h"
#include "tools/cli.h"
#include "tools/progress.h"
#include "tools/replay_child.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;

struct AbOptions {
  std::string model;
  std::string tokens;
  std::string a;
  std::string b;
  int reps = 3;
  std::string json;
};

// Knobs that only move bytes or threads: by DESIGN.md invariant 1 they never change the logits.
// Any other knob that differs between the arms may change the numbers.
const std::set<std::string> kPlacementKnobs = {"THREADS",  "RAM_GB",    "VRAM_GB",   "NUMA",
                                               "DIRECT",   "URING",     "PIN",       "REPIN",
                                               "PREFETCH", "CACHE_DIR", "USAGE_AUTO"};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Interval {
  double lo = 0, hi = 0;
};

// 95% percentile bootstrap interval of the mean of d (10000 resamples, seed 20261129).
Interval bootstrap_ci(const std::vector<double>& d) {
  if (d.empty()) return {};
  std::mt19937_64 rng(20261129);
  std::uniform_int_distribution<size_t> pick(0, d.size() - 1);
  constexpr int kResamples = 10000;
  std::vector<double> means(kResamples);
  for (double& m : means) {
    double sum = 0;
    for (size_t i = 0; i < d.size(); ++i) sum += d[pick(rng)];
    m = sum / double(d.size());
  }
  std::sort(means.begin(), means.end());
  return {means[size_t(0.025 * kResamples)], means[size_t(0.975 * kResamples) - 1]};
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// True when both directories hold the same files with the same bytes.
bool same_dumps(const fs::path& x, const fs::path& y) {
  std::vector<std::string> nx, ny;
  for (const auto& e : fs::directory_iterator(x)) nx.push_back(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(y)) ny.push_back(e.path().filename().string());
  std::sort(nx.begin(), nx.end());
  std::sort(ny.begin(), ny.end());
  if (nx != ny || nx.empty()) return false;
  for (const std::string& n : nx)
    if (slurp(x / n) != slurp(y / n)) return false;
  return true;
}

// What the runs read: a change while the A/B runs makes the comparison meaningless.
std::string input_fingerprint(const std::string& model, const std::string& tokens) {
  std::string fp;
  for (const std::string& p : {model, tokens}) {
    struct stat st {};
    if (stat(p.c_str(), &st) != 0) fail(ErrorKind::kNotFound, "{}: cannot stat input", p);
    fp += fmt::format("{}:{}:{}.{};", p, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  }
  return fp + std::to_string(std::hash<std::string>{}(slurp(tokens)));
}

std::string knobs_text(const std::map<std::string, std::string>& k) {
  std::string s;
  for (const auto& [n, v] : k) s += (s.empty() ? "" : " ") + n + "=" + v;
  return s.empty() ? "(defaults)" : s;
}

int run_ab(const AbOptions& o) {
  if (o.reps < 1) fail(ErrorKind::kBadValue, "--reps must be >= 1");
  const auto ka = parse_knob_list(o.a, "--a");
  const auto kb = parse_knob_list(o.b, "--b");
  // Knobs that differ between the arms (set in one, or set to different values).
  std::vector<std::string> differ, numerics;
  std::set<std::string> names;
  for (const auto& [n, v] : ka) names.insert(n);
  for (const auto& [n, v] : kb) names.insert(n);
  for (const std::string& n : names) {
    const auto ia = ka.find(n), ib = kb.find(n);
    if (ia == ka.end() || ib == kb.end() || ia->second != ib->second) {
      differ.push_back(n);
      if (!kPlacementKnobs.count(n)) numerics.push_back(n);
    }
  }
  if (differ.empty())
    fmt::print(stderr, "ab: warning: the two arms set the same knobs (A/A run)\n");
  const std::string fp0 = input_fingerprint(o.model, o.tokens);

  TempDir work("strata-ab");
  std::vector<double> tok[2], hit[2];
  uint64_t tokens = 0;
  bool identical = true;
  const fs::path ref_dump = fs::path(work.path()) / "ref";
  Progress bar("ab", uint64_t(2 * o.reps), ProgressUnit::kItems);
  uint64_t done = 0;
  for (int rep = 0; rep < o.reps; ++rep) {
    // A B, then B A: the order alternates so neither arm always runs first.
    const int order[2] = {rep % 2 ? 1 : 0, rep % 2 ? 0 : 1};
    for (const int arm : order) {
      ReplayChild c;
      c.model = o.model;
      c.tokens = o.tokens;
      c.knobs = arm == 0 ? ka : kb;
      c.work_dir = work.path();
      c.tag = fmt::format("{}{}", arm == 0 ? 'a' : 'b', rep);
      const bool first = tok[0].empty() && tok[1].empty();
      const fs::path dump = first ? ref_dump : fs::path(work.path()) / "dump";
      fs::remove_all(dump);
      c.dump_logits = dump.string();
      ReplayPoint p;
      try {
        p = replay_point(run_replay_child(c));
      } catch (...) {
        bar.abort();
        throw;
      }
      if (input_fingerprint(o.model, o.tokens) != fp0)
        fail(ErrorKind::kBadValue,
             "ab: {} or {} changed during the runs; refusing to compare runs whose inputs differ",
             o.model, o.tokens);
      if (tokens == 0) tokens = p.tokens;
      if (p.tokens != tokens)
        fail(ErrorKind::kBadValue,
             "ab: run {} replayed {} tokens, the first {}; refusing to compare runs whose inputs "
             "differ",
             c.tag, p.tokens, tokens);
      if (!first && !same_dumps(ref_dump, dump)) identical = false;
      tok[arm].push_back(p.tok_s);
      hit[arm].push_back(p.hit_rate);
      bar.update(++done);
    }
  }
  bar.finish();

  std::vector<double> diff;
  for (int r = 0; r < o.reps; ++r) diff.push_back(tok[1][r] - tok[0][r]);
  const Interval ci = bootstrap_ci(diff);
  const double mean_diff = [&] {
    double s = 0;
    for (double d : diff) s += d;
    return s / double(diff.size());
  }();
  const double ma = median(tok[0]), mb = median(tok[1]);

  fmt::print("{:<4} {:>12} {:>9}  {}\n", "arm", "median tok/s", "hit rate", "knobs");
  fmt::print("{:<4} {:>12.2f} {:>8.1f}%  {}\n", "A", ma, 100 * median(hit[0]), knobs_text(ka));
  fmt::print("{:<4} {:>12.2f} {:>8.1f}%  {}\n", "B", mb, 100 * median(hit[1]), knobs_text(kb));
  fmt::print(
      "B - A: {:+.2f} tok/s ({:+.1f}%), 95% bootstrap CI [{:+.2f}, {:+.2f}] over {} paired reps "
      "(interleaved A B B A ...; {} tokens each, --ubatch 1)\n",
      mean_diff, ma > 0 ? 100 * mean_diff / ma : 0.0, ci.lo, ci.hi, o.reps, tokens);
  if (o.reps < 3)
    fmt::print("note: with {} reps the interval says little; use --reps 5+\n", o.reps);
  if (identical) {
    fmt::print("logits: byte-identical across all {} runs\n", 2 * o.reps);
  } else if (!numerics.empty()) {
    fmt::print(
        "logits: DIFFER between runs — expected: the arms differ in {} which may change the "
        "numbers, so this compares different computations, not only speed\n",
        fmt::join(numerics, ", "));
  } else {
    fmt::print(
        "logits: DIFFER between runs although only placement/thread knobs differ — this "
        "breaks strata's invariant (placement never changes the numbers); please report "
        "it\n");
  }
  std::fflush(stdout);

  if (!o.json.empty()) {
    nlohmann::json j;
    j["model"] = o.model;
    j["tokens_file"] = o.tokens;
    j["tokens"] = tokens;
    j["reps"] = o.reps;
    j["a"] = {{"knobs", ka},
              {"tok_s", tok[0]},
              {"hit_rate", hit[0]},
              {"median_tok_s", ma},
              {"median_hit_rate", median(hit[0])}};
    j["b"] = {{"knobs", kb},
              {"tok_s", tok[1]},
              {"hit_rate", hit[1]},
              {"median_tok_s", mb},
              {"median_hit_rate", median(hit[1])}};
    j["diff_tok_s"] = {{"mean", mean_diff},
                       {"ci95_lo", ci.lo},
                       {"ci95_hi", ci.hi},
                       {"paired", diff},
                       {"bootstrap_seed", 20261129}};
    j["logits_identical"] = identical;
    j["knobs_differ"] = differ;
    j["numerics_knobs_differ"] = numerics;
    const std::string tmp = o.json + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      if (!out.flush()) fail(ErrorKind::kIo, "{}: write failed", tmp);
    }
    std::error_code ec;
    fs::rename(tmp, o.json, ec);
    if (ec) fail(ErrorKind::kIo, "{}: cannot rename the JSON into place", o.json);
  }
  return identical || !numerics.empty() ? 0 : 3;
}

}  // namespace

void add_ab(CLI::App& app, CommandFn& run) {
  auto* cmd = app.add_subcommand(
      "ab", "A/B two knob settings on held-out replays (fresh processes, paired bootstrap CI)");
  auto o = std::make_shared<AbOptions>();
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("--tokens", o->tokens, "Held-out token file (one stream per line)")->required();
  cmd->add_option("--a", o->a, "Arm A knobs: \"RAM_GB=4 THREADS=2\" (\"\" = defaults)")->required();
  cmd->add_option("--b", o->b, "Arm B knobs")->required();
  cmd->add_option("--reps", o->reps, "Runs per arm (default 3)");
  cmd->add_option("--json", o->json, "Write the result as JSON to FILE");
  cmd->callback([&run, o] { run = [o] { return run_ab(*o); }; });
}

}  // namespace strata::tools
