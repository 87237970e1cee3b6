// The always-on shared expert of a MoE layer (DeepSeek-V2/V3, GLM-4.5): a resident dense FFN run
// for every token through the CPU executor as a one-expert MoE with weight 1, added to the routed
// output the way llama.cpp adds ffn_shexp to ffn_moe_out. It never goes through the tiers.
// Exercised by tests/test_arch_forward.cpp (tiny-deepseek2, tiny-glm4moe).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model_config.h"
#include "engine/moe.h"
#include "engine/weights.h"

namespace strata::engine {

class SharedExpert {
 public:
  SharedExpert(const ModelConfig& cfg, uint32_t n_ubatch);
  // out[t] += shared(x[t]) for t < n.  x, out: [n, n_embd]
  void add(const ExpertStack& shared, uint32_t n, const float* x, ExpertExecutor& cpu, float* out);

 private:
  std::vector<int32_t> row_token_;  // [n_ubatch] 0, 1, 2, ...: token t is dispatch row t
  std::vector<float> y_;            // [n_ubatch, n_embd]
};

}  // namespace strata::engine
