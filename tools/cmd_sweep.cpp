// `strata sweep -m MODEL --tokens FILE --ram-gb LIST [--pin STATS] [--csv FILE] [--plot FILE.png]`:
// replays the token file once per RAM_GB budget, each in a fresh process (replay_child.h), and
// prints RAM_GB, hit rate, SSD GB/token, tok/s and the PROF verdict per point — how a user decides
// how much RAM to buy. Tested by tests/test_ab_sweep.cpp.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/knobs.h"
#include "io/check.h"
#include "tools/cli.h"
#include "tools/progress.h"
#include "tools/replay_child.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;

struct SweepOptions {
  std::string model;
  std::string tokens;
  std::string ram_gb;  // "1,2,4" or "1 2 4"
  std::string pin;
  std::string extra;  // more knobs for every point, "THREADS=2 ..."
  std::string csv;
  std::string plot;
};

std::vector<double> parse_ram_list(const std::string& text) {
  std::vector<double> out;
  std::string s = text;
  std::replace(s.begin(), s.end(), ',', ' ');
  std::istringstream in(s);
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    const double v = std::strtod(word.c_str(), &end);
    if (end != word.c_str() + word.size() || !(v >= 0))
      fail(ErrorKind::kBadValue, "--ram-gb: '{}' is not a size in GiB", word);
    out.push_back(v);
  }
  if (out.empty()) fail(ErrorKind::kBadValue, "--ram-gb: empty list");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Written to path.tmp and renamed, so a failed sweep leaves no partial CSV.
void write_csv(const std::string& path, const std::vector<double>& ram,
               const std::vector<ReplayPoint>& pts) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) fail(ErrorKind::kIo, "{}: cannot write the CSV", tmp);
    out << "ram_gb,hit_rate,ssd_gb_per_token,decode_tok_s,verdict\n";
    for (size_t i = 0; i < pts.size(); ++i)
      out << fmt::format("{},{:.6f},{:.6f},{:.3f},{}\n", ram[i], pts[i].hit_rate,
                         pts[i].ssd_gb_per_token, pts[i].tok_s, pts[i].verdict);
    if (!out.flush()) fail(ErrorKind::kIo, "{}: write failed", tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fail(ErrorKind::kIo, "{}: cannot rename the CSV into place: {}", path, ec.message());
}

bool have_gnuplot() {
  return std::system("command -v gnuplot > /dev/null 2>&1") == 0;
}

// tok/s (left axis) and hit rate (right axis) against RAM_GB, from the CSV.
void plot(const std::string& csv, const std::string& png) {
  if (!have_gnuplot()) {
    fmt::print(stderr,
               "sweep: gnuplot is not installed, so no plot was drawn (apt-get install gnuplot); "
               "the data is in {}\n",
               csv);
    return;
  }
  const std::string script = fmt::format(
      "set terminal pngcairo size 900,540; set output '{}'; set datafile separator ',';"
      "set key autotitle columnhead; set xlabel 'RAM_GB (GiB)'; set ylabel 'tok/s';"
      "set y2label 'hit rate'; set y2range [0:1]; set ytics nomirror; set y2tics;"
      "plot '{}' using 1:4 with linespoints title 'tok/s' axes x1y1,"
      " '' using 1:2 with linespoints title 'hit rate' axes x1y2",
      png, csv);
  const std::string cmd = "gnuplot -e \"" + script + "\"";
  if (std::system(cmd.c_str()) != 0)
    fail(ErrorKind::kIo, "{}: gnuplot failed to draw the plot", png);
  fmt::print(stderr, "sweep: plot written to {}\n", png);
}

int run_sweep(const SweepOptions& o) {
  const std::vector<double> ram = parse_ram_list(o.ram_gb);
  std::map<std::string, std::string> knobs = parse_knob_list(o.extra, "--knobs");
  if (knobs.count("RAM_GB")) fail(ErrorKind::kBadValue, "--knobs: RAM_GB is what --ram-gb sweeps");
  if (!o.pin.empty()) knobs["PIN"] = o.pin;
  if (!fs::exists(o.model)) fail(ErrorKind::kNotFound, "{}: no such model file", o.model);
  if (!fs::exists(o.tokens)) fail(ErrorKind::kNotFound, "{}: no such token file", o.tokens);
  const std::string csv_path =
      !o.csv.empty()
          ? o.csv
          : (!o.plot.empty() ? fs::path(o.plot).replace_extension(".csv").string() : std::string());

  TempDir work("strata-sweep");
  std::vector<ReplayPoint> pts;
  Progress bar("sweep", ram.size(), ProgressUnit::kItems);
  for (size_t i = 0; i < ram.size(); ++i) {
    ReplayChild c;
    c.model = o.model;
    c.tokens = o.tokens;
    c.knobs = knobs;
    c.knobs["RAM_GB"] = fmt::format("{}", ram[i]);
    c.work_dir = work.path();
    c.tag = fmt::format("point{}", i);
    try {
      pts.push_back(replay_point(run_replay_child(c)));
    } catch (...) {
      bar.abort();
      throw;
    }
    if (i > 0 && pts[i].tokens != pts[0].tokens)
      fail(ErrorKind::kBadValue, "sweep: point {} replayed {} tokens, point 0 {}: inputs changed",
           i, pts[i].tokens, pts[0].tokens);
    bar.update(i + 1);
  }
  bar.finish();

  fmt::print("{:>8} {:>9} {:>16} {:>12}  {}\n", "RAM_GB", "hit rate", "SSD GB/token",
             "decode tok/s", "verdict");
  for (size_t i = 0; i < pts.size(); ++i)
    fmt::print("{:>8.4g} {:>8.1f}% {:>16.6f} {:>12.2f}  {}\n", ram[i], 100 * pts[i].hit_rate,
               pts[i].ssd_gb_per_token, pts[i].tok_s, pts[i].verdict);
  fmt::print(
      "({} tokens per point, replayed one at a time (--ubatch 1) in a fresh process; hit "
      "rate = expert uses that read nothing from SSD)\n",
      pts.empty() ? 0 : pts[0].tokens);
  std::fflush(stdout);
  if (!csv_path.empty()) {
    write_csv(csv_path, ram, pts);
    fmt::print(stderr, "sweep: CSV written to {}\n", csv_path);
  }
  if (!o.plot.empty()) plot(csv_path, o.plot);
  return 0;
}

}  // namespace

void add_sweep(CLI::App& app, CommandFn& run) {
  auto* cmd = app.add_subcommand(
      "sweep", "Replay a token file at each RAM_GB budget (fresh process each): hit rate, tok/s");
  auto o = std::make_shared<SweepOptions>();
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("--tokens", o->tokens, "Token file for `strata replay` (one stream per line)")
      ->required();
  cmd->add_option("--ram-gb", o->ram_gb, "RAM_GB budgets to try, e.g. 0.5,1,2,4")->required();
  cmd->add_option("--pin", o->pin,
                  "Usage stats file for PIN (placement from measured usage), or `learned`: the "
                  "model's USAGE_AUTO profile");
  cmd->add_option("--knobs", o->extra, "More knobs for every point: \"THREADS=2 NUMA=off\"");
  cmd->add_option("--csv", o->csv,
                  "Write ram_gb,hit_rate,ssd_gb_per_token,decode_tok_s,verdict to FILE");
  cmd->add_option("--plot", o->plot, "Plot tok/s and hit rate against RAM_GB (needs gnuplot)");
  cmd->callback([&run, o] { run = [o] { return run_sweep(*o); }; });
}

}  // namespace strata::tools
