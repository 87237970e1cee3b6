// ExpertStore: where every routed expert's bytes are, per a PlacementPlan — RAM homes loaded into
// NUMA arenas at construction, SSD homes streamed from the GGUF into the RAM cache on demand — and
// the prepare / get / release API the engine's MoE stage calls, with PROF counters.
// Tested by tests/test_tiers_store.cpp.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "placement/plan.h"
#include "tiers/expert_cache.h"
#include "tiers/extents.h"
#include "tiers/io_reader.h"
#include "tiers/ram_arena.h"
#include "tiers/sidecar.h"

namespace strata::tiers {

// Home slices are packed at this alignment in RAM arenas (a cache line; SIMD loads never split).
constexpr uint64_t kSliceAlign = 64;

// What placement needs from the extents: per-layer expert bytes as packed in a RAM arena (the
// largest expert of the layer) and the cache slot size (the largest expert as read: the sum of its
// slices' 4 KiB-aligned supersets; with a sidecar, its raw bytes 4 KiB-aligned plus the frame's
// read, since a slot holds the frame and the decompressed slices side by side).
placement::ExpertSizes expert_sizes(const ExtentTable& extents, int n_expert_used,
                                    const Sidecar* sidecar = nullptr);

// The engine's tier knobs (DIRECT, URING, THREADS, NUMA) and the test-only fault seam.
struct StoreOptions {
  bool direct = true;
  bool uring = true;
  int io_threads = 4;    // pread fallback pool
  int queue_depth = 32;  // reads in flight
  NumaMode numa = NumaMode::kInterleave;
  IoFaults faults;
  // The compressed SSD tier: SSD-homed experts are read from this sidecar (checked against the
  // extents by read_sidecar) and decompressed by decompress_threads workers. RAM homes still load
  // from the model file. Must outlive the store.
  const Sidecar* sidecar = nullptr;
  int decompress_threads = 1;
};

struct StoreHooks {
  FirstTouch first_touch;  // null: arenas are touched on the constructing thread
  NoticeFn notice = notice_to_stderr;
  std::function<void(uint64_t bytes_done, uint64_t bytes_total)> progress;  // RAM home loading
};

// Pointers to one expert's three slices, byte-identical to the file's.
struct ExpertView {
  std::array<const std::byte*, 3> slice{};  // indexed by Slice
  std::array<uint64_t, 3> bytes{};
  placement::Home home;
};

struct TierCounters {
  uint64_t served = 0;        // experts handed to compute from this home
  uint64_t served_bytes = 0;  // their slice bytes
  uint64_t loads = 0;         // experts read from the file into this tier (RAM: at start)
  uint64_t load_bytes = 0;    // bytes read from the file for them (4 KiB-aligned supersets)
  double load_seconds = 0;    // wall time with loads outstanding (RAM: the start-up load)
};

struct StoreCounters {
  TierCounters ram, ssd, vram;
  uint64_t cache_hits = 0;    // SSD-homed expert found in the cache (or already in flight)
  uint64_t cache_misses = 0;  // SSD-homed expert that had to be read
  uint64_t evictions = 0;
  uint64_t reads = 0;             // read requests completed (three per expert)
  double io_wait_seconds = 0;     // time get() blocked waiting for reads (felt by compute)
  double io_service_seconds = 0;  // submit -> reaped, summed over reads (overlaps itself)
  uint64_t frames = 0;            // sidecar frames decompressed
  uint64_t frame_raw_bytes = 0;   // the expert bytes they held
  double decompress_seconds = 0;  // worker time spent decompressing (summed over workers)
  double hit_rate() const {
    const uint64_t n = cache_hits + cache_misses;
    return n ? static_cast<double>(cache_hits) / static_cast<double>(n) : 0.0;
  }
};

// Not thread-safe: one thread (the engine's MoE driver) calls prepare / get / release; the views
// it hands out may be read by any thread until release(layer).
class ExpertStore {
 public:
  // Checks the extents against the file and the plan, opens the file, maps the cache and the RAM
  // arenas, and reads every RAM-homed expert (progress reported through hooks). Throws Error for
  // extents outside the file, a plan built for other sizes, a VRAM home (needs the CUDA tier), or
  // an I/O failure.
  ExpertStore(std::string path, ExtentTable extents, placement::PlacementPlan plan,
              StoreOptions options = {}, StoreHooks hooks = {});
  ~ExpertStore();
  ExpertStore(const ExpertStore&) = delete;
  ExpertStore& operator=(const ExpertStore&) = delete;

