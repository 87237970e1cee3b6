// Grouped expert kernels: one kernel per stage (gate+up, then down) covers every job of a layer.
// A block takes a tile of consecutive weight rows of one matrix of one job: it starts the tile's
// copy into shared memory with 16-byte cp.async (all of it in flight at once: decode is a
// bandwidth problem), quantizes its tokens' activations into shared memory meanwhile (x, or
// SwiGLU(gate, up) for the down stage), then teams of 8 or 32 lanes compute row dots with dp4a in
// the canonical order: each of the 8 accumulator lanes is one group of Dot<T>::kThreads lanes that
// takes blocks l, l+8, ... in order. All arithmetic is cuda/expert_math.h's, shared with the host
// emulation. Tested by tests/test_cuda_grouped.cpp; measured by bench/bench_gpu_grouped.cpp.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/expert_math.h"
#include "cuda/grouped_launch.h"
#include "kernels/portable_math.h"

namespace strata::cuda::detail {
namespace {

constexpr unsigned kFull = 0xFFFFFFFFu;
constexpr int kWarps = kStageThreads / 32;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// Programmatic dependent launch (sm_90+; no-ops when the launch did not ask for it): let the next
// kernel's blocks start, and wait until the previous kernel's writes are visible.
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// ---- activation quantizers: `elem` yields element i of dispatch-row slot t ----

// Q8_0: one warp per 32-element block, lane = element.
template <typename Elem>
__device__ void quantize_q8_0(const Elem& elem, int nt, int64_t n, uint8_t* acts,
                              uint32_t act_bytes, int warp, int lane) {
  const int64_t nb = n / 32;
  for (int64_t i = warp; i < nt * nb; i += kWarps) {
    const int t = static_cast<int>(i / nb);
    const int64_t b = i % nb;
    const float v = elem(t, 32 * b + lane);
    float amax = amax_key(v);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = max_key(amax, __shfl_xor_sync(kFull, amax, off));
    const Q8_0Scale s = q8_0_scale(amax);
    const int8_t c = q8_0_code(v, s.id);
    uint8_t* area = acts + t * act_bytes;
    reinterpret_cast<int8_t*>(area)[32 * b + lane] = c;
    int32_t sum = c;
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(kFull, sum, off);
    if ((lane & 15) == 0) reinterpret_cast<int32_t*>(area + n + 4 * nb)[2 * b + lane / 16] = sum;
    if (lane == 0) reinterpret_cast<float*>(area + n)[b] = s.d;
  }
}

// Q8_K: one warp per 256-element super-block, 8 consecutive elements per lane (elem8 fills them).
template <typename Elem8>
__device__ void quantize_q8_k(const Elem8& elem8, int nt, int64_t n, uint8_t* acts,
                              uint32_t act_bytes, int warp, int lane) {
  const int64_t nb = n / 256;
  for (int64_t i = warp; i < nt * nb; i += kWarps) {
    const int t = static_cast<int>(i / nb);
    const int64_t b = i % nb;
    float v[8];
    elem8(t, 256 * b + 8 * lane, v);
    AbsMax best = absmax_none();
#pragma unroll
    for (int j = 0; j < 8; ++j) best = absmax_pick(best, absmax_leaf(v[j], 8 * lane + j));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      AbsMax o;
      o.abs = __shfl_xor_sync(kFull, best.abs, off);
      o.idx = __shfl_xor_sync(kFull, best.idx, off);
      o.val = __shfl_xor_sync(kFull, best.val, off);
      best = absmax_pick(best, o);
    }
    const Q8_KScale s = q8_k_scale(best.val);
    uint32_t packed[2] = {0, 0};
    int32_t sum = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int8_t c = q8_k_code(v[j], s.iscale);
      packed[j / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(c)) << (8 * (j % 4));
      sum += c;
    }
    uint8_t* area = acts + t * act_bytes;
    *reinterpret_cast<uint2*>(area + 256 * b + 8 * lane) = make_uint2(packed[0], packed[1]);
    sum += __shfl_xor_sync(kFull, sum, 1);  // lanes 2g, 2g+1 hold group g of 16
    if ((lane & 1) == 0) reinterpret_cast<int32_t*>(area + n + 4 * nb)[16 * b + lane / 2] = sum;
    if (lane == 0) reinterpret_cast<float*>(area + n)[b] = s.d;
  }
}

// ---- one row dot by a team of 8·kThreads lanes (team_base = its first lane) ----

