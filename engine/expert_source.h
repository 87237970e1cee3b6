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

#include "engine/gpu_lane.h"
#include "engine/knobs.h"
#include "engine/kv_cache.h"
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
  // VRAM_GB as given: "" = auto (vram_budgets), "24" = the total, "24,24" = per GPU. The default
  // here is "0" (no VRAM homes) so in-process users get the plan they ask for on any host;
  // tier_options() passes the knob (auto = "").
  std::string vram_gb = "0";
  // VRAM_EMULATE: VRAM homes computed by the host emulation (GpuLane), one emulated GPU per
  // VRAM_GB entry; auto VRAM_GB is then 0.
  bool vram_emulate = false;
  // CUDA_DENSE: 1 = attention projections, dense FFNs, shared experts and the output head on GPU 0
  // during decode (GpuDense, bit-identical), 2 = also prefill's (cuBLASLt, not bit-identical).
  int cuda_dense = 0;
  uint32_t gpu_max_rows = 4096;  // dispatch rows per GPU launch (GpuLaneOptions::max_rows)
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
  // THREADS: RAM homes are first-touched by this many pinned workers (as the compute pool pins
  // its workers); 1 = by the constructing thread.
  int touch_threads = 1;
  int io_threads = 4;             // pread fallback pool
  int queue_depth = 32;           // reads in flight
  uint32_t n_ctx = 0;             // KV cache positions the run will use (for the auto budget)
  KvType kv_type = KvType::kF32;  // KV_TYPE: the KV cache's element type (for the auto budget)
  bool resident_dense = true;     // copy the dense weights out of the mapping (see make_resident)
  tiers::IoFaults faults;         // test-only fault seam
  tiers::NoticeFn notice = tiers::notice_to_stderr;
  // Hears the loading of RAM-homed experts (bytes done, bytes total); may be empty.
  std::function<void(uint64_t, uint64_t)> progress;
  Profiler* prof = nullptr;  // compute seconds per home; may be null
  // Hears the plan before any expert is read (the CLI prints its byte totals).
  std::function<void(const placement::PlacementPlan&)> on_plan;
  // PIN: [total experts] layer-major usage counts for placement::plan_placement; empty = the
  // usage-free default plan.
  std::vector<uint64_t> pin_counts;
  // Receives every routed selection (USAGE_SAVE, `strata stats`); may be null. Must outlive this.
  placement::UsageStats* usage = nullptr;
  // PREFETCH: after layer L's attention, Forward predicts layers L+1..L+prefetch with their
  // routers and prefetch() starts the reads (decode only; 0 = off).
  int prefetch = 0;
  // REPACK: RAM-homed experts' Q4_0 matrices are interleaved in their arenas (kernels/interleave.h)
  // when the CPU's kernels for it pay; the dense weights are interleave_dense()'s job.
  bool repack = false;
  // DENSE_ARENA: the caller moves the dense tensors into a huge-page arena after construction
  // (Model::arrange_dense; tools/tier_setup.cpp). Not used by ExpertSource itself.
  bool dense_arena = false;
  // REPIN: on every repin-th decode token (0 = off), after each MoE layer's compute (no slot
  // pinned), up to repin_moves SSD experts in all that the layer just used from the RAM cache swap
  // homes with RAM-homed experts (no larger) whose decayed usage (half-life repin_half_life
  // tokens) they beat by the hysteresis margin. Memcpy from the slot, no I/O.
  int repin = 0;
  double repin_half_life = 256;
  int repin_moves = 4;
  // PROMPT_PLACE: with a usage-free plan (no pin_counts), once, on the first decode step after a
  // forward chunk of at least kPromptPlaceMinTokens tokens (a prompt), each MoE layer, after its
  // compute, swaps its RAM homes the prompt used least with the SSD experts it used most (by the
  // REPIN margin), reading those from the file (ExpertStore::promote_homes). Same numbers.
  bool prompt_place = false;
};
inline constexpr uint64_t kPromptPlaceMinTokens = 32;
// A reply shorter than this many tokens cannot repay PROMPT_PLACE's reads (set_reply_hint).
inline constexpr int kPromptPlaceMinReply = 16;

// Whether to read SSD experts from a sidecar (see TierOptions::zstd): the sidecar when it is used,
// else null; says its decision in one notice line when a sidecar exists.
std::unique_ptr<tiers::Sidecar> choose_sidecar(const Model& model,
                                               const tiers::ExtentTable& extents,
                                               const TierOptions& opts);

