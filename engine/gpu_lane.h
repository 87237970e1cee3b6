// The GPU lane of the decode loop: routed experts whose plan home is VRAM@d are uploaded once at
// load into device d (cuda::VramStore, pinned staging, from the model's mapping) and computed there
// by one grouped launch per MoE layer per device (cuda::GroupedExperts), started before the CPU
// computes its own RAM / SSD experts and joined after; the joined rows land in the dispatch-order
// y, so combine() keeps its fixed slot order and the logits do not depend on the homes (the grouped
// kernel gives kernels::expert_forward_ref's bits, as does the CPU executor).
//
// emulate (the VRAM_EMULATE knob, for tests and CI without a GPU): each "device" is a host worker
// thread running cuda::grouped_forward_emulated — the kernels' own element functions — over
// private host copies of the experts, with the same launch-before-CPU / join-after semantics.
//
// Nothing is allocated on a device, and no pageable memory is copied, after construction: x rows
// go through the executor's pinned buffer, y rows come back through its pinned buffer. A chunk
// whose rows on one device exceed max_rows runs in several launches (prefill only).
// Tested by tests/test_gpu_lane.cpp (emulated, and on a device when there is one).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cuda/dense.h"
#include "engine/model.h"
#include "engine/moe.h"
#include "placement/plan.h"
#include "tiers/ram_arena.h"

namespace strata::engine {

// Whether the grouped kernel computes this stack's experts; false with the reason in *why
// ("expert biases", "activation SwiGLU-OAI", "type MXFP4 (down)").
bool gpu_stack_supported(const ExpertStack& stack, std::string* why = nullptr);

struct GpuLaneOptions {
  bool emulate = false;      // host workers in place of CUDA devices (see the header comment)
  uint32_t max_rows = 4096;  // dispatch rows per launch per device (512 tokens x top-8)
};

// Per device, for PROF (docs/FORMATS.md "PROF JSON" gpu.devices[]).
struct GpuDeviceStats {
  int device = 0;
  std::string name;  // "NVIDIA H200" or "emulated"
  uint64_t resident_experts = 0;
  uint64_t resident_bytes = 0;  // expert bytes uploaded at load
  double upload_seconds = 0;
  uint64_t launches = 0;
  uint64_t experts = 0;       // expert jobs computed (one per expert per layer step)
  uint64_t rows = 0;          // dispatch rows (token-expert pairs)
  uint64_t bytes_read = 0;    // weight bytes the jobs read (each job reads its expert once)
  double kernel_seconds = 0;  // device time of the launches (copies + kernels; emulated: worker)
  uint64_t repin_moves = 0;   // REPIN: experts that took a VRAM slot here from an SSD home
};

class GpuLane {
 public:
  // Uploads every expert the plan homes in VRAM (one executor per device named by the plan).
  // Throws Error(kUnsupported) when a VRAM-homed layer is one the kernel cannot run, or when a
  // device is needed and this build has none.
  GpuLane(const Model& model, const placement::PlacementPlan& plan, const GpuLaneOptions& opts,
          const tiers::NoticeFn& notice);
  ~GpuLane();
  GpuLane(const GpuLane&) = delete;
  GpuLane& operator=(const GpuLane&) = delete;

  int n_devices() const { return static_cast<int>(devs_.size()); }
  bool emulated() const { return opts_.emulate; }

  // Starts layer il's VRAM jobs (d.jobs[kVram]) on every device; returns at once. x: [n_tokens,
  // n_embd], read here (copied into the executors' pinned buffers).
  void launch(uint32_t il, const ExpertStack& stack, const Dispatch& d, const float* x);
  // Waits for every device and writes their rows into y (dispatch order). Runs any further
  // launches a large chunk needed. Returns the seconds the caller blocked.
  double join(float* y);
  // After an exception between launch and join (an SSD read of the CPU's share failed): waits for
  // the devices and drops the launch (its rows are not written); the next launch may follow.
  void abandon();

  // REPIN between tokens (nothing in flight): expert (pl, pe), whose bytes are at `bytes` (a RAM
  // cache slot), takes the VRAM slot of (dl, de), which loses its VRAM home. Only when pe's device
  // footprint is no larger than de's (so the device budget holds); false, changing nothing,
  // otherwise. The upload is complete on return.
  bool swap(uint32_t pl, uint32_t pe, const ExpertSlice& bytes, uint32_t dl, uint32_t de);
  bool resident(uint32_t il, uint32_t e) const {
    return il < where_.size() && e < where_[il].size() && where_[il][e].device >= 0;
  }

  const std::vector<GpuDeviceStats>& stats() const { return stats_; }
  // Summed over layers: the device time of the slowest device's launches (the GPU lane's
  // critical time).
  double lane_seconds() const { return lane_seconds_; }

 private:
  struct Device;
  struct Where {
    int16_t device = -1;
    int32_t slot = -1;
  };
  void run_batch(size_t dev, size_t batch, float* y);

