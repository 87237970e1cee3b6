// MoE stages: route, dispatch, the CPU executor, combine (see moe.h).
// Exercised by tests/test_model_forward.cpp and tests/test_ops.cpp.
#include "engine/moe.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/gating.h"
#include "engine/ops.h"
#include "io/check.h"
#include "kernels/gemv.h"
#include "kernels/interleave.h"
#include "kernels/quant.h"

namespace strata::engine {
namespace {

// Weight rows per work item at least (plan_items makes them a quarter of one thread's share of a
// matrix where that is larger): small enough to balance a decode step's few experts over many
// threads (8 experts x 768 rows = 96 items), large enough that an item amortizes its call (the
// interleaved kernels prepare the activation once per call). A multiple of 16: the kernels' rows
// per pass and the interleaved layouts' group.
constexpr uint32_t kRowBlock = 64;
// Items per thread per matrix. One (whole halves) left a thread done first waiting at the join
// for the other's last half-expert, 6-7% of each expert region's thread time at 2 threads; four
// took that to ~2% (bench/RESULTS.md session 11).
constexpr int64_t kItemsPerThread = 4;

// Weight row `row` of m (a kernels::set_gemv_tail hint: the interleaved layouts' 16-row group
// starting there).
const std::byte* row_at(const MatrixRef& m, uint32_t row) {
  return m.data + size_t{row} * m.row_bytes;
}

// Below this many rows a fork/join costs more than the work.
constexpr uint32_t kMinParallelRows = 8;

// Below this many activation elements (SiLU-GLU + quantization) a fork/join costs more than the
// work: a decode step's 8 rows of 768 are done by the caller alone.
constexpr int64_t kMinParallelElements = 16384;

// A stack's kernels for each layout an expert's matrix may be in: RAM homes repacked (REPACK),
// cache slots and the mapping as in the file. Looked up once per stage, not per work item.
// (A type's matrices may be in more than one interleaved layout: Q4_0 ones of 32k rows in
// kQ4_0x32 on AVX-512 hosts, the others in kQ4_0x16.)
struct LayoutKernels {
  kernels::GemvKernels rows;
  kernels::GemvKernels packed[2];  // Q4_0: kQ4_0x16, kQ4_0x32; else the type's one layout
  kernels::WeightLayout layouts[2] = {kernels::WeightLayout::kRows, kernels::WeightLayout::kRows};
  explicit LayoutKernels(GgmlType type) : rows(kernels::gemv_kernels(type)), packed{rows, rows} {
    layouts[0] = kernels::interleaved_layout(type);
    if (type == GgmlType::Q4_0) layouts[1] = kernels::WeightLayout::kQ4_0x32;
    for (int i = 0; i < 2; ++i)
      if (layouts[i] != kernels::WeightLayout::kRows)
        packed[i] = kernels::gemv_kernels(type, layouts[i]);
  }
  const kernels::GemvKernels& operator()(const MatrixRef& m) const {
    if (m.layout == kernels::WeightLayout::kRows) return rows;
    STRATA_ASSERT(m.layout == layouts[0] || m.layout == layouts[1],
                  "no kernels for a matrix in layout {}", static_cast<int>(m.layout));
    return m.layout == layouts[0] ? packed[0] : packed[1];
  }
};

int64_t round_up(int64_t n, int64_t m) {
  return (n + m - 1) / m * m;
}

// Rows per gate/up item a multiple of the down activation's block (so the items can do the
// activation, stage C) when that still gives every thread one item per matrix; else the kernels'
// 16.
int64_t glu_item_align(int64_t n_ff, int64_t n_threads, int64_t hq_block) {
  const int64_t a = std::max<int64_t>(16, hq_block);
  if (n_threads == 1) return a;
  return round_up((n_ff + n_threads - 1) / n_threads, a) * (n_threads - 1) < n_ff ? a : 16;
}

template <typename F>
void for_rows(kernels::ThreadPool& pool, uint32_t n, F&& fn) {
  if (n < kMinParallelRows) {
    fn(int64_t{0}, int64_t{n}, 0);
  } else {
    pool.parallel_for(n, {}, fn);
  }
}

}  // namespace

void route(kernels::ThreadPool& pool, const ModelConfig& cfg, const LayerWeights& layer,
           const float* x, Routing& r, std::byte* xq_scratch) {
  const uint32_t n = r.n_tokens;
  if (r.n_expert == 1) {
    STRATA_ASSERT(r.k == 1);
    for (uint32_t t = 0; t < n; ++t) {
      r.probs[t] = 1.0f;
      r.topk[t] = 0;
      r.weights[t] = 1.0f;
    }
    return;
  }
  if (r.shared_gate && layer.shared_gate.present()) {
    // One parallel region for the router and the shared expert's gate (both read x).
    const MatrixRef w[] = {layer.ffn_gate_inp.matrix(), layer.shared_gate.matrix()};
    float* const y[] = {r.probs, r.shared_gate};
    const size_t y_stride[] = {r.n_expert, 1};
    ActivationRows(pool, x, cfg.n_embd, n, cfg.n_embd, xq_scratch).matmul_many(w, y, y_stride);
  } else {
    matmul(pool, layer.ffn_gate_inp.matrix(), x, cfg.n_embd, n, r.probs, r.n_expert, xq_scratch);
  }
  for (uint32_t t = 0; t < n; ++t)
    select_experts(cfg, layer, r.probs + size_t{t} * r.n_expert, r.n_expert, r.k,
                   r.topk + size_t{t} * r.k, r.weights + size_t{t} * r.k);
}

Dispatch::Dispatch(uint32_t max_rows, uint32_t max_experts)
    : row_token(max_rows), slot_row(max_rows), count(max_experts) {
  for (auto& j : jobs) j.reserve(max_experts);
}

void dispatch(const Routing& r, const ExpertStack& stack, Dispatch& d,
              std::span<const ExpertHome> homes) {
  const uint32_t n_slots = r.n_tokens * r.k;
  STRATA_ASSERT(n_slots <= d.row_token.size() && r.n_expert <= d.count.size(),
                "dispatch: {} slots / {} experts exceed the planned scratch", n_slots, r.n_expert);
  STRATA_ASSERT(r.n_expert == stack.n_expert);
  STRATA_ASSERT(homes.empty() || homes.size() == r.n_expert, "{} homes for {} experts",
                homes.size(), r.n_expert);
  std::fill_n(d.count.begin(), r.n_expert, 0u);
  for (uint32_t s = 0; s < n_slots; ++s) {
    const int32_t e = r.topk[s];
    STRATA_ASSERT(e >= 0 && uint32_t(e) < r.n_expert, "expert id {} of {}", e, r.n_expert);
    ++d.count[e];
  }
  for (auto& j : d.jobs) j.clear();
  uint32_t row = 0;
  for (size_t h = 0; h < kNumHomes; ++h) {
    for (uint32_t e = 0; e < r.n_expert; ++e) {
      if (d.count[e] == 0) continue;
      if (size_t(homes.empty() ? ExpertHome::kRam : homes[e]) != h) continue;
      // The mapping's slice; a tiered ExpertSource replaces it with the bytes at the home.
      d.jobs[h].push_back(ExpertJob{e, row, row + d.count[e], stack.expert_slice(e)});
      const uint32_t begin = row;
      row += d.count[e];
      d.count[e] = begin;  // now the next free row of expert e
    }
  }
  for (uint32_t t = 0; t < r.n_tokens; ++t) {
    for (uint32_t j = 0; j < r.k; ++j) {
      const uint32_t s = t * r.k + j;
      const uint32_t dr = d.count[r.topk[s]]++;
      d.row_token[dr] = static_cast<int32_t>(t);
      d.slot_row[s] = static_cast<int32_t>(dr);
    }
  }
  d.n_rows = n_slots;
}

CpuExpertExecutor::CpuExpertExecutor(kernels::ThreadPool& pool, const ModelConfig& cfg,
                                     uint32_t max_rows)
    : pool_(pool), max_rows_(max_rows) {
  const uint32_t n_ff = cfg.max_n_ff();
  uint32_t max_experts = 1;
  for (uint32_t il = 0; il < cfg.n_layer; ++il)
    max_experts = std::max(max_experts, cfg.layer_n_expert(il));
  xq_row_bytes_ = activation_row_bytes(cfg.n_embd);
  hq_row_bytes_ = activation_row_bytes(n_ff);
  xq_.resize(size_t{max_rows} * xq_row_bytes_);
  xq2_.resize(size_t{max_rows} * xq_row_bytes_);
  xt_.resize(size_t{max_rows} * xq_row_bytes_);
  xt2_.resize(size_t{max_rows} * xq_row_bytes_);
  gate_.resize(size_t{max_rows} * n_ff);
  up_.resize(size_t{max_rows} * n_ff);
  hq_.resize(size_t{max_rows} * hq_row_bytes_);
  const uint32_t max_weight_rows = std::max(n_ff, cfg.n_embd);
  const size_t max_items = size_t{max_experts} * ((max_weight_rows + kRowBlock - 1) / kRowBlock);
  items_.reserve(max_items);
  cost_.reserve(max_items);
}

int64_t CpuExpertExecutor::plan_items(std::span<const ExpertJob> jobs, int64_t n_weight_rows,
                                      size_t bytes_per_row, int64_t align) {
  items_.clear();
  cost_.clear();
  // Each matrix in kItemsPerThread items per thread (rounded up to align rows, at least
  // kRowBlock); one thread gets one item per matrix. An owner takes a job's items together while
  // much of its range is left, so it still streams whole matrices in one kernel call, and single
  // items at the end, so the other thread can take the last ones instead of waiting at the join
  // (ThreadPool::parallel_for's guided owner claims). Every job is cut into the same number of
  // items, so equal-cost jobs (decode) split evenly over the threads.
  const int64_t n_threads = pool_.size();
  const int64_t per_thread =
      (n_weight_rows + n_threads * kItemsPerThread - 1) / (n_threads * kItemsPerThread);
  const int64_t block =
      n_threads == 1 ? n_weight_rows : std::max<int64_t>(kRowBlock, round_up(per_thread, align));
  for (uint32_t ji = 0; ji < jobs.size(); ++ji) {
    const uint64_t n_tok = jobs[ji].row_end - jobs[ji].row_begin;
    for (int64_t r = 0; r < n_weight_rows; r += block) {
      const int64_t r_end = std::min<int64_t>(r + block, n_weight_rows);
      items_.push_back(WorkItem{ji, uint32_t(r), uint32_t(r_end)});
      // Weight bytes dominate at few tokens, arithmetic (∝ tokens) at many.
      cost_.push_back(uint64_t(r_end - r) * bytes_per_row * n_tok);
    }
  }
  STRATA_ASSERT(items_.size() <= items_.capacity());
  items_per_job_ = (n_weight_rows + block - 1) / block;
  return block;
}

void CpuExpertExecutor::set_reads_after(std::span<const MatrixRef> ws) {
  n_after_ = std::min(ws.size(), after_.size());
  std::copy_n(ws.begin(), n_after_, after_.begin());
}

void CpuExpertExecutor::idle_read_down(const ExpertStack& stack, std::span<const ExpertJob> jobs) {
  constexpr int kMaxThreads = 64;
  const int n = pool_.size();
  if (n == 1 || n > kMaxThreads) return;
  // Stage D splits its items as stage B's (the same jobs, the same cut per job): thread t starts
  // on the down rows of the job and part where its stage-B range starts.
  int64_t bounds[kMaxThreads + 1];
  kernels::split_by_cost(int64_t(items_.size()), cost_, n, bounds);
  kernels::ThreadPool::IdleRead reads[kMaxThreads];
  const int64_t per_job = items_per_job_;
  for (int t = 0; t < n; ++t) {
    if (bounds[t] >= bounds[t + 1]) continue;
    const int64_t item = bounds[t];
    const MatrixRef d = stack.down_matrix(jobs[items_[item].job].slice);
    const int64_t row = d.n_rows * (item % per_job) / per_job / 16 * 16;
    reads[t] = {d.data + size_t(row) * d.row_bytes, size_t(d.n_rows - row) * d.row_bytes};
  }
  pool_.set_idle_reads({reads, size_t(n)});
}

template <typename F>
void CpuExpertExecutor::run_items(F&& fn) {
  pool_.parallel_for(
      int64_t(items_.size()), cost_,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end;) {
          WorkItem run = items_[i++];
          while (i < end && items_[i].job == run.job && items_[i].row_begin == run.row_end)
            run.row_end = items_[i++].row_end;
          fn(run, i < end ? &items_[i] : nullptr);
        }
      },
      true, items_per_job_);
}

