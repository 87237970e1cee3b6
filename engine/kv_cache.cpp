// KV cache storage (see kv_cache.h). Exercised by tests/test_model_forward.cpp and
// tests/test_kv_types.cpp.
#include "engine/kv_cache.h"

#include <cstring>

#include "io/check.h"
#include "kernels/quant.h"

namespace strata::engine {
namespace {

// Bytes of one head's row of n elements: every layer, MLA's latent rows included, takes the type.
uint32_t row_bytes_of(KvType type, uint32_t n) {
  switch (type) {
    case KvType::kF16:
      return 2 * n;
    case KvType::kQ8_0:
      return n / 32 * 34;
    case KvType::kF32:
      break;
  }
  return 4 * n;
}

// Q8_0 rows are whole blocks of 32: every head's K and V width must be a multiple of 32.
void check_type(const ModelConfig& cfg, KvType type) {
  if (type != KvType::kQ8_0) return;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const uint32_t nh = cfg.n_head_kv(il);
    const uint32_t kd = cfg.kv_k_width(il) / nh, vd = cfg.kv_v_width(il) / nh;
    if (kd % 32 != 0 || vd % 32 != 0)
      fail(ErrorKind::kUnsupported,
           "KV_TYPE=q8_0: layer {}'s KV heads are {} (K) and {} (V) elements wide, not multiples "
           "of 32 (Q8_0's block); use KV_TYPE=f16",
           il, kd, vd);
  }
}

}  // namespace

KvType parse_kv_type(std::string_view s) {
  if (s == "f32") return KvType::kF32;
  if (s == "f16") return KvType::kF16;
  if (s == "q8_0") return KvType::kQ8_0;
  fail(ErrorKind::kBadValue, "KV_TYPE={}: f32, f16 or q8_0", s);
}

std::string_view kv_type_name(KvType t) {
  switch (t) {
    case KvType::kF16:
      return "f16";
    case KvType::kQ8_0:
      return "q8_0";
    case KvType::kF32:
      break;
  }
  return "f32";
}

uint64_t KvCache::position_bytes(const ModelConfig& cfg, KvType type) {
  check_type(cfg, type);
  uint64_t n = 0;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const uint32_t nh = cfg.n_head_kv(il);
    n += uint64_t{nh} * (row_bytes_of(type, cfg.kv_k_width(il) / nh) +
                         row_bytes_of(type, cfg.kv_v_width(il) / nh));
  }
  return n;
}

KvCache::KvCache(const ModelConfig& cfg, uint32_t n_ctx, KvType type) : n_ctx_(n_ctx), type_(type) {
  check_type(cfg, type);
  // Each layer's K and V start on a cache line.
  const auto bytes = [n_ctx](uint32_t n_head, uint32_t row) {
    return (size_t{n_ctx} * n_head * row + 63) / 64 * 64;
  };
  size_t total = 0;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const uint32_t kw = cfg.kv_k_width(il), vw = cfg.kv_v_width(il);
    const uint32_t nh = cfg.n_head_kv(il);
    STRATA_ASSERT(nh > 0 && kw % nh == 0 && vw % nh == 0,
                  "layer {}: KV widths {} / {} are not {} heads", il, kw, vw, nh);
    n_head_.push_back(nh);
    k_dim_.push_back(kw / nh);
    v_dim_.push_back(vw / nh);
    k_row_.push_back(row_bytes_of(type, kw / nh));
    v_row_.push_back(row_bytes_of(type, vw / nh));
    total += bytes(nh, k_row_.back()) + bytes(nh, v_row_.back());
    n_bytes_ += size_t{n_ctx} * nh * (k_row_.back() + v_row_.back());
  }
  // No first touch here: Forward faults the first positions' pages in on all its threads, later
  // ones fault in as they fill (zeros until written).
  arena_ = tiers::RamArena(
      total, tiers::RamArena::kAnyNode, tiers::NumaMode::kOff, [](std::span<std::byte>) {},
      nullptr);
  std::byte* at = arena_.data();
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    k_.push_back(at);
    at += bytes(n_head_[il], k_row_[il]);
    v_.push_back(at);
    at += bytes(n_head_[il], v_row_[il]);
  }
}