  // Submits one batch of reads for the SSD-homed experts of the list that are not cached and
  // pins them (and the cached ones) until release(layer). Returns at once. Experts that find no
  // free slot are skipped (get() will try again).
  void prepare(int layer, std::span<const int> experts);
  // The expert's slices: RAM homes at once; SSD homes when their reads are done (blocks, and the
  // time blocked counts as I/O wait). Pins the slot until release(layer). Throws Error on I/O
  // failure or when every cache slot is pinned.
  ExpertView get(int layer, int expert);
  // Unpins every slot prepare/get pinned for this layer.
  void release(int layer);
  // Unpins only these experts' slots (a prefill chunk computes a layer's SSD experts in groups
  // that together exceed the cache; the next group stays pinned while this one is released).
  void release(int layer, std::span<const int> experts);

  const placement::PlacementPlan& plan() const { return plan_; }
  const StoreCounters& counters() const { return counters_; }
  void reset_counters();
  uint64_t ram_bytes() const;  // arenas + cache as mapped (<= the plan's RAM budget)
  bool uring() const { return reader_->uring(); }
  bool compressed() const { return zreader_ != nullptr; }
  bool direct() const { return reader_->direct(); }
  bool fixed_buffers() const { return reader_->registered(); }
  const ExpertCache* cache() const { return cache_.get(); }

 private:
  // Per expert, layer-major: its home and where its bytes are.
  struct Expert {
    placement::Home home;
    std::array<const std::byte*, 3> ram{};  // RAM homes: packed slices in an arena
    std::array<AlignedRange, 3> read{};     // the reads (SSD homes and RAM loading)
    std::array<uint64_t, 3> sub{};          // where each superset starts inside a slot
    const SidecarEntry* frame = nullptr;    // compressed SSD home: its sidecar frame
    std::array<uint64_t, 3> zsub{};         // ... and its slices' offsets in a slot
    uint64_t zframe_at = 0;                 // where the frame is read to inside a slot
  };
  struct Active {
    int expert;
    int slot;
  };

  int64_t key(int layer, int expert) const { return layer_begin_[layer] + expert; }
  void check_inputs();
  void load_ram_homes();
  // Pins the expert's slot for this layer (hit or new fill); appends its reads to batch_.
  // Returns the slot or ExpertCache::kNone when every slot is pinned (may_block: after waiting
  // for reads in flight that hold slots).
  int activate(int layer, int expert, bool may_block);
  void submit_batch();       // hands batch_ (and zbatch_) to the readers in one submit each
  void drain(bool block);    // reaps completions, finishing filled slots
  size_t in_flight() const;  // reads outstanding plus frames being decompressed
  void slot_filled(int slot);
  ExpertView view(int layer, int expert, const std::byte* slot) const;  // slot null: RAM home

  std::string path_;
  ExtentTable extents_;
  placement::PlacementPlan plan_;
  StoreOptions options_;
  StoreHooks hooks_;

  std::vector<int64_t> layer_begin_;  // [n_layer + 1]
  std::vector<Expert> experts_;       // [total experts], layer-major
  std::unique_ptr<IoReader> reader_;
  std::unique_ptr<IoReader> zreader_;  // the sidecar (compressed SSD tier)
  std::unique_ptr<Decompressor> decomp_;
  std::vector<ReadRequest> zbatch_;        // scratch: one prepare's sidecar reads
  std::vector<Decompressor::Done> zdone_;  // scratch
  std::vector<RamArena> arenas_;           // one per RAM node used by the plan
  std::unique_ptr<ExpertCache> cache_;
  std::vector<int> pending_reads_;           // [n_slots] reads outstanding per slot
  std::vector<std::vector<Active>> active_;  // [n_layer] slots pinned for the layer
  std::vector<ReadRequest> batch_;           // scratch: one prepare's reads
  std::vector<ReadCompletion> completions_;  // scratch: [queue_depth]
  StoreCounters counters_;
  std::chrono::steady_clock::time_point busy_since_;  // reads outstanding since (SSD seconds)
};

}  // namespace strata::tiers
