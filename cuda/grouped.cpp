// Host side of cuda/grouped.h (g++ with the CUDA runtime API): argument checks, the tiling of each
// stage, the per-device buffers (pinned activations, device scratch), the copies and the event.
// The kernels are in grouped.cu. Tested by tests/test_cuda_grouped.cpp; measured by
// bench/bench_gpu_grouped.cpp.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/blaslt.h"
#include "cuda/cuda_check.h"
#include "cuda/dense.h"
#include "cuda/dequant.h"
#include "cuda/expert_math.h"
#include "cuda/grouped.h"
#include "cuda/grouped_launch.h"
#include "cuda/runtime.h"
#include "io/check.h"
#include "kernels/gelu.h"

namespace strata::cuda {
namespace {

using detail::StageParams;

// A tile of weight rows aims at this many bytes (enough in flight per block), and never exceeds
// the second (very long rows get fewer rows than a block has row teams).
constexpr int64_t kTileTarget = 24 << 10;
constexpr int64_t kTileMax = 96 << 10;
constexpr uint32_t kMaxTokChunk = 8;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
int64_t round16(int64_t a) {
  return (a + 15) & ~int64_t{15};
}

struct TypeFacts {
  int threads = 0;    // Dot<T>::kThreads
  int act_block = 0;  // Dot<T>::kActBlock
  int elems = 0;      // Dot<T>::kElems
};

TypeFacts type_facts(GgmlType t) {
  TypeFacts f;
  const bool ok = detail::dispatch_grouped(t, [&](auto tag) {
    using D = detail::Dot<decltype(tag)::kType>;
    f = TypeFacts{D::kThreads, D::kActBlock, D::kElems};
  });
  if (!ok)
    fail(ErrorKind::kUnsupported, "grouped experts: no CUDA kernel for type {}", ggml_type_name(t));
  return f;
}

// Tile rows and token chunk of one stage: tiles of about kTileTarget bytes, whole passes of the
// block's row teams, at least two blocks per SM when the work allows.
void plan_stage(GgmlType t, int64_t n_out, int64_t n_in, uint32_t max_job_rows, int n_jobs,
                int n_mats, int sm_count, uint32_t smem_max, StageParams* p, uint32_t* grid,
                uint32_t* smem) {
  const TypeFacts f = type_facts(t);
  const int64_t row_bytes = static_cast<int64_t>(ggml_row_bytes(t, n_in));
  const int64_t per_pass = (detail::kStageThreads / 32) * (32 / (8 * f.threads));
  int64_t rows = per_pass * std::max<int64_t>(1, kTileTarget / (per_pass * row_bytes));
  if (rows * row_bytes > kTileMax) rows = std::max<int64_t>(1, kTileMax / row_bytes);
  const auto blocks = [&](int64_t r) { return int64_t{n_jobs} * n_mats * ceil_div(n_out, r); };
  while (rows > per_pass && blocks(rows) < 2 * int64_t{sm_count})
    rows = std::max(per_pass, rows / 2 / per_pass * per_pass);
  rows = std::min(rows, n_out);

  const uint32_t act_bytes = detail::act_area_bytes(n_in, f.act_block);
  const auto tile_bytes = static_cast<uint32_t>(round16(rows * row_bytes + 16));
  uint32_t tok_chunk = std::clamp<uint32_t>(max_job_rows, 1, kMaxTokChunk);
  while (tok_chunk > 1 && tile_bytes + tok_chunk * act_bytes > smem_max) --tok_chunk;
  const uint32_t bytes = tile_bytes + tok_chunk * act_bytes;
  if (bytes > smem_max)
    fail(ErrorKind::kUnsupported,
         "grouped experts: {} rows of {} columns need {} bytes of shared memory per block, the "
         "device allows {}",
         ggml_type_name(t), n_in, bytes, smem_max);

  p->rows_per_tile = static_cast<int32_t>(rows);
  p->tiles_per_mat = static_cast<int32_t>(ceil_div(n_out, rows));
  p->tok_chunk = static_cast<int32_t>(tok_chunk);
  p->tile_bytes = tile_bytes;
  p->act_bytes = act_bytes;
  p->n_out = n_out;
  p->n_in = n_in;
  p->row_bytes = row_bytes;
  *grid = static_cast<uint32_t>(blocks(rows));
  *smem = bytes;
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// Shapes, types, limits and job ranges; weights must be 16-byte aligned device pointers.
void check_layer(const GroupedLayer& l, const GroupedLimits& lim) {
  const ExpertShape& s = l.shape;
  for (GgmlType t : {s.gate_type, s.up_type, s.down_type}) type_facts(t);  // throws if unsupported
  STRATA_ASSERT(s.n_embd > 0 && s.n_ff > 0, "n_embd={} n_ff={}", s.n_embd, s.n_ff);
  STRATA_ASSERT(
      s.n_embd % type_facts(s.gate_type).elems == 0 && s.n_embd % type_facts(s.up_type).elems == 0,
      "n_embd={} is not a multiple of the gate/up block", s.n_embd);
  STRATA_ASSERT(s.n_ff % type_facts(s.down_type).elems == 0,
                "n_ff={} is not a multiple of the down block", s.n_ff);
  STRATA_ASSERT(s.n_embd <= lim.max_embd && s.n_ff <= lim.max_ff,
                "layer {}x{} exceeds the context's {}x{}", s.n_embd, s.n_ff, lim.max_embd,
                lim.max_ff);
  STRATA_ASSERT(l.n_rows <= lim.max_rows && l.n_tokens <= lim.max_tokens,
                "{} rows / {} tokens exceed the context's {} / {}", l.n_rows, l.n_tokens,
                lim.max_rows, lim.max_tokens);
  STRATA_ASSERT(l.n_jobs == 0 || l.jobs != nullptr, "null job list");
  for (uint32_t j = 0; j < l.n_jobs; ++j) {
    const GroupedJob& job = l.jobs[j];
    STRATA_ASSERT(job.row_begin <= job.row_end && job.row_end <= l.n_rows,
                  "job {}: rows [{}, {}) of {}", j, job.row_begin, job.row_end, l.n_rows);
    if (job.row_begin == job.row_end) continue;
    STRATA_ASSERT(aligned16(job.w.gate) && aligned16(job.w.up) && aligned16(job.w.down) &&
                      job.w.gate != nullptr && job.w.up != nullptr && job.w.down != nullptr,
                  "job {}: weights must be non-null and 16-byte aligned", j);
  }
}

}  // namespace

struct GroupedExperts::Impl {
  GroupedLimits lim;
  int sm_count = 0;
  uint32_t smem_max = 0;
  bool overlap = false;         // lim.overlap_launches on a device that has it (sm_90+)
  size_t x_bytes_max = 0;       // the x part of the input buffers
  Stream stream;                // created after the device is selected (see the constructor)
  DeviceBuffer in;              // [x: max_tokens * max_embd floats][row_token: max_rows int32]
  DeviceBuffer gate;            // [max_rows, max_ff]
  DeviceBuffer up;              // [max_rows, max_ff]
  DeviceBuffer y;               // [max_rows, max_embd]
  DeviceBuffer gelu;            // kernels::gelu_table (grok's GELU experts), 256 KiB
  PinnedBuffer in_host;         // the layout of `in`
  PinnedBuffer y_host;          // the layout of `y`
  cudaEvent_t done = nullptr;   // recorded after the last launch's work
  cudaEvent_t start = nullptr;  // recorded before launch()'s first copy
  bool timed = false;           // the last launch recorded start
  double seconds = 0;           // device time of the last waited launch()
  cudaStream_t last_stream = nullptr;
  bool in_flight = false;             // done not yet waited for
  bool pinned_in_flight = false;      // ... and that launch uses the pinned buffers
  std::vector<GroupedJob> live_jobs;  // enqueue()'s scratch

