// MachineProfile: the measured constants of the planner's cost model — RAM read bandwidth per
// thread count and SSD O_DIRECT read throughput at the expert read size per queue depth — saved
// as JSON by `strata probe` (docs/FORMATS.md "Machine profile"), with conservative defaults when
// no profile exists. Tested by tests/test_planner.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata::placement {

struct MachineProfile {
  std::map<int, double> ram_read_gbps;  // threads -> GB/s (1e9 bytes/s)
  uint64_t ssd_read_bytes = 0;          // read size measured (the expert read size)
  std::map<int, double> ssd_read_gbps;  // queue depth -> GB/s
  // GPUs (`strata probe` in a CUDA build with devices): copy bandwidths per device, GB/s.
  struct Gpu {
    int device = 0;
    std::string name;
    double h2d_gbps = 0;  // pinned host -> device
    double d2h_gbps = 0;  // device -> pinned host
    double d2d_gbps = 0;  // device copy, bytes read + written
  };
  std::vector<Gpu> gpus;
  bool measured = false;  // false: the conservative defaults

  double ram_gbps() const;  // the best measured (all threads), else the default
  // Measured at this many threads; else at the most threads measured below it; else the fewest
  // measured; else the default.
  double ram_gbps_at(int threads) const;
  // The measured thread count ram_gbps_at(threads) reads (0 when nothing was measured).
  int ram_probe_threads(int threads) const;
  double ssd_gbps() const;  // the best queue depth, else the default
  // The deepest measured queue depth within `share` of the best SSD rate: deeper ones lose (a
  // virtual disk here peaks at QD 4-8 and loses 30% at 32), shallower ones leave the disk idle
  // whenever the compute thread is late; 0 when SSD was not measured.
  int best_queue_depth(double share = 0.95) const;
  std::string describe() const;  // one line
};

// 10 GB/s RAM, 1 GB/s SSD: below any machine strata targets, so plans are not optimistic.
MachineProfile default_machine_profile();

// JSON (nlohmann) to path.tmp, then renamed; Error(kIo) naming the path on failure.
void save_machine_profile(const MachineProfile& p, const std::string& path);
// Error(kBadFile) naming the path and the key when malformed; Error(kNotFound) when missing.
MachineProfile load_machine_profile(const std::string& path);
// The profile at path, or the defaults with a one-line notice on stderr when there is none.
MachineProfile machine_profile_or_defaults(const std::string& path);

// A RAM read-bandwidth probe that keeps its buffer: buffer_bytes (rounded down to whole pages per
// thread) mapped on huge pages where the kernel allows and touched once by the thread that will
// read it; each pass() streams all of it with n_threads threads (one contiguous share each) and
// returns GB/s. PROF_PROBE_EVERY takes a pass between decode tokens with one held for the run.
// Error(kOutOfMemory) when the buffer cannot be mapped.
class RamReadProbe {
 public:
  RamReadProbe(int n_threads, uint64_t buffer_bytes);
  ~RamReadProbe();
  RamReadProbe(const RamReadProbe&) = delete;
  RamReadProbe& operator=(const RamReadProbe&) = delete;

  double pass();  // GB/s of one pass
  uint64_t bytes() const { return total_; }
  int threads() const { return n_threads_; }

 private:
  void run(bool touch);
  int n_threads_;
  uint64_t chunk_ = 0, total_ = 0;
  uint64_t* base_ = nullptr;
  uint64_t sink_ = 0;
};

// Measurements used by `strata probe`.
// RAM read bandwidth (GB/s) streaming buffer_bytes with n_threads threads: the best of repeats
// passes, and of more while the passes so far took under min_seconds (a shared host's bus dips
// for tenths of a second; a longer window finds its rate between the dips).
double measure_ram_read_gbps(int n_threads, uint64_t buffer_bytes, int repeats,
                             double min_seconds = 0);

}  // namespace strata::placement
