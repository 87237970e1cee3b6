// F32 KV cache storage (see kv_cache.h). Exercised by tests/test_model_forward.cpp.
#include "engine/kv_cache.h"

#include <cstring>

#include "io/check.h"

namespace strata::engine {

KvCache::KvCache(const ModelConfig& cfg, uint32_t n_ctx) : n_ctx_(n_ctx) {
  // Each layer's K and V start on a cache line.
  const auto floats = [n_ctx](uint32_t width) { return (size_t{n_ctx} * width + 15) / 16 * 16; };
  size_t total = 0;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const uint32_t kw = cfg.kv_k_width(il), vw = cfg.kv_v_width(il);
    const uint32_t nh = cfg.n_head_kv(il);
    STRATA_ASSERT(nh > 0 && kw % nh == 0 && vw % nh == 0,
                  "layer {}: KV widths {} / {} are not {} heads", il, kw, vw, nh);
    n_head_.push_back(nh);
    k_dim_.push_back(kw / nh);
    v_dim_.push_back(vw / nh);
    total += floats(kw) + floats(vw);
    n_bytes_ += (size_t{n_ctx} * kw + size_t{n_ctx} * vw) * sizeof(float);
  }
  // No first touch: positions fault their pages in as they fill (zeros until then).
  arena_ = tiers::RamArena(
      total * sizeof(float), tiers::RamArena::kAnyNode, tiers::NumaMode::kOff,
      [](std::span<std::byte>) {}, nullptr);
  auto* at = reinterpret_cast<float*>(arena_.data());
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    k_.push_back(at);
    at += floats(n_head_[il] * k_dim_[il]);
    v_.push_back(at);
    at += floats(n_head_[il] * v_dim_[il]);
  }
}

void KvCache::store(uint32_t il, uint32_t pos, const float* k_row, const float* v_row) {
  for (uint32_t g = 0; g < n_head_[il]; ++g) {
    std::memcpy(k(il, g, pos), k_row + size_t{g} * k_dim_[il], sizeof(float) * k_dim_[il]);
    if (v_dim_[il] > 0)
      std::memcpy(v(il, g, pos), v_row + size_t{g} * v_dim_[il], sizeof(float) * v_dim_[il]);
  }
}

size_t KvCache::floats_per_position() const {
  size_t n = 0;
  for (size_t il = 0; il < n_head_.size(); ++il)
    n += size_t{n_head_[il]} * (k_dim_[il] + v_dim_[il]);
  return n;
}

template <typename Fn>
void KvCache::for_each_prefix(uint32_t n, Fn&& fn) const {
  for (uint32_t il = 0; il < n_head_.size(); ++il)
    for (int part = 0; part < 2; ++part) {
      const uint32_t dim = part == 0 ? k_dim_[il] : v_dim_[il];
      for (uint32_t g = 0; g < n_head_[il] && dim > 0; ++g)
        fn(part == 0 ? k_[il] + size_t{g} * n_ctx_ * dim : v_[il] + size_t{g} * n_ctx_ * dim,
           size_t{n} * dim);
    }
}

void KvCache::copy_rows(uint32_t n, std::vector<float>& out) const {
  STRATA_ASSERT(n <= n_ctx_, "copy_rows: {} positions of {}", n, n_ctx_);
  out.resize(size_t{n} * floats_per_position());
  if (n == 0) return;
  float* at = out.data();
  for_each_prefix(n, [&](const float* rows, size_t floats) {
    std::memcpy(at, rows, sizeof(float) * floats);
    at += floats;
  });
}

void KvCache::restore_rows(uint32_t n, std::span<const float> in) {
  STRATA_ASSERT(n <= n_ctx_ && in.size() == size_t{n} * floats_per_position(),
                "restore_rows: {} floats for {} positions", in.size(), n);
  if (n == 0) return;
  const float* at = in.data();
  for_each_prefix(n, [&](float* rows, size_t floats) {
    std::memcpy(rows, at, sizeof(float) * floats);
    at += floats;
  });
}

}  // namespace strata::engine
