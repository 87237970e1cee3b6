// PROF: the first counters — per tier (ram, ssd, vram) expert loads, bytes and seconds, RAM cache
// hits, I/O wait felt by the compute thread vs I/O service time, prefill/decode tokens and tok/s,
// decode latency percentiles. PROF=1 prints report() on stderr at the end, PROF=2 adds
// token_line() per decoded token, PROF_JSON writes json() (schema in docs/FORMATS.md).
// ScopedTimer reads the clock only when profiling is on. Tested by tests/test_tier_invariance.cpp
// (JSON keys, SSD bytes at small and full RAM_GB).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/gpu_lane.h"
#include "engine/knobs.h"
#include "engine/moe.h"
#include "placement/machine_profile.h"
#include "tiers/expert_store.h"

namespace strata::engine {

struct ProfCounters {
  uint64_t prefill_tokens = 0;
  double prefill_seconds = 0;
  uint64_t decode_tokens = 0;
  double decode_seconds = 0;
  // Forward passes that produced them: decode_tokens without LOOKUP; with it, a pass runs a token
  // and its draft, and the tokens whose drafted logits were used (lookup_accepted) run none.
  uint64_t decode_steps = 0;
  uint64_t lookup_drafted = 0;   // draft tokens run in those passes
  uint64_t lookup_accepted = 0;  // decode tokens whose logits came from a drafted position
  std::vector<double> decode_token_seconds;         // [decode_tokens] latency of each token
  std::array<double, kNumHomes> compute_seconds{};  // expert FFN compute, per home (wall)
  std::array<uint64_t, kNumHomes> experts_computed{};
  // The CPU executor's time by stage (RAM and SSD homes' compute_seconds, split), per pass kind:
  // [0] passes of several tokens (prefill), [1] of one token (decode).
  ExpertStagePhases expert_stages{};
  // Filled where a caller times them (0 = not timed in this build; the time stays in "other").
  double attention_seconds = 0;
  // attention_seconds by pass kind ([0] several tokens, [1] one), and of each the attention core's
  // (scores, softmax, values; the rest is projections, norms, RoPE and KV writes).
  std::array<double, 2> attention_phase_seconds{};
  std::array<double, 2> attention_core_seconds{};
  double router_seconds = 0;
  double shared_expert_seconds = 0;  // always-on shared experts (resident; not in compute_seconds)
  uint64_t shared_expert_bytes = 0;  // their weight bytes the CPU read in that time (once a pass)
  double head_seconds = 0;           // final norm + output head (the rows whose logits are wanted)
  double sampling_seconds = 0;
  // Of sampling_seconds, what a caller timed outside the prefill and decode clocks (`strata run`
  // times each decode step without its sampler; chat's token latency includes it): added to the
  // time the shares divide.
  double sampling_outside_seconds = 0;
  double prefetch_seconds = 0;  // PREFETCH: routers of the layers ahead + issuing their reads
  // The two lanes of MoE layer steps that had GPU experts (VRAM homes), summed over those steps:
  // the CPU lane (its RAM/SSD experts, I/O wait included, between the GPU launch and the join),
  // the GPU lane (device time of the slowest device), the host's wait at the join, the steps,
  // and the steps where the GPU lane was the straggler.
  double cpu_lane_seconds = 0;
  double gpu_lane_seconds = 0;
  double gpu_join_wait_seconds = 0;
  uint64_t lane_layer_steps = 0;
  uint64_t gpu_straggler_steps = 0;
  // Decode's RAM reads for the roofline: routed expert bytes computed from RAM (RAM homes and the
  // RAM cache; VRAM experts excluded) and KV bytes (positions attended x bytes per position).
  uint64_t decode_expert_ram_bytes = 0;
  uint64_t decode_kv_bytes = 0;
  double probe_seconds = 0;  // PROF_PROBE_EVERY's passes (outside every clock above)
};

// PROF_PROBE_EVERY: the decode tokens between two in-run probe passes, and each ratio held against
// the mean of the two passes.
struct ProbeWindow {
  uint64_t tokens = 0;
  double probe_gb_s = 0;   // the mean of the passes that bracket the window
  double read_gb_s = 0;    // decode's RAM reads (dense + experts + KV) per second of decode
  double expert_gb_s = 0;  // CPU expert bytes per second of expert compute (0: no expert compute)
};

// The in-run probe's summary: passes, their spread, and the medians over windows.
struct RunProbe {
  int every = 0;       // PROF_PROBE_EVERY (0: off)
  uint64_t bytes = 0;  // one pass
  size_t passes = 0;
  double seconds = 0;  // spent in passes
  double min_gb_s = 0, median_gb_s = 0, max_gb_s = 0;
  size_t windows = 0;
  double roofline_p25 = 0, roofline_p50 = 0, roofline_p75 = 0;  // read_gb_s / probe_gb_s
  double experts_p25 = 0, experts_p50 = 0, experts_p75 = 0;     // expert_gb_s / probe_gb_s
};

// Measured tier read ceilings (GB/s) from `strata probe`'s machine profile (RAM: or PROF_PROBE's
// measurement as the run starts); 0 = not probed.
struct TierCeilings {
  double ram_gb_s = 0;   // at the run's THREADS (the probe's nearest thread count below)
  int threads = 0;       // THREADS
  int ram_threads = 0;   // the probe's thread count ram_gb_s was measured at
  bool ram_now = false;  // ram_gb_s measured as this run started (PROF_PROBE), not machine.json's
  double ssd_gb_s = 0;
  double vram_gb_s = 0;
  std::vector<double> gpu_d2d_gb_s;  // [device] each probed GPU's device copy bandwidth
};

// The ceilings in <cache dir>/machine.json (`strata probe`); 0 when there is no measured profile
// (a malformed one is an Error naming the file and key). RAM: the read bandwidth probed at the
// THREADS knob's thread count (auto: one per physical core), or with PROF_PROBE > 0 measured now
// over that many MiB (ram_now), with or without a profile.
TierCeilings probed_ceilings(const Knobs& knobs);

// What one decode token reads from RAM besides its routed experts, for PROF's roofline: every
// resident weight a token's forward pass reads (attention and router, dense FFNs, shared experts,
// norms, the output head, one embedding row), and the KV cache bytes per cached position.
struct DecodeBytes {
  uint64_t dense = 0;
  uint64_t kv_per_position = 0;
  bool kv_f32 = true;  // KV_TYPE=f32: the attention-bound verdict offers f16 (half the bytes)
  // CUDA_DENSE: the resident weights a decode token reads from GPU 0's memory instead (not in
  // `dense`, not in the RAM roofline; reported beside it).
  uint64_t vram_dense = 0;
};

// The host in one line: "CPU Intel Xeon ..., 2 cores, RAM 15.6 GiB, GPUs 0" from /proc/cpuinfo,
// /proc/meminfo and /proc/driver/nvidia/gpus (no CUDA link needed).
std::string machine_summary();

// Shares of the run's wall time (prefill + decode), each in [0, 1], summing to 1 (other = rest).
struct TimeShares {
  double attention = 0, expert_ram = 0, expert_ssd = 0, expert_vram = 0, io_wait = 0, router = 0,
         shared_experts = 0, head = 0, sampling = 0, other = 0;
};

// The bound of a run and the knob most likely to help, with the number behind it.
struct Verdict {
  std::string bound;  // "SSD-bound", "RAM-bandwidth-bound", "CPU-compute-bound", "GPU-bound",
                      // "attention-bound", "balanced"
  std::string knob;   // e.g. "RAM_GB"
  std::string why;    // one sentence with the number
};

// The verdict when CPU expert compute dominates a run: RAM-bandwidth-bound while the experts
// streamed at kComputeBoundBelow or more of the probed read bandwidth (or no probe can tell),
// else CPU-compute-bound — the kernels' arithmetic, not the DIMMs, sets the pace (a prefill reads
// each expert once for many tokens; some types' kernels are compute-bound even in decode).
constexpr double kComputeBoundBelow = 0.5;
// The SSD-bound verdict's note when every expert cannot fit in this machine's memory (fit_limit:
// Profiler::set_ram_fit_limit; 0 = unknown): "" when they fit or it is unknown.
std::string ram_fit_note(uint64_t fit_limit, uint64_t all_ram);
Verdict cpu_experts_verdict(double share, double streamed_gb_s, double probed_gb_s,
                            bool vram_in_use);

// Decode against the RAM read roofline: GB each decode token read from RAM (resident weights,
// routed experts computed from RAM, KV), the rate that made, and the probe's tok/s ceiling.
struct Roofline {
  double dense_gb = 0, experts_gb = 0, kv_gb = 0, gb_per_token = 0;  // per decode token
  double vram_dense_gb = 0;    // CUDA_DENSE's weights read on the GPU per token (not in the above)
  double tok_s = 0, gb_s = 0;  // decode's achieved
  double probe_gb_s = 0;       // RAM read probed at THREADS (0 = not probed)
  double roofline_tok_s = 0;   // probe_gb_s / gb_per_token
  double fraction = 0;         // tok_s / roofline_tok_s
  // The median token's: (1 / p50 latency) / roofline_tok_s, with the mean bytes per token. On a
  // shared host it shows what undisturbed tokens reach; `fraction` is the one that counts.
  double fraction_p50 = 0;
};

class Profiler {
 public:
  // level: the PROF knob (0..2); json_path: PROF_JSON ("" = none). Counting is on when either asks.
  Profiler(int level, std::string json_path);