// RAM_GB, NUMA, DIRECT, URING from the knob table (RAM_GB GiB -> bytes, rounded to the nearest).
TierOptions tier_options(const Knobs& knobs);

// The automatic RAM_GB: the memory available (MemAvailable capped by the memory cgroup, read
// after the dense weights were made resident) minus the KV cache, dense bytes not resident yet and
// headroom (512 MiB + 5% of available, for scratch — activations, attention scores, up to 128 MiB
// of a scored prompt's logits rows —, stacks and the allocator), at most what every expert in RAM
// needs.
struct RamBudgetInputs {
  uint64_t available = 0;    // bytes, engine::memory_info().available()
  uint64_t kv_bytes = 0;     // the KV cache the run will allocate
  uint64_t dense_bytes = 0;  // dense weights still to be faulted in (0 when already resident)
  // The most expert bytes that fit beside the dense weights and the KV cache (no headroom).
  uint64_t fit_limit() const {
    const uint64_t others = dense_bytes + kv_bytes;
    return available > others ? available - others : 0;
  }
};
uint64_t auto_ram_budget(const RamBudgetInputs& in, const placement::ExpertSizes& sizes);
// An explicit RAM_GB whose expert bytes (at most every expert's) with the dense weights and KV
// cache exceed the memory available would be OOM-killed part-way through the load:
// Error(kOutOfMemory) naming the most that fits and what auto would give. Fits: nothing.
void check_explicit_ram_budget(uint64_t expert_bytes, const RamBudgetInputs& in,
                               const placement::ExpertSizes& sizes);

// VRAM_GB -> expert bytes per GPU (Budgets::vram_bytes; empty = no VRAM homes). vram_gb "" = auto:
// with emulate none; else per device its free memory less headroom (1 GiB + 5% of its total) and
// reserve_bytes (the executor's buffers). One number is a total split evenly over n_devices; a
// list must have one entry per device (emulate: the list makes the devices). Error(kBadValue)
// naming the knob for a malformed value, a list of the wrong length, or VRAM asked for without a
// device.
struct VramDevice {
  uint64_t free = 0;
  uint64_t total = 0;
};
std::vector<uint64_t> vram_budgets(const std::string& vram_gb, bool emulate,
                                   const std::vector<VramDevice>& devices, uint64_t reserve_bytes);

