// The GPU lane (see gpu_lane.h). Tested by tests/test_gpu_lane.cpp.
#include "engine/gpu_lane.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "cuda/grouped.h"
#include "cuda/runtime.h"
#include "cuda/vram_store.h"
#include "engine/ops.h"
#include "io/check.h"
#include "placement/plan.h"

namespace strata::engine {
namespace {

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

uint64_t align_up(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

// Drops the page tables and page cache of an uploaded expert's file-backed pages (only the pages
// wholly inside the slice: the ones around it may be resident dense weights). Best effort.
void drop_pages(const ByteRange& r) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const auto b = reinterpret_cast<uintptr_t>(r.data);
  const uint64_t first = align_up(b, page);
  const uint64_t last = (b + r.n_bytes) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);  // NOLINT
}

}  // namespace

bool gpu_stack_supported(const ExpertStack& stack, std::string* why) {
  const auto no = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  for (const WeightView* b : {&stack.gate_bias, &stack.up_bias, &stack.down_bias})
    if (b->present() && b->type != GgmlType::F32)
      return no(fmt::format("expert bias type {}", ggml_type_name(b->type)));
  const std::pair<const WeightView*, const char*> mats[] = {
      {&stack.gate, "gate"}, {&stack.up, "up"}, {&stack.down, "down"}};
  for (const auto& [w, name] : mats)
    if (!cuda::grouped_supported(w->type))
      return no(fmt::format("type {} ({})", ggml_type_name(w->type), name));
  return true;
}

// One device: its expert copies and its executor (CUDA, or a host worker when emulated), and the
// per-launch batches (jobs renumbered to local rows and local tokens).
struct GpuLane::Device {
  struct Batch {
    std::vector<cuda::GroupedJob> jobs;
    std::vector<uint32_t> dst;       // [jobs] first dispatch row of each job in the layer's y
    std::vector<int32_t> row_token;  // [rows] local token of each local row
    std::vector<int32_t> tokens;     // [local tokens] the chunk's token index
    uint64_t bytes = 0;              // weight bytes the jobs read
    void clear() {
      jobs.clear();
      dst.clear();
      row_token.clear();
      tokens.clear();
      bytes = 0;
    }
  };

  int index = 0;
  bool emulate = false;
  cuda::ExpertShape shape;
  // CUDA
  std::unique_ptr<cuda::VramStore> vram;
  std::unique_ptr<cuda::GroupedExperts> exec;
  // Per layer with expert biases: [gate: n_expert x n_ff][up: n_expert x n_ff][down: n_expert x
  // n_embd] F32 on the device (every layer's, so REPIN may move any expert here).
  std::vector<cuda::DeviceBuffer> bias;
  // Emulated: the "device memory" (slots of 256-aligned matrices) and the worker.
  std::unique_ptr<std::byte, FreeDeleter> emu_mem;
  std::vector<cuda::ExpertWeights> emu_slots;
  std::vector<float> emu_x, emu_y;
  std::thread worker;
  std::mutex mu;
  std::condition_variable cv;
  bool go = false, done = true, stop = false;
  std::exception_ptr error;
  cuda::GroupedLayer emu_layer;
  double emu_seconds = 0;

  std::vector<Batch> batches;  // batches[0..n_batches) are this launch's
  size_t n_batches = 0;
  std::vector<uint32_t> tok_stamp, tok_local;  // [tokens] chunk token -> local token (by stamp)
  uint32_t stamp = 0;