  bool enabled() const { return enabled_; }
  int level() const { return level_; }
  const std::string& json_path() const { return json_path_; }
  ProfCounters& counters() { return c_; }
  const ProfCounters& counters() const { return c_; }

  // Tier, cache and I/O counters come from the store at report time (null: none, all zero).
  void set_store(const tiers::ExpertStore* store) { store_ = store; }
  // The plan reported (with VRAM homes); null: the store's.
  void set_plan(const placement::PlacementPlan* plan) { plan_ = plan; }
  // The most expert bytes this machine's memory held beside the dense weights and the KV cache
  // when the plan was made (0: unknown): the SSD-bound verdict says when every expert cannot fit.
  void set_ram_fit_limit(uint64_t bytes) { ram_fit_limit_ = bytes; }
  // Per-device GPU counters and the lane times come from the GPU lane (null: no VRAM homes).
  void set_gpu(const GpuLane* gpu) {
    gpu_ = gpu;
    gpu_base_ = gpu ? gpu->stats() : std::vector<GpuDeviceStats>{};
  }
  // CUDA_DENSE's matrices on the GPU (null: off): its calls and time since begin_window().
  void set_gpu_dense(const GpuDense* dense) {
    dense_ = dense;
    dense_base_calls_ = dense ? dense->calls() : 0;
    dense_base_seconds_ = dense ? dense->seconds() : 0;
  }
  // Lines printed above the report (effective knobs, the plan's totals).
  void set_header(std::string header) { header_ = std::move(header); }
  // Probed ceilings for "% of ceiling" (none set: the report says to run `strata probe`).
  void set_ceilings(const TierCeilings& c) { ceilings_ = c; }
  // Preallocates the per-token latency array so decode does not allocate while profiling.
  void reserve_decode(size_t n_tokens) { c_.decode_token_seconds.reserve(n_tokens); }
  // Starts a new reporting window (a chat turn): counters zeroed, store counters rebased.
  void begin_window();