template <GgmlType T>
__device__ __forceinline__ float team_row_dot(const uint8_t* w_row, const ActView& x, int64_t nb,
                                              int sub, int team_base) {
  using D = Dot<T>;
  constexpr int S = D::kThreads;
  const int g = sub / S;  // accumulator lane
  const int k = sub % S;  // part of the block
  float acc = 0.0f;
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {  // the same trip count for the whole warp
    const int64_t b = b0 + g;
    const bool valid = b < nb;
    Partial p{0, 0};
    if (valid) p = D::part(w_row + b * D::kBytes, x, b, k);
#pragma unroll
    for (int off = S / 2; off > 0; off >>= 1) {
      p.a += __shfl_xor_sync(kFull, p.a, off);
      if constexpr (D::kHasM) p.m += __shfl_xor_sync(kFull, p.m, off);
    }
    // A missing block adds +0, the identity for an accumulator that never holds -0.
    const float r = valid ? D::finish(w_row + b * D::kBytes, x, b, p) : 0.0f;
    acc = add_rn(acc, r);
  }
  float lanes[8];
#pragma unroll
  for (int l = 0; l < 8; ++l) lanes[l] = __shfl_sync(kFull, acc, team_base + l * S);
  return fold8(lanes);
}

// ---- the stage kernel ----

// kAct: the down stage's activation (GroupedActivation), a template parameter so SiLU layers do
// not carry SwiGLU-OAI's double-precision expf in their registers.
template <GgmlType T, bool kDown, int kAct>
__global__ void __launch_bounds__(kStageThreads)
    expert_stage_kernel(const __grid_constant__ StageParams p) {
  using D = Dot<T>;
  constexpr int kTeamLanes = 8 * D::kThreads;
  constexpr int kTeams = 32 / kTeamLanes;  // rows a warp computes at once
  extern __shared__ __align__(16) uint8_t smem[];

  const int tiles_per_job = p.n_mats * p.tiles_per_mat;
  const StageJob& job = p.jobs[blockIdx.x / tiles_per_job];
  const int tile = static_cast<int>(blockIdx.x % tiles_per_job);
  const int mat = p.mat_begin + tile / p.tiles_per_mat;
  const int64_t row0 = static_cast<int64_t>(tile % p.tiles_per_mat) * p.rows_per_tile;
  const int n_tile_rows =
      static_cast<int>(min(static_cast<int64_t>(p.rows_per_tile), p.n_out - row0));

  // 1. The weight tile, contiguous bytes, copied from its 16-byte aligned superset.
  const uint8_t* src = job.w[mat] + row0 * p.row_bytes;
  const auto* src16 =
      reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(src) & ~uintptr_t{15});
  const int shift = static_cast<int>(src - src16);
  const int64_t n16 = (shift + n_tile_rows * p.row_bytes + 15) / 16;
  for (int64_t i = threadIdx.x; i < n16; i += kStageThreads)
    cp_async16(smem + 16 * i, src16 + 16 * i);
  const uint8_t* tile_w = smem + shift;
  // Weights are never written on the device, so their copy may start before the previous kernel
  // on the stream has finished; every read of x / gate / up and every write comes after this.
  allow_dependents();
  wait_for_prerequisites();
  uint8_t* acts = smem + p.tile_bytes;

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int team = lane / kTeamLanes;
  const int sub = lane % kTeamLanes;
  const int64_t nb = p.n_in / D::kElems;
  float* out = p.out[kDown ? 0 : mat];
  const float* bias = job.bias[mat];

  for (uint32_t r0 = 0; r0 < job.n_rows; r0 += p.tok_chunk) {
    const int nt = static_cast<int>(min(static_cast<uint32_t>(p.tok_chunk), job.n_rows - r0));
    const int64_t row_first = static_cast<int64_t>(job.row_begin) + r0;  // dispatch row of slot 0
    if (r0 > 0) __syncthreads();  // the previous chunk's activations are no longer read

    // 2. Activations of this chunk into shared memory (overlaps the tile copy).
    if constexpr (D::kActBlock == 32) {
      if constexpr (kDown) {
        const auto elem = [&](int t, int64_t i) {
          const int64_t o = (row_first + t) * p.n_in + i;
          return glu_elem(kAct, p.gate[o], p.up[o], p.gelu_table);
        };
        quantize_q8_0(elem, nt, p.n_in, acts, p.act_bytes, warp, lane);
      } else {
        const auto elem = [&](int t, int64_t i) {
          return p.x[static_cast<int64_t>(p.row_token[row_first + t]) * p.n_in + i];
        };
        quantize_q8_0(elem, nt, p.n_in, acts, p.act_bytes, warp, lane);
      }
    } else {
      if constexpr (kDown) {
        const auto elem8 = [&](int t, int64_t i, float* v) {
          const int64_t o = (row_first + t) * p.n_in + i;
          const float4 g0 = *reinterpret_cast<const float4*>(p.gate + o);
          const float4 g1 = *reinterpret_cast<const float4*>(p.gate + o + 4);
          const float4 u0 = *reinterpret_cast<const float4*>(p.up + o);
          const float4 u1 = *reinterpret_cast<const float4*>(p.up + o + 4);
          const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
          const float u[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
#pragma unroll
          for (int j = 0; j < 8; ++j) v[j] = glu_elem(kAct, g[j], u[j], p.gelu_table);
        };
        quantize_q8_k(elem8, nt, p.n_in, acts, p.act_bytes, warp, lane);
      } else {
        const auto elem8 = [&](int t, int64_t i, float* v) {
          const float* xr = p.x + static_cast<int64_t>(p.row_token[row_first + t]) * p.n_in + i;
          const float4 a = *reinterpret_cast<const float4*>(xr);
          const float4 c = *reinterpret_cast<const float4*>(xr + 4);
          v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
          v[4] = c.x, v[5] = c.y, v[6] = c.z, v[7] = c.w;
        };
        quantize_q8_k(elem8, nt, p.n_in, acts, p.act_bytes, warp, lane);
      }
    }
    if (r0 == 0) cp_async_wait_all();
    __syncthreads();

    // 3. Row dots: each warp takes kTeams rows at a time; a team past the tile's end computes a
    // duplicate of the last row (keeping the warp's shuffles converged) and stores nothing.
    for (int rb = warp * kTeams; rb < n_tile_rows; rb += kWarps * kTeams) {
      const int rr = rb + team;
      const int rc = rr < n_tile_rows ? rr : n_tile_rows - 1;
      const uint8_t* w_row = tile_w + rc * p.row_bytes;
      for (int t = 0; t < nt; ++t) {
        const ActView x = act_view(acts + t * p.act_bytes, p.n_in, D::kActBlock);
        float v = team_row_dot<T>(w_row, x, nb, sub, team * kTeamLanes);
        if (sub == 0 && rr < n_tile_rows) {
          if (bias != nullptr) v = add_rn(v, bias[row0 + rr]);
          out[(row_first + t) * p.n_out + row0 + rr] = v;
        }
      }
    }
  }
}

