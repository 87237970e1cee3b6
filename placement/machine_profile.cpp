// Machine profile: JSON file, defaults, and the RAM bandwidth measurement (see machine_profile.h).
#include "placement/machine_profile.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "io/check.h"

namespace strata::placement {
namespace {

constexpr double kDefaultRamGbps = 10.0;
constexpr double kDefaultSsdGbps = 1.0;
constexpr int kProfileVersion = 1;

double best(const std::map<int, double>& m, double fallback) {
  double b = 0;
  for (const auto& [k, v] : m) b = std::max(b, v);
  return b > 0 ? b : fallback;
}

// Sums 64-bit words so the loads cannot be optimized away; the compiler vectorizes it.
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
  }
  return a0 + a1 + a2 + a3;
}

}  // namespace

double MachineProfile::ram_gbps() const {
  return best(ram_read_gbps, kDefaultRamGbps);
}
int MachineProfile::ram_probe_threads(int threads) const {
  if (ram_read_gbps.empty()) return 0;
  auto it = ram_read_gbps.upper_bound(threads);  // first key > threads
  return it == ram_read_gbps.begin() ? it->first : std::prev(it)->first;
}
double MachineProfile::ram_gbps_at(int threads) const {
  const int t = ram_probe_threads(threads);
  return t > 0 ? ram_read_gbps.at(t) : kDefaultRamGbps;
}
double MachineProfile::ssd_gbps() const {
  return best(ssd_read_gbps, kDefaultSsdGbps);
}
int MachineProfile::best_queue_depth(double share) const {
  const double top = best(ssd_read_gbps, 0);
  int pick = 0;
  for (const auto& [qd, gbps] : ssd_read_gbps)  // ascending queue depth
    if (top > 0 && gbps >= share * top) pick = qd;
  return pick;
}

std::string MachineProfile::describe() const {
  std::string gpu;
  for (const Gpu& g : gpus)
    gpu += fmt::format(", GPU {} H2D {:.1f} GB/s, device copy {:.0f} GB/s", g.device, g.h2d_gbps,
                       g.d2d_gbps);
  return fmt::format("machine: RAM {:.1f} GB/s, SSD {:.2f} GB/s{}{}", ram_gbps(), ssd_gbps(), gpu,
                     measured ? "" : " (defaults, not measured: run `strata probe`)");
}

MachineProfile default_machine_profile() {
  return {};
}

void save_machine_profile(const MachineProfile& p, const std::string& path) {
  nlohmann::json j;
  j["version"] = kProfileVersion;
  for (const auto& [t, v] : p.ram_read_gbps) j["ram_read_gbps"][std::to_string(t)] = v;
  j["ssd_read_bytes"] = p.ssd_read_bytes;
  for (const auto& [q, v] : p.ssd_read_gbps) j["ssd_read_gbps"][std::to_string(q)] = v;
  j["gpus"] = nlohmann::json::array();
  for (const MachineProfile::Gpu& g : p.gpus)
    j["gpus"].push_back({{"device", g.device},
                         {"name", g.name},
                         {"h2d_gbps", g.h2d_gbps},
                         {"d2h_gbps", g.d2h_gbps},
                         {"d2d_gbps", g.d2d_gbps}});
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!out) fail(ErrorKind::kIo, "machine profile: cannot write {}", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail(ErrorKind::kIo, "machine profile: cannot rename {} to {}", tmp, path);
  }
}