  ~Device() {
    if (worker.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu);
        stop = true;
      }
      cv.notify_all();
      worker.join();
    }
  }

  void start_worker() {
    worker = std::thread([this] {
      for (;;) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go || stop; });
        if (stop) return;
        go = false;
        const cuda::GroupedLayer layer = emu_layer;
        lock.unlock();
        const auto t0 = std::chrono::steady_clock::now();
        std::exception_ptr err;
        try {
          cuda::grouped_forward_emulated(layer, emu_x.data(), emu_y.data());
        } catch (...) {
          err = std::current_exception();
        }
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        lock.lock();
        emu_seconds = s;
        error = err;
        done = true;
        cv.notify_all();
      }
    });
  }

  float* x_host() { return emulate ? emu_x.data() : exec->x_host(); }
  const float* y_host() const { return emulate ? emu_y.data() : exec->y_host(); }

  void launch(const cuda::GroupedLayer& layer) {
    if (!emulate) {
      exec->launch(layer);
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    emu_layer = layer;
    go = true;
    done = false;
    cv.notify_all();
  }

  // Returns the device time of the launch.
  double wait() {
    if (!emulate) {
      exec->wait();
      return exec->last_seconds();
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    if (error) std::rethrow_exception(std::exchange(error, nullptr));
    return emu_seconds;
  }
};

GpuLane::GpuLane(const Model& model, const placement::PlacementPlan& plan,
                 const GpuLaneOptions& opts, const tiers::NoticeFn& notice)
    : opts_(opts), model_(model) {
  const ModelConfig& cfg = model.config();
  const ModelWeights& w = model.weights();
  n_embd_ = cfg.n_embd;
  STRATA_ASSERT(opts_.max_rows > 0, "GPU lane: max_rows 0");
  where_.resize(cfg.n_layer);

  // Which devices, and what each holds.
  int n_dev = 0;
  int64_t max_ff = 0;
  std::vector<uint64_t> footprint;  // per device
  for (int l = 0; l < plan.n_layer(); ++l) {
    for (int e = 0; e < plan.n_expert(l); ++e) {
      const placement::Home h = plan.home(l, e);
      if (h.kind != placement::HomeKind::kVram) continue;
      const ExpertStack& stack = w.layers[l].experts;
      std::string why;
      if (!gpu_stack_supported(stack, &why))
        fail(ErrorKind::kUnsupported,
             "layer {} expert {} is homed in VRAM but the GPU kernel does not run this layer's "
             "experts ({})",
             l, e, why);
      n_dev = std::max(n_dev, h.index + 1);
      footprint.resize(static_cast<size_t>(n_dev), 0);
      const ExpertSlice s = stack.expert_slice(static_cast<uint32_t>(e));
      footprint[h.index] += cuda::VramStore::footprint(
          {s.gate.data, s.gate.n_bytes, s.up.data, s.up.n_bytes, s.down.data, s.down.n_bytes});
      max_ff = std::max(max_ff, stack.n_ff);
    }
  }
  if (n_dev == 0) return;
  if (!opts_.emulate && cuda::cuda_device_count() < n_dev)
    fail(ErrorKind::kUnsupported,
         "the plan homes experts on {} GPU(s) but {} usable: {} (VRAM_EMULATE=1 computes VRAM "
         "homes by the host emulation, for tests)",
         n_dev, cuda::cuda_device_count(), cuda::cuda_describe());

  for (int d = 0; d < n_dev; ++d) {
    auto dev = std::make_unique<Device>();
    dev->index = d;
    dev->emulate = opts_.emulate;
    GpuDeviceStats st;
    st.device = d;
    st.name = opts_.emulate ? std::string("emulated") : fmt::format("cuda:{}", d);
    if (opts_.emulate) {
      const size_t bytes = std::max<size_t>(footprint[d], cuda::VramStore::kAlign);
      dev->emu_mem.reset(
          static_cast<std::byte*>(std::aligned_alloc(cuda::VramStore::kAlign, bytes)));
      if (!dev->emu_mem) fail(ErrorKind::kOutOfMemory, "emulated VRAM: {} bytes", bytes);
      dev->emu_x.resize(size_t{opts_.max_rows} * n_embd_);
      dev->emu_y.resize(size_t{opts_.max_rows} * n_embd_);
      dev->start_worker();
    } else {
      dev->vram = std::make_unique<cuda::VramStore>(d, std::max<uint64_t>(footprint[d], 1));
      cuda::GroupedLimits lim;
      lim.device = d;
      lim.max_embd = n_embd_;
      lim.max_ff = max_ff;
      lim.max_tokens = opts_.max_rows;
      lim.max_rows = opts_.max_rows;
      dev->exec = std::make_unique<cuda::GroupedExperts>(lim);
    }
    dev->batches.resize(1);
    uint32_t max_experts = 1;
    for (uint32_t l = 0; l < cfg.n_layer; ++l)
      max_experts = std::max(max_experts, cfg.layer_n_expert(l));
    dev->batches[0].jobs.reserve(max_experts);
    dev->batches[0].dst.reserve(max_experts);
    dev->batches[0].row_token.reserve(opts_.max_rows);
    dev->batches[0].tokens.reserve(opts_.max_rows);
    dev->tok_stamp.assign(opts_.max_rows, 0);
    dev->tok_local.assign(opts_.max_rows, 0);
    devs_.push_back(std::move(dev));
    stats_.push_back(st);
  }

  // Expert biases: every device gets every biased layer's (small: 3 rows per expert).
  for (uint32_t l = 0; l < cfg.n_layer && l < w.layers.size(); ++l) {
    const ExpertStack& stack = w.layers[l].experts;
    if (!stack.gate_bias.present() && !stack.up_bias.present() && !stack.down_bias.present())
      continue;
    const uint32_t n_exp = cfg.layer_n_expert(l);
    const size_t ff = size_t{n_exp} * static_cast<size_t>(stack.n_ff);
    const size_t embd = size_t{n_exp} * static_cast<size_t>(stack.n_embd);
    for (auto& dev : devs_) {
      if (dev->emulate) continue;  // the emulation reads the mapped tensors
      dev->bias.resize(cfg.n_layer);
      cuda::set_device(dev->index);
      dev->bias[l] = cuda::DeviceBuffer(sizeof(float) * (2 * ff + embd));
      auto* base = dev->bias[l].as<float>();
      if (stack.gate_bias.present())
        cuda::copy_to_device(base, stack.gate_bias.f32(), sizeof(float) * ff);
      if (stack.up_bias.present())
        cuda::copy_to_device(base + ff, stack.up_bias.f32(), sizeof(float) * ff);
      if (stack.down_bias.present())
        cuda::copy_to_device(base + 2 * ff, stack.down_bias.f32(), sizeof(float) * embd);
    }
  }

  // Upload every VRAM-homed expert from the mapping.
  std::vector<uint64_t> emu_used(static_cast<size_t>(n_dev), 0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int l = 0; l < plan.n_layer(); ++l) {
    if (plan.n_expert(l) == 0) continue;
    where_[l].assign(static_cast<size_t>(plan.n_expert(l)), Where{});
    const ExpertStack& stack = w.layers[l].experts;
    for (int e = 0; e < plan.n_expert(l); ++e) {
      const placement::Home h = plan.home(l, e);
      if (h.kind != placement::HomeKind::kVram) continue;
      Device& dev = *devs_[h.index];
      const ExpertSlice s = stack.expert_slice(static_cast<uint32_t>(e));
      const cuda::HostExpert he{s.gate.data,  s.gate.n_bytes, s.up.data,
                                s.up.n_bytes, s.down.data,    s.down.n_bytes};
      int32_t slot = 0;
      if (dev.emulate) {
        std::byte* base = dev.emu_mem.get() + emu_used[h.index];
        const uint64_t g = align_up(s.gate.n_bytes, cuda::VramStore::kAlign);
        const uint64_t u = align_up(s.up.n_bytes, cuda::VramStore::kAlign);
        std::memcpy(base, s.gate.data, s.gate.n_bytes);
        std::memcpy(base + g, s.up.data, s.up.n_bytes);
        std::memcpy(base + g + u, s.down.data, s.down.n_bytes);
        emu_used[h.index] += cuda::VramStore::footprint(he);
        slot = static_cast<int32_t>(dev.emu_slots.size());
        dev.emu_slots.push_back({base, base + g, base + g + u});
      } else {
        slot = dev.vram->put(he);
        STRATA_ASSERT(slot != cuda::VramStore::kNoSlot, "VRAM store of {} bytes is full",
                      dev.vram->capacity());
      }
      where_[l][e] = Where{h.index, slot};
      stats_[h.index].resident_experts += 1;
      stats_[h.index].resident_bytes += s.n_bytes();
    }
  }
  for (auto& dev : devs_)
    if (dev->vram) dev->vram->sync();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& st : stats_) st.upload_seconds = secs;
  // The uploaded experts' file pages are not needed in RAM any more.
  for (int l = 0; l < plan.n_layer(); ++l)
    for (int e = 0; e < plan.n_expert(l); ++e)
      if (where_[l][e].device >= 0) {
        const ExpertSlice s = w.layers[l].experts.expert_slice(static_cast<uint32_t>(e));
        drop_pages(s.gate);
        drop_pages(s.up);
        drop_pages(s.down);
      }
  for (const io::FilePart& part : model.file().parts()) {
    if (const int fd = ::open(part.path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  }
  if (notice) {
    std::string line =
        fmt::format("GPU lane{}:", opts_.emulate ? " (VRAM_EMULATE: host emulation)" : "");
    for (const GpuDeviceStats& st : stats_)
      line += fmt::format(" GPU {} ({}): {} experts ({});", st.device, st.name, st.resident_experts,
                          placement::format_bytes(st.resident_bytes));
    notice(line + fmt::format(" uploaded in {:.2f} s", secs));
  }
}

GpuLane::~GpuLane() {
  // A launch still in flight reads buffers the devices own; wait before they go.
  abandon();
}

void GpuLane::abandon() {
  for (auto& dev : devs_) {
    if (dev->n_batches == 0) continue;
    try {
      dev->wait();  // the launch's first batch, the only one started
    } catch (...) {
    }
    dev->n_batches = 0;
  }
  in_flight_ = false;
  x_ = nullptr;
}

void GpuLane::launch(uint32_t il, const ExpertStack& stack, const Dispatch& d, const float* x) {
  STRATA_ASSERT(!in_flight_, "GPU lane: launch() before the previous join()");
  const std::vector<ExpertJob>& jobs = d.jobs[size_t(ExpertHome::kVram)];
  if (jobs.empty()) return;
  x_ = x;
  in_flight_ = true;
  cuda::ExpertShape shape;
  shape.n_embd = stack.n_embd;
  shape.n_ff = stack.n_ff;
  shape.gate_type = stack.gate.type;
  shape.up_type = stack.up.type;
  shape.down_type = stack.down.type;
  shape.activation =
      stack.activation == FfnActivation::kSwigluOai ? cuda::GroupedActivation::kSwigluOai
      : stack.activation == FfnActivation::kGeluGlu ? cuda::GroupedActivation::kGeluGlu
                                                    : cuda::GroupedActivation::kSiluGlu;
  const auto n_exp = static_cast<size_t>(model_.config().layer_n_expert(il));
  const auto ff = static_cast<size_t>(stack.n_ff);
  const auto embd = static_cast<size_t>(stack.n_embd);
  const uint32_t max_rows = opts_.max_rows;
  for (auto& dev : devs_) {
    dev->n_batches = 0;
    dev->shape = shape;
  }
  for (const ExpertJob& job : jobs) {
    STRATA_ASSERT(il < where_.size() && job.expert < where_[il].size(),
                  "GPU lane: layer {} expert {} has no VRAM copy", il, job.expert);
    const Where at = where_[il][job.expert];
    STRATA_ASSERT(at.device >= 0, "GPU lane: layer {} expert {} has no VRAM copy", il, job.expert);
    Device& dev = *devs_[at.device];
    const cuda::ExpertWeights wts =
        dev.emulate ? dev.emu_slots[at.slot] : dev.vram->weights(at.slot);
    const uint64_t bytes = stack.expert_slice(job.expert).n_bytes();
    for (uint32_t r = job.row_begin; r < job.row_end;) {
      if (dev.n_batches == 0 || dev.batches[dev.n_batches - 1].row_token.size() >= max_rows) {
        if (dev.batches.size() <= dev.n_batches) dev.batches.emplace_back();
        dev.batches[dev.n_batches].clear();
        ++dev.n_batches;
        ++dev.stamp;
      }
      Device::Batch& b = dev.batches[dev.n_batches - 1];
      const uint32_t take =
          std::min<uint32_t>(job.row_end - r, max_rows - static_cast<uint32_t>(b.row_token.size()));
      const auto local0 = static_cast<uint32_t>(b.row_token.size());
      cuda::GroupedJob gj;
      gj.w = wts;
      gj.row_begin = local0;
      gj.row_end = local0 + take;
      // Biases: the mapped tensors (emulated) or the device's copy of the layer's.
      const float* bias_base = !dev.emulate && il < dev.bias.size() && dev.bias[il].data()
                                   ? dev.bias[il].as<float>()
                                   : nullptr;
      const auto bias_of = [&](const WeightView& v, size_t off, size_t width) -> const float* {
        if (!v.present()) return nullptr;
        if (dev.emulate) return v.f32() + job.expert * width;
        STRATA_ASSERT(bias_base != nullptr, "GPU lane: layer {} biases not on device", il);
        return bias_base + off + job.expert * width;
      };
      gj.gate_bias = bias_of(stack.gate_bias, 0, ff);
      gj.up_bias = bias_of(stack.up_bias, n_exp * ff, ff);
      gj.down_bias = bias_of(stack.down_bias, 2 * n_exp * ff, embd);
      b.jobs.push_back(gj);
      b.dst.push_back(r);
      b.bytes += bytes;
      for (uint32_t k = r; k < r + take; ++k) {
        const auto t = static_cast<uint32_t>(d.row_token[k]);
        if (t >= dev.tok_stamp.size()) {  // a chunk with more tokens than planned rows
          dev.tok_stamp.resize(t + 1, 0);
          dev.tok_local.resize(t + 1, 0);
        }
        if (dev.tok_stamp[t] != dev.stamp) {
          dev.tok_stamp[t] = dev.stamp;
          dev.tok_local[t] = static_cast<uint32_t>(b.tokens.size());
          b.tokens.push_back(static_cast<int32_t>(t));
        }
        b.row_token.push_back(static_cast<int32_t>(dev.tok_local[t]));
      }
      r += take;
    }
  }
  // Every device's first launch goes out before the caller's CPU work.
  for (size_t i = 0; i < devs_.size(); ++i)
    if (devs_[i]->n_batches > 0) run_batch(i, 0, nullptr);
}

// Launches batch b of device i (y == nullptr), or waits for it and copies its rows into y.
void GpuLane::run_batch(size_t i, size_t b, float* y) {
  Device& dev = *devs_[i];
  const Device::Batch& batch = dev.batches[b];
  if (y == nullptr) {
    float* xh = dev.x_host();
    for (size_t t = 0; t < batch.tokens.size(); ++t)
      std::memcpy(xh + t * n_embd_, x_ + size_t(batch.tokens[t]) * n_embd_,
                  sizeof(float) * n_embd_);
    cuda::GroupedLayer layer;
    layer.shape = dev.shape;
    layer.jobs = batch.jobs.data();
    layer.n_jobs = static_cast<uint32_t>(batch.jobs.size());
    layer.row_token = batch.row_token.data();
    layer.n_rows = static_cast<uint32_t>(batch.row_token.size());
    layer.n_tokens = static_cast<uint32_t>(batch.tokens.size());
    dev.launch(layer);
    return;
  }
  const double secs = dev.wait();
  const float* yh = dev.y_host();
  for (size_t j = 0; j < batch.jobs.size(); ++j) {
    const cuda::GroupedJob& job = batch.jobs[j];
    std::memcpy(y + size_t(batch.dst[j]) * n_embd_, yh + size_t(job.row_begin) * n_embd_,
                sizeof(float) * n_embd_ * (job.row_end - job.row_begin));
  }
  GpuDeviceStats& st = stats_[i];
  st.launches += 1;
  st.experts += batch.jobs.size();
  st.rows += batch.row_token.size();
  st.bytes_read += batch.bytes;
  st.kernel_seconds += secs;
}

bool GpuLane::swap(uint32_t pl, uint32_t pe, const ExpertSlice& bytes, uint32_t dl, uint32_t de) {
  STRATA_ASSERT(!in_flight_, "GPU lane: swap() while a launch is in flight");
  if (!resident(dl, de) || pl >= where_.size() || pe >= where_[pl].size() || resident(pl, pe))
    return false;
  const Where at = where_[dl][de];
  Device& dev = *devs_[at.device];
  const cuda::HostExpert he{bytes.gate.data,  bytes.gate.n_bytes, bytes.up.data,
                            bytes.up.n_bytes, bytes.down.data,    bytes.down.n_bytes};
  const ExpertSlice old = model_.weights().layers[dl].experts.expert_slice(de);
  const cuda::HostExpert ho{old.gate.data,  old.gate.n_bytes, old.up.data,
                            old.up.n_bytes, old.down.data,    old.down.n_bytes};
  if (cuda::VramStore::footprint(he) > cuda::VramStore::footprint(ho)) return false;
  int32_t slot = at.slot;
  if (dev.emulate) {  // the same matrix offsets inside the incumbent's region
    const cuda::ExpertWeights w = dev.emu_slots[at.slot];
    auto* base = static_cast<std::byte*>(const_cast<void*>(w.gate));
    const uint64_t g = align_up(bytes.gate.n_bytes, cuda::VramStore::kAlign);
    const uint64_t u = align_up(bytes.up.n_bytes, cuda::VramStore::kAlign);
    std::memcpy(base, bytes.gate.data, bytes.gate.n_bytes);
    std::memcpy(base + g, bytes.up.data, bytes.up.n_bytes);
    std::memcpy(base + g + u, bytes.down.data, bytes.down.n_bytes);
    dev.emu_slots[at.slot] = {base, base + g, base + g + u};
  } else {
    dev.vram->release(at.slot);
    slot = dev.vram->put(he);
    STRATA_ASSERT(slot != cuda::VramStore::kNoSlot, "VRAM slot of a smaller expert refused");
    dev.vram->sync();
  }
  where_[dl][de] = Where{};
  where_[pl][pe] = Where{at.device, slot};
  GpuDeviceStats& st = stats_[at.device];
  st.resident_bytes = st.resident_bytes - old.n_bytes() + bytes.n_bytes();
  st.repin_moves += 1;
  return true;
}

double GpuLane::join(float* y) {
  if (!in_flight_) return 0;
  in_flight_ = false;
  const auto t0 = std::chrono::steady_clock::now();
  double slowest = 0;
  std::exception_ptr err;
  for (size_t i = 0; i < devs_.size(); ++i) {
    Device& dev = *devs_[i];
    if (dev.n_batches == 0) continue;
    const double before = stats_[i].kernel_seconds;
    try {
      run_batch(i, 0, y);
      for (size_t b = 1; b < dev.n_batches; ++b) {
        run_batch(i, b, nullptr);
        run_batch(i, b, y);
      }
    } catch (...) {
      if (!err) err = std::current_exception();  // the other devices are still waited for
    }
    dev.n_batches = 0;
    slowest = std::max(slowest, stats_[i].kernel_seconds - before);
  }
  x_ = nullptr;
  if (err) std::rethrow_exception(err);
  lane_seconds_ += slowest;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

namespace {

int64_t dense_max_cols(const ModelConfig& cfg) {
  int64_t c = std::max<int64_t>(cfg.n_embd, cfg.max_n_ff());  // an FFN's down reads n_ff
  for (uint32_t l = 0; l < cfg.n_layer; ++l)
    c = std::max<int64_t>(c, int64_t{cfg.n_head(l)} * cfg.head_dim_v);
  return c;
}

int64_t dense_max_out(const ModelConfig& cfg) {
  int64_t o = cfg.n_vocab;
  for (uint32_t l = 0; l < cfg.n_layer; ++l)
    o = std::max<int64_t>(o, int64_t{cfg.n_embd_q(l)} + cfg.n_embd_k_gqa(l) + cfg.n_embd_v_gqa(l));
  o = std::max<int64_t>(o, 2 * int64_t{cfg.max_n_ff()});  // an FFN's gate and up in one call
  return std::max<int64_t>(o, cfg.n_embd);
}

cuda::DenseMatrix dense_of(const WeightView& w) {
  const MatrixRef m = w.matrix();
  return cuda::DenseMatrix{m.type, m.data, m.n_rows, m.n_cols};
}

// The matrices GpuDense takes: GQA projections and the output head of a type the kernel has, in
// the file's layout (REPACK interleaves the CPU's copies only after the upload).
bool dense_takes(const WeightView& w) {
  return w.present() && w.layout == kernels::WeightLayout::kRows &&
         cuda::dense_gemv_supported(w.type, w.n_cols());
}

// The FFNs that are not routed (a dense FFN, a shared expert): one expert, no biases, all three
// matrices of a type the kernel takes (else the whole FFN stays on the CPU).
bool ffn_takes(const ExpertStack& s) {
  return s.n_expert == 1 && !s.gate_bias.present() && !s.up_bias.present() &&
         !s.down_bias.present() && dense_takes(s.gate) && dense_takes(s.up) && dense_takes(s.down);
}

// Layer l's FFN `which` (GpuDense::Ffn), or null when the layer has none.
const ExpertStack* ffn_stack(const ModelConfig& cfg, const LayerWeights& lw, uint32_t l,
                             int which) {
  const ExpertStack* s = which == 0 ? (cfg.is_moe(l) ? nullptr : &lw.experts) : &lw.shared;
  return s != nullptr && s->n_expert > 0 ? s : nullptr;
}

}  // namespace

uint64_t gpu_dense_bytes(const Model& model) {
  const ModelConfig& cfg = model.config();
  const ModelWeights& w = model.weights();
  uint64_t bytes = dense_takes(w.output) ? w.output.n_bytes : 0;
  if (!cfg.is_mla())
    for (uint32_t l = 0; l < cfg.n_layer && l < w.layers.size(); ++l)
      for (const WeightView* v :
           {&w.layers[l].wq, &w.layers[l].wk, &w.layers[l].wv, &w.layers[l].wo})
        if (dense_takes(*v)) bytes += v->n_bytes;
  for (uint32_t l = 0; l < cfg.n_layer && l < w.layers.size(); ++l)
    for (int f = 0; f < 2; ++f)
      if (const ExpertStack* s = ffn_stack(cfg, w.layers[l], l, f); s && ffn_takes(*s))
        bytes += s->gate.n_bytes + s->up.n_bytes + s->down.n_bytes;
  return bytes;
}

GpuDense::GpuDense(const Model& model, bool emulate, bool prefill, const tiers::NoticeFn& notice)
    : gemv_(0, emulate, dense_max_cols(model.config()), dense_max_out(model.config())),
      prefill_(prefill) {
  const ModelConfig& cfg = model.config();
  const ModelWeights& w = model.weights();
  ids_.assign(cfg.n_layer, {-1, -1, -1, -1});
  ffn_.assign(cfg.n_layer, {});
  call_.reserve(4);
  size_t cpu = 0, ffn_cpu = 0;
  if (!cfg.is_mla())
    for (uint32_t l = 0; l < cfg.n_layer && l < w.layers.size(); ++l) {
      const LayerWeights& lw = w.layers[l];
      const WeightView* views[4] = {&lw.wq, &lw.wk, &lw.wv, &lw.wo};
      for (int p = 0; p < 4; ++p) {
        if (!views[p]->present()) continue;
        if (dense_takes(*views[p])) ids_[l][p] = gemv_.add(dense_of(*views[p]));
        cpu += ids_[l][p] < 0;
      }
    }
  int64_t max_n_ff = 0;
  for (uint32_t l = 0; l < cfg.n_layer && l < w.layers.size(); ++l)
    for (int f = 0; f < 2; ++f) {
      const ExpertStack* s = ffn_stack(cfg, w.layers[l], l, f);
      if (s == nullptr) continue;
      if (!ffn_takes(*s)) {
        ++ffn_cpu;
        continue;
      }
      FfnIds& ids = ffn_[l][f];
      ids.gate_up[0] = gemv_.add(dense_of(s->gate));
      ids.gate_up[1] = gemv_.add(dense_of(s->up));
      ids.down = gemv_.add(dense_of(s->down));
      ids.n_ff = s->n_ff;
      ids.activation = s->activation;
      ids.gemm = cuda::dense_gemm_supported(s->gate.type) &&
                 cuda::dense_gemm_supported(s->up.type) && cuda::dense_gemm_supported(s->down.type);
      max_n_ff = std::max(max_n_ff, s->n_ff);
      ++n_ffns_;
    }
  gate_.resize(static_cast<size_t>(max_n_ff));
  up_.resize(static_cast<size_t>(max_n_ff));
  if (dense_takes(w.output)) output_ = gemv_.add(dense_of(w.output));
  if (notice)
    notice(fmt::format(
        "CUDA_DENSE{}: {} dense matrices ({}) on GPU 0 for decode{}{}{}{}{}",
        emulate ? " (VRAM_EMULATE: host emulation)" : "", gemv_.n_matrices(),
        placement::format_bytes(gemv_.bytes()),
        n_ffns_ > 0 ? fmt::format(" (with {} dense / shared-expert FFNs)", n_ffns_) : "",
        prefill ? " and prefill (cuBLASLt GEMMs: not bit-identical)" : "",
        cpu > 0 ? fmt::format("; {} of other types stay on the CPU", cpu) : "",
        ffn_cpu > 0 ? fmt::format("; {} FFNs stay on the CPU (types or biases)", ffn_cpu) : "",
        output_ < 0 ? "; the output head stays on the CPU" : ""));
}

bool GpuDense::project(uint32_t il, std::span<const Proj> which, const float* x, uint32_t n_tokens,
                       float* const* ys) {
  if (il >= ids_.size() || n_tokens == 0 || (n_tokens > 1 && !prefill_)) return false;
  call_.clear();
  for (Proj p : which) {
    if (ids_[il][p] < 0) return false;
    call_.push_back(ids_[il][p]);
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (n_tokens == 1)
    gemv_.gemv(call_, x, ys);
  else if (!gemv_.gemm(call_, x, n_tokens, ys))
    return false;
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++calls_;
  return true;
}

bool GpuDense::ffn(uint32_t il, Ffn which, const float* x, uint32_t n_tokens, float* y) {
  if (il >= ffn_.size() || ffn_[il][which].down < 0 || n_tokens == 0) return false;
  const FfnIds& f = ffn_[il][which];
  if (n_tokens > 1 && (!prefill_ || !f.gemm)) return false;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n_h = size_t{n_tokens} * static_cast<size_t>(f.n_ff);
  if (gate_.size() < n_h) {  // a prefill chunk (decode never grows them)
    gate_.resize(n_h);
    up_.resize(n_h);
  }
  float* const gate_up[] = {gate_.data(), up_.data()};
  if (n_tokens == 1)
    gemv_.gemv(f.gate_up, x, gate_up);
  else
    gemv_.gemm(f.gate_up, x, n_tokens, gate_up);  // types checked at construction
  // The CPU executor's activation call (Stage C of CpuExpertExecutor::compute), in place; it is
  // elementwise, so a chunk's rows go in one call.
  glu(f.activation, gate_.data(), up_.data(), gate_.data(), static_cast<int64_t>(n_h));
  if (n_tokens == 1)
    gemv_.gemv({&f.down, 1}, gate_.data(), &y);
  else
    gemv_.gemm({&f.down, 1}, gate_.data(), n_tokens, &y);
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  calls_ += 2;
  return true;
}

bool GpuDense::output(const float* x, float* logits) {
  if (output_ < 0) return false;
  const auto t0 = std::chrono::steady_clock::now();
  gemv_.gemv({&output_, 1}, x, &logits);
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++calls_;
  return true;
}

}  // namespace strata::engine
