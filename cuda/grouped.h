// Grouped expert execution on one GPU (plain C++ header, no CUDA types, so the engine may include
// it): one launch per layer per device runs every selected expert whose home is that device —
// quantize x, gate and up GEMVs, SwiGLU, quantize, down GEMV — and returns one output row per
// (token, expert) pair, unweighted and not summed (the host combines in its fixed order). Each
// output is bit-identical to kernels::expert_forward_ref for the same expert and token.
// Weight types: every quantized type the CPU kernels take — Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, MXFP4 (gpt-oss), IQ4_NL, IQ4_XS — any per matrix. Activations: SiLU-GLU
// (the portable SwiGLU) or gpt-oss's SwiGLU-OAI; optional per-expert F32 biases on gate, up, down
// (added to each output element after its dot, as engine/moe.cpp's add_bias_rows). A build without
// CUDA links stubs (cuda/stub.cpp); the host emulation below works in every build. Tested by
// tests/test_cuda_grouped.cpp; measured by bench/bench_gpu_grouped.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "io/ggml_type.h"

namespace strata::cuda {

// One expert's matrices: gate and up [n_ff, n_embd], down [n_embd, n_ff], each row-major with rows
// of ggml_row_bytes(type, cols) bytes back to back and a 16-byte aligned base. Device pointers for
// GroupedExperts (VramStore::weights gives them), host pointers for the emulation. The kernel
// may read up to 15 bytes past a matrix's end (never past its 16-byte granule).
struct ExpertWeights {
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* down = nullptr;
};

// The gate/up activation: kernels::portable_swiglu (what engine::silu_glu computes),
// engine::swiglu_oai's clamped SwiGLU (alpha 1.702, limit 7, glibc's expf; cuda/expert_math.h),
// or grok's GELU-GLU through a device copy of kernels::gelu_table (kernels/gelu.h).
enum class GroupedActivation : int32_t { kSiluGlu = 0, kSwigluOai = 1, kGeluGlu = 2 };

// What every expert of a layer shares.
struct ExpertShape {
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  GgmlType gate_type = GgmlType::Q4_0;
  GgmlType up_type = GgmlType::Q4_0;
  GgmlType down_type = GgmlType::Q4_0;
  GroupedActivation activation = GroupedActivation::kSiluGlu;
};

// Whether the grouped kernel takes weights of type t.
bool grouped_supported(GgmlType t);

// One selected expert and the dispatch rows routed to it. Dispatch row r (one token-expert pair)
// reads x row row_token[r] and writes output row r.
struct GroupedJob {
  ExpertWeights w;
  uint32_t row_begin = 0;  // rows [row_begin, row_end) of the layer's dispatch order
  uint32_t row_end = 0;
  // The expert's F32 biases (device pointers for GroupedExperts, host for the emulation), or
  // nullptr: gate and up [n_ff], down [n_embd].
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
};

// One layer's work for one device. Rows that no job covers are left unwritten.
struct GroupedLayer {
  ExpertShape shape;
  const GroupedJob* jobs = nullptr;  // [n_jobs]
  uint32_t n_jobs = 0;
  const int32_t* row_token = nullptr;  // [n_rows] token of each dispatch row, host memory
  uint32_t n_rows = 0;
  uint32_t n_tokens = 0;  // rows of x
};

// Capacity of a GroupedExperts context, fixed at construction so decode never allocates.
struct GroupedLimits {
  int device = 0;
  int64_t max_embd = 0;
  int64_t max_ff = 0;
  uint32_t max_tokens = 1;  // x rows per launch
  uint32_t max_rows = 8;    // dispatch rows per launch (token-expert pairs on this device)
  // On sm_90+, launch each stage as a programmatic dependent of the kernel before it on the
  // stream: its blocks start copying their (read-only) weights while that kernel finishes, and
  // wait for it before touching activations. Same results either way.
  bool overlap_launches = true;
};

// The per-device executor: pinned activation buffers, device scratch, an event. One launch in
// flight at a time: launch(), then the CPU's own work, then wait().
class GroupedExperts {
 public:
  // Allocates everything on limits.device. Throws Error(kCuda) on a CUDA failure and
  // Error(kUnsupported) in a build without CUDA.
  explicit GroupedExperts(const GroupedLimits& limits);
  ~GroupedExperts();
  GroupedExperts(const GroupedExperts&) = delete;
  GroupedExperts& operator=(const GroupedExperts&) = delete;

  const GroupedLimits& limits() const;

  // Pinned [max_tokens, n_embd] (rows packed with the next launch's n_embd): the caller writes the
  // layer's x rows here before launch().
  float* x_host();
  // Pinned [n_rows, n_embd] outputs of the last launch, valid after wait().
  const float* y_host() const;

  // Asynchronous on `stream` (a cudaStream_t; nullptr = this context's own stream): copies x and
  // row_token up, runs the kernels, copies y down, records the event. Returns at once.
  void launch(const GroupedLayer& layer, void* stream = nullptr);

  // The same kernels on activations already on the device, no copies:
  //   dev_x [n_tokens, n_embd], dev_row_token [n_rows], dev_y [n_rows, n_embd] (16-byte aligned).
  // layer.row_token is not read. Several launch_device calls may be queued on one stream (the
  // scratch is stream-ordered); wait() then waits for the last. kGateUp stops after the gate/up
  // stage (dev_y untouched): for benchmarks of that pass.
  enum class Stages { kAll, kGateUp };
  void launch_device(const GroupedLayer& layer, const float* dev_x, const int32_t* dev_row_token,
                     float* dev_y, void* stream = nullptr, Stages stages = Stages::kAll);

  // Blocks until the last launch is done (its y_host() rows are final). Throws Error(kCuda) if a
  // kernel failed. A no-op when nothing is in flight.
  void wait();

  // Device time of the last launch() (its copies and kernels, between two events on its stream),
  // in seconds; valid after wait(), 0 before the first launch.
  double last_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- host emulation: the kernels' own element functions (cuda/expert_math.h) run on the CPU ----

// The whole layer on the host: x [n_tokens, n_embd], y [n_rows, n_embd], host weight pointers.
void grouped_forward_emulated(const GroupedLayer& layer, const float* x, float* y);

// The device activation quantizer on the host, output in ggml block layout (BlockQ8_0 for
// act == Q8_0, BlockQ8_K for Q8_K) so it compares byte for byte with
// kernels::quantize_activation_row.
void grouped_quantize_emulated(GgmlType act, const float* x, void* dst, int64_t n);

// The device dot of one weight row with an activation row that kernels::quantize_activation_row
// produced (in vec_dot_type(w_type)), in the kernel's thread decomposition.
float grouped_row_dot_emulated(GgmlType w_type, const void* w_row, const void* xq, int64_t n);

// ---- device checks of kernels/portable_math.h ----

enum class PortableFn { kExp, kSilu, kOaiExp };

// dev_y[i] = portable_expf / portable_silu / the SwiGLU-OAI expf (cuda/expert_math.h oai_expf)
// of dev_x[i] on the device, for tests that the device gives the host's bits. Synchronous.
void cuda_portable_eval(PortableFn fn, const float* dev_x, float* dev_y, int64_t n);

}  // namespace strata::cuda