void CpuExpertExecutor::compute(const ExpertStack& stack, std::span<const ExpertJob> jobs,
                                const int32_t* row_token, const float* x, float* y) {
  if (jobs.empty()) {
    n_after_ = 0;
    return;
  }
  uint32_t row0 = jobs.front().row_begin;  // the jobs' rows: [row0, n_rows)
  uint32_t n_rows = 0;
  for (const ExpertJob& j : jobs) {
    row0 = std::min(row0, j.row_begin);
    n_rows = std::max(n_rows, j.row_end);
  }
  STRATA_ASSERT(n_rows <= max_rows_, "{} expert rows > planned {}", n_rows, max_rows_);
  const int64_t n_embd = stack.n_embd;
  const int64_t n_ff = stack.n_ff;
  const GgmlType gate_vdt = kernels::vec_dot_type(stack.gate.type);
  const GgmlType up_vdt = kernels::vec_dot_type(stack.up.type);
  const GgmlType down_vdt = kernels::vec_dot_type(stack.down.type);
  const size_t xq_stride = ggml_row_bytes(gate_vdt, n_embd);
  const size_t xq2_stride = ggml_row_bytes(up_vdt, n_embd);
  const size_t hq_stride = ggml_row_bytes(down_vdt, n_ff);
  const bool up_separate = up_vdt != gate_vdt;
  // PROF's stage clock: lap(stage) adds the time since the last lap to that stage (no clock read
  // when off).
  using Clock = std::chrono::steady_clock;
  ExpertStageTimes* const st = stage_times_ ? &(*stage_times_)[stage_phase_] : nullptr;
  Clock::time_point t_last = st ? Clock::now() : Clock::time_point{};
  const auto lap = [&](ExpertStageTimes::Stage stage) {
    if (!st) return;
    const Clock::time_point now = Clock::now();
    st->seconds[stage] += std::chrono::duration<double>(now - t_last).count();
    t_last = now;
  };
  std::byte* xq_up = up_separate ? xq2_.data() : xq_.data();
  const size_t xq_up_stride = up_separate ? xq2_stride : xq_stride;

  // Stage A: the activation quantized for gate (and up). When the rows repeat tokens (decode: one
  // token, k rows) each token is quantized once into xt_ and a one-row job reads its token's row
  // there; rows of several-token jobs are copied into dispatch order for the GEMM. Otherwise each
  // row is quantized in place. Either way a row holds the same bytes.
  int32_t n_tok = 0;
  for (uint32_t r = row0; r < n_rows; ++r) n_tok = std::max(n_tok, row_token[r] + 1);
  const bool per_token = uint32_t(n_tok) < n_rows - row0;
  if (per_token) {
    for_rows(pool_, uint32_t(n_tok), [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        const float* xr = x + t * n_embd;
        kernels::quantize_activation_row(gate_vdt, xr, xt_.data() + t * xq_stride, n_embd);
        if (up_separate)
          kernels::quantize_activation_row(up_vdt, xr, xt2_.data() + t * xq2_stride, n_embd);
      }
    });
    for (const ExpertJob& j : jobs) {
      if (j.row_end - j.row_begin == 1) continue;
      for (uint32_t r = j.row_begin; r < j.row_end; ++r) {
        std::memcpy(xq_.data() + r * xq_stride, xt_.data() + row_token[r] * xq_stride, xq_stride);
        if (up_separate)
          std::memcpy(xq2_.data() + r * xq2_stride, xt2_.data() + row_token[r] * xq2_stride,
                      xq2_stride);
      }
    }
  } else {
    for_rows(pool_, n_rows - row0, [&](int64_t begin, int64_t end, int) {
      for (int64_t r = row0 + begin; r < row0 + end; ++r) {
        const float* xr = x + row_token[r] * n_embd;
        kernels::quantize_activation_row(gate_vdt, xr, xq_.data() + r * xq_stride, n_embd);
        if (up_separate)
          kernels::quantize_activation_row(up_vdt, xr, xq2_.data() + r * xq2_stride, n_embd);
      }
    });
  }
  lap(ExpertStageTimes::kQuantize);
  const std::byte* xt_up = up_separate ? xt2_.data() : xt_.data();
  // The gate / up activation row(s) of a job.
  const auto x_gate = [&](const ExpertJob& j) {
    return per_token && j.row_end - j.row_begin == 1
               ? xt_.data() + row_token[j.row_begin] * xq_stride
               : xq_.data() + j.row_begin * xq_stride;
  };
  const auto x_up = [&](const ExpertJob& j) {
    return per_token && j.row_end - j.row_begin == 1 ? xt_up + row_token[j.row_begin] * xq_up_stride
                                                     : xq_up + j.row_begin * xq_up_stride;
  };

  // Stage B: gate and up rows of every job, one parallel region. Each item also does stage C
  // (below) for its rows when its rows are whole blocks of the down activation's type: the GLU is
  // elementwise and each block is quantized on its own, so the bytes are those of whole rows, and
  // the decode step loses a serial step between two joins. Items are aligned to the block when
  // that still gives each thread one item per matrix (Q8_K's 256 rows: 768 = 512 + 256 at 2
  // threads, not at 4).
  const LayoutKernels gate_k(stack.gate.type);
  const LayoutKernels up_k(stack.up.type);
  const int64_t hq_block = ggml_type_info(down_vdt).block_size;
  const int64_t gu_align = glu_item_align(n_ff, pool_.size(), hq_block);
  const int64_t gu_block =
      plan_items(jobs, n_ff, stack.gate.row_bytes + stack.up.row_bytes, gu_align);
  const bool fused_glu = gu_block % hq_block == 0 && n_ff % hq_block == 0;
  idle_read_down(stack, jobs);
  run_items([&](const WorkItem& it, const WorkItem* after) {
    const ExpertJob& job = jobs[it.job];
    const MatrixRef g = stack.gate_matrix(job.slice);
    const MatrixRef u = stack.up_matrix(job.slice);
    const uint32_t m = job.row_end - job.row_begin;
    const std::byte* xg = x_gate(job);
    const std::byte* xu = x_up(job);
    float* yg = gate_.data() + size_t{job.row_begin} * n_ff;
    float* yu = up_.data() + size_t{job.row_begin} * n_ff;
    if (m == 1) {
      // Memory streams on from one call into the next (kernels::set_gemv_tail): gate into up,
      // up into this thread's next item.
      kernels::set_gemv_tail(row_at(u, it.row_begin));
      gate_k(g).gemv(g.data, g.row_bytes, xg, yg, it.row_begin, it.row_end, n_embd);
      kernels::set_gemv_tail(
          after ? row_at(stack.gate_matrix(jobs[after->job].slice), after->row_begin) : nullptr);
      up_k(u).gemv(u.data, u.row_bytes, xu, yu, it.row_begin, it.row_end, n_embd);
      kernels::set_gemv_tail(nullptr);
    } else {
      gate_k(g).gemm(g.data, g.row_bytes, xg, xq_stride, yg, n_ff, m, it.row_begin, it.row_end,
                     n_embd);
      up_k(u).gemm(u.data, u.row_bytes, xu, xq_up_stride, yu, n_ff, m, it.row_begin, it.row_end,
                   n_embd);
    }
    if (stack.gate_bias.present())
      add_bias_rows(stack.gate_bias.f32() + size_t{job.expert} * n_ff, yg, n_ff, m, it.row_begin,
                    it.row_end);
    if (stack.up_bias.present())
      add_bias_rows(stack.up_bias.f32() + size_t{job.expert} * n_ff, yu, n_ff, m, it.row_begin,
                    it.row_end);
    if (!fused_glu) return;
    const int64_t n_el = it.row_end - it.row_begin;
    const size_t hq_offset = ggml_row_bytes(down_vdt, it.row_begin);
    for (uint32_t r = job.row_begin; r < job.row_end; ++r) {
      float* h = gate_.data() + size_t{r} * n_ff + it.row_begin;
      glu(stack.activation, h, up_.data() + size_t{r} * n_ff + it.row_begin, h, n_el);
      kernels::quantize_activation_row(down_vdt, h, hq_.data() + r * hq_stride + hq_offset, n_el);
    }
  });

  lap(ExpertStageTimes::kGateUp);

  // Stage C, unless stage B's items did it: the activation (silu(gate) ⊙ up, or SwiGLU-OAI),
  // quantized for down. A decode step's few rows are less work than a fork/join: the caller does
  // them alone.
  const auto glu_rows = [&](int64_t begin, int64_t end, int) {
    for (int64_t r = row0 + begin; r < row0 + end; ++r) {
      float* h = gate_.data() + r * n_ff;
      glu(stack.activation, h, up_.data() + r * n_ff, h, n_ff);
      kernels::quantize_activation_row(down_vdt, h, hq_.data() + r * hq_stride, n_ff);
    }
  };
  if (!fused_glu) {
    if (int64_t{n_rows - row0} * n_ff < kMinParallelElements) {
      glu_rows(0, n_rows - row0, 0);
    } else {
      pool_.parallel_for(n_rows - row0, {}, glu_rows);
    }
    lap(ExpertStageTimes::kGlu);
  }

  // Stage D: down rows of every job, one parallel region.
  const LayoutKernels down_k(stack.down.type);
  plan_items(jobs, n_embd, stack.down.row_bytes);
  if (n_after_ > 0) idle_read_rows(pool_, {after_.data(), n_after_});
  n_after_ = 0;
  run_items([&](const WorkItem& it, const WorkItem* after) {
    const ExpertJob& job = jobs[it.job];
    const MatrixRef d = stack.down_matrix(job.slice);
    const uint32_t m = job.row_end - job.row_begin;
    const std::byte* h = hq_.data() + job.row_begin * hq_stride;
    float* yd = y + size_t{job.row_begin} * n_embd;
    if (m == 1) {
      kernels::set_gemv_tail(
          after ? row_at(stack.down_matrix(jobs[after->job].slice), after->row_begin) : nullptr);
      down_k(d).gemv(d.data, d.row_bytes, h, yd, it.row_begin, it.row_end, n_ff);
      kernels::set_gemv_tail(nullptr);
    } else {
      down_k(d).gemm(d.data, d.row_bytes, h, hq_stride, yd, n_embd, m, it.row_begin, it.row_end,
                     n_ff);
    }
    if (stack.down_bias.present())
      add_bias_rows(stack.down_bias.f32() + size_t{job.expert} * n_embd, yd, n_embd, m,
                    it.row_begin, it.row_end);
  });
  if (st) {
    lap(ExpertStageTimes::kDown);
    const uint64_t rows = n_rows - row0;
    const uint64_t n_jobs = jobs.size();
    st->calls += 1;
    st->rows += rows;
    st->gate_up_macs += rows * uint64_t(n_ff) * uint64_t(n_embd) * 2;
    st->down_macs += rows * uint64_t(n_ff) * uint64_t(n_embd);
    st->gate_up_bytes += n_jobs * uint64_t(n_ff) * (stack.gate.row_bytes + stack.up.row_bytes);
    st->down_bytes += n_jobs * uint64_t(n_embd) * stack.down.row_bytes;
  }
}

void combine(kernels::ThreadPool& pool, const Routing& r, const Dispatch& d, const float* y,
             uint32_t n_embd, float* out) {
  for_rows(pool, r.n_tokens, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      float* o = out + t * n_embd;
      const float* w = r.weights + t * r.k;
      const int32_t* rows = d.slot_row.data() + t * r.k;
      const float* y0 = y + size_t(rows[0]) * n_embd;
      for (uint32_t i = 0; i < n_embd; ++i) o[i] = y0[i] * w[0];
      for (uint32_t j = 1; j < r.k; ++j) {
        const float* yj = y + size_t(rows[j]) * n_embd;
        const float wj = w[j];
        for (uint32_t i = 0; i < n_embd; ++i) o[i] += yj[i] * wj;
      }
    }
  });
}

}  // namespace strata::engine
