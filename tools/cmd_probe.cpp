// `strata probe [-o FILE] [--dir DIR] [--ssd-mib N] [--read-kib N | -m MODEL] [--ram-mib N]`:
// measures the planner's constants — RAM read bandwidth per thread count, and SSD O_DIRECT read
// throughput at the expert read size at queue depths 1 to 32 (tiers::IoReader on the model file
// itself with -m, read-only, else on a temp file that is deleted after) — and saves the machine
// profile JSON (default <cache dir>/machine.json; docs/FORMATS.md "Machine profile"). The file
// format is tested by tests/test_planner.cpp.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda/runtime.h"
#include "engine/expert_source.h"
#include "engine/model.h"
#include "engine/sysmem.h"
#include "io/check.h"
#include "placement/machine_profile.h"
#include "tiers/io_reader.h"
#include "tools/cli.h"
#include "tools/knob_flags.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;

struct ProbeOptions {
  std::string out;
  std::string dir;
  std::string model;
  uint64_t ssd_mib = 1024;
  uint64_t read_kib = 0;  // 0: the model's cache slot, else 3 MiB
  uint64_t ram_mib = 0;   // 0: auto (ram_probe_mib)
  KnobOverrides knobs;
};

// Removes the temp file however the probe ends.
struct TempFile {
  std::string path;
  ~TempFile() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

void write_file(const std::string& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) fail(ErrorKind::kIo, "probe: cannot create {}", path);
  std::vector<uint64_t> block((8u << 20) / sizeof(uint64_t));
  std::mt19937_64 rng(1);
  for (uint64_t& w : block) w = rng();
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min<uint64_t>(block.size() * sizeof(uint64_t), bytes - done);
    const ssize_t w = ::write(fd, block.data(), n);
    if (w <= 0) {
      ::close(fd);
      fail(ErrorKind::kIo, "probe: write to {} failed at offset {}", path, done);
    }
    done += static_cast<uint64_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
}