  TimeShares time_shares() const;
  Roofline roofline() const;  // all 0 without decode tokens or set_decode_bytes()
  Verdict verdict() const;

  void add_prefill(uint64_t tokens, double seconds);
  // The next decode token's traffic is counted from here (the roofline's expert bytes, PROF=2's
  // token line). add_prefill marks too.
  void mark();
  // Work the report must not count (`strata bench`'s untimed context prefills and warm-up runs):
  // what runs between begin_untimed() and end_untimed() reaches no part of the report — time
  // shares, tier and cache counters, hit rates, I/O, GPU lanes and devices, CUDA_DENSE, the
  // roofline. The interval records no prefill or decode tokens. end_untimed() marks.
  void begin_untimed();
  void end_untimed();
  // n_past: the positions the token attended (the KV cache's length after it), for the roofline.
  // LOOKUP: ran = false for a token whose logits a previous pass drafted (no pass ran for it);
  // drafted = the draft tokens the pass ran besides this one.
  void add_decode_token(double seconds, uint64_t n_past = 0, bool ran = true, uint32_t drafted = 0);
  // PROF_PROBE_EVERY: hold probe (its buffer allocated and touched) for the run, and take a pass
  // every `every` decode tokens. The caller calls probe_tick() after add_prefill() (the first
  // pass) and after each add_decode_token(), outside its clocks; it returns the seconds it spent
  // (0 when no pass was due), also summed in counters().probe_seconds.
  void set_run_probe(std::unique_ptr<placement::RamReadProbe> probe, int every);
  double probe_tick();
  RunProbe run_probe() const;
  // The roofline's per-token bytes besides the experts (the report omits the line when unset).
  void set_decode_bytes(const DecodeBytes& b) { decode_bytes_ = b; }
  // The KV bytes an average decode step read (0 without decode steps).
  double kv_bytes_per_step() const;
  // PROF=2: "prof: decode token 7: 81.2 ms, ssd 5 experts 13.2 MB, cache 3/8, wait 40.1 ms"
  // (the counters since the previous call); with a GPU lane also ", gpu 96 experts 96 rows,
  // lanes cpu 30.2 gpu 12.1 wait 0.3 ms, straggler CPU (2/48 steps GPU)" (docs/FORMATS.md).
  std::string token_line(uint64_t index, double seconds);