template <GgmlType T, bool kDown, int kAct>
void launch_typed(const StageParams& p, uint32_t grid, uint32_t smem, bool overlap,
                  cudaStream_t stream) {
  auto* kernel = &expert_stage_kernel<T, kDown, kAct>;
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kStageThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = overlap ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

__global__ void portable_eval_kernel(int fn, const float* __restrict__ x, float* __restrict__ y,
                                     int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fn == 0   ? kernels::portable_expf(x[i])
           : fn == 1 ? kernels::portable_silu(x[i])
                     : oai_expf(x[i]);
}

}  // namespace

bool launch_stage(GgmlType t, bool down, const StageParams& p, uint32_t grid, uint32_t smem,
                  bool overlap, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  return dispatch_grouped(t, [&](auto tag) {
    if (!down) {
      launch_typed<decltype(tag)::kType, false, 0>(p, grid, smem, overlap, s);
    } else if (p.act == 0) {
      launch_typed<decltype(tag)::kType, true, 0>(p, grid, smem, overlap, s);
    } else if (p.act == 1) {
      launch_typed<decltype(tag)::kType, true, 1>(p, grid, smem, overlap, s);
    } else {
      launch_typed<decltype(tag)::kType, true, 2>(p, grid, smem, overlap, s);
    }
  });
}

void launch_portable_eval(int fn, const float* dev_x, float* dev_y, int64_t n) {
  if (n == 0) return;
  const int64_t blocks = (n + 255) / 256 < 65536 ? (n + 255) / 256 : 65536;
  portable_eval_kernel<<<static_cast<unsigned>(blocks), 256>>>(fn, dev_x, dev_y, n);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace strata::cuda::detail