  explicit Impl(const GroupedLimits& l)
      : lim(l),
        x_bytes_max(static_cast<size_t>(round16(int64_t{l.max_tokens} * l.max_embd * 4))),
        stream(),
        in(x_bytes_max + size_t{l.max_rows} * 4),
        gate(size_t{l.max_rows} * static_cast<size_t>(l.max_ff) * 4),
        up(size_t{l.max_rows} * static_cast<size_t>(l.max_ff) * 4),
        y(size_t{l.max_rows} * static_cast<size_t>(l.max_embd) * 4),
        gelu(size_t{kernels::kGeluTableSize} * 4),
        in_host(in.bytes()),
        y_host(y.bytes()) {
    CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, l.device));
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, l.device));
    smem_max = static_cast<uint32_t>(optin);
    int major = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, l.device));
    overlap = l.overlap_launches && major >= 9;
    CUDA_CHECK(cudaEventCreate(&done));
    CUDA_CHECK(cudaEventCreate(&start));
    copy_to_device(gelu.data(), kernels::gelu_table(), gelu.bytes());
  }
  ~Impl() {
    if (done != nullptr) {
      cudaEventSynchronize(done);  // buffers must outlive the work that uses them
      cudaEventDestroy(done);
    }
    if (start != nullptr) cudaEventDestroy(start);
  }

  // One stage over jobs[first, first + count): matrices of n_out rows and n_in columns; p holds
  // the stage's inputs, outputs and matrix range.
  void run_stage(GgmlType t, bool down, int64_t n_out, int64_t n_in,
                 const std::vector<GroupedJob>& jobs, size_t first, size_t count, StageParams& p,
                 cudaStream_t s) {
    uint32_t max_job_rows = 1;
    for (size_t j = 0; j < count; ++j) {
      const GroupedJob& job = jobs[first + j];
      p.jobs[j] = detail::StageJob{
          {static_cast<const uint8_t*>(job.w.gate), static_cast<const uint8_t*>(job.w.up),
           static_cast<const uint8_t*>(job.w.down)},
          {job.gate_bias, job.up_bias, job.down_bias},
          job.row_begin,
          job.row_end - job.row_begin};
      max_job_rows = std::max(max_job_rows, job.row_end - job.row_begin);
    }
    p.n_jobs = static_cast<int32_t>(count);
    uint32_t grid = 0, smem = 0;
    plan_stage(t, n_out, n_in, max_job_rows, static_cast<int>(count), p.n_mats, sm_count, smem_max,
               &p, &grid, &smem);
    detail::launch_stage(t, down, p, grid, smem, overlap, s);
  }

  // Every stage of the layer on stream s: gate and up of all jobs, then down of all jobs.
  void enqueue(const GroupedLayer& l, const float* dev_x, const int32_t* dev_rows, float* dev_y,
               cudaStream_t s, bool gate_up_only = false) {
    // The non-empty jobs; live_jobs keeps its capacity, so steady decode does not allocate.
    live_jobs.clear();
    for (uint32_t j = 0; j < l.n_jobs; ++j)
      if (l.jobs[j].row_end > l.jobs[j].row_begin) live_jobs.push_back(l.jobs[j]);
    const ExpertShape& sh = l.shape;
    StageParams p{};
    p.x = dev_x;
    p.row_token = dev_rows;
    p.out[0] = gate.as<float>();
    p.out[1] = up.as<float>();
    for (size_t first = 0; first < live_jobs.size(); first += detail::kMaxJobsPerStage) {
      const size_t count = std::min<size_t>(detail::kMaxJobsPerStage, live_jobs.size() - first);
      if (sh.gate_type == sh.up_type) {
        p.mat_begin = 0;
        p.n_mats = 2;
        run_stage(sh.gate_type, false, sh.n_ff, sh.n_embd, live_jobs, first, count, p, s);
      } else {  // one launch per type
        p.n_mats = 1;
        p.mat_begin = 0;
        run_stage(sh.gate_type, false, sh.n_ff, sh.n_embd, live_jobs, first, count, p, s);
        p.mat_begin = 1;
        run_stage(sh.up_type, false, sh.n_ff, sh.n_embd, live_jobs, first, count, p, s);
      }
    }
    if (gate_up_only) return;
    p = StageParams{};
    p.act = static_cast<int32_t>(sh.activation);
    p.gelu_table = gelu.as<float>();
    p.gate = gate.as<float>();
    p.up = up.as<float>();
    p.out[0] = dev_y;
    p.mat_begin = 2;
    p.n_mats = 1;
    for (size_t first = 0; first < live_jobs.size(); first += detail::kMaxJobsPerStage) {
      const size_t count = std::min<size_t>(detail::kMaxJobsPerStage, live_jobs.size() - first);
      run_stage(sh.down_type, true, sh.n_embd, sh.n_ff, live_jobs, first, count, p, s);
    }
  }
};

