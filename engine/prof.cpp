// PROF counters, the stderr report and the JSON file (see prof.h; schema in docs/FORMATS.md).
// Tested by tests/test_tier_invariance.cpp.
#include "engine/prof.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "io/check.h"
#include "kernels/gemv.h"
#include "kernels/threadpool.h"
#include "placement/machine_profile.h"
#include "placement/plan.h"

namespace strata::engine {
namespace {

constexpr const char* kTierNames[] = {"ram", "ssd", "vram"};  // ExpertHome order

double rate(double n, double seconds) {
  return seconds > 0 ? n / seconds : 0.0;
}

// Nearest-rank percentile of a copy (p in 0..100); 0 for no samples.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

const tiers::TierCounters& tier(const tiers::StoreCounters& s, size_t home) {
  return home == size_t(ExpertHome::kRam)   ? s.ram
         : home == size_t(ExpertHome::kSsd) ? s.ssd
                                            : s.vram;
}

// op(a.f, b.f) for every counter field f (windows subtract a base; untimed intervals shift it).
template <typename Op>
void each_field(tiers::TierCounters& a, const tiers::TierCounters& b, Op op) {
  op(a.served, b.served);
  op(a.served_bytes, b.served_bytes);
  op(a.loads, b.loads);
  op(a.load_bytes, b.load_bytes);
  op(a.load_seconds, b.load_seconds);
}
template <typename Op>
void each_field(tiers::StoreCounters& a, const tiers::StoreCounters& b, Op op) {
  each_field(a.ram, b.ram, op);
  each_field(a.ssd, b.ssd, op);
  each_field(a.vram, b.vram, op);
  op(a.cache_hits, b.cache_hits);
  op(a.cache_misses, b.cache_misses);
  op(a.evictions, b.evictions);
  op(a.reads, b.reads);
  op(a.io_wait_seconds, b.io_wait_seconds);
  op(a.io_service_seconds, b.io_service_seconds);
  op(a.frames, b.frames);
  op(a.frame_raw_bytes, b.frame_raw_bytes);
  op(a.decompress_seconds, b.decompress_seconds);
  op(a.prefetch_issued, b.prefetch_issued);
  op(a.prefetch_used, b.prefetch_used);
  op(a.prefetch_wasted, b.prefetch_wasted);
  op(a.prefetch_refused, b.prefetch_refused);
  op(a.prefetch_needed, b.prefetch_needed);
  op(a.prefetch_head_start_seconds, b.prefetch_head_start_seconds);
  op(a.decode_layers_missed, b.decode_layers_missed);
  op(a.decode_layers_missed_wait, b.decode_layers_missed_wait);
  op(a.decode_layers_saved, b.decode_layers_saved);
  op(a.repin_passes, b.repin_passes);
  op(a.repin_moves, b.repin_moves);
  op(a.place_passes, b.place_passes);
  op(a.place_moves, b.place_moves);
  op(a.place_read_bytes, b.place_read_bytes);
  op(a.place_seconds, b.place_seconds);
}
template <typename Op>
void each_field(GpuDeviceStats& a, const GpuDeviceStats& b, Op op) {
  op(a.launches, b.launches);
  op(a.experts, b.experts);
  op(a.rows, b.rows);
  op(a.bytes_read, b.bytes_read);
  op(a.kernel_seconds, b.kernel_seconds);
  op(a.repin_moves, b.repin_moves);
}
constexpr auto kSub = [](auto& x, const auto& y) { x -= y; };
constexpr auto kAdd = [](auto& x, const auto& y) { x += y; };

std::string slurp(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Hit rates over every routed expert use: where the expert's bytes came from.
struct HitRates {
  uint64_t uses = 0;
  double vram = 0, ram_pinned = 0, ram_cache = 0, ssd_miss = 0;
  double fast() const { return 1.0 - ssd_miss; }  // uses that read nothing from SSD
};

// gpu_uses: expert jobs the GPU lane computed (the store never serves VRAM homes).
HitRates hit_rates(const tiers::StoreCounters& s, uint64_t gpu_uses) {
  HitRates h;
  h.uses = s.ram.served + s.ssd.served + s.vram.served + gpu_uses;
  if (h.uses == 0) return h;
  const double n = static_cast<double>(h.uses);
  h.vram = double(s.vram.served + gpu_uses) / n;
  h.ram_pinned = double(s.ram.served) / n;
  h.ram_cache = double(s.cache_hits) / n;
  h.ssd_miss = double(s.cache_misses) / n;
  return h;
}

double ceiling_of(const TierCeilings& c, size_t home) {
  return home == size_t(ExpertHome::kRam)   ? c.ram_gb_s
         : home == size_t(ExpertHome::kSsd) ? c.ssd_gb_s
                                            : c.vram_gb_s;
}

// PROF's names of the expert stage phases (ExpertStagePhases' order).
constexpr const char* kPhaseNames[2] = {"prefill", "decode"};

double stage_total(const ExpertStageTimes& st) {
  double total = 0;
  for (double v : st.seconds) total += v;
  return total;
}

}  // namespace

TierCeilings probed_ceilings(const Knobs& knobs) {
  TierCeilings c;
  c.threads = static_cast<int>(
      knobs.int_opt("THREADS").value_or(int64_t(kernels::physical_core_cpus().size())));
  c.threads = std::max(1, c.threads);
  if (const int64_t mib = knobs.int_opt("PROF_PROBE").value_or(0); mib > 0) {
    c.ram_gb_s = placement::measure_ram_read_gbps(c.threads, uint64_t(mib) << 20, 3, 1.0);
    c.ram_threads = c.threads;
    c.ram_now = true;
  }
  const std::filesystem::path path = std::filesystem::path(cache_dir(knobs)) / "machine.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return c;
  const placement::MachineProfile m = placement::load_machine_profile(path.string());
  if (!m.measured) return c;
  if (!c.ram_now) {
    c.ram_gb_s = m.ram_gbps_at(c.threads);
    c.ram_threads = m.ram_probe_threads(c.threads);
  }
  c.ssd_gb_s = m.ssd_gbps();
  // The VRAM tier's ceiling: the slowest probed device's copy bandwidth (the grouped kernel's
  // reads are held against it).
  for (const placement::MachineProfile::Gpu& g : m.gpus) {
    c.vram_gb_s = c.vram_gb_s > 0 ? std::min(c.vram_gb_s, g.d2d_gbps) : g.d2d_gbps;
    if (g.device >= 0) {
      if (c.gpu_d2d_gb_s.size() <= size_t(g.device)) c.gpu_d2d_gb_s.resize(size_t(g.device) + 1, 0);
      c.gpu_d2d_gb_s[g.device] = g.d2d_gbps;
    }
  }
  return c;
}

std::string machine_summary() {
  const std::string cpuinfo = slurp("/proc/cpuinfo");
  std::string model = "unknown CPU";
  int cpus = 0;
  for (size_t at = 0; at < cpuinfo.size();) {
    const size_t nl = std::min(cpuinfo.find('\n', at), cpuinfo.size());
    const std::string_view line(cpuinfo.data() + at, nl - at);
    if (line.starts_with("processor")) ++cpus;
    if (line.starts_with("model name") && model == "unknown CPU") {
      const size_t colon = line.find(':');
      if (colon != std::string_view::npos) model = std::string(line.substr(colon + 2));
    }
    at = nl + 1;
  }
  double ram_gib = 0;
  const std::string meminfo = slurp("/proc/meminfo");
  if (const size_t at = meminfo.find("MemTotal:"); at != std::string::npos)
    ram_gib = std::strtod(meminfo.c_str() + at + 9, nullptr) / (1024.0 * 1024.0);  // kB -> GiB
  int gpus = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++gpus;
  return fmt::format("CPU {}, {} logical cpus, RAM {:.1f} GiB, GPUs {}", model, cpus, ram_gib,
                     gpus);
}

Profiler::Profiler(int level, std::string json_path)
    : level_(level), enabled_(level > 0 || !json_path.empty()), json_path_(std::move(json_path)) {
  if (enabled_) machine_ = machine_summary();
}

void Profiler::begin_window() {
  const std::vector<double>::size_type capacity = c_.decode_token_seconds.capacity();
  c_ = ProfCounters{};
  c_.decode_token_seconds.reserve(capacity);
  probe_passes_.clear();
  probe_windows_.clear();
  probe_marked_ = false;
  base_ = store_ ? store_->counters() : tiers::StoreCounters{};
  last_ = base_;
  gpu_base_ = gpu_ ? gpu_->stats() : std::vector<GpuDeviceStats>{};
  lane_mark_ = lane_now();
  set_gpu_dense(dense_);
}

Profiler::LaneMark Profiler::lane_now() const {
  LaneMark m;
  if (gpu_)
    for (const GpuDeviceStats& d : gpu_->stats()) {
      m.experts += d.experts;
      m.rows += d.rows;
    }
  m.steps = c_.lane_layer_steps;
  m.straggler_steps = c_.gpu_straggler_steps;
  m.cpu = c_.cpu_lane_seconds;
  m.gpu = c_.gpu_lane_seconds;
  m.wait = c_.gpu_join_wait_seconds;
  return m;
}

std::vector<GpuDeviceStats> Profiler::window_gpu() const {
  std::vector<GpuDeviceStats> out = gpu_ ? gpu_->stats() : std::vector<GpuDeviceStats>{};
  for (size_t i = 0; i < out.size() && i < gpu_base_.size(); ++i)
    each_field(out[i], gpu_base_[i], kSub);
  return out;
}

tiers::StoreCounters Profiler::window_counters() const {
  tiers::StoreCounters s = store_ ? store_->counters() : tiers::StoreCounters{};
  each_field(s, base_, kSub);
  return s;
}

double Profiler::achieved_gb_s(const tiers::TierCounters& t, size_t home) const {
  if (home == size_t(ExpertHome::kSsd)) return rate(double(t.load_bytes) / 1e9, t.load_seconds);
  return rate(double(t.served_bytes) / 1e9, c_.compute_seconds[home]);
}

TimeShares Profiler::time_shares() const {
  const tiers::StoreCounters s = window_counters();
  const double total = c_.prefill_seconds + c_.decode_seconds + c_.sampling_outside_seconds;
  TimeShares t;
  if (total <= 0) {
    t.other = 1;
    return t;
  }
  t.attention = c_.attention_seconds;
  t.expert_ram = c_.compute_seconds[size_t(ExpertHome::kRam)];
  t.expert_ssd = c_.compute_seconds[size_t(ExpertHome::kSsd)];
  t.expert_vram = c_.compute_seconds[size_t(ExpertHome::kVram)];
  t.io_wait = s.io_wait_seconds;
  t.router = c_.router_seconds;
  t.shared_experts = c_.shared_expert_seconds;
  t.head = c_.head_seconds;
  t.sampling = c_.sampling_seconds;
  const double known = t.attention + t.expert_ram + t.expert_ssd + t.expert_vram + t.io_wait +
                       t.router + t.shared_experts + t.head + t.sampling;
  // The parts are timed inside the run, so they fit; rounding can overshoot a little: then scale
  // them down instead of a negative "other".
  const double base = std::max(total, known);
  for (double* v : {&t.attention, &t.expert_ram, &t.expert_ssd, &t.expert_vram, &t.io_wait,
                    &t.router, &t.shared_experts, &t.head, &t.sampling})
    *v /= base;
  t.other = std::max(0.0, 1.0 - known / base);
  return t;
}

std::string ram_fit_note(uint64_t fit_limit, uint64_t all_ram) {
  if (fit_limit == 0 || fit_limit >= all_ram) return "";
  return fmt::format(
      ", but this machine held at most {:.3f} GiB of experts beside the dense weights and KV "
      "cache: the rest needs more memory (or a smaller quantization)",
      double(fit_limit) / double(1ull << 30));
}

Verdict cpu_experts_verdict(double share, double streamed_gb_s, double probed_gb_s,
                            bool vram_in_use) {
  Verdict v;
  const bool compute = probed_gb_s > 0 && streamed_gb_s < kComputeBoundBelow * probed_gb_s;
  v.bound = compute ? "CPU-compute-bound" : "RAM-bandwidth-bound";
  v.knob = vram_in_use ? "VRAM_GB" : "THREADS";
  v.why = fmt::format(
      "CPU expert compute is {:.0f}% of the run, streaming expert weights at {:.2f} GB/s{}{}",
      100 * share, streamed_gb_s,
      probed_gb_s > 0 ? fmt::format(" ({:.0f}% of the probed {:.1f} GB/s)",
                                    100 * streamed_gb_s / probed_gb_s, probed_gb_s)
                      : std::string(" (no probe; run `strata probe`)"),
      compute ? ": the kernels' arithmetic, not RAM, sets the pace (a prefill reads each expert "
                "once for many tokens)"
              : "");
  return v;
}

double Profiler::kv_bytes_per_step() const {
  return c_.decode_steps > 0 ? double(c_.decode_kv_bytes) / double(c_.decode_steps) : 0.0;
}

double Profiler::attention_core_share() const {
  const double total = c_.attention_phase_seconds[0] + c_.attention_phase_seconds[1];
  return total > 0 ? (c_.attention_core_seconds[0] + c_.attention_core_seconds[1]) / total : -1.0;
}

bool Profiler::projections_dominate() const {
  // Measured where the attention core was timed. Else from decode's bytes: decode ran, and its KV
  // reads were under a quarter of the dense weights it read (the attention projections among
  // them), so attention time is mostly the projections' GEMVs.
  if (const double core = attention_core_share(); core >= 0) return core < 0.5;
  return c_.decode_steps > 0 && decode_bytes_.dense > 0 &&
         4 * kv_bytes_per_step() < double(decode_bytes_.dense);
}

std::string Profiler::core_note() const {
  const double core = attention_core_share();
  return core >= 0
             ? fmt::format(" (its core, scores, softmax and values, {:.0f}% of it)", 100 * core)
             : std::string();
}

Verdict Profiler::verdict() const {
  const TimeShares t = time_shares();
  const tiers::StoreCounters s = window_counters();
  const HitRates h = hit_rates(s, c_.experts_computed[size_t(ExpertHome::kVram)]);
  const double tokens = double(c_.prefill_tokens + c_.decode_tokens);
  Verdict v;
  const double cpu_experts = t.expert_ram + t.expert_ssd;
  if (c_.prefill_seconds + c_.decode_seconds <= 0) {
    v = {"balanced", "-", "nothing ran"};
  } else if (t.io_wait >= 0.25 || (h.ssd_miss >= 0.2 && t.io_wait + t.expert_ssd >= t.expert_ram)) {
    // Felt waits, or misses frequent enough that the SSD side (waits + computing just-read
    // experts) outweighs the RAM-homed experts' compute.
    uint64_t all_ram = 0;
    if (plan()) {
      const placement::PlacementPlan& p = *plan();
      all_ram = p.bytes(placement::HomeKind::kRam) + p.bytes(placement::HomeKind::kSsd);
    }
    v.bound = "SSD-bound";
    v.knob = "RAM_GB";
    v.why = fmt::format(
        "I/O wait felt is {:.0f}% of the run and SSD experts' compute {:.0f}% ({:.2f} MB read "
        "from SSD per token, {:.0f}% of expert uses missed RAM); RAM_GB={:.3f} holds every expert",
        100 * t.io_wait, 100 * t.expert_ssd,
        tokens > 0 ? double(s.ssd.load_bytes) / 1e6 / tokens : 0.0, 100 * h.ssd_miss,
        double(all_ram) / double(1ull << 30));
    v.why += ram_fit_note(ram_fit_limit_, all_ram);
  } else if (t.expert_vram >= 0.5) {
    v = {"GPU-bound", "VRAM_GB",
         fmt::format("GPU expert compute is {:.0f}% of the run", 100 * t.expert_vram)};
  } else if (cpu_experts + t.shared_experts >= 0.5) {
    // Shared experts are the same GEMVs over resident weights: with the routed experts they are
    // the expert compute the run is bound by, and their bytes join the streaming rate (where the
    // CPU computed them: CUDA_DENSE's GPU passes read no RAM).
    const double secs =
        c_.compute_seconds[size_t(ExpertHome::kRam)] + c_.compute_seconds[size_t(ExpertHome::kSsd)];
    const double routed_gb = double(s.ram.served_bytes + s.ssd.served_bytes) / 1e9;
    const double shared_gb = double(c_.shared_expert_bytes) / 1e9;
    const double shared_secs = shared_gb > 0 ? c_.shared_expert_seconds : 0.0;
    const double gbs = rate(routed_gb + shared_gb, secs + shared_secs);
    v = cpu_experts_verdict(cpu_experts + t.shared_experts, gbs, ceilings_.ram_gb_s,
                            t.expert_vram > 0);
    if (const ExpertStageTimes& pre = c_.expert_stages[0];
        v.bound == "CPU-compute-bound" && pre.calls > 0) {
      const double secs =
          pre.seconds[ExpertStageTimes::kGateUp] + pre.seconds[ExpertStageTimes::kDown];
      v.why +=
          fmt::format("; prefill's expert GEMMs ran at {:.1f} GMAC/s{}",
                      rate(double(pre.gate_up_macs + pre.down_macs) / 1e9, secs),
                      ceilings_.threads > 0 ? fmt::format(" over {} thread{}", ceilings_.threads,
                                                          ceilings_.threads == 1 ? "" : "s")
                                            : std::string());
    }
    if (t.shared_experts > 0)
      v.why +=
          fmt::format(" (shared experts {:.0f}% of the run{}, routed {:.0f}% at {:.2f} GB/s)",
                      100 * t.shared_experts,
                      shared_gb > 0 ? fmt::format(" at {:.2f} GB/s", rate(shared_gb, shared_secs))
                                    : std::string(" on the GPU"),
                      100 * cpu_experts, rate(routed_gb, secs));
  } else if (t.attention >= 0.4 && projections_dominate()) {
    // A short context: the KV pass is small next to the q/k/v/o matrices, which no KV knob
    // shrinks.
    v = {"attention-bound", "-",
         fmt::format("attention is {:.0f}% of the run, mostly its q/k/v/o projections{}: a decode "
                     "token read {:.2f} MB of KV cache against {:.1f} MB of dense weights, so "
                     "neither KV_TYPE nor a shorter context would help (CUDA_DENSE=1 moves the "
                     "projections to a GPU)",
                     100 * t.attention, core_note(), kv_bytes_per_step() / 1e6,
                     double(decode_bytes_.dense) / 1e6)};
  } else if (t.attention >= 0.4) {
    // At a long context the pass over the KV cache is most of it: F16 rows are half the bytes a
    // key for the same arithmetic (q8_0 fewer still, but widening them costs more arithmetic
    // than it saves reads on the CPUs measured), a shorter context fewer keys.
    v = {"attention-bound", decode_bytes_.kv_f32 ? "KV_TYPE" : "--ctx",
         fmt::format("attention is {:.0f}% of the run{}{}", 100 * t.attention, core_note(),
                     decode_bytes_.kv_f32
                         ? " (KV_TYPE=f16 reads half the KV bytes a key; a shorter context "
                           "fewer keys)"
                         : " (a shorter context reads fewer keys)")};
  } else {
    v.bound = "balanced";
    v.knob = "THREADS";
    v.why = fmt::format(
        "no stage dominates: experts {:.0f}%, I/O wait {:.0f}%, attention {:.0f}%, {}other {:.0f}%",
        100 * (cpu_experts + t.expert_vram), 100 * t.io_wait, 100 * t.attention,
        t.shared_experts > 0 ? fmt::format("shared experts {:.0f}%, ", 100 * t.shared_experts)
                             : std::string(),
        100 * t.other);
  }
  return v;
}

void Profiler::add_prefill(uint64_t tokens, double seconds) {
  c_.prefill_tokens += tokens;
  c_.prefill_seconds += seconds;
  mark();
}

void Profiler::begin_untimed() {
  STRATA_ASSERT(!untimed_.open, "begin_untimed() twice");
  untimed_.open = true;
  std::vector<double> tokens = std::move(c_.decode_token_seconds);
  untimed_.c = c_;
  c_.decode_token_seconds = std::move(tokens);
  untimed_.store = store_ ? store_->counters() : tiers::StoreCounters{};
  untimed_.gpu = gpu_ ? gpu_->stats() : std::vector<GpuDeviceStats>{};
  untimed_.dense_calls = dense_ ? dense_->calls() : 0;
  untimed_.dense_seconds = dense_ ? dense_->seconds() : 0;
}

void Profiler::end_untimed() {
  STRATA_ASSERT(untimed_.open, "end_untimed() without begin_untimed()");
  untimed_.open = false;
  // The counters return to the snapshot; the sources' totals moved on, so their bases move with
  // them by what the interval added.
  std::vector<double> tokens = std::move(c_.decode_token_seconds);
  c_ = untimed_.c;
  c_.decode_token_seconds = std::move(tokens);
  if (store_) {
    tiers::StoreCounters added = store_->counters();
    each_field(added, untimed_.store, kSub);
    each_field(base_, added, kAdd);
  }
  if (gpu_) {
    std::vector<GpuDeviceStats> now = gpu_->stats();
    for (size_t i = 0; i < now.size() && i < untimed_.gpu.size() && i < gpu_base_.size(); ++i) {
      each_field(now[i], untimed_.gpu[i], kSub);
      each_field(gpu_base_[i], now[i], kAdd);
    }
  }
  if (dense_) {
    dense_base_calls_ += dense_->calls() - untimed_.dense_calls;
    dense_base_seconds_ += dense_->seconds() - untimed_.dense_seconds;
  }
  mark();
}

void Profiler::mark() {
  if (store_) last_ = store_->counters();  // token_line() deltas start after the prompt
  if (store_) expert_ram_mark_ = last_.ram.served_bytes + last_.ssd.served_bytes;
  lane_mark_ = lane_now();
}

void Profiler::add_decode_token(double seconds, uint64_t n_past, bool ran, uint32_t drafted) {
  ++c_.decode_tokens;
  c_.decode_seconds += seconds;
  c_.decode_token_seconds.push_back(seconds);
  if (ran) {
    ++c_.decode_steps;
    c_.lookup_drafted += drafted;
    c_.decode_kv_bytes += decode_bytes_.kv_per_position * n_past;
  } else {
    ++c_.lookup_accepted;
  }
  if (store_) {
    const tiers::StoreCounters now = store_->counters();
    const uint64_t served = now.ram.served_bytes + now.ssd.served_bytes;
    c_.decode_expert_ram_bytes += served - expert_ram_mark_;
    expert_ram_mark_ = served;
  }
}

void Profiler::set_run_probe(std::unique_ptr<placement::RamReadProbe> probe, int every) {
  probe_ = std::move(probe);
  probe_every_ = probe_ ? std::max(1, every) : 0;
  probe_passes_.clear();
  probe_windows_.clear();
  probe_marked_ = false;
}

double Profiler::probe_tick() {
  if (!probe_ || (probe_marked_ &&
                  c_.decode_tokens - probe_mark_.tokens < static_cast<uint64_t>(probe_every_)))
    return 0;
  const auto t0 = std::chrono::steady_clock::now();
  const double gbs = probe_->pass();
  const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c_.probe_seconds += spent;
  probe_passes_.push_back(gbs);
  ProbeMark now;
  now.tokens = c_.decode_tokens;
  now.steps = c_.decode_steps;
  now.expert_bytes = c_.decode_expert_ram_bytes;
  now.kv_bytes = c_.decode_kv_bytes;
  now.decode_seconds = c_.decode_seconds;
  now.expert_seconds =
      c_.compute_seconds[size_t(ExpertHome::kRam)] + c_.compute_seconds[size_t(ExpertHome::kSsd)];
  now.gb_s = gbs;
  if (probe_marked_ && now.tokens > probe_mark_.tokens &&
      now.decode_seconds > probe_mark_.decode_seconds) {
    const ProbeMark& m = probe_mark_;
    ProbeWindow w;
    w.tokens = now.tokens - m.tokens;
    w.probe_gb_s = 0.5 * (m.gb_s + gbs);
    // The dense weights are read once per forward pass (LOOKUP: fewer passes than tokens).
    const double bytes = double(decode_bytes_.dense) * double(now.steps - m.steps) +
                         double(now.expert_bytes - m.expert_bytes) +
                         double(now.kv_bytes - m.kv_bytes);
    w.read_gb_s = bytes / (now.decode_seconds - m.decode_seconds) / 1e9;
    if (now.expert_seconds > m.expert_seconds)
      w.expert_gb_s =
          double(now.expert_bytes - m.expert_bytes) / (now.expert_seconds - m.expert_seconds) / 1e9;
    probe_windows_.push_back(w);
  }
  probe_mark_ = now;
  probe_marked_ = true;
  return spent;
}

RunProbe Profiler::run_probe() const {
  RunProbe r;
  if (!probe_) return r;
  r.every = probe_every_;
  r.bytes = probe_->bytes();
  r.passes = probe_passes_.size();
  r.seconds = c_.probe_seconds;
  if (!probe_passes_.empty()) {
    r.min_gb_s = *std::min_element(probe_passes_.begin(), probe_passes_.end());
    r.max_gb_s = *std::max_element(probe_passes_.begin(), probe_passes_.end());
    r.median_gb_s = percentile(probe_passes_, 50);
  }
  r.windows = probe_windows_.size();
  std::vector<double> roof, experts;
  for (const ProbeWindow& w : probe_windows_) {
    if (decode_bytes_.dense > 0) roof.push_back(w.read_gb_s / w.probe_gb_s);
    if (w.expert_gb_s > 0) experts.push_back(w.expert_gb_s / w.probe_gb_s);
  }
  r.roofline_p25 = percentile(roof, 25);
  r.roofline_p50 = percentile(roof, 50);
  r.roofline_p75 = percentile(roof, 75);
  r.experts_p25 = percentile(experts, 25);
  r.experts_p50 = percentile(experts, 50);
  r.experts_p75 = percentile(experts, 75);
  return r;
}

Roofline Profiler::roofline() const {
  Roofline r;
  if (c_.decode_tokens == 0 || decode_bytes_.dense == 0 || c_.decode_seconds <= 0) return r;
  const double n = double(c_.decode_tokens);
  // Per token: the dense weights once per forward pass (LOOKUP runs fewer passes than tokens).
  const double passes = double(c_.decode_steps) / n;
  r.dense_gb = double(decode_bytes_.dense) / 1e9 * passes;
  r.vram_dense_gb = double(decode_bytes_.vram_dense) / 1e9 * passes;
  r.experts_gb = double(c_.decode_expert_ram_bytes) / 1e9 / n;
  r.kv_gb = double(c_.decode_kv_bytes) / 1e9 / n;
  r.gb_per_token = r.dense_gb + r.experts_gb + r.kv_gb;
  r.tok_s = n / c_.decode_seconds;
  r.gb_s = r.gb_per_token * r.tok_s;
  r.probe_gb_s = ceilings_.ram_gb_s;
  if (r.probe_gb_s > 0) {
    r.roofline_tok_s = r.probe_gb_s / r.gb_per_token;
    r.fraction = r.tok_s / r.roofline_tok_s;
    // The median token's rate means nothing when LOOKUP serves tokens without a pass.
    const double p50 = percentile(c_.decode_token_seconds, 50);
    if (p50 > 0 && c_.decode_steps == c_.decode_tokens)
      r.fraction_p50 = 1.0 / p50 / r.roofline_tok_s;
  }
  return r;
}

std::string Profiler::token_line(uint64_t index, double seconds) {
  const tiers::StoreCounters now = store_ ? store_->counters() : tiers::StoreCounters{};
  std::string line = fmt::format(
      "prof: decode token {}: {:.1f} ms, ssd {} experts {:.1f} MB, cache {}/{} hits, wait {:.1f} "
      "ms, prefetch {} used {}",
      index, seconds * 1e3, now.ssd.loads - last_.ssd.loads,
      static_cast<double>(now.ssd.load_bytes - last_.ssd.load_bytes) / 1e6,
      now.cache_hits - last_.cache_hits,
      (now.cache_hits + now.cache_misses) - (last_.cache_hits + last_.cache_misses),
      (now.io_wait_seconds - last_.io_wait_seconds) * 1e3,
      now.prefetch_issued - last_.prefetch_issued, now.prefetch_used - last_.prefetch_used);
  last_ = now;
  if (gpu_) {
    const LaneMark m = lane_now(), &b = lane_mark_;
    const double cpu = m.cpu - b.cpu, gpu = m.gpu - b.gpu;
    const uint64_t steps = m.steps - b.steps;
    line += fmt::format(
        ", gpu {} experts {} rows, lanes cpu {:.1f} gpu {:.1f} wait {:.1f} ms, straggler {} ({}/{} "
        "steps GPU)",
        m.experts - b.experts, m.rows - b.rows, cpu * 1e3, gpu * 1e3, (m.wait - b.wait) * 1e3,
        steps == 0  ? "none"
        : gpu > cpu ? "GPU"
                    : "CPU",
        m.straggler_steps - b.straggler_steps, steps);
    lane_mark_ = m;
  }
  return line;
}

std::string Profiler::report() const {
  const tiers::StoreCounters s = window_counters();
  std::string out;
  if (!machine_.empty()) out += "prof: machine: " + machine_ + "\n";
  if (!header_.empty()) {
    size_t at = 0;
    while (at < header_.size()) {
      const size_t nl = header_.find('\n', at);
      out += "prof: " + header_.substr(at, nl - at) + "\n";
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
  }
  const auto& d = c_.decode_token_seconds;
  out += fmt::format(
      "prof: prefill {} tokens in {:.3f} s ({:.2f} tok/s) | decode {} tokens in {:.3f} s ({:.2f} "
      "tok/s), latency p50 {:.1f} ms p90 {:.1f} ms p99 {:.1f} ms max {:.1f} ms\n",
      c_.prefill_tokens, c_.prefill_seconds, rate(double(c_.prefill_tokens), c_.prefill_seconds),
      c_.decode_tokens, c_.decode_seconds, rate(double(c_.decode_tokens), c_.decode_seconds),
      percentile(d, 50) * 1e3, percentile(d, 90) * 1e3, percentile(d, 99) * 1e3,
      percentile(d, 100) * 1e3);
  if (const Roofline r = roofline(); r.gb_per_token > 0) {
    out += fmt::format(
        "prof: roofline: decode read {:.3f} GB/token from RAM (dense {:.3f}, experts {:.3f}, KV "
        "{:.3f}) = {:.2f} GB/s",
        r.gb_per_token, r.dense_gb, r.experts_gb, r.kv_gb, r.gb_s);
    if (r.vram_dense_gb > 0)
      out += fmt::format(" (CUDA_DENSE: another {:.3f} GB/token of dense weights read on GPU 0)",
                         r.vram_dense_gb);
    out += r.probe_gb_s > 0
               ? fmt::format(
                     "; RAM read probed {:.1f} GB/s at {}{} -> roofline {:.2f} tok/s, decode "
                     "at {:.0f}% of it{}\n",
                     r.probe_gb_s,
                     ceilings_.ram_threads == ceilings_.threads
                         ? fmt::format("{} thread{}", ceilings_.threads,
                                       ceilings_.threads == 1 ? "" : "s")
                         : fmt::format("{} threads (THREADS={})", ceilings_.ram_threads,
                                       ceilings_.threads),
                     ceilings_.ram_now ? " as the run started" : "", r.roofline_tok_s,
                     100 * r.fraction,
                     r.fraction_p50 > 0
                         ? fmt::format(" (the median token at {:.0f}%)", 100 * r.fraction_p50)
                         : std::string())
               : std::string("; no probe (run `strata probe`)\n");
  }
  if (c_.decode_steps < c_.decode_tokens || c_.lookup_drafted > 0)
    out += fmt::format(
        "prof: lookup: {} forward passes for {} decode tokens ({:.2f} tokens a pass); {} of {} "
        "drafted tokens used ({:.0f}%)\n",
        c_.decode_steps, c_.decode_tokens,
        c_.decode_steps ? double(c_.decode_tokens) / double(c_.decode_steps) : 0.0,
        c_.lookup_accepted, c_.lookup_drafted,
        c_.lookup_drafted ? 100.0 * double(c_.lookup_accepted) / double(c_.lookup_drafted) : 0.0);
  if (const RunProbe p = run_probe(); p.passes > 0) {
    out += fmt::format(
        "prof: in-run probe: {} passes of {:.0f} MiB at {} thread{}, one after the prompt and "
        "after every {} decode tokens ({:.2f} s, outside the decode clock): {:.1f}-{:.1f} GB/s, "
        "median {:.1f}",
        p.passes, double(p.bytes) / double(1 << 20), probe_->threads(),
        probe_->threads() == 1 ? "" : "s", p.every, p.seconds, p.min_gb_s, p.max_gb_s,
        p.median_gb_s);
    if (p.windows > 0) {
      out += fmt::format(
          "; per window between two passes (median of {}, quartiles): decode at {:.0f}% of the "
          "roofline ({:.0f}-{:.0f}%)",
          p.windows, 100 * p.roofline_p50, 100 * p.roofline_p25, 100 * p.roofline_p75);
      if (p.experts_p50 > 0)
        out += fmt::format(", experts streamed at {:.0f}% of the probe ({:.0f}-{:.0f}%)",
                           100 * p.experts_p50, 100 * p.experts_p25, 100 * p.experts_p75);
    } else {
      out += "; no window yet (fewer decode tokens than PROF_PROBE_EVERY)";
    }
    out += "\n";
  }
  const TimeShares ts = time_shares();
  out += fmt::format(
      "prof: time: attention {:.1f}%, experts RAM {:.1f}% SSD {:.1f}% VRAM {:.1f}%, I/O wait felt "
      "{:.1f}%, router {:.1f}%, {}output head {:.1f}%, sampling {:.1f}%, other {:.1f}%{}\n",
      100 * ts.attention, 100 * ts.expert_ram, 100 * ts.expert_ssd, 100 * ts.expert_vram,
      100 * ts.io_wait, 100 * ts.router,
      c_.shared_expert_seconds > 0
          ? fmt::format("shared experts {:.1f}%, ", 100 * ts.shared_experts)
          : std::string(),
      100 * ts.head, 100 * ts.sampling, 100 * ts.other,
      c_.attention_seconds + c_.router_seconds == 0
          ? " (attention and router not timed yet: in other)"
          : "");
  out += fmt::format("prof: {:<5} {:>10} {:>12} {:>9} {:>12} {:>9} {:>8} {:>10}\n", "tier",
                     "computed", "served", "loads", "load bytes", "load s", "GB/s", "compute s");
  for (size_t h = 0; h < kNumHomes; ++h) {
    const tiers::TierCounters& t = tier(s, h);
    out +=
        fmt::format("prof: {:<5} {:>10} {:>12} {:>9} {:>12} {:>9.3f} {:>8.3f} {:>10.3f}\n",
                    kTierNames[h], c_.experts_computed[h], placement::format_bytes(t.served_bytes),
                    t.loads, placement::format_bytes(t.load_bytes), t.load_seconds,
                    rate(double(t.load_bytes) / 1e9, t.load_seconds), c_.compute_seconds[h]);
  }
  const bool probed = ceilings_.ram_gb_s > 0 || ceilings_.ssd_gb_s > 0 || ceilings_.vram_gb_s > 0;
  for (size_t h = 0; h < kNumHomes; ++h) {
    const tiers::TierCounters& tc = tier(s, h);
    if (tc.served == 0 && tc.loads == 0) continue;
    // SSD (and the RAM start-up load): file reads per second of reads outstanding. RAM and VRAM
    // homes: expert bytes streamed through compute per second of compute, the rate their
    // bandwidth ceiling bounds.
    const bool reads = h == size_t(ExpertHome::kSsd);
    const double gbs = achieved_gb_s(tc, h);
    const double ceil = ceiling_of(ceilings_, h);
    out += fmt::format(
        "prof: tier {}: {} experts served ({:.3f} GB), {:.3f} GB read from the file, {:.2f} GB/s "
        "{} {}\n",
        kTierNames[h], tc.served, double(tc.served_bytes) / 1e9, double(tc.load_bytes) / 1e9, gbs,
        reads ? "read" : "streamed in compute",
        ceil > 0 ? fmt::format("({:.0f}% of the probed {:.1f} GB/s)", 100 * gbs / ceil, ceil)
                 : std::string(probed ? "(not probed)" : "(no probe; run `strata probe`)"));
  }
  if (c_.shared_expert_bytes > 0) {
    const double gb = double(c_.shared_expert_bytes) / 1e9;
    const double gbs = rate(gb, c_.shared_expert_seconds);
    out += fmt::format(
        "prof: shared experts: {:.3f} GB read in {:.3f} s of their compute, {:.2f} GB/s {}\n", gb,
        c_.shared_expert_seconds, gbs,
        ceilings_.ram_gb_s > 0 ? fmt::format("({:.0f}% of the probed {:.1f} GB/s)",
                                             100 * gbs / ceilings_.ram_gb_s, ceilings_.ram_gb_s)
                               : std::string("(no probe)"));
  }
  out += stage_report();
  const HitRates hr = hit_rates(s, c_.experts_computed[size_t(ExpertHome::kVram)]);
  out += fmt::format(
      "prof: hit rates over {} expert uses: VRAM {:.1f}%, RAM pinned {:.1f}%, RAM cache {:.1f}%, "
      "SSD miss {:.1f}%\n",
      hr.uses, 100 * hr.vram, 100 * hr.ram_pinned, 100 * hr.ram_cache, 100 * hr.ssd_miss);
  out += fmt::format(
      "prof: prefetch: precision {:.1f}% ({} used of {} issued, {} evicted unused, {} refused by "
      "the guard), recall {:.1f}% (of {} SSD experts decode needed), I/O wait saved ~{:.3f} s "
      "(layer steps served by prefetch x felt wait per missing step; head start {:.3f} s), routers "
      "ahead {:.3f} s{}\n",
      100 * s.prefetch_precision(), s.prefetch_used, s.prefetch_issued, s.prefetch_wasted,
      s.prefetch_refused, 100 * s.prefetch_recall(), s.prefetch_needed, s.prefetch_wait_saved(),
      s.prefetch_head_start_seconds, c_.prefetch_seconds,
      s.prefetch_issued + s.prefetch_needed == 0 ? " (PREFETCH off)" : "");
  if (s.repin_passes > 0) {
    uint64_t vram_moves = 0;
    for (const GpuDeviceStats& g : window_gpu()) vram_moves += g.repin_moves;
    out += fmt::format("prof: repin: {} passes, {} experts moved RAM <-> SSD, {} SSD -> VRAM\n",
                       s.repin_passes, s.repin_moves, vram_moves);
  }
  if (s.place_passes > 0)
    out += fmt::format(
        "prof: prompt placement: {} experts moved into RAM homes ({:.3f} GB read) in {:.3f} s, "
        "{} layer passes (PROMPT_PLACE)\n",
        s.place_moves, double(s.place_read_bytes) / 1e9, s.place_seconds, s.place_passes);
  out += gpu_report();
  if (dense_) {
    const uint64_t tokens = c_.prefill_tokens + c_.decode_tokens;
    const double secs = dense_->seconds() - dense_base_seconds_;
    out += fmt::format(
        "prof: cuda_dense: {} matrices ({}) on GPU 0{}; {} calls, {:.3f} s ({:.3f} ms per token, "
        "copies included)\n",
        dense_->n_matrices(), placement::format_bytes(dense_->bytes()),
        dense_->emulated() ? " (host emulation)" : "", dense_->calls() - dense_base_calls_, secs,
        tokens > 0 ? secs / double(tokens) * 1e3 : 0.0);
  }
  const Verdict v = verdict();
  out += fmt::format("prof: verdict: {} | knob {}: {}\n", v.bound, v.knob, v.why);
  const tiers::ExpertCache* cache = store_ ? store_->cache() : nullptr;
  out += fmt::format(
      "prof: cache: {} hits, {} misses, hit rate {:.1f}%, {} evictions, {} slots of {}\n",
      s.cache_hits, s.cache_misses, 100.0 * s.hit_rate(), s.evictions, cache ? cache->n_slots() : 0,
      placement::format_bytes(cache ? cache->slot_bytes() : 0));
  const double run_s = c_.prefill_seconds + c_.decode_seconds;
  out += fmt::format(
      "prof: io: wait felt {:.3f} s ({:.1f}% of prefill + decode), service {:.3f} s (summed over "
      "{} reads), {}{}\n",
      s.io_wait_seconds, run_s > 0 ? 100.0 * s.io_wait_seconds / run_s : 0.0, s.io_service_seconds,
      s.reads, store_ ? (store_->uring() ? "io_uring" : "pread pool") : "no SSD tier",
      store_ ? (store_->direct() ? " + O_DIRECT" : " + buffered") : "");
  return out;
}

std::string Profiler::json() const {
  using nlohmann::json;
  const tiers::StoreCounters s = window_counters();
  const auto& d = c_.decode_token_seconds;
  json j;
  j["version"] = 1;
  j["prefill_tokens"] = c_.prefill_tokens;
  j["prefill_seconds"] = c_.prefill_seconds;
  j["prefill_tok_s"] = rate(double(c_.prefill_tokens), c_.prefill_seconds);
  j["decode_tokens"] = c_.decode_tokens;
  j["decode_seconds"] = c_.decode_seconds;
  j["decode_tok_s"] = rate(double(c_.decode_tokens), c_.decode_seconds);
  j["decode_steps"] = c_.decode_steps;
  j["lookup"] = {{"drafted", c_.lookup_drafted}, {"accepted", c_.lookup_accepted}};
  j["decode_latency_ms"] = {{"p50", percentile(d, 50) * 1e3},
                            {"p90", percentile(d, 90) * 1e3},
                            {"p99", percentile(d, 99) * 1e3},
                            {"max", percentile(d, 100) * 1e3}};
  const TimeShares ts = time_shares();
  j["time_shares"] = {{"attention", ts.attention},
                      {"expert_ram", ts.expert_ram},
                      {"expert_ssd", ts.expert_ssd},
                      {"expert_vram", ts.expert_vram},
                      {"io_wait", ts.io_wait},
                      {"router", ts.router},
                      {"shared_experts", ts.shared_experts},
                      {"head", ts.head},
                      {"sampling", ts.sampling},
                      {"other", ts.other}};
  const HitRates hr = hit_rates(s, c_.experts_computed[size_t(ExpertHome::kVram)]);
  j["hit_rates"] = {{"expert_uses", hr.uses},      {"vram", hr.vram},
                    {"ram_pinned", hr.ram_pinned}, {"ram_cache", hr.ram_cache},
                    {"ssd_miss", hr.ssd_miss},     {"fast", hr.fast()}};
  const double tokens = double(c_.prefill_tokens + c_.decode_tokens);
  j["ssd_gb_per_token"] = tokens > 0 ? double(s.ssd.load_bytes) / 1e9 / tokens : 0.0;
  if (const Roofline r = roofline(); r.gb_per_token > 0) {
    j["roofline"] = {{"gb_per_token", r.gb_per_token},   {"dense_gb", r.dense_gb},
                     {"experts_gb", r.experts_gb},       {"kv_gb", r.kv_gb},
                     {"vram_dense_gb", r.vram_dense_gb}, {"gb_s", r.gb_s},
                     {"probe_gb_s", r.probe_gb_s},       {"roofline_tok_s", r.roofline_tok_s},
                     {"fraction", r.fraction},           {"fraction_p50", r.fraction_p50}};
  } else {
    j["roofline"] = nullptr;
  }
  if (const RunProbe p = run_probe(); p.passes > 0) {
    j["run_probe"] = {
        {"every", p.every},
        {"bytes", p.bytes},
        {"passes", p.passes},
        {"seconds", p.seconds},
        {"gb_s", {{"min", p.min_gb_s}, {"median", p.median_gb_s}, {"max", p.max_gb_s}}},
        {"windows", p.windows},
        {"roofline_fraction",
         {{"p25", p.roofline_p25}, {"p50", p.roofline_p50}, {"p75", p.roofline_p75}}},
        {"experts_fraction",
         {{"p25", p.experts_p25}, {"p50", p.experts_p50}, {"p75", p.experts_p75}}}};
  } else {
    j["run_probe"] = nullptr;
  }
  j["ceilings_gb_s"] = {{"ram", ceilings_.ram_gb_s},
                        {"ssd", ceilings_.ssd_gb_s},
                        {"vram", ceilings_.vram_gb_s},
                        {"ram_now", ceilings_.ram_now}};
  const Verdict v = verdict();
  j["verdict"] = {{"bound", v.bound}, {"knob", v.knob}, {"why", v.why}};
  j["machine"] = machine_;
  j["cpu_kernels"] = std::string(kernels::isa_name(kernels::best_isa()));
  j["prefetch"] = nullptr;  // no prefetcher in this build
  json tiers_j = json::object();
  for (size_t h = 0; h < kNumHomes; ++h) {
    const tiers::TierCounters& t = tier(s, h);
    tiers_j[kTierNames[h]] = {
        {"expert_loads", t.loads},
        {"bytes", t.load_bytes},
        {"seconds", t.load_seconds},
        {"gb_s", rate(double(t.load_bytes) / 1e9, t.load_seconds)},
        {"experts_served", t.served},
        {"served_bytes", t.served_bytes},
        {"experts_computed", c_.experts_computed[h]},
        {"compute_seconds", c_.compute_seconds[h]},
        {"achieved_gb_s", achieved_gb_s(t, h)},
        {"ceiling_pct", ceiling_of(ceilings_, h) > 0
                            ? 100 * achieved_gb_s(t, h) / ceiling_of(ceilings_, h)
                            : 0.0}};
  }
  j["tiers"] = tiers_j;
  json stages_j = json::object();
  for (size_t ph = 0; ph < c_.expert_stages.size(); ++ph) {
    const ExpertStageTimes& st = c_.expert_stages[ph];
    using S = ExpertStageTimes;
    stages_j[kPhaseNames[ph]] = {{"calls", st.calls},
                                 {"rows", st.rows},
                                 {"quantize_seconds", st.seconds[S::kQuantize]},
                                 {"gate_up_seconds", st.seconds[S::kGateUp]},
                                 {"glu_seconds", st.seconds[S::kGlu]},
                                 {"down_seconds", st.seconds[S::kDown]},
                                 {"gate_up_macs", st.gate_up_macs},
                                 {"down_macs", st.down_macs},
                                 {"gate_up_bytes", st.gate_up_bytes},
                                 {"down_bytes", st.down_bytes}};
  }
  j["expert_stages"] = stages_j;
  json attn_j = json::object();
  for (size_t ph = 0; ph < 2; ++ph)
    attn_j[kPhaseNames[ph]] = {{"seconds", c_.attention_phase_seconds[ph]},
                               {"core_seconds", c_.attention_core_seconds[ph]}};
  j["attention_stages"] = attn_j;
  j["shared_experts"] = {
      {"bytes", c_.shared_expert_bytes},
      {"seconds", c_.shared_expert_seconds},
      {"gb_s", rate(double(c_.shared_expert_bytes) / 1e9, c_.shared_expert_seconds)}};
  const tiers::ExpertCache* cache = store_ ? store_->cache() : nullptr;
  j["cache"] = {{"hits", s.cache_hits},
                {"misses", s.cache_misses},
                {"hit_rate", s.hit_rate()},
                {"evictions", s.evictions},
                {"slots", cache ? cache->n_slots() : 0},
                {"slot_bytes", cache ? cache->slot_bytes() : 0}};
  j["io"] = {{"wait_seconds", s.io_wait_seconds},
             {"service_seconds", s.io_service_seconds},
             {"reads", s.reads},
             {"uring", store_ ? store_->uring() : false},
             {"direct", store_ ? store_->direct() : false},
             {"zstd", store_ ? store_->compressed() : false},
             {"zstd_frames", s.frames},
             {"zstd_raw_bytes", s.frame_raw_bytes},
             {"decompress_seconds", s.decompress_seconds}};
  j["prefetch"] = {{"issued", s.prefetch_issued},
                   {"used", s.prefetch_used},
                   {"wasted", s.prefetch_wasted},
                   {"refused", s.prefetch_refused},
                   {"needed", s.prefetch_needed},
                   {"precision", s.prefetch_precision()},
                   {"recall", s.prefetch_recall()},
                   {"wait_saved_seconds", s.prefetch_wait_saved()},
                   {"head_start_seconds", s.prefetch_head_start_seconds},
                   {"route_seconds", c_.prefetch_seconds}};
  uint64_t vram_moves = 0;
  for (const GpuDeviceStats& g : window_gpu()) vram_moves += g.repin_moves;
  j["repin"] = {{"passes", s.repin_passes}, {"moves", s.repin_moves}, {"vram_moves", vram_moves}};
  j["prompt_place"] = {{"layer_passes", s.place_passes},
                       {"moves", s.place_moves},
                       {"read_bytes", s.place_read_bytes},
                       {"seconds", s.place_seconds}};
  j["gpu"] = gpu_json();
  j["cuda_dense"] = nullptr;
  if (dense_)
    j["cuda_dense"] = {{"emulated", dense_->emulated()},
                       {"matrices", dense_->n_matrices()},
                       {"bytes", dense_->bytes()},
                       {"calls", dense_->calls() - dense_base_calls_},
                       {"seconds", dense_->seconds() - dense_base_seconds_}};
  if (plan()) {
    const placement::PlacementPlan& p = *plan();
    j["plan"] = {{"ram_budget_bytes", p.budgets().ram_bytes},
                 {"ram_used_bytes", p.ram_bytes_used()},
                 {"cache_bytes", p.cache_bytes()},
                 {"experts_ram", p.count(placement::HomeKind::kRam)},
                 {"experts_ssd", p.count(placement::HomeKind::kSsd)},
                 {"experts_vram", p.count(placement::HomeKind::kVram)},
                 {"bytes_ram", p.bytes(placement::HomeKind::kRam)},
                 {"bytes_ssd", p.bytes(placement::HomeKind::kSsd)},
                 {"bytes_vram", p.bytes(placement::HomeKind::kVram)}};
  } else {
    j["plan"] = nullptr;
  }
  j["header"] = header_;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

double Profiler::device_ceiling(int device) const {
  if (device >= 0 && size_t(device) < ceilings_.gpu_d2d_gb_s.size() &&
      ceilings_.gpu_d2d_gb_s[device] > 0)
    return ceilings_.gpu_d2d_gb_s[device];
  return 0;
}

Profiler::LaneTimes Profiler::lane_times() const {
  LaneTimes l;
  const double tokens = double(c_.prefill_tokens + c_.decode_tokens);
  if (tokens > 0) {
    l.cpu_ms_per_token = c_.cpu_lane_seconds / tokens * 1e3;
    l.gpu_ms_per_token = c_.gpu_lane_seconds / tokens * 1e3;
    l.wait_ms_per_token = c_.gpu_join_wait_seconds / tokens * 1e3;
  }
  l.straggler = c_.lane_layer_steps == 0                    ? "none"
                : c_.gpu_lane_seconds > c_.cpu_lane_seconds ? "GPU"
                                                            : "CPU";
  return l;
}

std::string Profiler::stage_report() const {
  std::string out;
  for (size_t ph = 0; ph < 2; ++ph) {
    const double total = c_.attention_phase_seconds[ph];
    if (total <= 0) continue;
    const double core = std::min(c_.attention_core_seconds[ph], total);
    out += fmt::format(
        "prof: attention, {}: {:.3f} s: core (scores, softmax, values) {:.3f} s = {:.0f}%, "
        "projections, norms, RoPE and KV writes {:.3f} s = {:.0f}%\n",
        kPhaseNames[ph], total, core, 100 * core / total, total - core,
        100 * (total - core) / total);
  }
  for (size_t ph = 0; ph < c_.expert_stages.size(); ++ph) {
    const ExpertStageTimes& st = c_.expert_stages[ph];
    if (st.calls == 0) continue;
    const double total = stage_total(st);
    const auto share = [&](double secs) { return total > 0 ? 100 * secs / total : 0.0; };
    const auto matmul = [&](double secs, uint64_t macs, uint64_t bytes) {
      return fmt::format("{:.3f} s = {:.0f}% ({:.1f} GMAC/s, {:.2f} GB/s of weights)", secs,
                         share(secs), rate(double(macs) / 1e9, secs),
                         rate(double(bytes) / 1e9, secs));
    };
    using S = ExpertStageTimes;
    out += fmt::format(
        "prof: CPU experts, {} ({}): {} rows in {:.3f} s: activation quantize {:.3f} s = {:.0f}%, "
        "gate+up {}, {}, down {}\n",
        kPhaseNames[ph], ph == 0 ? "passes of several tokens" : "one-token passes", st.rows, total,
        st.seconds[S::kQuantize], share(st.seconds[S::kQuantize]),
        matmul(st.seconds[S::kGateUp], st.gate_up_macs, st.gate_up_bytes),
        st.seconds[S::kGlu] > 0
            ? fmt::format("GLU {:.3f} s = {:.0f}%", st.seconds[S::kGlu], share(st.seconds[S::kGlu]))
            : std::string("GLU inside gate+up"),
        matmul(st.seconds[S::kDown], st.down_macs, st.down_bytes));
  }
  return out;
}

std::string Profiler::gpu_report() const {
  if (!gpu_) return "";
  std::string out;
  for (const GpuDeviceStats& g : window_gpu()) {
    const double gbs = rate(double(g.bytes_read) / 1e9, g.kernel_seconds);
    const double ceil = device_ceiling(g.device);
    out += fmt::format(
        "prof: gpu {} ({}): {} experts resident ({}, uploaded in {:.2f} s); {} launches, {} expert "
        "jobs, {} rows, {:.3f} GB read in {:.3f} s of device time: {:.2f} GB/s {}\n",
        g.device, g.name, g.resident_experts, placement::format_bytes(g.resident_bytes),
        g.upload_seconds, g.launches, g.experts, g.rows, double(g.bytes_read) / 1e9,
        g.kernel_seconds, gbs,
        gpu_->emulated() ? std::string("(host emulation: not a device rate)")
        : ceil > 0
            ? fmt::format("({:.0f}% of the probed {:.1f} GB/s device copy)", 100 * gbs / ceil, ceil)
            : std::string("(no probe; run `strata probe`)"));
  }
  const LaneTimes l = lane_times();
  out += fmt::format(
      "prof: lanes: {} MoE layer steps with GPU experts; per token CPU lane {:.3f} ms, GPU lane "
      "{:.3f} ms, host waited {:.3f} ms at the join; straggler: {} ({} of {} steps GPU-bound)\n",
      c_.lane_layer_steps, l.cpu_ms_per_token, l.gpu_ms_per_token, l.wait_ms_per_token, l.straggler,
      c_.gpu_straggler_steps, c_.lane_layer_steps);
  return out;
}

nlohmann::json Profiler::gpu_json() const {
  using json = nlohmann::json;
  if (!gpu_) return nullptr;
  json devices = json::array();
  for (const GpuDeviceStats& g : window_gpu()) {
    const double gbs = rate(double(g.bytes_read) / 1e9, g.kernel_seconds);
    const double ceil = device_ceiling(g.device);
    devices.push_back({{"device", g.device},
                       {"name", g.name},
                       {"resident_experts", g.resident_experts},
                       {"resident_bytes", g.resident_bytes},
                       {"upload_seconds", g.upload_seconds},
                       {"launches", g.launches},
                       {"experts", g.experts},
                       {"rows", g.rows},
                       {"bytes_read", g.bytes_read},
                       {"kernel_seconds", g.kernel_seconds},
                       {"gb_s", gbs},
                       {"ceiling_gb_s", ceil},
                       {"ceiling_pct", ceil > 0 ? 100 * gbs / ceil : 0.0}});
  }
  const LaneTimes l = lane_times();
  return {{"emulated", gpu_->emulated()},
          {"devices", devices},
          {"lanes",
           {{"layer_steps", c_.lane_layer_steps},
            {"cpu_seconds", c_.cpu_lane_seconds},
            {"gpu_seconds", c_.gpu_lane_seconds},
            {"join_wait_seconds", c_.gpu_join_wait_seconds},
            {"gpu_straggler_steps", c_.gpu_straggler_steps},
            {"cpu_ms_per_token", l.cpu_ms_per_token},
            {"gpu_ms_per_token", l.gpu_ms_per_token},
            {"wait_ms_per_token", l.wait_ms_per_token},
            {"straggler", l.straggler}}}};
}

void Profiler::write_json() const {
  if (json_path_.empty()) return;
  const std::string tmp = json_path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(ErrorKind::kIo, "{}: cannot write the PROF JSON file", tmp);
    out << json();
    out.flush();
    if (!out) fail(ErrorKind::kIo, "{}: write failed", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, json_path_, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    fail(ErrorKind::kIo, "{}: cannot rename the PROF JSON file into place", json_path_);
  }
}

}  // namespace strata::engine