// GB/s reading `total` bytes in random read_bytes-sized aligned reads, qd in flight.
double ssd_read_gbps(const std::string& path, uint64_t file_bytes, uint64_t read_bytes, int qd,
                     uint64_t total, bool& direct) {
  tiers::IoConfig cfg;
  cfg.queue_depth = qd;
  tiers::IoReader reader(path, cfg);
  direct = reader.direct();
  const size_t n_buf = static_cast<size_t>(qd);
  std::byte* buf = static_cast<std::byte*>(std::aligned_alloc(4096, read_bytes * n_buf));
  if (!buf) fail(ErrorKind::kOutOfMemory, "probe: cannot allocate read buffers");
  std::mt19937_64 rng(2);
  const uint64_t slots = file_bytes / read_bytes;
  const auto request = [&](uint64_t tag) {
    return tiers::ReadRequest{(rng() % slots) * read_bytes, read_bytes, buf + tag * read_bytes,
                              tag};
  };
  const uint64_t n_reads = std::max<uint64_t>(n_buf * 2, total / read_bytes);
  std::vector<tiers::ReadCompletion> done(n_buf);
  uint64_t issued = 0, finished = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<tiers::ReadRequest> first;
  for (; issued < std::min<uint64_t>(n_buf, n_reads); ++issued) first.push_back(request(issued));
  reader.submit(first);
  while (finished < n_reads) {
    const size_t n = reader.wait(done);
    for (size_t i = 0; i < n; ++i) {
      ++finished;
      if (issued < n_reads) {
        const tiers::ReadRequest r = request(done[i].tag);
        reader.submit({&r, 1});
        ++issued;
      }
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::free(buf);
  return static_cast<double>(n_reads * read_bytes) / s / 1e9;
}

// The RAM probe's buffer: 4x the last-level cache and at least 2 GiB, so the reads come from DRAM
// (a 512 MiB buffer read partly from this VM's 480 MiB L3), at most a quarter of what memory is
// available, at least 64 MiB.
uint64_t ram_probe_mib() {
  uint64_t llc_kib = 0;
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
  std::string size;
  if (f >> size && !size.empty()) {
    try {
      llc_kib = std::stoull(size);
      if (size.back() == 'M') llc_kib <<= 10;
    } catch (const std::exception&) {
      llc_kib = 0;
    }
  }
  uint64_t mib = std::max<uint64_t>(2048, 4 * llc_kib / 1024);
  const uint64_t avail_mib = engine::memory_info().available() >> 20;
  if (avail_mib > 0) mib = std::min(mib, avail_mib / 4);
  return std::max<uint64_t>(mib, 64);
}

int run_probe(const ProbeOptions& o) {
  const engine::Knobs knobs = load_knobs(o.knobs);
  const fs::path cache = engine::cache_dir(knobs);
  const std::string out = o.out.empty() ? (cache / "machine.json").string() : o.out;
  placement::MachineProfile p;
  p.measured = true;

  uint64_t read_bytes = o.read_kib ? o.read_kib << 10 : 3ull << 20;
  if (!o.model.empty() && !o.read_kib) {
    // The size of the reads the SSD tier issues: one expert slice's 4 KiB-aligned superset.
    read_bytes = 0;
    for (const auto& layer : engine::expert_extents(engine::Model::load(o.model)))
      for (const auto& expert : layer)
        for (const auto& slice : expert)
          read_bytes =
              std::max(read_bytes, tiers::aligned_superset(slice.offset, slice.bytes).bytes);
  }
  read_bytes = std::max<uint64_t>(4096, (read_bytes + 4095) / 4096 * 4096);

  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> counts;
  for (int t = 1; t < hw; t *= 2) counts.push_back(t);
  counts.push_back(hw);
  const uint64_t ram_mib = o.ram_mib > 0 ? o.ram_mib : ram_probe_mib();
  std::printf("RAM read over a %llu MiB buffer, best of 3:\n",
              static_cast<unsigned long long>(ram_mib));
  for (int t : counts) {
    p.ram_read_gbps[t] = placement::measure_ram_read_gbps(t, ram_mib << 20, 3);
    std::printf("RAM read, %3d threads: %7.2f GB/s\n", t, p.ram_read_gbps[t]);
  }

  // With -m (and no --dir) the model file itself is read: the disk it lives on, read-only; a
  // freshly written temp file may still sit in a cache (a virtual disk's host cache made one read
  // 40% faster here). Otherwise a temp file in --dir (default: the cache dir), deleted after.
  const bool on_model = !o.model.empty() && o.dir.empty();
  const fs::path dir = o.dir.empty() ? cache : fs::path(o.dir);
  TempFile tmp;
  std::string ssd_path = o.model;
  uint64_t file_bytes = 0;
  if (on_model) {
    file_bytes = fs::file_size(o.model) / 4096 * 4096;
    std::printf("SSD: reading %s (read-only) ...\n", o.model.c_str());
  } else {
    std::error_code ec;
    fs::create_directories(dir, ec);
    tmp.path = (dir / fmt::format("strata-probe-{}.tmp", ::getpid())).string();
    ssd_path = tmp.path;
    file_bytes = std::max<uint64_t>(o.ssd_mib << 20, read_bytes * 16);
    std::printf("SSD: writing a %s temp file in %s ...\n",
                placement::format_bytes(file_bytes).c_str(), dir.string().c_str());
    write_file(tmp.path, file_bytes);
  }
  p.ssd_read_bytes = read_bytes;
  bool direct = true;
  // Two sweeps, each queue depth keeping its better rate: disks (virtual ones above all) swing
  // between neighbouring seconds, and one slow moment should not pick the queue depth.
  constexpr int kQds[] = {1, 2, 4, 8, 16, 32};
  for (int pass = 0; pass < 2; ++pass)
    for (int qd : kQds)
      p.ssd_read_gbps[qd] =
          std::max(p.ssd_read_gbps[qd],
                   ssd_read_gbps(ssd_path, file_bytes, read_bytes, qd,
                                 std::min<uint64_t>(file_bytes / 4, 512ull << 20), direct));
  for (int qd : kQds)
    std::printf("SSD read %s, QD %2d: %7.3f GB/s (better of 2)%s\n",
                placement::format_bytes(read_bytes).c_str(), qd, p.ssd_read_gbps[qd],
                direct ? "" : " (buffered: O_DIRECT refused here; page cache may inflate this)");
  std::printf("SSD: QD %d is the deepest within 5%% of the best rate (the QD knob's auto value)\n",
              p.best_queue_depth());
  // GPUs: pinned H2D / D2H and device-copy bandwidth per device (CUDA builds with devices).
  const int n_gpu = cuda::cuda_device_count();
  if (n_gpu == 0) std::printf("GPU: none (%s)\n", cuda::cuda_describe().c_str());
  for (int d = 0; d < n_gpu; ++d) {
    const cuda::CopyBandwidth b = cuda::probe_copy_bandwidth(d);
    p.gpus.push_back({d, b.name, b.h2d_gb_s, b.d2h_gb_s, b.d2d_gb_s});
    std::printf("GPU %d %s: H2D %.2f GB/s, D2H %.2f GB/s, device copy %.1f GB/s (read + write)\n",
                d, b.name.c_str(), b.h2d_gb_s, b.d2h_gb_s, b.d2d_gb_s);
  }
  placement::save_machine_profile(p, out);
  std::printf("%s\nsaved %s\n", p.describe().c_str(), out.c_str());
  return 0;
}

}  // namespace

void add_probe(CLI::App& app, CommandFn& run) {
  auto* cmd = app.add_subcommand(
      "probe", "Measure RAM and SSD bandwidth for the planner; save the machine profile");
  auto o = std::make_shared<ProbeOptions>();
  cmd->add_option("-o,--out", o->out, "Profile JSON (default <cache dir>/machine.json)");
  cmd->add_option("--dir", o->dir,
                  "Measure SSD on a temp file here (default: with -m the model file itself, "
                  "read-only; else the cache dir)");
  cmd->add_option("-m,--model", o->model,
                  "Use the size of this model's expert reads (one slice's 4 KiB-aligned superset)");
  cmd->add_option("--ssd-mib", o->ssd_mib, "SSD temp file size in MiB (default 1024)");
  cmd->add_option("--read-kib", o->read_kib, "SSD read size in KiB (default: model's, else 3072)");
  cmd->add_option("--ram-mib", o->ram_mib,
                  "RAM probe buffer in MiB (default: 4x the last-level cache, at least 2048, at "
                  "most a quarter of available memory)");
  add_knob_flags(cmd, o->knobs);
  cmd->callback([&run, o] { run = [o] { return run_probe(*o); }; });
}

}  // namespace strata::tools