// VRAM_GB / VRAM_EMULATE into the planner's inputs: budgets.vram_bytes (vram_budgets over the
// usable devices, scaled for the VRAM store's 256-byte alignment) and policy.vram_layers (the MoE
// layers gpu_stack_supported; one notice naming the others). Leaves both empty when the total is 0.
void add_vram_budgets(const Model& model, const TierOptions& opts,
                      const placement::ExpertSizes& sizes, placement::Budgets& budgets,
                      placement::DefaultPolicy& policy);

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
  // The first part of compute(): counters, usage (and REPIN's decayed counts) and the first
  // group's SSD reads. Forward calls it right after
  // dispatch so the layer's own reads go out before any prefetch; compute() calls it when not.
  void start(uint32_t il, Dispatch& d);
  // PREFETCH depth (TierOptions::prefetch); 0 without tiers.
  int prefetch_depth() const { return store_ ? prefetch_ : 0; }
  // Starts reads for layer il's predicted experts (ExpertStore::prefetch); returns reads started.
  int prefetch(uint32_t il, std::span<const int32_t> experts);
  // PREFETCH for a decode step (one token; no-op when off): the residual h [n_embd] after layer
  // il's attention, normed and routed as layers il+1..il+D would (their ffn_norm and router),
  // predicts their experts; prefetch() starts the reads. Own scratch (xq_scratch: the caller's
  // activation quantization scratch); changes nothing the forward pass reads. The routers run on
  // the calling thread: one token's router matmul is smaller than a fork/join of the pool.
  void prefetch_ahead(uint32_t il, const float* h, std::byte* xq_scratch);

  // After an exception from compute() (an I/O error): the GPU lane's launch in flight is waited
  // for and dropped (GpuLane::abandon), the store waits for its reads in flight and drops what
  // they were filling and every pin (ExpertStore::recover); the next pass runs.
  void recover();

  bool tiered() const { return store_ != nullptr; }
  const tiers::ExpertStore* store() const { return store_.get(); }
  // The plan (with its VRAM homes; the store's own plan sees them as SSD homes it never reads).
  const placement::PlacementPlan* plan() const { return store_ ? &*plan_ : nullptr; }
  const GpuLane* gpu_lane() const { return lane_.get(); }
  // CUDA_DENSE's dense matrices on the GPU; null when off.
  GpuDense* gpu_dense() { return dense_.get(); }
  const tiers::Sidecar* sidecar() const { return sidecar_.get(); }  // in use, or null
  // PROMPT_PLACE: the most tokens the coming reply will decode (-1: unknown). A placement due
  // before a reply shorter than kPromptPlaceMinReply is put off to a later prompt (serve: each
  // request's max_tokens; run and chat: -n).
  void set_reply_hint(int tokens) { reply_hint_ = tokens; }
  uint64_t resident_dense_bytes() const { return resident_bytes_; }
  double resident_dense_seconds() const { return resident_seconds_; }

 private:
  // Adds the layer's routed selections to usage_ (decode = a one-token chunk).
  void record_usage(uint32_t il, const Dispatch& d);
  // Pins the group's experts in the store (prepare) and fills their jobs' slices (get).
  void fetch(uint32_t il, std::span<ExpertJob> jobs);
  // REPIN: layer il's cached SSD experts that beat the weakest RAM homes (decayed usage, with
  // hysteresis) swap homes with them, up to the pass's remaining moves (no I/O).
  void repin_layer(uint32_t il);
  // REPIN into VRAM (before repin_layer): layer il's cached SSD experts (their bytes are still in
  // the jobs' cache slots) that beat the weakest VRAM homes take their GPU slots (GpuLane::swap);
  // the incumbents become SSD homes (the store already sees every VRAM home as one).
  void repin_vram(uint32_t il, const Dispatch& d);
  // PROMPT_PLACE: layer il's SSD experts the prompt used most take the RAM homes of its experts the
  // prompt used least (margin as REPIN's), read from the file.
  void place_by_prompt(uint32_t il);

  const Model& model_;
  std::unique_ptr<tiers::Sidecar> sidecar_;  // before store_: the store points into it
  std::unique_ptr<tiers::ExpertStore> store_;
  std::optional<placement::PlacementPlan> plan_;
  std::unique_ptr<GpuLane> lane_;    // VRAM homes; null when the plan has none
  std::unique_ptr<GpuDense> dense_;  // CUDA_DENSE; null when off
  std::vector<int32_t> pf_ids_;      // PREFETCH scratch: the predicted experts not in VRAM
  std::vector<std::vector<ExpertHome>> homes_;  // [n_layer][n_expert]; empty = reference path
  Profiler* prof_ = nullptr;
  placement::UsageStats* usage_ = nullptr;
  uint64_t resident_bytes_ = 0;
  double resident_seconds_ = 0;
  std::vector<int> ids_;  // scratch: one group's expert ids
  int started_ = -1;      // layer whose start() ran and whose compute() has not
  int prefetch_ = 0;
  tiers::StoreCounters step0_;  // PREFETCH: store counters at start() of a decode layer step
  std::vector<float> pf_x_, pf_probs_, pf_weights_;  // PREFETCH scratch: one token's routing
  std::vector<int32_t> pf_topk_;
  std::unique_ptr<kernels::ThreadPool> pf_pool_;  // one thread: the caller
  // REPIN state: decayed decode uses per expert (layer-major), tokens since the last pass.
  int repin_ = 0;
  int repin_moves_ = 0;
  double repin_decay_ = 1;  // 0.5^(repin / half-life), applied after each pass
  int first_moe_ = -1;
  int last_moe_ = -1;
  bool repin_now_ = false;    // this decode step is a REPIN pass
  int repin_left_ = 0;        // moves left in this pass
  bool decode_step_ = false;  // the started layer's chunk is one token
  uint64_t repin_tokens_ = 0;
  std::vector<int64_t> layer_begin_;  // [n_layer + 1] into score_
  std::vector<double> score_;
  std::vector<int64_t> promote_, demote_;       // scratch: candidate keys
  std::vector<const ExpertJob*> promote_jobs_;  // REPIN into VRAM: the candidates' jobs
  // PROMPT_PLACE state: selections per expert (layer-major) in multi-token chunks since the last
  // decode step, the largest such chunk's tokens, and whether this decode step places.
  bool prompt_place_ = false;
  std::vector<uint32_t> prompt_count_;
  uint64_t prompt_tokens_ = 0;
  bool place_now_ = false;
  int reply_hint_ = -1;
  std::vector<std::pair<int, int>> place_pairs_;  // scratch: (SSD expert, RAM expert)
};

}  // namespace strata::engine
