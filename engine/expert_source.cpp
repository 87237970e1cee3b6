// Routed experts from the mapping or from the tiers (see expert_source.h).
// Tested by tests/test_tier_invariance.cpp and tests/test_tier_faults.cpp.
#include "engine/expert_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "cuda/runtime.h"
#include "engine/ops.h"
#include "engine/prof.h"
#include "engine/sysmem.h"
#include "io/check.h"
#include "placement/planner.h"

namespace strata::engine {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// REPIN hysteresis: a cached SSD expert takes a RAM home only when its decayed decode uses reach
// kRepinMargin x the incumbent's + kRepinMinScore.
constexpr double kRepinMargin = 1.5;
constexpr double kRepinMinScore = 2.0;

ExpertHome engine_home(placement::Home h) {
  switch (h.kind) {
    case placement::HomeKind::kRam:
      return ExpertHome::kRam;
    case placement::HomeKind::kSsd:
      return ExpertHome::kSsd;
    case placement::HomeKind::kVram:
      return ExpertHome::kVram;
  }
  return ExpertHome::kRam;
}

// GiB rounded up at 4 decimals, so the printed minimum is itself an acceptable RAM_GB.
std::string gib_up(uint64_t bytes) {
  return fmt::format("{:.4f}", std::ceil(static_cast<double>(bytes) / kGiB * 1e4) / 1e4);
}

// The dense weights become resident private memory at the same addresses: every page of the
// mapping that holds a byte of anything but a routed expert (header, metadata, attention, norms,
// router, embeddings, output, dense FFNs) is replaced in place by an anonymous page filled with
// pread. Views keep pointing where they did, whoever added them; the pages wholly inside routed
// expert tensors stay file-backed and are never touched, so expert bytes enter RAM only through
// the ExpertStore, and a file truncated under a run shows up as a read error, not SIGBUS.
// Returns the bytes made resident.
uint64_t make_resident(const io::GgufFile& file, const tiers::ExtentTable& extents) {
  const std::span<const std::byte> map = file.bytes();
  if (map.empty()) return 0;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t size = map.size();
  const uint64_t mapped = (size + page - 1) / page * page;

  // Expert byte ranges, merged where they touch (a stacked tensor's slices are back to back).
  std::vector<std::pair<uint64_t, uint64_t>> experts;  // [begin, end)
  for (const auto& layer : extents)
    for (const tiers::ExpertExtents& x : layer)
      for (const tiers::SliceExtent& s : x) experts.push_back({s.offset, s.offset + s.bytes});
  std::sort(experts.begin(), experts.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (const auto& r : experts) {
    if (!merged.empty() && r.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  // Resident ranges: the complement of the pages wholly inside a merged expert range.
  std::vector<std::pair<uint64_t, uint64_t>> resident;
  uint64_t at = 0;
  for (const auto& [b, e] : merged) {
    const uint64_t first = (b + page - 1) / page * page;  // first whole expert page
    const uint64_t last = e / page * page;                // end of the last whole one
    if (first >= last) continue;
    if (first > at) resident.push_back({at, first});
    at = last;
  }
  if (at < mapped) resident.push_back({at, mapped});

  const io::PartFiles files(file.parts());
  auto* base = const_cast<std::byte*>(map.data());  // the mapping is ours to replace
  uint64_t total = 0;
  for (const auto& [b, e] : resident) {
    void* p = mmap(base + b, e - b, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
      fail_sys("mmap", fmt::format("{}: resident copy of bytes {}..{}", file.path(), b, e));
    madvise(p, e - b, MADV_HUGEPAGE);  // best effort: THP may be off
    // The bytes each file holds in [b, e) (a split model's gaps between files stay zero).
    for (const io::FilePart& part : file.parts()) {
      const uint64_t from = std::max(b, part.base);
      const uint64_t to = std::min(e, part.base + part.size);
      if (from >= to) continue;
      files.read_at(from, {base + from, to - from});  // FileError naming the file and offset
      total += to - from;
    }
    mprotect(p, e - b, PROT_READ);
  }
  // The copies are ours now; the files' pages in the page cache are not needed (they would count
  // against a memory cgroup until reclaimed).
  files.drop_cache();
  return total;
}

}  // namespace

tiers::ExtentTable expert_extents(const Model& model) {
  const ModelConfig& cfg = model.config();
  tiers::ExtentTable table(cfg.n_layer);
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    if (!cfg.is_moe(il)) continue;
    const ExpertStack& stack = model.weights().layers[il].experts;
    table[il].resize(stack.n_expert);
    for (uint32_t e = 0; e < stack.n_expert; ++e) {
      const ExpertSlice s = stack.expert_slice(e);
      table[il][e] = {tiers::SliceExtent{s.gate.file_offset, s.gate.n_bytes},
                      tiers::SliceExtent{s.up.file_offset, s.up.n_bytes},
                      tiers::SliceExtent{s.down.file_offset, s.down.n_bytes}};
    }
  }
  return table;
}

placement::ExpertSizes expert_sizes(const Model& model) {
  return tiers::expert_sizes(expert_extents(model), static_cast<int>(model.config().n_expert_used));
}

TierOptions tier_options(const Knobs& knobs) {
  TierOptions o;
  if (const auto gb = knobs.float_opt("RAM_GB"))
    o.ram_bytes = static_cast<uint64_t>(std::llround(*gb * kGiB));
  if (const auto gb = knobs.float_opt("CACHE_GB"))
    o.cache_bytes = static_cast<uint64_t>(std::llround(*gb * kGiB));
  o.vram_gb = knobs.get_string("VRAM_GB");
  o.kv_type = parse_kv_type(knobs.get_string("KV_TYPE"));
  o.vram_emulate = knobs.get_bool("VRAM_EMULATE");
  o.cuda_dense = static_cast<int>(knobs.get_int("CUDA_DENSE"));
  o.zstd = knobs.get_string("ZSTD");
  const std::string numa = knobs.get_string("NUMA");
  o.numa = numa == "local" ? tiers::NumaMode::kLocal
           : numa == "off" ? tiers::NumaMode::kOff
                           : tiers::NumaMode::kInterleave;
  o.touch_threads = static_cast<int>(
      knobs.int_opt("THREADS").value_or(int64_t(kernels::physical_core_cpus().size())));
  o.direct = knobs.get_bool("DIRECT");
  o.uring = knobs.get_bool("URING");
  o.prefetch = static_cast<int>(knobs.get_int("PREFETCH"));
  o.repack = knobs.get_bool("REPACK") && kernels::interleave_pays();
  o.dense_arena = knobs.get_bool("DENSE_ARENA");
  o.repin = static_cast<int>(knobs.get_int("REPIN"));
  o.repin_half_life = knobs.get_float("REPIN_HALF_LIFE");
  o.repin_moves = static_cast<int>(knobs.get_int("REPIN_MOVES"));
  o.prompt_place = knobs.get_bool("PROMPT_PLACE");
  return o;
}

void check_explicit_ram_budget(uint64_t expert_bytes, const RamBudgetInputs& in,
                               const placement::ExpertSizes& sizes) {
  const uint64_t others = in.dense_bytes + in.kv_bytes;
  if (expert_bytes + others <= in.available) return;
  fail(ErrorKind::kOutOfMemory,
       "knob RAM_GB ({}): {} GiB of experts plus {} ({}) is more than the {} of memory available "
       "(the process would be killed); at most {} GiB fits, RAM_GB auto gives {} GiB",
       knob_flag("RAM_GB"), fmt::format("{:.2f}", static_cast<double>(expert_bytes) / kGiB),
       in.dense_bytes > 0 ? "the dense weights and the KV cache" : "the KV cache",
       placement::format_bytes(others), placement::format_bytes(in.available),
       fmt::format("{:.2f}", static_cast<double>(in.fit_limit()) / kGiB),
       fmt::format("{:.2f}", static_cast<double>(auto_ram_budget(in, sizes)) / kGiB));
}

uint64_t auto_ram_budget(const RamBudgetInputs& in, const placement::ExpertSizes& sizes) {
  const uint64_t headroom = (512ull << 20) + in.available / 20;
  const uint64_t taken = in.kv_bytes + in.dense_bytes + headroom;
  const uint64_t room = in.available > taken ? in.available - taken : 0;
  return std::min(room, placement::all_ram_bytes(sizes));
}

std::vector<uint64_t> vram_budgets(const std::string& vram_gb, bool emulate,
                                   const std::vector<VramDevice>& devices, uint64_t reserve_bytes) {
  std::vector<double> gb;
  for (size_t at = 0; !vram_gb.empty() && at <= vram_gb.size();) {
    const size_t comma = std::min(vram_gb.find(',', at), vram_gb.size());
    const std::string item = vram_gb.substr(at, comma - at);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    // At most 1 PiB (RAM_GB's bound too): larger values would overflow the byte count.
    if (item.empty() || end != item.c_str() + item.size() || !(v >= 0) || !(v <= 1048576))
      fail(ErrorKind::kBadValue,
           "knob VRAM_GB ({}): bad value '{}': '{}' is not a number of GiB in 0..1048576 "
           "(allowed: one total, or one per GPU like 24,24)",
           knob_flag("VRAM_GB"), vram_gb, item);
    gb.push_back(v);
    at = comma + 1;
  }
  const auto bytes = [](double g) { return static_cast<uint64_t>(std::llround(g * kGiB)); };
  std::vector<uint64_t> out;
  if (emulate) {
    for (double g : gb) out.push_back(bytes(g));
    return out;
  }
  const size_t n = devices.size();
  if (gb.empty()) {
    for (const VramDevice& d : devices) {
      const uint64_t keep = (1ull << 30) + d.total / 20 + reserve_bytes;
      out.push_back(d.free > keep ? d.free - keep : 0);
    }
    return out;
  }
  if (gb.size() == 1) {
    if (n == 0) {
      if (gb[0] > 0)
        fail(ErrorKind::kBadValue,
             "knob VRAM_GB ({}): {} GiB asked for but there is no usable CUDA device ({}); "
             "VRAM_EMULATE=1 emulates one for tests",
             knob_flag("VRAM_GB"), vram_gb, cuda::cuda_describe());
      return out;
    }
    for (size_t i = 0; i < n; ++i) out.push_back(bytes(gb[0] / static_cast<double>(n)));
  } else {
    if (gb.size() != n)
      fail(ErrorKind::kBadValue, "knob VRAM_GB ({}): {} per-GPU values for {} usable GPU(s) ({})",
           knob_flag("VRAM_GB"), gb.size(), n, cuda::cuda_describe());
    for (double g : gb) out.push_back(bytes(g));
  }
  // An explicit budget must fit beside what the GPU holds anyway (else the upload would fail
  // halfway through the load).
  for (size_t i = 0; i < n; ++i) {
    const uint64_t room = devices[i].free > reserve_bytes ? devices[i].free - reserve_bytes : 0;
    if (out[i] > room)
      fail(ErrorKind::kBadValue,
           "knob VRAM_GB ({}): {:.2f} GiB of experts for GPU {} but it has {:.2f} GiB free, less "
           "{:.2f} GiB for the executor's buffers, expert biases and CUDA_DENSE's matrices: at "
           "most {:.2f} GiB there (unset VRAM_GB for the automatic budget)",
           knob_flag("VRAM_GB"), double(out[i]) / kGiB, i, double(devices[i].free) / kGiB,
           double(reserve_bytes) / kGiB, double(room) / kGiB);
  }
  return out;
}

void add_vram_budgets(const Model& model, const TierOptions& opts,
                      const placement::ExpertSizes& sizes, placement::Budgets& budgets,
                      placement::DefaultPolicy& policy) {
  // The VRAM store aligns each matrix to 256 bytes: plan with each budget scaled by the tightest
  // expert bytes / device footprint ratio, so the uploads fit the budget.
  const ModelConfig& cfg = model.config();
  std::vector<VramDevice> devices;
  if (!opts.vram_emulate)
    for (int d = 0; d < cuda::cuda_device_count(); ++d) {
      const cuda::DeviceMemory m = cuda::device_memory(d);
      devices.push_back({m.free, m.total});
    }
  uint64_t reserve = uint64_t{opts.gpu_max_rows} * 4 *
                     (2 * uint64_t{cfg.max_n_ff()} + 2 * uint64_t{cfg.n_embd} + 1) * 2;
  // What else the GPUs hold: every biased layer's expert biases (each device), CUDA_DENSE's
  // matrices (GPU 0; reserved on every device, conservatively).
  for (uint32_t l = 0; l < cfg.n_layer && l < model.weights().layers.size(); ++l) {
    const ExpertStack& st = model.weights().layers[l].experts;
    for (const WeightView* b : {&st.gate_bias, &st.up_bias, &st.down_bias})
      if (b->present()) reserve += b->n_bytes;
  }
  if (opts.cuda_dense > 0) reserve += gpu_dense_bytes(model);
  std::vector<uint64_t> vram = vram_budgets(opts.vram_gb, opts.vram_emulate, devices, reserve);
  uint64_t total_vram = 0;
  for (uint64_t b : vram) total_vram += b;
  if (total_vram > 0) {
    policy.vram_layers.assign(cfg.n_layer, 0);
    double ratio = 1.0;
    std::string off;  // layers kept off the GPU
    std::string why;
    for (uint32_t l = 0; l < cfg.n_layer; ++l) {
      if (!cfg.is_moe(l)) continue;
      const ExpertStack& stack = model.weights().layers[l].experts;
      std::string w;
      if (!gpu_stack_supported(stack, &w)) {
        off += fmt::format("{}{}", off.empty() ? "" : ",", l);
        if (why.empty()) why = w;
        continue;
      }
      policy.vram_layers[l] = 1;
      const ExpertSlice sl = stack.expert_slice(0);
      const auto fp = [](uint64_t b) { return (b + 255) / 256 * 256; };
      const uint64_t foot = fp(sl.gate.n_bytes) + fp(sl.up.n_bytes) + fp(sl.down.n_bytes);
      ratio =
          std::min(ratio, static_cast<double>(sizes.expert_bytes[l]) / static_cast<double>(foot));
    }
    if (!off.empty() && opts.notice)
      opts.notice(
          fmt::format("VRAM: MoE layer(s) {} stay off the GPU: the grouped kernel does "
                      "not run them ({})",
                      off, why));
    for (uint64_t& b : vram) b = static_cast<uint64_t>(std::floor(static_cast<double>(b) * ratio));
    budgets.vram_bytes = vram;
  }
}

std::unique_ptr<tiers::Sidecar> choose_sidecar(const Model& model,
                                               const tiers::ExtentTable& extents,
                                               const TierOptions& opts) {
  if (opts.zstd == "0") return nullptr;
  const bool forced = opts.zstd == "1";
  const std::string path =
      opts.sidecar_path.empty() ? model.file().path() + tiers::kSidecarSuffix : opts.sidecar_path;
  if (!std::filesystem::exists(path)) {
    if (forced)
      fail(ErrorKind::kNotFound,
           "knob ZSTD=1: no expert sidecar {} (write it with `strata pack -m {}`)", path,
           model.file().path());
    return nullptr;
  }
  std::unique_ptr<tiers::Sidecar> sc;
  double dec = 0;  // one thread's decompression GB/s, measured on the first frames
  try {
    sc = std::make_unique<tiers::Sidecar>(tiers::read_sidecar(path, extents));
    if (sc->fingerprint != tiers::model_fingerprint(model.file().parts()))
      fail(ErrorKind::kBadValue,
           "{}: the sidecar was packed from another model than {} (fingerprint differs); run "
           "`strata pack` again",
           path, model.file().path());
    dec = tiers::measure_decompress_gbps(*sc, 8);
  } catch (const Error& e) {
    if (forced) throw;
    if (opts.notice) opts.notice(fmt::format("zstd sidecar ignored: {}", e.what()));
    return nullptr;
  }
  const int threads = opts.decompress_threads > 0
                          ? opts.decompress_threads
                          : std::clamp(int(std::thread::hardware_concurrency()) / 2, 1, 4);
  const double ratio = sc->ratio();
  const double disk = opts.ssd_gbps;
  // Expert bytes per second either way: the disk alone, or the disk's compressed stream capped by
  // what the decompression workers keep up with.
  const double packed = std::min(disk * ratio, dec * threads);
  const bool pays = packed > disk * 1.05;
  if (opts.notice)
    opts.notice(fmt::format(
        "zstd sidecar {}: ratio {:.3f}; disk {:.2f} GB/s x ratio = {:.2f}, decompression {:.2f} "
        "GB/s x {} thread(s) = {:.2f} GB/s of experts vs {:.2f} from the model file: {}",
        path, ratio, disk, disk * ratio, dec, threads, dec * threads, disk,
        forced ? "used (ZSTD=1)"
        : pays ? "used"
               : "not used (ZSTD=1 forces it)"));
  if (!forced && !pays) return nullptr;
  return sc;
}

ExpertSource::ExpertSource(const Model& model) : model_(model) {}

ExpertSource::ExpertSource(const Model& model, const TierOptions& opts)
    : model_(model), prof_(opts.prof), usage_(opts.usage) {
  if (opts.cuda_dense > 0 && !opts.vram_emulate && cuda::cuda_device_count() == 0)
    fail(ErrorKind::kUnsupported,
         "knob CUDA_DENSE ({}): no usable CUDA device ({}); VRAM_EMULATE=1 emulates one for tests",
         knob_flag("CUDA_DENSE"), cuda::cuda_describe());
  const ModelConfig& cfg = model.config();
  tiers::ExtentTable extents = expert_extents(model);
  sidecar_ = choose_sidecar(model, extents, opts);
  const placement::ExpertSizes sizes =
      tiers::expert_sizes(extents, static_cast<int>(cfg.n_expert_used), sidecar_.get());
  if (opts.resident_dense) {
    const auto t0 = std::chrono::steady_clock::now();
    resident_bytes_ = make_resident(model.file(), extents);
    resident_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // The KV cache is allocated (and zeroed) by Forward later: a context that cannot fit is an
  // error here, not an OOM kill when its pages are touched.
  const uint64_t kv_bytes = KvCache::position_bytes(cfg, opts.kv_type) * uint64_t{opts.n_ctx};
  const uint64_t available = memory_info().available();
  if (kv_bytes > available)
    fail(ErrorKind::kOutOfMemory,
         "the KV cache of {} positions takes {} ({} each, KV_TYPE={}), more than the {} of "
         "memory available; lower --ctx{}",
         opts.n_ctx, placement::format_bytes(kv_bytes),
         placement::format_bytes(KvCache::position_bytes(cfg, opts.kv_type)),
         kv_type_name(opts.kv_type), placement::format_bytes(available),
         opts.kv_type == KvType::kF32 ? " or set KV_TYPE=f16 (half the bytes)" : "");
  if (sizes.total_experts() == 0) return;  // a dense model: nothing to tier

  placement::DefaultPolicy policy;
  if (opts.numa == tiers::NumaMode::kLocal) {
    policy.ram = placement::RamPlacement::kLocal;
    policy.n_nodes = tiers::numa_info().n_nodes;
  }
  const uint64_t min = placement::min_ram_bytes(sizes);
  const uint64_t all = placement::all_ram_bytes(sizes, policy);
  uint64_t budget = 0;
  if (opts.ram_bytes) {
    budget = *opts.ram_bytes;
    if (budget < min && budget < all)
      fail(ErrorKind::kBadValue,
           "knob RAM_GB ({}): {} GiB is below this model's minimum of {} GiB ({}: a RAM cache of "
           "{} slots of {}, two layers' top-{} experts, with every expert on SSD)",
           knob_flag("RAM_GB"), fmt::format("{:.4f}", static_cast<double>(budget) / kGiB),
           gib_up(min), placement::format_bytes(min), placement::min_cache_slots(sizes),
           placement::format_bytes(sizes.slot_bytes), sizes.n_expert_used);
  }
  RamBudgetInputs in;
  in.available = available;
  in.kv_bytes = kv_bytes;
  in.dense_bytes = opts.resident_dense ? 0 : model.file().file_size() - sizes.total_bytes();
  if (prof_) prof_->set_ram_fit_limit(std::max<uint64_t>(1, in.fit_limit()));
  if (opts.ram_bytes) {
    check_explicit_ram_budget(std::min(budget, all), in, sizes);
  } else {
    budget = auto_ram_budget(in, sizes);
    if (budget < min && budget < all)
      fail(ErrorKind::kOutOfMemory,
           "RAM_GB auto: {} of memory available leaves {} GiB for experts after the KV cache "
           "({} for {} positions) and headroom, below this model's minimum of {} GiB; free "
           "memory, lower --ctx or set RAM_GB",
           placement::format_bytes(in.available),
           fmt::format("{:.4f}", static_cast<double>(budget) / kGiB),
           placement::format_bytes(kv_bytes), opts.n_ctx, gib_up(min));
  }
  if (opts.cache_bytes) {
    if (placement::arena_round(*opts.cache_bytes) > budget && budget < all)
      fail(ErrorKind::kBadValue, "knob CACHE_GB ({}): {} GiB does not fit in RAM_GB ({} GiB)",
           knob_flag("CACHE_GB"),
           fmt::format("{:.4f}", static_cast<double>(*opts.cache_bytes) / kGiB),
           fmt::format("{:.4f}", static_cast<double>(budget) / kGiB));
    policy.cache_bytes = *opts.cache_bytes;
  }
  placement::Budgets budgets;
  budgets.ram_bytes = budget;

  add_vram_budgets(model, opts, sizes, budgets, policy);
  placement::PlacementPlan plan =
      placement::plan_placement(sizes, budgets, policy, opts.pin_counts);
  if (opts.on_plan) opts.on_plan(plan);
  if (plan.count(placement::HomeKind::kVram) > 0) {
    GpuLaneOptions lo;
    lo.emulate = opts.vram_emulate;
    lo.max_rows = std::max<uint32_t>(1, opts.gpu_max_rows);
    lane_ = std::make_unique<GpuLane>(model, plan, lo, opts.notice);
  }
  if (opts.cuda_dense > 0)
    dense_ =
        std::make_unique<GpuDense>(model, opts.vram_emulate, opts.cuda_dense >= 2, opts.notice);
  if (prof_) prof_->set_gpu_dense(dense_.get());

  homes_.resize(cfg.n_layer);
  size_t max_experts = 0;
  for (int l = 0; l < plan.n_layer(); ++l) {
    for (placement::Home h : plan.layer_homes(l)) homes_[l].push_back(engine_home(h));
    max_experts = std::max(max_experts, homes_[l].size());
  }
  ids_.reserve(max_experts);
  // PREFETCH has nothing to do when no expert lives on SSD (REPIN never makes one): no routers
  // run ahead then.
  prefetch_ = plan.count(placement::HomeKind::kSsd) > 0 ? std::max(0, opts.prefetch) : 0;
  if (prefetch_ > 0) {
    uint32_t max_n_expert = 1;
    for (uint32_t l = 0; l < cfg.n_layer; ++l)
      max_n_expert = std::max(max_n_expert, cfg.layer_n_expert(l));
    pf_x_.resize(cfg.n_embd);
    pf_probs_.resize(max_n_expert);
    pf_topk_.resize(cfg.max_n_expert_used());
    pf_weights_.resize(cfg.max_n_expert_used());
    pf_pool_ = std::make_unique<kernels::ThreadPool>(1, false);
  }
  repin_ = std::max(0, opts.repin);
  repin_moves_ = std::max(0, opts.repin_moves);
  layer_begin_.assign(cfg.n_layer + 1, 0);
  for (uint32_t l = 0; l < cfg.n_layer; ++l) {
    layer_begin_[l + 1] = layer_begin_[l] + static_cast<int64_t>(homes_[l].size());
    if (!homes_[l].empty()) last_moe_ = static_cast<int>(l);
    if (!homes_[l].empty() && first_moe_ < 0) first_moe_ = static_cast<int>(l);
  }
  prompt_place_ = opts.prompt_place && opts.pin_counts.empty() &&
                  plan.count(placement::HomeKind::kSsd) > 0 &&
                  plan.count(placement::HomeKind::kRam) > 0;
  if (prompt_place_) {
    prompt_count_.assign(layer_begin_.back(), 0);
    promote_.reserve(layer_begin_.back());
    demote_.reserve(layer_begin_.back());
  }
  if (repin_ > 0) {
    repin_decay_ = std::pow(0.5, repin_ / std::max(1e-9, opts.repin_half_life));
    score_.assign(layer_begin_.back(), 0.0);
    promote_.reserve(layer_begin_.back());
    demote_.reserve(layer_begin_.back());
    promote_jobs_.reserve(max_experts);
  }

  tiers::StoreOptions so;
  so.direct = opts.direct;
  so.uring = opts.uring;
  so.io_threads = opts.io_threads;
  so.queue_depth = opts.queue_depth;
  so.numa = opts.numa;
  so.faults = opts.faults;
  so.sidecar = sidecar_.get();
  so.decompress_threads = opts.decompress_threads > 0
                              ? opts.decompress_threads
                              : std::clamp(int(std::thread::hardware_concurrency()) / 2, 1, 4);
  if (opts.repack) {
    so.ram_layouts.resize(cfg.n_layer);
    for (uint32_t l = 0; l < cfg.n_layer; ++l) {
      const ExpertStack& st = model.weights().layers[l].experts;
      if (st.n_expert < 2) continue;
      const WeightView* views[3] = {&st.gate, &st.up, &st.down};
      for (int i = 0; i < 3; ++i) {
        const WeightView& v = *views[i];
        so.ram_layouts[l][i] = {kernels::interleave_pays(v.type)
                                    ? kernels::interleaved_layout(v.type, v.n_rows(), v.n_cols())
                                    : kernels::WeightLayout::kRows,
                                v.n_rows(), v.n_cols()};
      }
    }
  }
  tiers::StoreHooks hooks;
  hooks.notice = opts.notice;
  hooks.progress = opts.progress;
  // RAM homes are first touched by pinned workers laid out as the compute pool's (worker i on the
  // i-th physical core), each faulting an even share of every arena: with NUMA=off or local the
  // pages land on the nodes of the cores that compute, and the faulting runs in parallel.
  std::unique_ptr<kernels::ThreadPool> touch_pool;
  if (opts.touch_threads > 1) {
    touch_pool = std::make_unique<kernels::ThreadPool>(opts.touch_threads);
    hooks.first_touch = [pool = touch_pool.get()](std::span<std::byte> range) {
      constexpr size_t kChunk = size_t{2} << 20;  // one huge page
      const int64_t n = int64_t((range.size() + kChunk - 1) / kChunk);
      // No stealing: each share must be faulted by its own pinned worker (its NUMA node).
      pool->parallel_for(
          n, {},
          [&](int64_t begin, int64_t end, int) {
            const size_t lo = size_t(begin) * kChunk;
            const size_t hi = std::min(range.size(), size_t(end) * kChunk);
            tiers::touch_pages(range.subspan(lo, hi - lo));
          },
          /*steal=*/false);
    };
  }
  // The tiers store takes the plan as it is: VRAM homes are never loaded, read or cached there
  // (compute() hands them to the GPU lane, prefetch() filters them out), so they need no RAM cache
  // (a plan with VRAM and RAM homes only has none).
  plan_.emplace(plan);
  pf_ids_.reserve(max_experts);
  store_ = std::make_unique<tiers::ExpertStore>(model.file().parts(), std::move(extents),
                                                std::move(plan), so, hooks);
}

ExpertSource::~ExpertSource() = default;

void ExpertSource::recover() {
  if (lane_) lane_->abandon();
  if (store_) store_->recover();
  started_ = -1;
}

std::span<const ExpertHome> ExpertSource::layer_homes(uint32_t il) const {
  if (homes_.empty()) return {};
  return homes_[il];
}

void ExpertSource::fetch(uint32_t il, std::span<ExpertJob> jobs) {
  for (ExpertJob& job : jobs) {
    const tiers::ExpertView v = store_->get(static_cast<int>(il), static_cast<int>(job.expert));
    job.slice.gate.data = v.slice[tiers::kGate];
    job.slice.up.data = v.slice[tiers::kUp];
    job.slice.down.data = v.slice[tiers::kDown];
    job.slice.gate.layout = v.layout[tiers::kGate];
    job.slice.up.layout = v.layout[tiers::kUp];
    job.slice.down.layout = v.layout[tiers::kDown];
  }
}

void ExpertSource::record_usage(uint32_t il, const Dispatch& d) {
  // A chunk whose rows all belong to one token is a decode step.
  int32_t max_token = 0;
  bool one_token = true;
  for (uint32_t r = 0; r < d.n_rows; ++r) {
    max_token = std::max(max_token, d.row_token[r]);
    one_token = one_token && d.row_token[r] == d.row_token[0];
  }
  for (const std::vector<ExpertJob>& jobs : d.jobs)
    for (const ExpertJob& j : jobs)
      usage_->record(static_cast<int>(il), static_cast<int>(j.expert), j.row_end - j.row_begin,
                     one_token);
  if (static_cast<int>(il) == usage_->first_moe_layer() && d.n_rows > 0)
    usage_->add_tokens(static_cast<uint64_t>(max_token) + 1, one_token);
}

int ExpertSource::prefetch(uint32_t il, std::span<const int32_t> experts) {
  if (!store_ || homes_[il].empty()) return 0;
  static_assert(sizeof(int32_t) == sizeof(int));
  if (lane_) {  // VRAM homes are never read from the file
    pf_ids_.clear();
    for (int32_t e : experts)
      if (e >= 0 && size_t(e) < homes_[il].size() && homes_[il][e] != ExpertHome::kVram)
        pf_ids_.push_back(e);
    experts = pf_ids_;
  }
  return store_->prefetch(static_cast<int>(il),
                          {reinterpret_cast<const int*>(experts.data()), experts.size()});
}

void ExpertSource::prefetch_ahead(uint32_t il, const float* h, std::byte* xq_scratch) {
  if (prefetch_depth() == 0) return;
  double ignored = 0;
  const ScopedTimer t(prof_, prof_ ? prof_->counters().prefetch_seconds : ignored);
  const ModelConfig& cfg = model_.config();
  const uint32_t last = std::min(cfg.n_layer - 1, il + static_cast<uint32_t>(prefetch_));
  for (uint32_t m = il + 1; m <= last; ++m) {
    if (!cfg.is_moe(m) || homes_[m].empty()) continue;
    const LayerWeights& lm = model_.weights().layers[m];
    // arctic's experts read ffn_norm_exps of the layer's input: h stands in for it too.
    block_norm(cfg, h, cfg.moe_beside_dense ? lm.ffn_norm_exps : lm.ffn_norm, lm.ffn_norm_b,
               pf_x_.data());
    Routing r;
    r.n_tokens = 1;
    r.n_expert = cfg.layer_n_expert(m);
    r.k = cfg.layer_n_expert_used(m);
    r.probs = pf_probs_.data();
    r.topk = pf_topk_.data();
    r.weights = pf_weights_.data();
    route(*pf_pool_, cfg, lm, pf_x_.data(), r, xq_scratch);
    prefetch(m, {r.topk, r.k});
  }
}

void ExpertSource::repin_vram(uint32_t il, const Dispatch& d) {
  if (!lane_ || repin_left_ <= 0) return;
  promote_jobs_.clear();
  for (const ExpertJob& j : d.jobs[size_t(ExpertHome::kSsd)]) {
    const int64_t k = layer_begin_[il] + static_cast<int64_t>(j.expert);
    if (homes_[il][j.expert] == ExpertHome::kSsd && score_[k] >= kRepinMinScore &&
        store_->ready_in_cache(static_cast<int>(il), static_cast<int>(j.expert)))
      promote_jobs_.push_back(&j);
  }
  if (promote_jobs_.empty()) return;
  demote_.clear();
  for (size_t l = 0; l < homes_.size(); ++l)
    for (size_t e = 0; e < homes_[l].size(); ++e)
      if (homes_[l][e] == ExpertHome::kVram) demote_.push_back(layer_begin_[l] + int64_t(e));
  if (demote_.empty()) return;
  const auto key = [&](const ExpertJob* j) { return layer_begin_[il] + int64_t(j->expert); };
  std::sort(
      promote_jobs_.begin(), promote_jobs_.end(), [&](const ExpertJob* a, const ExpertJob* b) {
        return score_[key(a)] != score_[key(b)] ? score_[key(a)] > score_[key(b)] : key(a) < key(b);
      });
  const size_t nd = std::min(promote_jobs_.size(), demote_.size());
  std::partial_sort(
      demote_.begin(), demote_.begin() + nd, demote_.end(),
      [&](int64_t a, int64_t b) { return score_[a] != score_[b] ? score_[a] < score_[b] : a < b; });
  size_t di = 0;
  for (const ExpertJob* j : promote_jobs_) {
    if (repin_left_ <= 0 || di >= nd) break;
    const int64_t p = key(j);
    const int64_t dk = demote_[di];
    if (score_[p] < kRepinMargin * score_[dk] + kRepinMinScore) break;
    const auto dl = static_cast<uint32_t>(
        std::upper_bound(layer_begin_.begin(), layer_begin_.end(), dk) - layer_begin_.begin() - 1);
    const auto de = static_cast<uint32_t>(dk - layer_begin_[dl]);
    if (!lane_->swap(il, j->expert, j->slice, dl, de)) continue;  // larger than the incumbent
    store_->swap_vram_home(static_cast<int>(il), static_cast<int>(j->expert), static_cast<int>(dl),
                           static_cast<int>(de));
    homes_[il][j->expert] = ExpertHome::kVram;
    homes_[dl][de] = ExpertHome::kSsd;
    --repin_left_;
    ++di;
  }
}

void ExpertSource::repin_layer(uint32_t il) {
  if (repin_left_ <= 0) return;
  // Promotion candidates: layer il's SSD-homed experts still ready in the RAM cache (it just
  // computed them: no read is ever waited on), strongest first; incumbents: every layer's RAM
  // homes, weakest first.
  promote_.clear();
  demote_.clear();
  for (size_t e = 0; e < homes_[il].size(); ++e) {
    const int64_t k = layer_begin_[il] + static_cast<int64_t>(e);
    if (homes_[il][e] == ExpertHome::kSsd && score_[k] >= kRepinMinScore &&
        store_->ready_in_cache(static_cast<int>(il), static_cast<int>(e)))
      promote_.push_back(k);
  }
  if (promote_.empty()) return;
  for (size_t l = 0; l < homes_.size(); ++l)
    for (size_t e = 0; e < homes_[l].size(); ++e)
      if (homes_[l][e] == ExpertHome::kRam) demote_.push_back(layer_begin_[l] + int64_t(e));
  const size_t m = static_cast<size_t>(repin_left_);
  const auto by_score_desc = [&](int64_t a, int64_t b) {
    return score_[a] != score_[b] ? score_[a] > score_[b] : a < b;
  };
  const auto by_score_asc = [&](int64_t a, int64_t b) {
    return score_[a] != score_[b] ? score_[a] < score_[b] : a < b;
  };
  const size_t np = std::min(m, promote_.size());
  std::partial_sort(promote_.begin(), promote_.begin() + np, promote_.end(), by_score_desc);
  const size_t nd = std::min(promote_.size(), demote_.size());
  std::partial_sort(demote_.begin(), demote_.begin() + nd, demote_.end(), by_score_asc);
  const auto layer_of = [&](int64_t k) {
    return static_cast<int>(std::upper_bound(layer_begin_.begin(), layer_begin_.end(), k) -
                            layer_begin_.begin() - 1);
  };
  size_t moved = 0;
  size_t di = 0;
  for (size_t pi = 0; pi < promote_.size() && moved < m && di < nd; ++pi) {
    const int64_t p = promote_[pi];
    const int64_t dk = demote_[di];
    // Hysteresis: the candidate must beat the incumbent by the margin, so homes do not flap.
    if (score_[p] < kRepinMargin * score_[dk] + kRepinMinScore) break;
    const int pl = layer_of(p), dl = layer_of(dk);
    const int pe = static_cast<int>(p - layer_begin_[pl]),
              de = static_cast<int>(dk - layer_begin_[dl]);
    if (!store_->swap_homes(pl, pe, dl, de)) continue;  // does not fit this arena space
    homes_[pl][pe] = ExpertHome::kRam;
    homes_[dl][de] = ExpertHome::kSsd;
    ++moved;
    ++di;
  }
  repin_left_ -= static_cast<int>(moved);
}

void ExpertSource::start(uint32_t il, Dispatch& d) {
  std::vector<ExpertJob>& ram = d.jobs[size_t(ExpertHome::kRam)];
  std::vector<ExpertJob>& ssd = d.jobs[size_t(ExpertHome::kSsd)];
  const std::vector<ExpertJob>& vram = d.jobs[size_t(ExpertHome::kVram)];
  STRATA_ASSERT(vram.empty() || lane_, "VRAM homes without a GPU lane");
  started_ = static_cast<int>(il);
  ProfCounters* pc = prof_ ? &prof_->counters() : nullptr;
  if (pc) {
    pc->experts_computed[size_t(ExpertHome::kRam)] += ram.size();
    pc->experts_computed[size_t(ExpertHome::kSsd)] += ssd.size();
    pc->experts_computed[size_t(ExpertHome::kVram)] += vram.size();
  }
  if (usage_ && usage_->n_expert()[il] > 0) record_usage(il, d);
  if (!store_ || homes_[il].empty()) return;
  // A one-token chunk is a decode step (replay --ubatch 1 included).
  const bool one_token =
      d.n_rows > 0 && std::all_of(d.row_token.begin(), d.row_token.begin() + d.n_rows,
                                  [&](int32_t t) { return t == d.row_token[0]; });
  decode_step_ = one_token;
  if (prompt_place_) {
    if (!one_token) {  // a prompt (or a LOOKUP verify pass): count its selections
      for (const auto& jobs : d.jobs)
        for (const ExpertJob& j : jobs)
          prompt_count_[layer_begin_[il] + j.expert] += j.row_end - j.row_begin;
      // The largest chunk's tokens: a prompt's chunks reach kPromptPlaceMinTokens, LOOKUP's
      // verify passes (at most 17 tokens) never do.
      if (static_cast<int>(il) == first_moe_ && d.n_rows > 0)
        prompt_tokens_ = std::max<uint64_t>(
            prompt_tokens_,
            *std::max_element(d.row_token.begin(), d.row_token.begin() + d.n_rows) + 1);
    } else if (static_cast<int>(il) == first_moe_ && prompt_tokens_ > 0) {
      place_now_ = prompt_tokens_ >= kPromptPlaceMinTokens &&
                   (reply_hint_ < 0 || reply_hint_ >= kPromptPlaceMinReply);
      // No prompt-sized chunk (LOOKUP's verify passes), or a reply too short to repay the reads:
      // forget the counts (a later prompt may place).
      if (!place_now_) {
        std::fill(prompt_count_.begin(), prompt_count_.end(), 0u);
        prompt_tokens_ = 0;
      }
    }
  }
  if (one_token && repin_ > 0 && static_cast<int>(il) == first_moe_) {
    repin_now_ = ++repin_tokens_ % static_cast<uint64_t>(repin_) == 0;
    repin_left_ = repin_now_ ? repin_moves_ : 0;
    if (repin_now_) store_->note_repin_pass();
  }
  if (one_token) {
    if (prefetch_ > 0) {
      store_->note_needed(ssd.size());
      step0_ = store_->counters();
    }
    if (repin_ > 0)
      for (const auto& jobs : d.jobs)
        for (const ExpertJob& j : jobs) score_[layer_begin_[il] + j.expert] += 1.0;
  }
  if (!ssd.empty()) {
    const size_t group = std::max<size_t>(1, static_cast<size_t>(store_->plan().cache_slots()) / 2);
    ids_.clear();
    for (size_t j = 0; j < std::min(group, ssd.size()); ++j)
      ids_.push_back(static_cast<int>(ssd[j].expert));
    store_->prepare(static_cast<int>(il), ids_);
  }
}

void ExpertSource::compute(uint32_t il, const ExpertStack& stack, Dispatch& d, ExpertExecutor& cpu,
                           const float* x, float* y) {
  if (started_ != static_cast<int>(il)) start(il, d);
  started_ = -1;
  const int32_t* row_token = d.row_token.data();
  std::vector<ExpertJob>& ram = d.jobs[size_t(ExpertHome::kRam)];
  std::vector<ExpertJob>& ssd = d.jobs[size_t(ExpertHome::kSsd)];
  ProfCounters* pc = prof_ ? &prof_->counters() : nullptr;
  double ignored = 0;
  double& ram_seconds = pc ? pc->compute_seconds[size_t(ExpertHome::kRam)] : ignored;
  double& ssd_seconds = pc ? pc->compute_seconds[size_t(ExpertHome::kSsd)] : ignored;
  if (!store_ || homes_[il].empty()) {  // the mapping, or a dense FFN (resident)
    const ScopedTimer t(prof_, ram_seconds);
    cpu.compute(stack, ram, row_token, x, y);
    return;
  }

  const int layer = static_cast<int>(il);
  // Groups of SSD experts that fit the cache twice over: one computing, the next loading.
  const size_t group = std::max<size_t>(1, static_cast<size_t>(store_->plan().cache_slots()) / 2);
  const auto ids_of = [&](size_t begin) {
    ids_.clear();
    for (size_t j = begin; j < std::min(begin + group, ssd.size()); ++j)
      ids_.push_back(static_cast<int>(ssd[j].expert));
    return std::span<const int>(ids_);
  };
  // The GPU lane first: every device's group of this layer is launched before the CPU starts
  // (its rows of y are written at the join below).
  const bool gpu = lane_ && !d.jobs[size_t(ExpertHome::kVram)].empty();
  const bool timing = gpu && pc && prof_->enabled();
  std::chrono::steady_clock::time_point cpu0;
  if (gpu) {
    lane_->launch(il, stack, d, x);
    if (timing) cpu0 = std::chrono::steady_clock::now();
  }
  // The first group's reads went out in start(); RAM experts compute meanwhile.
  fetch(il, ram);
  {
    const ScopedTimer t(prof_, ram_seconds);
    cpu.compute(stack, ram, row_token, x, y);
  }
  for (size_t begin = 0; begin < ssd.size(); begin += group) {
    const size_t n = std::min(group, ssd.size() - begin);
    const std::span<ExpertJob> jobs(ssd.data() + begin, n);
    fetch(il, jobs);  // blocks until this group's reads are in (felt I/O wait)
    if (begin + n < ssd.size()) store_->prepare(layer, ids_of(begin + n));
    {
      const ScopedTimer t(prof_, ssd_seconds);
      cpu.compute(stack, jobs, row_token, x, y);
    }
    if (begin + n < ssd.size()) store_->release(layer, ids_of(begin));
  }
  if (gpu) {
    const double lane0 = lane_->lane_seconds();
    const double cpu =
        timing ? std::chrono::duration<double>(std::chrono::steady_clock::now() - cpu0).count()
               : 0.0;
    const double wait = lane_->join(y);
    if (timing) {
      const double dev = lane_->lane_seconds() - lane0;
      pc->compute_seconds[size_t(ExpertHome::kVram)] += wait;  // the GPU time the host felt
      pc->cpu_lane_seconds += cpu;
      pc->gpu_lane_seconds += dev;
      pc->gpu_join_wait_seconds += wait;
      pc->lane_layer_steps += 1;
      if (dev > cpu) pc->gpu_straggler_steps += 1;
    }
  }
  store_->release(layer);
  if (prefetch_ > 0 && decode_step_ && !ssd.empty()) {
    const tiers::StoreCounters& c = store_->counters();
    store_->note_decode_layer(c.cache_misses - step0_.cache_misses,
                              c.prefetch_used - step0_.prefetch_used,
                              c.io_wait_seconds - step0_.io_wait_seconds);
  }
  // REPIN on every REPIN-th decode step, between layers (no slot pinned by any layer): this
  // layer's experts just computed from the cache may take RAM homes; later layers' dispatch sees
  // the new homes. The counts decay once per pass, after the last MoE layer.
  if (repin_now_ && decode_step_) {
    repin_vram(il, d);
    repin_layer(il);
    if (layer == last_moe_) {
      for (double& v : score_) v *= repin_decay_;
      repin_now_ = false;
    }
  }
  // PROMPT_PLACE on the first decode step after a prompt, layer by layer (no slot pinned).
  if (place_now_ && decode_step_) {
    place_by_prompt(il);
    if (layer == last_moe_) {  // once: the first prompt's placement stays for the run
      place_now_ = false;
      prompt_place_ = false;
      prompt_count_ = {};
    }
  }
}

void ExpertSource::place_by_prompt(uint32_t il) {
  // Candidates: SSD homes the prompt used, most first; incumbents: RAM homes, least used first
  // (ties: the lower expert id first, so the result never depends on anything but the counts).
  promote_.clear();
  demote_.clear();
  const int64_t base = layer_begin_[il];
  for (size_t e = 0; e < homes_[il].size(); ++e) {
    const int64_t k = base + static_cast<int64_t>(e);
    if (homes_[il][e] == ExpertHome::kSsd && prompt_count_[k] > 0) promote_.push_back(k);
    if (homes_[il][e] == ExpertHome::kRam) demote_.push_back(k);
  }
  std::sort(promote_.begin(), promote_.end(), [&](int64_t a, int64_t b) {
    return prompt_count_[a] != prompt_count_[b] ? prompt_count_[a] > prompt_count_[b] : a < b;
  });
  std::sort(demote_.begin(), demote_.end(), [&](int64_t a, int64_t b) {
    return prompt_count_[a] != prompt_count_[b] ? prompt_count_[a] < prompt_count_[b] : a < b;
  });
  place_pairs_.clear();
  for (size_t i = 0; i < std::min(promote_.size(), demote_.size()); ++i) {
    const double p = prompt_count_[promote_[i]], q = prompt_count_[demote_[i]];
    if (p < kRepinMargin * q + kRepinMinScore) break;
    place_pairs_.emplace_back(static_cast<int>(promote_[i] - base),
                              static_cast<int>(demote_[i] - base));
  }
  store_->promote_homes(static_cast<int>(il), place_pairs_);  // counts the pass, even empty
  for (const auto& [p, q] : place_pairs_)  // the store may have refused some (no free slot)
    if (store_->home(static_cast<int>(il), p).kind == placement::HomeKind::kRam) {
      homes_[il][p] = ExpertHome::kRam;
      homes_[il][q] = ExpertHome::kSsd;
    }
}

}  // namespace strata::engine
