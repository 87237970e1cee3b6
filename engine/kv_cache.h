// The attention KV cache: K and V per layer as F32 (the default: llama.cpp's references were made
// with an F32 cache, so no rounding enters here), with KV_TYPE=f16 IEEE halves (round to nearest
// even at store), or with KV_TYPE=q8_0 Q8_0 blocks (per 32 elements an fp16 d = amax / 127 and 32
// int8 codes, quantized at store as kernels::quantize_row does a Q8_0 weight row); the attention
// core widens halves and d · code exactly. Group-major: each KV head (GQA
// group) of a layer keeps its positions' rows contiguous, [head][position][head_dim], so the
// attention core, which reads one group's rows for all of its query heads, streams them instead of
// taking a head_dim slice every n_kv_head * head_dim floats (at 2K positions that strided read was
// most of a decode token). MLA layers keep one head, K = [c ; k_pe] (V is read from it:
// cfg.kv_v_width() is 0), of the cache's type like every layer. All layers live in one 2
// MiB-aligned huge-page arena (tiers::RamArena, no NUMA policy): on 4 KiB pages a long context's
// attention took a TLB miss every few positions. Pages are faulted in as positions fill (anonymous
// memory reads as zeros until then). Exercised by tests/test_model_forward.cpp,
// tests/test_arch_forward.cpp and tests/test_arch_ops.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "engine/model_config.h"
#include "tiers/ram_arena.h"

namespace strata::engine {

enum class KvType : uint8_t { kF32, kF16, kQ8_0 };
// KV_TYPE's value: "f32", "f16" or "q8_0" (anything else throws Error(kBadValue)).
KvType parse_kv_type(std::string_view s);
std::string_view kv_type_name(KvType t);

class KvCache {
 public:
  KvCache(const ModelConfig& cfg, uint32_t n_ctx, KvType type = KvType::kF32);

  // Bytes one position takes over all layers, K and V, for a cache of this type (RAM budgets,
  // PROF's roofline). Both this and the constructor throw Error(kUnsupported) for q8_0 on a model
  // whose KV heads are not multiples of 32 wide.
  static uint64_t position_bytes(const ModelConfig& cfg, KvType type);

  uint32_t n_ctx() const { return n_ctx_; }
  KvType type() const { return type_; }
  // KV head g's row at position pos in layer il: head_dim_k(il) elements of K, head_dim_v(il) of
  // V (k_row_bytes / v_row_bytes bytes); the row of position pos + 1 follows it. k / v for an F32
  // cache, k16 / v16 for an F16 one, k_bytes / v_bytes (Q8_0 blocks) for q8_0.
  float* k(uint32_t il, uint32_t g, uint32_t pos) {
    return reinterpret_cast<float*>(k_bytes(il, g, pos));
  }
  float* v(uint32_t il, uint32_t g, uint32_t pos) {
    return reinterpret_cast<float*>(v_bytes(il, g, pos));
  }
  const float* k(uint32_t il, uint32_t g, uint32_t pos) const {
    return reinterpret_cast<const float*>(k_bytes(il, g, pos));
  }
  const float* v(uint32_t il, uint32_t g, uint32_t pos) const {
    return reinterpret_cast<const float*>(v_bytes(il, g, pos));
  }
  const uint16_t* k16(uint32_t il, uint32_t g, uint32_t pos) const {
    return reinterpret_cast<const uint16_t*>(k_bytes(il, g, pos));
  }
  const uint16_t* v16(uint32_t il, uint32_t g, uint32_t pos) const {
    return reinterpret_cast<const uint16_t*>(v_bytes(il, g, pos));
  }
  std::byte* k_bytes(uint32_t il, uint32_t g, uint32_t pos) const {
    return k_[il] + (size_t{g} * n_ctx_ + pos) * k_row_[il];
  }
  std::byte* v_bytes(uint32_t il, uint32_t g, uint32_t pos) const {
    return v_[il] + (size_t{g} * n_ctx_ + pos) * v_row_[il];
  }
  uint32_t k_row_bytes(uint32_t il) const { return k_row_[il]; }
  uint32_t v_row_bytes(uint32_t il) const { return v_row_[il]; }
  // Stores position pos of layer il from whole rows as the projections give them: k_row is
  // [n_kv_head(il), head_dim_k(il)], v_row [n_kv_head(il), head_dim_v(il)] (nullptr for MLA).
  void store(uint32_t il, uint32_t pos, const float* k_row, const float* v_row);
  uint32_t n_kv_head(uint32_t il) const { return n_head_[il]; }
  uint32_t head_dim_k(uint32_t il) const { return k_dim_[il]; }
  uint32_t head_dim_v(uint32_t il) const { return v_dim_[il]; }
  uint64_t n_bytes() const { return n_bytes_; }
  // Where positions [0, n) of every layer's K and V rows live: one range per layer, K or V and
  // head (Forward faults the first positions' pages in up front).
  std::vector<std::span<std::byte>> prefix_ranges(uint32_t n) const;
  // Bytes one position takes over all layers, K and V.
  size_t bytes_per_position() const;
  // Positions [0, n) of every layer's K and V rows into `out` (resized; layer, K then V, head
  // order, as stored), and back: a snapshot of a prefix (`strata serve`'s stash, ChatSession).
  void copy_rows(uint32_t n, std::vector<std::byte>& out) const;
  void restore_rows(uint32_t n, std::span<const std::byte> in);

 private:
  // fn(rows, bytes) for each layer's K, then V, head by head: the first n positions' rows.
  template <typename Fn>
  void for_each_prefix(uint32_t n, Fn&& fn) const;

  uint32_t n_ctx_;
  KvType type_;
  uint64_t n_bytes_ = 0;
  std::vector<uint32_t> n_head_;  // KV heads per layer
  std::vector<uint32_t> k_dim_;   // elements per head and position
  std::vector<uint32_t> v_dim_;   // 0 for MLA
  std::vector<uint32_t> k_row_;   // bytes of one head's K row at one position
  std::vector<uint32_t> v_row_;   // 0 for MLA
  tiers::RamArena arena_;         // every layer's K then V rows
  std::vector<std::byte*> k_;     // per layer [n_kv_head, n_ctx, head_dim_k] in arena_
  std::vector<std::byte*> v_;     // per layer [n_kv_head, n_ctx, head_dim_v] in arena_
};

}  // namespace strata::engine