GroupedExperts::GroupedExperts(const GroupedLimits& limits) {
  STRATA_ASSERT(
      limits.max_embd > 0 && limits.max_ff > 0 && limits.max_tokens > 0 && limits.max_rows > 0,
      "grouped experts: empty limits");
  set_device(limits.device);
  impl_ = std::make_unique<Impl>(limits);
}

GroupedExperts::~GroupedExperts() = default;

const GroupedLimits& GroupedExperts::limits() const {
  return impl_->lim;
}

float* GroupedExperts::x_host() {
  return impl_->in_host.as<float>();
}

const float* GroupedExperts::y_host() const {
  return impl_->y_host.as<float>();
}

void GroupedExperts::launch(const GroupedLayer& layer, void* stream) {
  Impl& m = *impl_;
  STRATA_ASSERT(!m.in_flight, "grouped experts: launch() while the previous launch is in flight");
  check_layer(layer, m.lim);
  STRATA_ASSERT(layer.n_rows == 0 || layer.row_token != nullptr, "null row_token");
  for (uint32_t r = 0; r < layer.n_rows; ++r)
    STRATA_ASSERT(
        layer.row_token[r] >= 0 && static_cast<uint32_t>(layer.row_token[r]) < layer.n_tokens,
        "row {}: token {} of {}", r, layer.row_token[r], layer.n_tokens);
  set_device(m.lim.device);
  const auto s = stream != nullptr ? static_cast<cudaStream_t>(stream)
                                   : static_cast<cudaStream_t>(m.stream.handle());
  // x rows then row_token, packed, in one copy.
  const size_t x_bytes =
      static_cast<size_t>(round16(int64_t{layer.n_tokens} * layer.shape.n_embd * 4));
  auto* host = m.in_host.as<uint8_t>();
  std::copy(layer.row_token, layer.row_token + layer.n_rows,
            reinterpret_cast<int32_t*>(host + x_bytes));
  auto* dev = m.in.as<uint8_t>();
  CUDA_CHECK(cudaEventRecord(m.start, s));
  CUDA_CHECK(
      cudaMemcpyAsync(dev, host, x_bytes + size_t{layer.n_rows} * 4, cudaMemcpyHostToDevice, s));
  m.enqueue(layer, reinterpret_cast<const float*>(dev),
            reinterpret_cast<const int32_t*>(dev + x_bytes), m.y.as<float>(), s);
  const size_t y_bytes = size_t{layer.n_rows} * static_cast<size_t>(layer.shape.n_embd) * 4;
  if (y_bytes > 0)
    CUDA_CHECK(cudaMemcpyAsync(m.y_host.data(), m.y.data(), y_bytes, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaEventRecord(m.done, s));
  m.in_flight = true;
  m.pinned_in_flight = true;
  m.timed = true;
  m.last_stream = s;
}

void GroupedExperts::launch_device(const GroupedLayer& layer, const float* dev_x,
                                   const int32_t* dev_row_token, float* dev_y, void* stream,
                                   Stages stages) {
  Impl& m = *impl_;
  check_layer(layer, m.lim);
  STRATA_ASSERT(aligned16(dev_x) && aligned16(dev_y), "dev_x / dev_y must be 16-byte aligned");
  set_device(m.lim.device);
  const auto s = stream != nullptr ? static_cast<cudaStream_t>(stream)
                                   : static_cast<cudaStream_t>(m.stream.handle());
  STRATA_ASSERT(!m.in_flight || (!m.pinned_in_flight && m.last_stream == s),
                "grouped experts: launch_device() on another stream while a launch is in flight");
  m.enqueue(layer, dev_x, dev_row_token, dev_y, s, stages == Stages::kGateUp);
  CUDA_CHECK(cudaEventRecord(m.done, s));
  m.in_flight = true;
  m.timed = false;
  m.last_stream = s;
}

void GroupedExperts::wait() {
  Impl& m = *impl_;
  if (!m.in_flight) return;
  m.in_flight = false;
  m.pinned_in_flight = false;
  CUDA_CHECK(cudaEventSynchronize(m.done));
  if (m.timed) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, m.start, m.done));
    m.seconds = static_cast<double>(ms) / 1e3;
  }
}

