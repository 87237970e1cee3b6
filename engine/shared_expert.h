// The always-on shared expert of a MoE layer (DeepSeek-V2/V3, GLM-4.5, Qwen2-MoE): a resident
// dense FFN run for every token through the CPU executor as a one-expert MoE with weight 1, added
// to the routed output the way llama.cpp adds ffn_shexp to ffn_moe_out. Qwen2-MoE scales it per
// token by sigmoid(ffn_gate_inp_shexp · x) first (the gate logits come from route()). It never goes
// through the tiers. With CUDA_DENSE a one-token pass computes it on GPU 0 (GpuDense::ffn, the same
// bits) where it is held (CUDA_DENSE=2: chunks too, through GEMMs). Exercised by
// tests/test_arch_forward.cpp (tiny-deepseek2, tiny-glm4moe), tests/test_synth_peer.cpp (the
// synthetic tiny-qwen2moe against llama.cpp) and tests/test_gpu_lane.cpp (CUDA_DENSE).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model_config.h"
#include "engine/moe.h"
#include "engine/weights.h"

namespace strata::engine {

class GpuDense;

class SharedExpert {
 public:
  SharedExpert(const ModelConfig& cfg, uint32_t n_ubatch);
  // CUDA_DENSE: passes go to the GPU where it holds layer il's shared expert and takes the chunk
  // (GpuDense::ffn; null: off).
  void set_gpu_dense(GpuDense* dense) { dense_ = dense; }
  // out[t] += shared(x[t]) for t < n, layer il's shared expert; with gate_logits [n] (null: no
  // gate), out[t] += shared(x[t]) · sigmoid(gate_logits[t]).  x, out: [n, n_embd]
  // Returns the weight bytes the CPU read (its three matrices, once for the n rows; 0 when the
  // GPU computed it), for PROF's expert streaming rate.
  uint64_t add(uint32_t il, const ExpertStack& shared, uint32_t n, const float* x,
               ExpertExecutor& cpu, float* out, const float* gate_logits = nullptr);

 private:
  GpuDense* dense_ = nullptr;
  std::vector<int32_t> row_token_;  // [n_ubatch] 0, 1, 2, ...: token t is dispatch row t
  std::vector<float> y_;            // [n_ubatch, n_embd]
};

}  // namespace strata::engine
