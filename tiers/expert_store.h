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
#include <utility>
#include <vector>

#include "kernels/interleave.h"
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
  // PREFETCH guard (see prefetch()): prefetched-not-yet-used slots are at most this share of the
  // cache (at least one slot), and a prefetch never evicts a slot used by any of the last
  // prefetch_min_age demand lookups (-1 = half the cache's slots).
  double prefetch_share = 0.5;
  int64_t prefetch_min_age = -1;
  // REPACK: RAM homes keep slice i of layer l's experts in ram_layouts[l][i].layout (a
  // [n_rows, n_cols] matrix, interleaved while it is copied in at load and by swap_homes), so the
  // CPU kernels stream them faster; kRows (or an empty table) = as in the file. Cache slots always
  // hold the file's layout.
  struct SliceLayout {
    kernels::WeightLayout layout = kernels::WeightLayout::kRows;
    int64_t n_rows = 0;
    int64_t n_cols = 0;
  };
  std::vector<std::array<SliceLayout, 3>> ram_layouts;
};

struct StoreHooks {
  FirstTouch first_touch;  // null: arenas are touched on the constructing thread
  NoticeFn notice = notice_to_stderr;
  std::function<void(uint64_t bytes_done, uint64_t bytes_total)> progress;  // RAM home loading
};

// Pointers to one expert's three slices: the file's bytes, in the file's layout or (RAM homes
// under REPACK) interleaved.
struct ExpertView {
  std::array<const std::byte*, 3> slice{};  // indexed by Slice
  std::array<uint64_t, 3> bytes{};
  placement::Home home;
  // Each slice's layout: the file's, or StoreOptions::ram_layouts for a RAM home.
  std::array<kernels::WeightLayout, 3> layout{};
};

struct TierCounters {
  uint64_t served = 0;        // experts handed to compute from this home
  uint64_t served_bytes = 0;  // their slice bytes
  uint64_t loads = 0;         // experts read from the file into this tier (RAM: at start)
  uint64_t load_bytes = 0;    // bytes read from the file for them (4 KiB-aligned supersets)
  // Wall time with loads outstanding. SSD: seconds with at least one read in the kernel, from the
  // readers' completion-thread timestamps (decompression not included); RAM: the start-up load.
  double load_seconds = 0;
};

