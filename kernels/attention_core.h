// The inner loop of causal attention for one (query row, head): scores against n_kv key rows,
// softmax (optionally with a sink logit), and the probability-weighted sum of n_kv value rows.
// engine/attention.cpp calls it once per (token, head), so prefill and decode compute every row
// the same way. A portable version and an AVX2 one (attention_avx2.cpp) give the same bits; the
// AVX2 one is used when the CPU has AVX2.
//
// THE ORDER (every variant; IEEE float ops, fma = one fused multiply-add, rounded once):
//   s_j = dot8(q, k_j)  8 lane sums a[l] = fma(q[i], k_j[i], a[l]) over i with i % 8 == l, in
//                       i order, then ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
//   s_j = s_j * scale;  with a cap c > 0 (grok): s_j = c * tanhf(s_j) (glibc's, as ggml_tanh)
//   m = max(s_0 .. s_{n-1} [, sink])
//   e_j = portable_expf(s_j - m)            (kernels/portable_math.h)
//   sum = 8 double lane sums b[l] += (double)e_j over j with j % 8 == l, in j order, folded as
//         above; with a sink, sum = sum + (double)portable_expf(sink - m)
//   p_j = e_j * (float)(1.0 / sum)
//   out[d] = +0, then out[d] = fma(p_j, v_j[d], out[d]) for j = 0 .. n-1 in order
// (The multiply-adds are fused: one instruction instead of two at a long context, where the pass
// over the keys is compute-bound; the AVX2 and AVX-512 variants need FMA, which every AVX2 CPU
// has.)
// KV_TYPE=f16 rows (k16 / v16 set instead of k / v): each element is widened to float exactly
// (fp16_to_f32) where the order above reads it, so an F16 row gives the bits of the F32 kernels on
// the widened rows, in every variant. KV_TYPE=q8_0 rows (k8 / v8): Q8_0 blocks (an fp16 scale d,
// then 32 int8 codes: 34 bytes per 32 elements), element i = d · code (an fp16 times an int8 has
// at most 18 significant bits, so the float product is exact): again the F32 kernels' bits on the
// widened rows. Q8_0 rows need head dims that are multiples of 32 (V inside K included).
// Tested by tests/test_ops.cpp (AVX2 == portable bit for bit, exp lanes == portable_expf).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/quant.h"

