// `strata synth --preset NAME [--out FILE] [--seed N] [--dist uniform|gaussian] [--type T]
// [--force]`: writes a synthetic MoE GGUF (engine/synth.h) with a progress bar, after checking
// the disk has room. Tested by tests/test_synth.cpp (the generator) and by hand (docs in the
// issue).
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "engine/knobs.h"
#include "engine/synth.h"
#include "io/check.h"
#include "tools/cli.h"
#include "tools/progress.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;

// The temp file being written, for the signal handler: an interrupted run removes it (a killed
// one cannot; the next run removes the stale file). The one mutable global here, because a
// signal handler can reach nothing else.
char g_tmp_path[4096];

extern "C" void remove_tmp_and_die(int sig) {
  if (g_tmp_path[0]) ::unlink(g_tmp_path);  // async-signal-safe
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

struct Options {
  std::string preset;
  std::string out;
  uint64_t seed = 1;
  std::string dist = "uniform";
  std::string type;
  bool force = false;
  int threads = 0;
};

std::string preset_list() {
  std::string s;
  size_t width = 0;
  for (const auto& p : engine::synth_presets()) width = std::max(width, p.name.size());
  for (const auto& p : engine::synth_presets())
    s += fmt::format("\n  {:<{}}  {}", p.name, width, p.doc);
  return s;
}

uint64_t free_bytes(const fs::path& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) fail_sys("statvfs", dir.string());
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

int run_synth(const Options& o) {
  const engine::SynthPreset* preset = engine::find_synth_preset(o.preset);
  if (!preset) {
    std::string names;
    for (const auto& p : engine::synth_presets())
      names += (names.empty() ? "" : ", ") + std::string(p.name);
    fail(ErrorKind::kBadValue, "synth: unknown preset '{}' (presets: {})", o.preset, names);
  }
  engine::SynthOptions so;
  so.preset = *preset;
  so.seed = o.seed;
  so.n_threads = o.threads;
  auto dist = engine::synth_dist_from_name(o.dist);
  if (!dist) fail(ErrorKind::kBadValue, "synth: --dist '{}' (use uniform or gaussian)", o.dist);
  so.dist = *dist;
  if (!o.type.empty()) {
    auto t = ggml_type_from_name(o.type);
    if (!t || (*t != GgmlType::Q4_0 && *t != GgmlType::Q8_0 && *t != GgmlType::Q4_K &&
               *t != GgmlType::MXFP4 && *t != GgmlType::IQ4_XS && *t != GgmlType::Q2_K &&
               *t != GgmlType::Q3_K && *t != GgmlType::Q5_K && *t != GgmlType::Q6_K &&
               *t != GgmlType::Q4_1 && *t != GgmlType::Q5_0 && *t != GgmlType::Q5_1 &&
               *t != GgmlType::F16 && *t != GgmlType::F32))
      fail(ErrorKind::kBadValue,
           "synth: --type '{}' (use Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4, IQ4_XS, "
           "Q2_K, Q3_K, F16 or F32)",
           o.type);
    so.expert_type = *t;
  }

  fs::path path = o.out;
  if (path.empty()) {
    const fs::path dir = engine::cache_dir(engine::Knobs::load());
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      fail(ErrorKind::kIo, "{}: cannot create the cache directory: {}", dir.string(), ec.message());
    path = dir / (std::string(preset->name) + ".gguf");
  }
  const std::string out = path.string();
  if (fs::exists(path) && !o.force)
    fail(ErrorKind::kBadValue, "{} exists; pass --force to overwrite it", out);
  const std::string tmp = out + ".tmp";
  if (fs::exists(tmp)) {
    std::error_code ec;
    fs::remove(tmp, ec);
    if (ec) fail(ErrorKind::kIo, "{}: cannot remove the stale temp file: {}", tmp, ec.message());
    std::fprintf(stderr, "strata synth: removed stale %s (left by an interrupted run)\n",
                 tmp.c_str());
  }

  const engine::SynthModel model(so);
  const uint64_t need = model.file_bytes();
  const fs::path dir = fs::absolute(path).parent_path();
  if (!fs::is_directory(dir))
    fail(ErrorKind::kBadValue, "{}: the output directory {} does not exist", out, dir.string());
  const uint64_t have = free_bytes(dir);
  if (need > have)
    fail(ErrorKind::kIo,
         "not enough disk space for {}: need {} ({} bytes), free {} ({} bytes) on {}", out,
         human_bytes(double(need)), need, human_bytes(double(have)), have, dir.string());

  float gmin = 1, gmax = 0;
  for (const auto& r : model.routing()) {
    gmin = std::min(gmin, r.gini_target);
    gmax = std::max(gmax, r.gini_target);
  }
  std::fprintf(stderr,
               "strata synth: %s, seed %llu, %s experts (%s codes), %u tokens (%u learned merges) "
               "-> %s (%s, %s free); routing Gini targets %.2f-%.2f\n",
               preset->name.data(), static_cast<unsigned long long>(o.seed),
               std::string(ggml_type_name(model.expert_type())).c_str(), o.dist.c_str(),
               preset->n_vocab, model.vocab().n_learned_merges, out.c_str(),
               human_bytes(double(need)).c_str(), human_bytes(double(have)).c_str(), gmin, gmax);

  std::snprintf(g_tmp_path, sizeof(g_tmp_path), "%s", tmp.c_str());
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, remove_tmp_and_die);
  Progress bar("synth " + std::string(preset->name), need);
  try {
    model.write(out, [&](uint64_t done, uint64_t) { bar.update(done); });
  } catch (...) {
    bar.abort();
    g_tmp_path[0] = 0;
    throw;
  }
  bar.update(need);
  bar.finish();
  g_tmp_path[0] = 0;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, SIG_DFL);
  std::printf("%s\n", out.c_str());
  return 0;
}

}  // namespace

void add_synth(CLI::App& app, CommandFn& run) {
  auto opt = std::make_shared<Options>();
  auto* cmd =
      app.add_subcommand("synth", "Write a synthetic MoE GGUF (random weights, skewed routing)");
  cmd->footer("Presets:" + preset_list());
  cmd->add_option("--preset", opt->preset, "Model shape (see Presets below)")->required();
  cmd->add_option("--out", opt->out, "Output file (default <cache_dir>/<preset>.gguf)");
  cmd->add_option("--seed", opt->seed, "RNG seed: the same seed writes the same bytes")
      ->capture_default_str();
  cmd->add_option("--dist", opt->dist, "Quantized codes: uniform or gaussian (compressible)")
      ->capture_default_str();
  cmd->add_option(
      "--type", opt->type,
      "Routed expert type: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4, IQ4_XS, Q2_K "
      "or Q3_K (default: preset); F16 or F32 makes every matrix unquantized");
  cmd->add_option("--threads", opt->threads, "Generation threads (0 = all hardware threads)")
      ->capture_default_str();
  cmd->add_flag("--force", opt->force, "Overwrite an existing output file");
  cmd->callback([&run, opt] { run = [opt] { return run_synth(*opt); }; });
}

}  // namespace strata::tools
