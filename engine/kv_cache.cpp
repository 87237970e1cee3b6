// F32 KV cache storage (see kv_cache.h). Exercised by tests/test_model_forward.cpp.
#include "engine/kv_cache.h"

namespace strata::engine {

KvCache::KvCache(const ModelConfig& cfg, uint32_t n_ctx) : n_ctx_(n_ctx) {
  // Each layer's K and V start on a cache line.
  const auto floats = [n_ctx](uint32_t width) { return (size_t{n_ctx} * width + 15) / 16 * 16; };
  size_t total = 0;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    k_width_.push_back(cfg.kv_k_width(il));
    v_width_.push_back(cfg.kv_v_width(il));
    total += floats(k_width_.back()) + floats(v_width_.back());
    n_bytes_ += (size_t{n_ctx} * k_width_.back() + size_t{n_ctx} * v_width_.back()) * sizeof(float);
  }
  // No first touch: positions fault their pages in as they fill (zeros until then).
  arena_ = tiers::RamArena(
      total * sizeof(float), tiers::RamArena::kAnyNode, tiers::NumaMode::kOff,
      [](std::span<std::byte>) {}, nullptr);
  auto* at = reinterpret_cast<float*>(arena_.data());
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    k_.push_back(at);
    at += floats(k_width_[il]);
    v_.push_back(at);
    at += floats(v_width_[il]);
  }
}

}  // namespace strata::engine