double GroupedExperts::last_seconds() const {
  return impl_->seconds;
}

// ---- CUDA_DENSE: one-matrix, one-row stages of the same kernel (cuda/dense.h) ----

namespace {

class DenseDeviceImpl final : public detail::DenseDevice {
 public:
  DenseDeviceImpl(int device, int64_t max_cols, int64_t max_out)
      : device_(device),
        x_bytes_(static_cast<size_t>(round16(max_cols * 4))),
        in_(x_bytes_ + 16),
        y_(static_cast<size_t>(max_out) * 4),
        in_host_(in_.bytes()),
        y_host_(y_.bytes()) {
    CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    smem_max_ = static_cast<uint32_t>(optin);
    int major = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    overlap_ = major >= 9;
    std::fill_n(in_host_.as<uint8_t>() + x_bytes_, 16, uint8_t{0});  // row_token[0] = 0
  }

  const void* upload(const void* host, size_t bytes) override {
    set_device(device_);
    mats_.emplace_back(bytes + 16);  // the kernel may read up to 15 bytes past the end
    copy_to_device(mats_.back().data(), host, bytes);
    return mats_.back().data();
  }

  void gemv(std::span<const DenseMatrix> w, const float* x, float* const* ys) override {
    if (w.empty()) return;
    set_device(device_);
    const auto s = static_cast<cudaStream_t>(stream_.handle());
    const int64_t n_cols = w[0].n_cols;
    std::copy(x, x + n_cols, in_host_.as<float>());
    auto* dev = in_.as<uint8_t>();
    CUDA_CHECK(cudaMemcpyAsync(dev, in_host_.data(), x_bytes_ + 16, cudaMemcpyHostToDevice, s));
    int64_t at = 0;
    for (const DenseMatrix& m : w) {
      StageParams p{};
      const auto* wd = static_cast<const uint8_t*>(m.data);
      p.jobs[0] = detail::StageJob{{wd, wd, wd}, {nullptr, nullptr, nullptr}, 0, 1};
      p.n_jobs = 1;
      p.mat_begin = 0;
      p.n_mats = 1;
      p.x = reinterpret_cast<const float*>(dev);
      p.row_token = reinterpret_cast<const int32_t*>(dev + x_bytes_);
      p.out[0] = y_.as<float>() + at;
      uint32_t grid = 0, smem = 0;
      plan_stage(m.type, m.n_rows, n_cols, 1, 1, 1, sm_count_, smem_max_, &p, &grid, &smem);
      detail::launch_stage(m.type, false, p, grid, smem, overlap_, s);
      at += m.n_rows;
    }
    CUDA_CHECK(cudaMemcpyAsync(y_host_.data(), y_.data(), static_cast<size_t>(at) * 4,
                               cudaMemcpyDeviceToHost, s));
    stream_.synchronize();
    at = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      std::copy_n(y_host_.as<float>() + at, w[i].n_rows, ys[i]);
      at += w[i].n_rows;
    }
  }