  GpuLaneOptions opts_;
  const Model& model_;
  std::vector<std::unique_ptr<Device>> devs_;
  std::vector<std::vector<Where>> where_;  // [n_layer][n_expert]
  std::vector<GpuDeviceStats> stats_;
  const float* x_ = nullptr;  // the launched layer's x (valid until join)
  uint32_t n_embd_ = 0;
  bool in_flight_ = false;
  double lane_seconds_ = 0;
};

// CUDA_DENSE=1: the attention projections (GQA's q, k, v, o), the dense FFNs (a layer's
// one-expert FFN), the shared experts and the output head computed on GPU 0 during decode (one
// token) by cuda::DenseGemv — the grouped kernel's canonical-order dots with x quantized as the CPU
// does, so the numbers are the CPU's to the bit. An FFN is gate and up in one GEMV call on the same
// x, the activation (engine glu, the CPU executor's own call) on the host in float, then down as a
// GEMV on that h (quantized on the device as the CPU executor quantizes it). Matrices are uploaded
// once at construction from the model's mapping (file layout); types the kernel does not take
// (F32, F16, BF16, ...), MLA attention and FFNs with biases or any matrix the kernel does not take
// stay on the CPU, as does every chunk of several tokens (prefill) unless `prefill` (CUDA_DENSE=2):
// then the attention projections and the FFNs of a chunk run as cuBLASLt GEMMs on weights
// dequantized on the GPU (close to the CPU's numbers, not bit-identical; the output head of a chunk
// stays on the CPU, as does an FFN with a matrix type the dequantizer lacks). emulate: the host
// emulation (VRAM_EMULATE). Tested by tests/test_gpu_lane.cpp. Device bytes GpuDense would upload
// for this model (the matrices it takes), for VRAM budgets.
uint64_t gpu_dense_bytes(const Model& model);

class GpuDense {
 public:
  enum Proj { kQ = 0, kK = 1, kV = 2, kO = 3 };
  // A layer's FFNs that are not routed: its dense FFN (LayerWeights::experts of a layer that is not
  // MoE) or its shared expert (LayerWeights::shared).
  enum Ffn { kDenseFfn = 0, kSharedFfn = 1 };
  GpuDense(const Model& model, bool emulate, bool prefill, const tiers::NoticeFn& notice);

  // ys[i] = W_which[i] · x for layer il: n_tokens rows of x ([n, cols] contiguous, ys[i] [n,
  // rows_i]); one token by the bit-identical GEMV, several by GEMMs when `prefill`. False,
  // computing nothing, when that is off or any of them is not on the GPU (the caller computes
  // them on the CPU).
  bool project(uint32_t il, std::span<const Proj> which, const float* x, uint32_t n_tokens,
               float* const* ys);
  // y [n_tokens, n_embd] = layer il's FFN `which` of x [n_tokens, n_embd]. One token: gate and up
  // in one GEMV call, glu(stack activation) on the host, down as a GEMV on it — CpuExpertExecutor's
  // numbers to the bit (a dense FFN's combine multiplies by weight 1, exact). Several when
  // `prefill`: the same through GEMMs (not bit-identical). False, computing nothing, when that FFN
  // is not on the GPU or the chunk is not taken (the caller computes it on the CPU).
  bool ffn(uint32_t il, Ffn which, const float* x, uint32_t n_tokens, float* y);
  // logits = output · x (one token); false when the head is not on the GPU.
  bool output(const float* x, float* logits);

  uint64_t bytes() const { return gemv_.bytes(); }
  size_t n_matrices() const { return gemv_.n_matrices(); }
  size_t n_ffns() const { return n_ffns_; }  // FFNs (dense and shared) on the GPU
  bool emulated() const { return gemv_.emulated(); }
  uint64_t calls() const { return calls_; }
  double seconds() const { return seconds_; }  // wall time of the calls (copies included)

 private:
  cuda::DenseGemv gemv_;
  struct FfnIds {
    int32_t gate_up[2] = {-1, -1};  // -1: on the CPU
    int32_t down = -1;
    int64_t n_ff = 0;
    FfnActivation activation = FfnActivation::kSiluGlu;
    bool gemm = false;  // all three types have a device dequantizer (prefill)
  };
  std::vector<std::array<int32_t, 4>> ids_;  // [n_layer] per Proj, -1 = on the CPU
  std::vector<std::array<FfnIds, 2>> ffn_;   // [n_layer] per Ffn
  int32_t output_ = -1;
  size_t n_ffns_ = 0;
  std::vector<int32_t> call_;
  // An FFN's gate / up rows, then h in gate_: [max n_ff] (decode), grown by a prefill chunk.
  std::vector<float> gate_, up_;
  bool prefill_ = false;
  uint64_t calls_ = 0;
  double seconds_ = 0;
};

}  // namespace strata::engine
