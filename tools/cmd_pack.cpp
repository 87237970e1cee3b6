// `strata pack -m MODEL.gguf [--out FILE] [--level N] [--threads N] [--force]`: writes the zstd
// expert sidecar (tiers/sidecar.h; default MODEL.gguf.stz) that the compressed SSD tier reads,
// then reports the ratio and one thread's decompression rate. Tested by tests/test_tier_zstd.cpp.
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "engine/expert_source.h"
#include "engine/model.h"
#include "io/check.h"
#include "tiers/sidecar.h"
#include "tools/cli.h"
#include "tools/progress.h"

namespace strata::tools {
namespace {

struct PackArgs {
  std::string model;
  std::string out;
  int level = 3;
  int threads = 0;
  bool force = false;
};

int run_pack(const PackArgs& a) {
  const engine::Model model = engine::Model::load(a.model);
  const tiers::ExtentTable extents = engine::expert_extents(model);
  // A split model's sidecar sits beside its first shard, where a run looks for it.
  const std::string out = a.out.empty() ? model.file().path() + tiers::kSidecarSuffix : a.out;
  if (std::filesystem::exists(out) && !a.force)
    fail(ErrorKind::kBadValue, "{}: exists (--force overwrites it)", out);
  if (a.level < 1 || a.level > 19)
    fail(ErrorKind::kBadValue, "--level {}: zstd levels 1..19 are allowed", a.level);
  tiers::PackOptions o;
  o.level = a.level;
  o.threads = a.threads > 0 ? a.threads : std::max(1, int(std::thread::hardware_concurrency()));
  uint64_t total = 0;
  for (const auto& l : extents)
    for (const auto& x : l)
      for (const auto& s : x) total += s.bytes;
  if (total == 0) fail(ErrorKind::kBadValue, "{}: no routed experts to pack", a.model);
  Progress bar("pack " + std::filesystem::path(a.model).filename().string(), total);
  o.progress = [&](uint64_t done, uint64_t) { bar.update(done); };
  tiers::Sidecar sc;
  try {
    sc = tiers::write_sidecar(model.file().parts(), extents, out, o);
  } catch (...) {
    bar.abort();
    throw;
  }
  bar.finish();
  const double dec = tiers::measure_decompress_gbps(sc, 16);
  std::fprintf(stderr,
               "pack: %s: %.3f GB of experts -> %.3f GB (ratio %.3f, zstd level %d); "
               "decompression %.2f GB/s per thread\n",
               out.c_str(), double(sc.raw_bytes()) / 1e9, double(sc.stored_bytes()) / 1e9,
               sc.ratio(), sc.level, dec);
  return 0;
}

}  // namespace

void add_pack(CLI::App& app, CommandFn& run) {
  auto* cmd = app.add_subcommand(
      "pack", "Write the zstd expert sidecar (MODEL.gguf.stz) the compressed SSD tier reads");
  auto a = std::make_shared<PackArgs>();
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("--out", a->out, "Sidecar file (default MODEL.gguf.stz, where ZSTD looks)");
  cmd->add_option("--level", a->level, "zstd level 1..19 (default 3)");
  cmd->add_option("--threads", a->threads, "Compression threads (0 = all hardware threads)");
  cmd->add_flag("--force", a->force, "Overwrite an existing sidecar");
  cmd->callback([&run, a] { run = [a] { return run_pack(*a); }; });
}

}  // namespace strata::tools
