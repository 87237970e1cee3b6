// The attention KV cache: F32 K and V per layer, one row per position (llama.cpp's references were
// made with an F32 cache, so no rounding enters here). MLA layers keep only K = [c ; k_pe] (V is
// read from it: cfg.kv_v_width() is 0). Exercised by tests/test_model_forward.cpp and
// tests/test_arch_forward.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model_config.h"

namespace strata::engine {

class KvCache {
 public:
  KvCache(const ModelConfig& cfg, uint32_t n_ctx);

  uint32_t n_ctx() const { return n_ctx_; }
  // Row of position pos in layer il: [kv_k_width] for K, [kv_v_width] for V.
  float* k(uint32_t il, uint32_t pos) { return k_[il].data() + size_t{pos} * k_width_[il]; }
  float* v(uint32_t il, uint32_t pos) { return v_[il].data() + size_t{pos} * v_width_[il]; }
  const float* k(uint32_t il, uint32_t pos) const {
    return k_[il].data() + size_t{pos} * k_width_[il];
  }
  const float* v(uint32_t il, uint32_t pos) const {
    return v_[il].data() + size_t{pos} * v_width_[il];
  }
  uint32_t k_width(uint32_t il) const { return k_width_[il]; }
  uint32_t v_width(uint32_t il) const { return v_width_[il]; }
  uint64_t n_bytes() const;

 private:
  uint32_t n_ctx_;
  std::vector<uint32_t> k_width_;
  std::vector<uint32_t> v_width_;
  std::vector<std::vector<float>> k_;  // per layer [n_ctx, k_width]
  std::vector<std::vector<float>> v_;  // per layer [n_ctx, v_width]
};

}  // namespace strata::engine