MachineProfile load_machine_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorKind::kNotFound, "machine profile: cannot open {}", path);
  MachineProfile p;
  std::string key = "(json)";
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    key = "version";
    if (j.at("version").get<int>() != kProfileVersion)
      fail(ErrorKind::kBadFile, "machine profile {}: unsupported version", path);
    key = "ram_read_gbps";
    for (const auto& [t, v] : j.at("ram_read_gbps").items())
      p.ram_read_gbps[std::stoi(t)] = v.get<double>();
    key = "ssd_read_bytes";
    p.ssd_read_bytes = j.at("ssd_read_bytes").get<uint64_t>();
    key = "ssd_read_gbps";
    for (const auto& [q, v] : j.at("ssd_read_gbps").items())
      p.ssd_read_gbps[std::stoi(q)] = v.get<double>();
    key = "gpus";  // optional: profiles from CPU-only builds have none
    if (j.contains("gpus"))
      for (const auto& g : j.at("gpus")) {
        MachineProfile::Gpu x;
        x.device = g.at("device").get<int>();
        x.name = g.at("name").get<std::string>();
        x.h2d_gbps = g.at("h2d_gbps").get<double>();
        x.d2h_gbps = g.at("d2h_gbps").get<double>();
        x.d2d_gbps = g.at("d2d_gbps").get<double>();
        if (!(x.h2d_gbps > 0 && x.d2h_gbps > 0 && x.d2d_gbps > 0) || x.device < 0)
          fail(ErrorKind::kBadFile, "machine profile {}: bad GPU entry for device {}", path,
               x.device);
        p.gpus.push_back(x);
      }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(ErrorKind::kBadFile, "machine profile {}: bad key '{}': {}", path, key, e.what());
  }
  for (const auto* m : {&p.ram_read_gbps, &p.ssd_read_gbps})
    for (const auto& [k, v] : *m)
      if (!(v > 0) || k <= 0)
        fail(ErrorKind::kBadFile, "machine profile {}: bad entry {}: {}", path, k, v);
  p.measured = true;
  return p;
}

MachineProfile machine_profile_or_defaults(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr,
                 "strata: no machine profile at %s: conservative defaults (RAM %.0f GB/s, SSD "
                 "%.0f GB/s); run `strata probe` to measure\n",
                 path.c_str(), kDefaultRamGbps, kDefaultSsdGbps);
    return default_machine_profile();
  }
  return load_machine_profile(path);
}

RamReadProbe::RamReadProbe(int n_threads, uint64_t buffer_bytes)
    : n_threads_(std::max(1, n_threads)) {
  chunk_ = (buffer_bytes / static_cast<uint64_t>(n_threads_)) & ~uint64_t{4095};
  total_ = chunk_ * static_cast<uint64_t>(n_threads_);
  if (total_ == 0)
    fail(ErrorKind::kBadValue, "probe: a buffer of {} bytes is under a page per thread",
         buffer_bytes);
  void* m = mmap(nullptr, total_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) fail(ErrorKind::kOutOfMemory, "probe: mmap of {} bytes failed", total_);
  madvise(m, total_, MADV_HUGEPAGE);
  base_ = static_cast<uint64_t*>(m);
  run(true);  // first touch by the reading thread puts each share's pages near it
}

RamReadProbe::~RamReadProbe() {
  munmap(base_, total_);
}

void RamReadProbe::run(bool touch) {
  std::atomic<uint64_t> sink{0};
  const size_t words = chunk_ / sizeof(uint64_t);
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads_; ++t)
    threads.emplace_back([&, t] {
      uint64_t* p = base_ + static_cast<size_t>(t) * words;
      if (touch) std::memset(p, 1, chunk_);
      sink += sum_words(p, words);
    });
  for (auto& th : threads) th.join();
  sink_ += sink.load();
}

double RamReadProbe::pass() {
  const auto t0 = std::chrono::steady_clock::now();
  run(false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(total_) / s / 1e9 + 0 * static_cast<double>(sink_);
}

double measure_ram_read_gbps(int n_threads, uint64_t buffer_bytes, int repeats,
                             double min_seconds) {
  RamReadProbe probe(n_threads, buffer_bytes);
  double best = 0;
  double spent_s = 0;
  constexpr int kMaxPasses = 10000;
  for (int r = 0; r < kMaxPasses && (r < std::max(1, repeats) || spent_s < min_seconds); ++r) {
    const double gbs = probe.pass();
    best = std::max(best, gbs);
    spent_s += static_cast<double>(probe.bytes()) / gbs / 1e9;
  }
  return best;
}

}  // namespace strata::placement
