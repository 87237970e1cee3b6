// The MoE FFN layer as named stages: route → dispatch (by home) → compute (per executor) →
// combine (fixed order). A dense FFN is a one-expert MoE and takes the same path.
// Exercised by tests/test_model_forward.cpp (routing vs llama.cpp's MOER dumps, thread-count
// invariance) and tests/test_ops.cpp (top-k order).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/model_config.h"
#include "engine/weights.h"
#include "kernels/threadpool.h"

namespace strata::engine {

// Router output for a chunk of n_tokens (views into the caller's scratch).
struct Routing {
  uint32_t n_tokens = 0;
  uint32_t n_expert = 0;     // experts of this layer (1 for a dense FFN)
  uint32_t k = 0;            // experts used per token
  float* probs = nullptr;    // [n_tokens, n_expert] gating probabilities (softmax)
  int32_t* topk = nullptr;   // [n_tokens, k] selected experts, probability-descending
  float* weights = nullptr;  // [n_tokens, k] the multiplier of each selected expert's output
  // [n_tokens] the shared expert's gate logits (qwen2moe), computed in the router's region when
  // set and the layer has a gate.
  float* shared_gate = nullptr;
};

// Stage 1. Router logits W_gate_inp·x, softmax, top-k (ties → lower index), renormalized weights.
// A dense FFN (n_expert = 1) routes every token to expert 0 with weight 1. A layer with a shared
// expert gate also gets the gate's logits into r.shared_gate (when set).
//   x: [n_tokens, n_embd] (the ffn-normed residual); xq_scratch: activation quantization scratch
void route(kernels::ThreadPool& pool, const ModelConfig& cfg, const LayerWeights& layer,
           const float* x, Routing& r, std::byte* xq_scratch);

// Where an expert's bytes live; the home decides which executor computes it and when: RAM homes
// at once, SSD homes (streamed into the RAM cache, computed by the CPU) once their reads land,
// VRAM homes on their GPU (placeholder: the CUDA tier). Dispatch rows are grouped in this order.
enum class ExpertHome : uint8_t { kRam, kSsd, kVram };
inline constexpr size_t kNumHomes = 3;

// One expert and the rows routed to it: rows [row_begin, row_end) of the dispatch order.
struct ExpertJob {
  uint32_t expert = 0;
  uint32_t row_begin = 0;
  uint32_t row_end = 0;
  ExpertSlice slice;  // where the expert's bytes are now
};

// Stage 2 output. Dispatch rows are the (token, slot) pairs grouped by home (ExpertHome order),
// then by expert (ascending), tokens ascending inside a group — so each home's jobs cover one
// contiguous range of rows.
struct Dispatch {
  explicit Dispatch(uint32_t max_rows, uint32_t max_experts);
  std::array<std::vector<ExpertJob>, kNumHomes> jobs;  // per home, capacity max_experts
  std::vector<int32_t> row_token;                      // [n_rows] token of each dispatch row
  std::vector<int32_t> slot_row;                       // [n_tokens * k] dispatch row of slot (t, j)
  std::vector<uint32_t> count;                         // [max_experts] scratch
  uint32_t n_rows = 0;
};

// Stage 2. Groups the routed (token, slot) pairs by home and expert. homes: [n_expert] home of
// each expert of this layer; empty = every expert in RAM. No allocation.
void dispatch(const Routing& r, const ExpertStack& stack, Dispatch& d,
              std::span<const ExpertHome> homes = {});

// Stage 3: computes expert FFNs for a list of jobs. One implementation per kind of executor (CPU
// node now; GPU device later).
class ExpertExecutor {
 public:
  virtual ~ExpertExecutor() = default;
  // y[r] = down_e(silu(gate_e·x[t]) ⊙ up_e·x[t]) for every row r of every job, t = row_token[r].
  // The jobs' rows must form one contiguous range (one home's jobs do); other rows are untouched.
  //   x: [n_tokens, n_embd];  y: [n_rows, n_embd] in dispatch order
  virtual void compute(const ExpertStack& stack, std::span<const ExpertJob> jobs,
                       const int32_t* row_token, const float* x, float* y) = 0;
};

// PROF's split of the CPU executor's wall time (the caller's clock) into its stages, summed over
// compute() calls: [0] the activation quantized for gate/up (and copied into dispatch order),
// [1] gate and up (with the GLU and its quantization when the items do it), [2] the GLU and its
// quantization as a stage of their own, [3] down. The multiply-adds (rows × weight elements) and
// weight bytes of the gate+up and down stages give their GMAC/s and GB/s.
struct ExpertStageTimes {
  enum Stage { kQuantize, kGateUp, kGlu, kDown, kNumStages };
  std::array<double, kNumStages> seconds{};
  uint64_t calls = 0;
  uint64_t rows = 0;  // dispatch rows computed
  uint64_t gate_up_macs = 0, down_macs = 0;
  uint64_t gate_up_bytes = 0, down_bytes = 0;
};
// Per pass kind: [0] passes of several tokens (prefill; LOOKUP's drafted passes too), [1] of one
// token (decode).
using ExpertStagePhases = std::array<ExpertStageTimes, 2>;

// Runs experts on the CPU pool: one parallel region for all jobs' gate+up rows, one for all down
// rows; work split by weight bytes. The activation (GLU, quantized for down) is done by each
// gate+up item on its own rows when the items end on the down activation's block boundaries
// (Q8_0: always; Q8_K where whole 256-row blocks still give every thread one item per matrix),
// else between the two regions (by the caller alone for a decode step's few rows). x is quantized
// once per token when rows repeat tokens (decode). Each output element is computed by the same
// kernel call whatever the split, so thread count never changes the numbers.
class CpuExpertExecutor final : public ExpertExecutor {
 public:
  // Scratch for up to max_rows dispatch rows of this model's layers.
  CpuExpertExecutor(kernels::ThreadPool& pool, const ModelConfig& cfg, uint32_t max_rows);
  void compute(const ExpertStack& stack, std::span<const ExpertJob> jobs, const int32_t* row_token,
               const float* x, float* y) override;
  // The matrices of the GEMV region after the next compute() (the next layer's q, k, v): stage D's
  // idle reads (ThreadPool::set_idle_reads), so a thread done with its down rows, and the serial
  // steps before that region, fetch its first rows. Used by the next compute() only.
  void set_reads_after(std::span<const MatrixRef> ws);
  // PROF: times each stage of compute() into (*phases)[the pass kind] (null: off, the default).
  // begin_pass() says the kind: the tokens of the forward pass the next compute() calls serve.
  void set_stage_times(ExpertStagePhases* phases) { stage_times_ = phases; }
  void begin_pass(uint32_t n_tokens) { stage_phase_ = n_tokens > 1 ? 0 : 1; }