  void gemm(std::span<const DenseMatrix> w, const float* x, uint32_t n_tokens,
            float* const* ys) override {
    if (w.empty() || n_tokens == 0) return;
    set_device(device_);
    const auto s = static_cast<cudaStream_t>(stream_.handle());
    const int64_t n_cols = w[0].n_cols;
    int64_t max_rows = 0;
    for (const DenseMatrix& m : w) max_rows = std::max(max_rows, m.n_rows);
    // Row chunks of at most kChunkElems dequantized weights.
    constexpr int64_t kChunkElems = int64_t{16} << 20;  // 64 MiB of F32
    const int64_t chunk = std::max<int64_t>(1, std::min(max_rows, kChunkElems / n_cols));
    const size_t x_bytes = size_t{n_tokens} * static_cast<size_t>(n_cols) * 4;
    const size_t y_bytes = size_t{n_tokens} * static_cast<size_t>(max_rows) * 4;
    const size_t yc_bytes = size_t{n_tokens} * static_cast<size_t>(chunk) * 4;
    const size_t w_bytes = static_cast<size_t>(chunk * n_cols) * 4;
    if (!blas_) blas_ = std::make_unique<BlasLt>();
    if (gx_.bytes() < x_bytes) {
      gx_ = DeviceBuffer(x_bytes);
      gx_host_ = PinnedBuffer(x_bytes);
    }
    if (gy_host_.bytes() < y_bytes) gy_host_ = PinnedBuffer(y_bytes);
    if (gyc_.bytes() < yc_bytes) gyc_ = DeviceBuffer(yc_bytes);
    if (gw_.bytes() < w_bytes) gw_ = DeviceBuffer(w_bytes);
    std::copy_n(x, size_t{n_tokens} * static_cast<size_t>(n_cols), gx_host_.as<float>());
    CUDA_CHECK(cudaMemcpyAsync(gx_.data(), gx_host_.data(), x_bytes, cudaMemcpyHostToDevice, s));
    for (size_t i = 0; i < w.size(); ++i) {
      const DenseMatrix& m = w[i];
      const size_t row_bytes = ggml_row_bytes(m.type, n_cols);
      for (int64_t r0 = 0; r0 < m.n_rows; r0 += chunk) {
        const int64_t rows = std::min(chunk, m.n_rows - r0);
        cuda_dequantize(m.type, static_cast<const uint8_t*>(m.data) + r0 * row_bytes,
                        gw_.as<float>(), rows * n_cols, s);
        blas_->matmul_f32(gw_.as<float>(), gx_.as<float>(), gyc_.as<float>(), rows, n_cols,
                          n_tokens, s);
        // Columns [r0, r0 + rows) of every token's output row.
        CUDA_CHECK(cudaMemcpy2DAsync(gy_host_.as<float>() + r0, static_cast<size_t>(m.n_rows) * 4,
                                     gyc_.data(), static_cast<size_t>(rows) * 4,
                                     static_cast<size_t>(rows) * 4, n_tokens,
                                     cudaMemcpyDeviceToHost, s));
      }
      stream_.synchronize();  // gy_host_ is reused by the next matrix
      std::copy_n(gy_host_.as<float>(), size_t{n_tokens} * static_cast<size_t>(m.n_rows), ys[i]);
    }
  }

 private:
  int device_;
  size_t x_bytes_;
  int sm_count_ = 0;
  uint32_t smem_max_ = 0;
  bool overlap_ = false;
  Stream stream_;
  DeviceBuffer in_;  // [x: max_cols floats, 16-byte padded][row_token: 0]
  DeviceBuffer y_;   // [max_out]
  PinnedBuffer in_host_, y_host_;
  std::vector<DeviceBuffer> mats_;
  // gemm(): cuBLASLt, x, one chunk of dequantized weights and its outputs, grown on demand.
  std::unique_ptr<BlasLt> blas_;
  DeviceBuffer gx_, gw_, gyc_;
  PinnedBuffer gx_host_, gy_host_;
};

}  // namespace

std::unique_ptr<detail::DenseDevice> detail::DenseDevice::create(int device, int64_t max_cols,
                                                                 int64_t max_out) {
  set_device(device);
  return std::make_unique<DenseDeviceImpl>(device, max_cols, max_out);
}

void cuda_portable_eval(PortableFn fn, const float* dev_x, float* dev_y, int64_t n) {
  STRATA_ASSERT(n >= 0, "n={}", n);
  detail::launch_portable_eval(static_cast<int>(fn), dev_x, dev_y, n);
}

}  // namespace strata::cuda