struct StoreCounters {
  TierCounters ram, ssd, vram;
  // Demand lookups of SSD-homed experts: found in the cache or already in flight (a used
  // prefetch counts here), or read on demand. Prefetch reads are not misses (prefetch_issued).
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t evictions = 0;
  uint64_t reads = 0;             // read requests completed (three per expert)
  double io_wait_seconds = 0;     // time get() blocked waiting for reads (felt by compute)
  double io_service_seconds = 0;  // submit -> reaped, summed over reads (overlaps itself)
  // PREFETCH (docs/FORMATS.md "PROF JSON" prefetch.*): reads started by prefetch(), those a
  // demand get/prepare then used (precision = used / issued), prefetched slots evicted unused,
  // predictions refused by the guard or the cap, SSD experts decode needed (note_needed; recall =
  // used / needed), and per used prefetch its head start (submit -> the earlier of its read
  // landing and the demand asking for it; summed, it overlaps itself like io_service_seconds).
  uint64_t prefetch_issued = 0;
  uint64_t prefetch_used = 0;
  uint64_t prefetch_wasted = 0;
  uint64_t prefetch_refused = 0;
  uint64_t prefetch_needed = 0;
  double prefetch_head_start_seconds = 0;
  // Decode layer steps with SSD experts while PREFETCH is on (note_decode_layer): those with a
  // demand miss and their felt wait; those served entirely by used prefetches.
  uint64_t decode_layers_missed = 0;
  double decode_layers_missed_wait = 0;
  uint64_t decode_layers_saved = 0;
  // REPIN: passes run and experts moved between a RAM home and SSD (one move = one swap).
  uint64_t repin_passes = 0;
  uint64_t repin_moves = 0;
  // PROMPT_PLACE: layer passes run (promote_homes calls), experts moved, bytes read for them from
  // the file (not counted as expert uses or SSD reads above) and the seconds taken.
  uint64_t place_passes = 0;
  uint64_t place_moves = 0;
  uint64_t place_read_bytes = 0;
  double place_seconds = 0;
  uint64_t frames = 0;            // sidecar frames decompressed
  uint64_t frame_raw_bytes = 0;   // the expert bytes they held
  double decompress_seconds = 0;  // worker time spent decompressing (summed over workers)
  double prefetch_precision() const {
    return prefetch_issued ? static_cast<double>(prefetch_used) / prefetch_issued : 0.0;
  }
  // The felt I/O wait the used prefetches saved, estimated per decode layer step (the compute
  // thread waits per layer, not per expert): steps whose SSD experts all came from used
  // prefetches, at the mean felt wait of the steps that had a demand miss.
  double prefetch_wait_saved() const {
    return decode_layers_missed ? static_cast<double>(decode_layers_saved) *
                                      decode_layers_missed_wait / decode_layers_missed
                                : 0.0;
  }
  double prefetch_recall() const {
    return prefetch_needed ? static_cast<double>(prefetch_used) / prefetch_needed : 0.0;
  }
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
  // arenas, and reads every RAM-homed expert (progress reported through hooks). VRAM homes are
  // another tier's (the GPU lane's): never loaded, read, cached or prefetched here, and they need
  // no cache slots. Throws Error for extents outside the file, a plan built for other sizes, or an
  // I/O failure.
  ExpertStore(std::string path, ExtentTable extents, placement::PlacementPlan plan,
              StoreOptions options = {}, StoreHooks hooks = {});
  // A split model's shards as one range (io::GgufFile::parts()); extents in its numbering.
  ExpertStore(io::FileParts parts, ExtentTable extents, placement::PlacementPlan plan,
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
  // PREFETCH: starts reads for the SSD-homed experts of the list that are neither cached nor in
  // flight, into slots the guard allows (ExpertCache::begin_prefetch; at most prefetch_share of
  // the cache prefetched-not-yet-used), and returns at once; nothing stays pinned once a read
  // lands, the reads are reaped by later prepare/get calls. Stops at the first refusal. Returns the
  // reads started.
  int prefetch(int layer, std::span<const int> experts);
  // Adds SSD experts a decode step needed (the recall denominator).
  void note_needed(uint64_t n) { counters_.prefetch_needed += n; }
  // One decode layer step's outcome, from counter deltas over the step (prefetch_wait_saved).
  void note_decode_layer(uint64_t misses, uint64_t used, double wait) {
    if (misses > 0) {
      ++counters_.decode_layers_missed;
      counters_.decode_layers_missed_wait += wait;
    } else if (used > 0) {
      ++counters_.decode_layers_saved;
    }
  }
  // REPIN: the SSD-homed expert (layer pl, expert pe), ready in the cache and unpinned, takes the
  // RAM home of the RAM-homed (dl, de): its bytes are copied from the slot into de's arena space
  // (which must be at least as large), the slot is emptied, and (dl, de) becomes SSD-homed (read
  // on demand again). No I/O. False, changing nothing, when pe is not ready in the cache, is
  // pinned, or does not fit. Only while no layer is active (between layers).
  bool swap_homes(int pl, int pe, int dl, int de);
  // PROMPT_PLACE: for each (SSD-homed expert, RAM-homed expert) pair of one layer, the first takes
  // the second's RAM home as swap_homes does, its bytes read from the file into the cache first
  // when they are not there (in groups of half the cache's slots, waited for). Returns the moves
  // made; counted in place_* only (not as expert uses). Only while no layer is active.
  int promote_homes(int layer, std::span<const std::pair<int, int>> pairs);
  // REPIN into VRAM: the GPU lane has taken the SSD-homed (pl, pe)'s bytes into the GPU slot of
  // the VRAM-homed (dl, de); pe gets de's VRAM home (its cache slot, if ready and unpinned, is
  // freed) and de becomes SSD-homed (read on demand). No I/O. Only while no layer is active.
  void swap_vram_home(int pl, int pe, int dl, int de);
  // The expert's current home (the plan's, changed by swap_homes and swap_vram_home).
  placement::Home home(int layer, int expert) const { return experts_[key(layer, expert)].home; }
  // Whether the expert's bytes are ready in the cache and unpinned (a swap_homes candidate).
  bool ready_in_cache(int layer, int expert) const {
    const int s = cache_->find(key(layer, expert));
    return s != ExpertCache::kNone && cache_->state(s) == ExpertCache::SlotState::kReady &&
           cache_->pins(s) == 0;
  }
  // Counts a REPIN pass (the moves count themselves).
  void note_repin_pass() { ++counters_.repin_passes; }
  // Unpins every slot prepare/get pinned for this layer.
  void release(int layer);
  // After an exception (a failed read or frame) left reads in flight, slots filling and layers
  // pinned: waits for everything still out (errors already raised are not raised again), empties
  // the slots whose fill did not complete and unpins every layer, so the next token starts clean.
  void recover();
  // Unpins only these experts' slots (a prefill chunk computes a layer's SSD experts in groups
  // that together exceed the cache; the next group stays pinned while this one is released).
  void release(int layer, std::span<const int> experts);

  // The plan the store was built from (REPIN's swaps change home(), not this).
  const placement::PlacementPlan& plan() const { return plan_; }
  const StoreCounters& counters() const { return counters_; }
  void reset_counters();
  uint64_t ram_bytes() const;  // arenas + cache as mapped (<= the plan's RAM budget)
  // REPACK: slice bytes held interleaved in RAM homes now (StoreOptions::ram_layouts).
  uint64_t repacked_bytes() const { return repacked_bytes_; }
  bool uring() const { return reader_->uring(); }
  bool compressed() const { return zreader_ != nullptr; }
  bool direct() const { return reader_->direct(); }
  bool fixed_buffers() const { return reader_->registered(); }
  const ExpertCache* cache() const { return cache_.get(); }

 private:
  // Per expert, layer-major: its home and where its bytes are.
  struct Expert {
    placement::Home home;
    std::array<const std::byte*, 3> ram{};          // RAM homes: packed slices in an arena
    std::array<kernels::WeightLayout, 3> layout{};  // RAM homes: each slice's layout there
    std::array<AlignedRange, 3> read{};             // the reads (SSD homes and RAM loading)
    std::array<uint64_t, 3> sub{};                  // where each superset starts inside a slot
    const SidecarEntry* frame = nullptr;            // compressed SSD home: its sidecar frame
    std::array<uint64_t, 3> zsub{};                 // ... and its slices' offsets in a slot
    uint64_t zframe_at = 0;                         // where the frame is read to inside a slot
  };
  struct Active {
    int expert;
    int slot;
  };

  uint64_t repacked_bytes_ = 0;
  int64_t key(int layer, int expert) const { return layer_begin_[layer] + expert; }
  bool move_home(int pl, int pe, int dl, int de);  // swap_homes without the REPIN count
  void check_inputs();
  void load_ram_homes();
  // Copies slice i of (layer's) expert x from src into its RAM home, repacked per ram_layouts.
  void copy_to_home(int layer, Expert& x, int i, const std::byte* src, uint64_t bytes);
  // Pins the expert's slot for this layer (hit or new fill); appends its reads to batch_.
  // Returns the slot or ExpertCache::kNone when every slot is pinned (may_block: after waiting
  // for reads in flight that hold slots).
  int activate(int layer, int expert, bool may_block);
  // Appends expert k's reads into `slot` (its sidecar frame, or its three slices) to the batch.
  void queue_reads(int64_t k, int slot);
  void submit_batch();       // hands batch_ (and zbatch_) to the readers in one submit each
  void drain(bool block);    // reaps completions, finishing filled slots
  size_t in_flight() const;  // reads outstanding plus frames being decompressed
  void slot_filled(int slot);
  void sync_wasted();  // counters_.prefetch_wasted follows the cache's count
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
  std::vector<int> pending_reads_;  // [n_slots] reads outstanding per slot
  std::vector<std::chrono::steady_clock::time_point> prefetch_at_;  // [n_slots] prefetch submit
  std::vector<std::chrono::steady_clock::time_point> filled_at_;    // [n_slots] prefetch landed
  std::vector<std::vector<Active>> active_;  // [n_layer] slots pinned for the layer
  std::vector<ReadRequest> batch_;           // scratch: one prepare's reads
  std::vector<ReadCompletion> completions_;  // scratch: [queue_depth]
  StoreCounters counters_;
  uint64_t wasted_seen_ = 0;    // cache_->prefetch_wasted() at the last sync_wasted()
  double readers_busy() const;  // IoReader::busy_seconds of the model file and the sidecar
  double ssd_busy_base_ = 0;    // readers_busy() when the SSD counters started
};

}  // namespace strata::tiers