 private:
  struct WorkItem {
    uint32_t job;
    uint32_t row_begin;  // weight rows [row_begin, row_end)
    uint32_t row_end;
  };
  // Cuts every job's n_weight_rows into items (one per thread, multiples of align rows, at least
  // kRowBlock) and returns the rows per item.
  int64_t plan_items(std::span<const ExpertJob> jobs, int64_t n_weight_rows, size_t bytes_per_row,
                     int64_t align = 16);
  // Stage B's idle reads: each thread's first down rows of stage D.
  void idle_read_down(const ExpertStack& stack, std::span<const ExpertJob> jobs);
  // One parallel region over the planned items: fn(item, after) once per run of consecutive items
  // of one job whose rows join up, taken as one item; after: the item this thread runs next when
  // it already holds it (nullptr if not), for a prefetch hint. Owners take a job's items together,
  // so a thread holding both halves of an expert's matrix streams it in one kernel call (and gate
  // runs on into up in a RAM home: one stream, not four); thieves take single items.
  template <typename F>
  void run_items(F&& fn);

  kernels::ThreadPool& pool_;
  uint32_t max_rows_;
  size_t xq_row_bytes_;  // bytes of one quantized activation row (the largest format: F32)
  size_t hq_row_bytes_;
  std::vector<std::byte> xq_;    // [max_rows, n_embd] x rows quantized for gate/up, dispatch order
  std::vector<std::byte> xq2_;   // the same for up when its activation type differs from gate's
  std::vector<std::byte> xt_;    // [max_rows, n_embd] x quantized once per token (token order)
  std::vector<std::byte> xt2_;   // the same for up when its activation type differs
  std::vector<float> gate_;      // [max_rows, max_n_ff]
  std::vector<float> up_;        // [max_rows, max_n_ff]
  std::vector<std::byte> hq_;    // [max_rows, max_n_ff] activation rows quantized for down
  std::vector<WorkItem> items_;  // capacity planned for all experts × row blocks
  std::vector<uint64_t> cost_;
  int64_t items_per_job_ = 1;
  std::array<MatrixRef, 4> after_{};  // set_reads_after (q, k, v)
  size_t n_after_ = 0;
  ExpertStagePhases* stage_times_ = nullptr;
  int stage_phase_ = 0;
};

// Stage 4. out[t] = Σ_j weights[t, j] · y[slot_row[t, j]], summed in slot order j = 0..k-1 (so the
// result never depends on thread timing; llama.cpp adds the weighted experts in the same order).
//   y: [n_rows, n_embd] in dispatch order; out: [n_tokens, n_embd]
void combine(kernels::ThreadPool& pool, const Routing& r, const Dispatch& d, const float* y,
             uint32_t n_embd, float* out);

}  // namespace strata::engine
