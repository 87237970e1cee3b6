// The attention KV cache: F32 K and V per layer, one row per position (llama.cpp's references were
// made with an F32 cache, so no rounding enters here). MLA layers keep only K = [c ; k_pe] (V is
// read from it: cfg.kv_v_width() is 0). All layers live in one 2 MiB-aligned huge-page arena
// (tiers::RamArena, no NUMA policy): a head's rows are strided by the whole K or V row, so on 4 KiB
// pages a long context's attention took a TLB miss every few positions. Pages are faulted in as
// positions fill (anonymous memory reads as zeros until then). Exercised by
// tests/test_model_forward.cpp and tests/test_arch_forward.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model_config.h"
#include "tiers/ram_arena.h"

namespace strata::engine {

class KvCache {
 public:
  KvCache(const ModelConfig& cfg, uint32_t n_ctx);

  uint32_t n_ctx() const { return n_ctx_; }
  // Row of position pos in layer il: [kv_k_width] for K, [kv_v_width] for V.
  float* k(uint32_t il, uint32_t pos) { return k_[il] + size_t{pos} * k_width_[il]; }
  float* v(uint32_t il, uint32_t pos) { return v_[il] + size_t{pos} * v_width_[il]; }
  const float* k(uint32_t il, uint32_t pos) const { return k_[il] + size_t{pos} * k_width_[il]; }
  const float* v(uint32_t il, uint32_t pos) const { return v_[il] + size_t{pos} * v_width_[il]; }
  uint32_t k_width(uint32_t il) const { return k_width_[il]; }
  uint32_t v_width(uint32_t il) const { return v_width_[il]; }
  uint64_t n_bytes() const { return n_bytes_; }

 private:
  uint32_t n_ctx_;
  uint64_t n_bytes_ = 0;
  std::vector<uint32_t> k_width_;
  std::vector<uint32_t> v_width_;
  tiers::RamArena arena_;  // every layer's K then V rows
  std::vector<float*> k_;  // per layer [n_ctx, k_width] in arena_
  std::vector<float*> v_;  // per layer [n_ctx, v_width] in arena_
};

}  // namespace strata::engine