namespace strata::kernels {

struct AttentionRow {
  const float* q = nullptr;  // [head_dim_k]
  const float* k = nullptr;  // key row 0; key row j at k + j * k_stride
  size_t k_stride = 0;       // elements (floats, halves for k16, bytes for k8)
  const float* v = nullptr;  // value row 0; value row j at v + j * v_stride
  size_t v_stride = 0;       // elements
  // An F16 KV cache's rows (IEEE halves) instead of k and v: both set, k and v null.
  const uint16_t* k16 = nullptr;
  const uint16_t* v16 = nullptr;
  // A Q8_0 KV cache's rows instead (strides in bytes): both set, the others null.
  const std::byte* k8 = nullptr;
  const std::byte* v8 = nullptr;
  uint32_t n_kv = 0;  // >= 1
  uint32_t head_dim_k = 0;
  uint32_t head_dim_v = 0;
  float scale = 1.0f;
  bool has_sink = false;
  float sink = 0.0f;
  float softcap = 0.0f;  // > 0: each scaled score s becomes softcap · tanh(s)
};

// out[0 .. head_dim_v) for one row; scores is scratch of n_kv floats. With AVX2 and head dims
// that are multiples of 8 it is the AVX2 group pass with one head, else attention_row_avx2, else
// the portable kernel: the same bits.
void attention_row(const AttentionRow& a, float* scores, float* out);

// Two heads of one query row that read the same K and V rows (two heads of a GQA group): the same
// bits as attention_row(a, ..., out_a) and attention_row(b, ..., out_b). a and b must agree on
// everything but q and the sink. scores: scratch of 2 * n_kv floats. With AVX-512 (and head dims
// that are multiples of 8, at most kAttentionPairMaxDim) both heads go through one pass that
// loads each K and V row once; otherwise it is the two calls.
void attention_row_pair(const AttentionRow& a, const AttentionRow& b, float* scores, float* out_a,
                        float* out_b);
constexpr uint32_t kAttentionPairMaxDim = 1024;
// Whether attention_row_pair takes the one-pass AVX-512 kernel for these head dims.
bool attention_pair_one_pass(uint32_t head_dim_k, uint32_t head_dim_v);

// Several heads of one query row that read the same K and V rows (heads of a GQA group; rows[h]
// agree on everything but q, the scale and the sink): the same bits as attention_row on each.
// scores: scratch of n_heads * n_kv floats. With AVX-512 or AVX2 (see attention_group_one_pass)
// all heads go through one pass that reads each K and V row from memory once and widens each F16
// or Q8_0 element once, so a layer's KV is read once per group instead of once per head (pair);
// otherwise pairs (attention_row_pair) and a single row.
void attention_rows_group(const AttentionRow* rows, uint32_t n_heads, float* scores,
                          float* const* outs);
constexpr uint32_t kAttentionGroupMax = 8;
// Whether attention_rows_group takes a one-pass kernel for n_heads heads of these dims: AVX-512
// with an even n_heads <= kAttentionGroupMax, head_dim_k a multiple of 8 (at most
// kAttentionPairMaxDim) and head_dim_v a multiple of 16; else AVX2 with 2 <= n_heads <=
// kAttentionGroupMax and both head dims multiples of 8.
bool attention_group_one_pass(uint32_t n_heads, uint32_t head_dim_k, uint32_t head_dim_v);

// The variants, for tests: portable and AVX2 (only on CPUs with AVX2), the AVX-512 pair (only where
// attention_pair_one_pass).
void attention_row_portable(const AttentionRow& a, float* scores, float* out);
void attention_row_avx2(const AttentionRow& a, float* scores, float* out);
bool attention_avx2_supported();
void attention_row_pair_avx512(const AttentionRow& a, const AttentionRow& b, float* scores,
                               float* out_a, float* out_b);
void attention_rows_group_avx512(const AttentionRow* rows, uint32_t n_heads, float* scores,
                                 float* const* outs);
// The AVX2 group pass (any 1 <= n_heads <= kAttentionGroupMax; head dims multiples of 8): heads in
// sets of up to 4 over key blocks of about kAttentionBlockBytes of K rows, each block's rows in
// L1 while every head set (then every head set and output slice) goes over them.
void attention_rows_group_avx2(const AttentionRow* rows, uint32_t n_heads, float* scores,
                               float* const* outs);
// Whether this CPU (and the ISA cap) runs attention_rows_group_avx512 / _avx2.
bool attention_avx512_supported();
// attention_row_avx2's softmax of n scaled scores in place, capped first when row.softcap > 0,
// with row's sink (the order in this header's comment).
void softmax_scores_avx2(float* scores, uint32_t n, const AttentionRow& row);
// The same with AVX-512, 16 scores a step: the same bits (the AVX-512 group and pair passes use
// it).
void softmax_scores_avx512(float* scores, uint32_t n, const AttentionRow& row);

// A KV row's element types: float (k, v), uint16_t (k16, v16: IEEE halves) and std::byte (k8, v8:
// Q8_0 blocks). Element i of a Q8_0 row is code i % 32 of block i / 32.
constexpr uint32_t kQ8Block = 32;       // elements per block
constexpr uint32_t kQ8BlockBytes = 34;  // fp16 d + 32 codes
inline const std::byte* q8_block(const std::byte* row, uint32_t i) {
  return row + size_t{i / kQ8Block} * kQ8BlockBytes;
}
inline float q8_scale(const std::byte* block) {
  uint16_t d;
  std::memcpy(&d, block, sizeof(d));
  return fp16_to_f32(d);
}
// Element i of a row as a float, exactly (the scalar steps of every variant).
inline float widen_at(const float* row, uint32_t i) {
  return row[i];
}
inline float widen_at(const uint16_t* row, uint32_t i) {
  return fp16_to_f32(row[i]);
}
inline float widen_at(const std::byte* row, uint32_t i) {
  const std::byte* b = q8_block(row, i);
  return q8_scale(b) * static_cast<float>(static_cast<int8_t>(b[2 + i % kQ8Block]));
}
// Where element i of a row is stored (for prefetches), and the bytes n elements take.
template <typename T>
inline const void* element_at(const T* row, uint32_t i) {
  if constexpr (sizeof(T) == 1)
    return q8_block(row, i) + 2 + i % kQ8Block;
  else
    return row + i;
}
template <typename T>
inline size_t row_bytes(uint32_t n) {
  if constexpr (sizeof(T) == 1)
    return size_t{(n + kQ8Block - 1) / kQ8Block} * kQ8BlockBytes;
  else
    return size_t{n} * sizeof(T);
}

// The AVX2 and AVX-512 row and pair passes prefetch key and value rows this many keys ahead: at
// decode a layer's KV comes from DRAM (the weights streamed since the last token evicted it).
// Prefetches never change a value.
constexpr uint32_t kAttentionPrefetchKeys = 32;
// The group passes go over the keys in blocks of about this many bytes of K rows (8 to 256 keys):
// a block stays in L1 while every head (set) and output slice reads it, and the next block is
// prefetched behind it, so its reads overlap the block's multiply-adds.
constexpr uint32_t kAttentionBlockBytes = 16 << 10;
template <typename T>
inline uint32_t attention_key_block(uint32_t head_dim_k) {
  const uint32_t keys = kAttentionBlockBytes / static_cast<uint32_t>(row_bytes<T>(head_dim_k));
  return keys < 8 ? 8 : keys > 256 ? 256 : keys;
}
// n bytes from p, a line (64 bytes) at a time.
template <int kLevel>
inline void prefetch_bytes(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < n; i += 64) __builtin_prefetch(c + i, 0, kLevel);
}
// A row's keys and values as elements of T.
template <typename T>
inline const T* row_keys(const AttentionRow& a) {
  if constexpr (sizeof(T) == 1)
    return a.k8;
  else if constexpr (sizeof(T) == 2)
    return a.k16;
  else
    return a.k;
}
template <typename T>
inline const T* row_values(const AttentionRow& a) {
  if constexpr (sizeof(T) == 1)
    return a.v8;
  else if constexpr (sizeof(T) == 2)
    return a.v16;
  else
    return a.v;
}
// The scores loop at keys j..j+3: keys kAttentionPrefetchKeys ahead into L1, their value rows
// into L2 for the weighted sum.
template <typename T = float>
inline void prefetch_keys_ahead(const AttentionRow& a, uint32_t j) {
  for (uint32_t r = j + kAttentionPrefetchKeys; r < j + kAttentionPrefetchKeys + 4 && r < a.n_kv;
       ++r) {
    prefetch_bytes<3>(row_keys<T>(a) + r * a.k_stride, row_bytes<T>(a.head_dim_k));
    prefetch_bytes<2>(row_values<T>(a) + r * a.v_stride, row_bytes<T>(a.head_dim_v));
  }
}
// The weighted sum at key j, whose n value elements from d are in row vj: the same elements of
// the key kAttentionPrefetchKeys ahead into L1.
template <typename T>
inline void prefetch_values_ahead(const AttentionRow& a, const T* vj, uint32_t d, uint32_t j,
                                  uint32_t n = 64) {
  if (j + kAttentionPrefetchKeys < a.n_kv)
    prefetch_bytes<3>(element_at(vj + kAttentionPrefetchKeys * a.v_stride, d), row_bytes<T>(n));
}

// out[i] = portable_expf(x[i]) with AVX2 (tests compare it with the scalar function).
void expf_avx2(const float* x, float* out, int64_t n);
// The same with AVX-512 (16 lanes).
void expf_avx512(const float* x, float* out, int64_t n);

// out[i] = portable_swiglu(gate[i], up[i]) with AVX2, bit for bit (swiglu_row uses it where the
// CPU has AVX2; tests compare the two). out may alias gate or up.
void swiglu_row_avx2(const float* gate, const float* up, float* out, int64_t n);

}  // namespace strata::kernels