  std::string report() const;  // multi-line, for stderr
  std::string json() const;    // one JSON object (docs/FORMATS.md "PROF JSON")
  // json() to path via path.tmp + rename; Error(kIo) naming the path on failure.
  void write_json() const;

 private:
  bool projections_dominate() const;  // the attention-bound verdict: see prof.cpp
  // The attention core's share of attention time (-1: not timed) and the verdict's note of it.
  double attention_core_share() const;
  std::string core_note() const;
  int level_;
  bool enabled_;
  std::string json_path_;
  std::string header_;
  ProfCounters c_;
  const tiers::ExpertStore* store_ = nullptr;
  const placement::PlacementPlan* plan_ = nullptr;
  uint64_t ram_fit_limit_ = 0;
  const GpuLane* gpu_ = nullptr;
  std::vector<GpuDeviceStats> gpu_base_;  // the lane's counters at begin_window()
  const GpuDense* dense_ = nullptr;
  uint64_t dense_base_calls_ = 0;
  double dense_base_seconds_ = 0;
  // The GPU lane's totals at the previous token_line() (its deltas).
  struct LaneMark {
    uint64_t experts = 0, rows = 0, steps = 0, straggler_steps = 0;
    double cpu = 0, gpu = 0, wait = 0;
  };
  LaneMark lane_mark_;
  LaneMark lane_now() const;
  tiers::StoreCounters last_;  // for token_line deltas
  tiers::StoreCounters base_;  // store counters at begin_window(), less later untimed intervals
  // begin_untimed()'s snapshot: the counters to return to, and the sources' totals then.
  struct Untimed {
    bool open = false;
    ProfCounters c;  // decode_token_seconds left empty
    tiers::StoreCounters store;
    std::vector<GpuDeviceStats> gpu;
    uint64_t dense_calls = 0;
    double dense_seconds = 0;
  };
  Untimed untimed_;
  TierCeilings ceilings_;
  DecodeBytes decode_bytes_;
  uint64_t expert_ram_mark_ = 0;  // RAM + cache served bytes at the last prefill / decode token
  // PROF_PROBE_EVERY: the probe, its passes' rates, and the counters at the last pass.
  std::unique_ptr<placement::RamReadProbe> probe_;
  int probe_every_ = 0;
  std::vector<double> probe_passes_;
  std::vector<ProbeWindow> probe_windows_;
  struct ProbeMark {
    uint64_t tokens = 0, steps = 0, expert_bytes = 0, kv_bytes = 0;
    double decode_seconds = 0, expert_seconds = 0, gb_s = 0;
  };
  ProbeMark probe_mark_;
  bool probe_marked_ = false;
  std::string machine_;  // machine_summary(), read once at construction when enabled

  tiers::StoreCounters window_counters() const;    // store counters since begin_window()
  std::vector<GpuDeviceStats> window_gpu() const;  // GPU lane counters since begin_window()
  const placement::PlacementPlan* plan() const {
    return plan_ ? plan_ : store_ ? &store_->plan() : nullptr;
  }
  // SSD: bytes read per second of reads outstanding; RAM/VRAM: expert bytes streamed through
  // compute per second of compute (what their bandwidth bounds).
  double achieved_gb_s(const tiers::TierCounters& t, size_t home) const;
  struct LaneTimes {
    double cpu_ms_per_token = 0, gpu_ms_per_token = 0, wait_ms_per_token = 0;
    std::string straggler;  // "GPU", "CPU", or "none" (no GPU experts ran)
  };
  LaneTimes lane_times() const;
  double device_ceiling(int device) const;  // probed device copy GB/s, 0 = not probed
  std::string stage_report() const;         // the report's CPU expert stage lines ("" if none)
  std::string gpu_report() const;           // the report's gpu / lanes lines ("" without a lane)
  nlohmann::json gpu_json() const;          // the JSON "gpu" object (null without a lane)
};

// Adds the scope's wall time to `into` when the profiler is on; costs one branch when it is off.
class ScopedTimer {
 public:
  ScopedTimer(const Profiler* prof, double& into)
      : into_(prof && prof->enabled() ? &into : nullptr) {
    if (into_) t0_ = std::chrono::steady_clock::now();
  }
  ~ScopedTimer() {
    if (into_)
      *into_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double* into_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace strata::engine
