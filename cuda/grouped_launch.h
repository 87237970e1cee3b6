// Internal seam between grouped.cu (nvcc: kernels) and grouped.cpp (g++: checks, tiling, buffers,
// typed errors): the kernel parameter block and the launchers. Not for use outside cuda/ (and the
// GPU bench). Exercised by tests/test_cuda_grouped.cpp.
#pragma once

#include <cstdint>

#include "io/ggml_type.h"

namespace strata::cuda::detail {

constexpr int kStageThreads = 256;    // 8 warps per block
constexpr int kMaxJobsPerStage = 64;  // jobs per kernel launch (parameters stay under 4 KiB)
static_assert(kMaxJobsPerStage * (6 * sizeof(void*) + 8) + 256 <= 4096);

struct StageJob {
  const uint8_t* w[3];   // gate, up, down (device)
  const float* bias[3];  // gate, up, down biases (device) or nullptr
  uint32_t row_begin;    // first dispatch row
  uint32_t n_rows;       // > 0
};

// One stage = one kernel launch: for each job, rows of matrices [mat_begin, mat_begin + n_mats)
// (gate/up: 0, 1; down: 2) times each of the job's dispatch rows. Grid: n_jobs · n_mats ·
// tiles_per_mat blocks; block i takes job i / (n_mats · tiles_per_mat), then its matrix, then
// rows [tile · rows_per_tile, +rows_per_tile) of it.
struct StageParams {
  StageJob jobs[kMaxJobsPerStage];
  int32_t n_jobs;
  int32_t mat_begin;
  int32_t n_mats;
  int32_t rows_per_tile;
  int32_t tiles_per_mat;
  int32_t tok_chunk;    // dispatch rows quantized into shared memory at once
  int32_t act;          // down stage: GroupedActivation (0 SiLU-GLU, 1 SwiGLU-OAI, 2 GELU-GLU)
  uint32_t tile_bytes;  // shared bytes for the weight tile (16-byte multiple, + 16 for alignment)
  uint32_t act_bytes;   // shared bytes of one quantized activation row
  int64_t n_out;        // rows of each matrix
  int64_t n_in;         // columns of each matrix
  int64_t row_bytes;
  const float* x;            // gate/up stage: [n_tokens, n_in]
  const int32_t* row_token;  // gate/up stage: [n_rows]
  const float* gate;         // down stage: [n_rows, n_in] gate outputs
  const float* up;           // down stage: [n_rows, n_in] up outputs
  float* out[2];             // gate/up stage: gate, up [n_rows, n_out]; down stage: y in out[0]
  const float* gelu_table;   // down stage, act 2: kernels::gelu_table's device copy
};

// Enqueues one stage for weight type t (false: no kernel for t). Throws Error(kCuda) on a failed
// launch. `down` selects the SwiGLU-input variant; `overlap` launches it as a programmatic
// dependent of the previous kernel on the stream (sm_90+ only).
bool launch_stage(GgmlType t, bool down, const StageParams& p, uint32_t grid, uint32_t smem,
                  bool overlap, void* stream);

// fn 0: portable_expf, 1: portable_silu, 2: oai_expf over n device floats, on the legacy stream.
void launch_portable_eval(int fn, const float* dev_x, float* dev_y, int64_t n);

}  // namespace strata::cuda::detail
