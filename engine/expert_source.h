// Where the MoE stage gets routed experts' bytes: straight from the model's mapping (the reference
// path, no tiers), or from a tiers::ExpertStore that follows a PlacementPlan (RAM homes in NUMA
// arenas, the rest streamed from the GGUF on SSD through the RAM cache). In the tiered mode the
// dense weights are made resident first and routed expert bytes are never read through the
// mapping. compute() runs the "compute per executor" stage: RAM-homed experts first while the
// SSD misses load, then the SSD ones. Tested by tests/test_tier_invariance.cpp and
// tests/test_tier_faults.cpp; measured by bench/e2e_tiers.sh.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/knobs.h"
#include "engine/model.h"
#include "engine/moe.h"
#include "placement/plan.h"
#include "placement/usage_stats.h"
#include "tiers/expert_store.h"

namespace strata::engine {

class Profiler;

// Every routed expert's three byte ranges in the model file: [n_layer][n_expert] (empty for
// layers with a dense FFN, which stays resident).
tiers::ExtentTable expert_extents(const Model& model);
// What placement needs: per-layer expert bytes, top-k, cache slot size.
placement::ExpertSizes expert_sizes(const Model& model);

// The tier knobs and the seams tests use.
struct TierOptions {
  std::optional<uint64_t> ram_bytes;    // RAM_GB in bytes; nullopt = auto (auto_ram_budget)
  std::optional<uint64_t> cache_bytes;  // CACHE_GB in bytes; nullopt = the minimum
  // ZSTD: "auto" = read SSD experts from the model's sidecar (MODEL.gguf.stz, `strata pack`) when
  // it matches the model and pays (disk GB/s x ratio and decompression GB/s x threads beat the
  // disk), "1" = always (a missing or foreign sidecar is an error), "0" = never.
  std::string zstd = "auto";
  std::string sidecar_path;    // "" = <model path>.stz
  double ssd_gbps = 1.0;       // the disk's read rate (machine profile) for the ZSTD decision
  int decompress_threads = 0;  // 0 = half the hardware threads, at least 1, at most 4
  tiers::NumaMode numa = tiers::NumaMode::kInterleave;
  bool direct = true;
  bool uring = true;
  int io_threads = 4;          // pread fallback pool
  int queue_depth = 32;        // reads in flight
  uint32_t n_ctx = 0;          // KV cache positions the run will use (for the auto budget)
  bool resident_dense = true;  // copy the dense weights out of the mapping (see make_resident)
  tiers::IoFaults faults;      // test-only fault seam
  tiers::NoticeFn notice = tiers::notice_to_stderr;
  Profiler* prof = nullptr;  // compute seconds per home; may be null
  // Hears the plan before any expert is read (the CLI prints its byte totals).
  std::function<void(const placement::PlacementPlan&)> on_plan;
  // PIN: [total experts] layer-major usage counts for placement::plan_placement; empty = the
  // usage-free default plan.
  std::vector<uint64_t> pin_counts;
  // Receives every routed selection (USAGE_SAVE, `strata stats`); may be null. Must outlive this.
  placement::UsageStats* usage = nullptr;
};

// Whether to read SSD experts from a sidecar (see TierOptions::zstd): the sidecar when it is used,
// else null; says its decision in one notice line when a sidecar exists.
std::unique_ptr<tiers::Sidecar> choose_sidecar(const Model& model,
                                               const tiers::ExtentTable& extents,
                                               const TierOptions& opts);

// RAM_GB, NUMA, DIRECT, URING from the knob table (RAM_GB GiB -> bytes, rounded to the nearest).
TierOptions tier_options(const Knobs& knobs);

// The automatic RAM_GB: the memory available (MemAvailable capped by the memory cgroup, read
// after the dense weights were made resident) minus the KV cache, dense bytes not resident yet and
// headroom (512 MiB + 5% of available, for scratch, stacks and the allocator), at most what every
// expert in RAM needs.
struct RamBudgetInputs {
  uint64_t available = 0;    // bytes, engine::memory_info().available()
  uint64_t kv_bytes = 0;     // the KV cache the run will allocate
  uint64_t dense_bytes = 0;  // dense weights still to be faulted in (0 when already resident)
};
uint64_t auto_ram_budget(const RamBudgetInputs& in, const placement::ExpertSizes& sizes);

class ExpertSource {
 public:
  // Reference path: every expert read through the model's mapping (all homes kRam).
  explicit ExpertSource(const Model& model);
  // Tiered path: makes the dense weights resident (opts.resident_dense), resolves the RAM budget
  // (an explicit budget below the minimum is Error(kBadValue) naming RAM_GB and the minimum in
  // GiB), builds the default plan and the store (RAM homes are read here).
  ExpertSource(const Model& model, const TierOptions& opts);
  ~ExpertSource();
  ExpertSource(const ExpertSource&) = delete;
  ExpertSource& operator=(const ExpertSource&) = delete;

  // Homes of layer il's experts for dispatch(); empty = all kRam (reference path, dense FFN).
  std::span<const ExpertHome> layer_homes(uint32_t il) const;

  // Stage 3 for one layer: fills every job's slice from its home and computes it on cpu, RAM
  // homes first (their reads are already done) while the SSD misses load; SSD experts go in
  // groups of at most half the cache so the next group loads while one computes.
  //   x: [n_tokens, n_embd];  y: [n_rows, n_embd] in dispatch order
  void compute(uint32_t il, const ExpertStack& stack, Dispatch& d, ExpertExecutor& cpu,
               const float* x, float* y);

  bool tiered() const { return store_ != nullptr; }
  const tiers::ExpertStore* store() const { return store_.get(); }
  const placement::PlacementPlan* plan() const { return store_ ? &store_->plan() : nullptr; }
  const tiers::Sidecar* sidecar() const { return sidecar_.get(); }  // in use, or null
  uint64_t resident_dense_bytes() const { return resident_bytes_; }
  double resident_dense_seconds() const { return resident_seconds_; }

 private:
  // Adds the layer's routed selections to usage_ (decode = a one-token chunk).
  void record_usage(uint32_t il, const Dispatch& d);
  // Pins the group's experts in the store (prepare) and fills their jobs' slices (get).
  void fetch(uint32_t il, std::span<ExpertJob> jobs);

  const Model& model_;
  std::unique_ptr<tiers::Sidecar> sidecar_;  // before store_: the store points into it
  std::unique_ptr<tiers::ExpertStore> store_;
  std::vector<std::vector<ExpertHome>> homes_;  // [n_layer][n_expert]; empty = reference path
  Profiler* prof_ = nullptr;
  placement::UsageStats* usage_ = nullptr;
  uint64_t resident_bytes_ = 0;
  double resident_seconds_ = 0;
  std::vector<int> ids_;  // scratch: one group's expert ids
};

}  // namespace strata::engine
