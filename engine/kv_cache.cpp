// F32 KV cache storage (see kv_cache.h). Exercised by tests/test_model_forward.cpp.
#include "engine/kv_cache.h"

namespace strata::engine {

KvCache::KvCache(const ModelConfig& cfg, uint32_t n_ctx) : n_ctx_(n_ctx) {
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    k_width_.push_back(cfg.kv_k_width(il));
    v_width_.push_back(cfg.kv_v_width(il));
    k_.emplace_back(size_t{n_ctx} * k_width_.back(), 0.0f);
    v_.emplace_back(size_t{n_ctx} * v_width_.back(), 0.0f);
  }
}

uint64_t KvCache::n_bytes() const {
  uint64_t n = 0;
  for (size_t il = 0; il < k_.size(); ++il) n += (k_[il].size() + v_[il].size()) * sizeof(float);
  return n;
}

}  // namespace strata::engine