void KvCache::store(uint32_t il, uint32_t pos, const float* k_row, const float* v_row) {
  for (uint32_t g = 0; g < n_head_[il]; ++g) {
    const float* kg = k_row + size_t{g} * k_dim_[il];
    const float* vg = v_dim_[il] > 0 ? v_row + size_t{g} * v_dim_[il] : nullptr;
    switch (type_) {
      case KvType::kF32:
        std::memcpy(k(il, g, pos), kg, sizeof(float) * k_dim_[il]);
        if (vg) std::memcpy(v(il, g, pos), vg, sizeof(float) * v_dim_[il]);
        break;
      case KvType::kF16: {
        auto* k16 = reinterpret_cast<uint16_t*>(k_bytes(il, g, pos));
        for (uint32_t i = 0; i < k_dim_[il]; ++i) k16[i] = kernels::f32_to_fp16(kg[i]);
        auto* v16 = reinterpret_cast<uint16_t*>(v_bytes(il, g, pos));
        for (uint32_t i = 0; vg && i < v_dim_[il]; ++i) v16[i] = kernels::f32_to_fp16(vg[i]);
        break;
      }
      case KvType::kQ8_0:
        kernels::quantize_row(GgmlType::Q8_0, kg, k_bytes(il, g, pos), k_dim_[il]);
        if (vg) kernels::quantize_row(GgmlType::Q8_0, vg, v_bytes(il, g, pos), v_dim_[il]);
        break;
    }
  }
}

size_t KvCache::bytes_per_position() const {
  size_t n = 0;
  for (size_t il = 0; il < n_head_.size(); ++il)
    n += size_t{n_head_[il]} * (k_row_[il] + v_row_[il]);
  return n;
}

template <typename Fn>
void KvCache::for_each_prefix(uint32_t n, Fn&& fn) const {
  for (uint32_t il = 0; il < n_head_.size(); ++il)
    for (int part = 0; part < 2; ++part) {
      const uint32_t row = part == 0 ? k_row_[il] : v_row_[il];
      for (uint32_t g = 0; g < n_head_[il] && row > 0; ++g)
        fn(part == 0 ? k_bytes(il, g, 0) : v_bytes(il, g, 0), size_t{n} * row);
    }
}

std::vector<std::span<std::byte>> KvCache::prefix_ranges(uint32_t n) const {
  STRATA_ASSERT(n <= n_ctx_, "prefix_ranges: {} positions of {}", n, n_ctx_);
  std::vector<std::span<std::byte>> out;
  for_each_prefix(n, [&](const std::byte* rows, size_t bytes) {
    out.emplace_back(const_cast<std::byte*>(rows), bytes);
  });
  return out;
}

void KvCache::copy_rows(uint32_t n, std::vector<std::byte>& out) const {
  STRATA_ASSERT(n <= n_ctx_, "copy_rows: {} positions of {}", n, n_ctx_);
  out.resize(size_t{n} * bytes_per_position());
  if (n == 0) return;
  std::byte* at = out.data();
  for_each_prefix(n, [&](const std::byte* rows, size_t bytes) {
    std::memcpy(at, rows, bytes);
    at += bytes;
  });
}

void KvCache::restore_rows(uint32_t n, std::span<const std::byte> in) {
  STRATA_ASSERT(n <= n_ctx_ && in.size() == size_t{n} * bytes_per_position(),
                "restore_rows: {} bytes for {} positions", in.size(), n);
  if (n == 0) return;
  const std::byte* at = in.data();
  for_each_prefix(n, [&](std::byte* rows, size_t bytes) {
    std::memcpy(rows, at, bytes);
    at += bytes;
  });
}

}  // namespace strata::engine
