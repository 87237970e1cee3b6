// DeepSeek multi-head latent attention in llama.cpp's absorbed form (AttentionBlock::mla), and
// the decompressed form for files converted before absorption (mla_decompressed).
// Per layer and token, with c the compressed KV latent (kv_lora_rank floats):
//   q = W_q_b · RMSNorm(W_q_a x)  (or W_q x)     per head [q_nope | q_pe]
//   [c | k_pe] = W_kv_a x;  c = RMSNorm(c);  RoPE(q_pe), RoPE(k_pe)
//   the cache row is [c ; k_pe] (one "kv head": kv_lora_rank + n_rot floats per token)
//   per head: q_abs = W_kb[h] · q_nope;  scores over [q_abs ; q_pe] · [c ; k_pe] (MQA);
//   o_h = Σ p · c (a latent);  v_h = W_vb[h] · o_h;  out = W_o · concat(v_h)
// which equals ordinary MHA with k_h = [W_kbᵀ c ; k_pe] and v_h = W_vb c. Each matrix product
// quantizes its activation rows the way llama.cpp's CPU backend does (per head for W_kb / W_vb).
// Exercised by tests/test_arch_forward.cpp (tiny-deepseek2 F32 / Q8_0 / Q4_0).
#include <algorithm>
#include <cstring>

#include "engine/attention_block.h"
#include "engine/ops.h"
#include "io/check.h"
#include "kernels/gemv.h"
#include "kernels/quant.h"

namespace strata::engine {

void AttentionBlock::head_matmul(kernels::ThreadPool& pool, const WeightView& w, uint32_t n_head,
                                 uint32_t n, const float* x, size_t x_tok, size_t x_head, float* y,
                                 size_t y_tok, size_t y_head) {
  const int64_t n_cols = w.ne[0];
  const uint32_t n_rows = uint32_t(w.ne[1]);
  STRATA_ASSERT(w.ne[2] == n_head, "{}: {} heads, expected {}", w.name, w.ne[2], n_head);
  // Activation rows in the weight's vec_dot format, head-major: head h's n token rows are
  // contiguous (the GEMM kernels read them xq_stride apart). The same per-row quantization as a
  // per-head matmul, so the numbers do not change.
  const GgmlType vdt = kernels::vec_dot_type(w.type);
  const size_t xq_stride = ggml_row_bytes(vdt, uint64_t(n_cols));
  STRATA_ASSERT(size_t{n_head} * n * xq_stride <= xq_.size(), "head_matmul scratch");
  std::byte* xq = xq_.data();
  for (uint32_t h = 0; h < n_head; ++h)
    for (uint32_t t = 0; t < n; ++t)
      kernels::quantize_activation_row(vdt, x + t * x_tok + h * x_head,
                                       xq + (size_t{h} * n + t) * xq_stride, n_cols);
  head_items_.clear();
  for (uint32_t h = 0; h < n_head; ++h)
    for (uint32_t r = 0; r < n_rows; r += kHeadRowBlock)
      head_items_.push_back({h, r, std::min(r + kHeadRowBlock, n_rows)});
  STRATA_ASSERT(head_items_.size() <= head_items_.capacity());
  const kernels::GemvKernels k = kernels::gemv_kernels(w.type, w.layout);
  pool.parallel_for(int64_t(head_items_.size()), {}, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const HeadItem& it = head_items_[i];
      const MatrixRef m = w.matrix(it.head);
      const std::byte* xh = xq + size_t{it.head} * n * xq_stride;
      float* yh = y + it.head * y_head;
      if (n == 1) {
        k.gemv(m.data, m.row_bytes, xh, yh, it.row_begin, it.row_end, n_cols);
      } else {
        k.gemm(m.data, m.row_bytes, xh, xq_stride, yh, y_tok, n, it.row_begin, it.row_end, n_cols);
      }
    }
  });
}

void AttentionBlock::mla(kernels::ThreadPool& pool, const LayerWeights& l, uint32_t il, uint32_t n,
                         uint32_t pos0, const float* x, KvCache& kv, float* out) {
  const uint32_t n_embd = cfg_.n_embd;
  const uint32_t n_head = cfg_.n_head(il);
  const uint32_t n_rot = cfg_.n_rot;
  const uint32_t hd = cfg_.head_dim_k_mla;  // per-head q width: nope + rope
  const uint32_t nope = hd - n_rot;
  const uint32_t n_lat = cfg_.n_lora_kv;  // latent width
  const uint32_t n_row = n_lat + n_rot;   // cache row / absorbed q head width
  const uint32_t hd_v = cfg_.head_dim_v_mla;
  const uint32_t n_q = n_head * hd;

  // Projections of x: q (through the LoRA pair when there is one) and [c | k_pe].
  {
    ActivationRows xa(pool, x, n_embd, n, n_embd, xq_.data());
    // Both read x: one parallel region when they share a type.
    const bool lora = cfg_.n_lora_q > 0;
    const MatrixRef w[] = {lora ? l.wq_a.matrix() : l.wq.matrix(), l.wkv_a_mqa.matrix()};
    float* const y[] = {lora ? q_a_.data() : q_.data(), k_.data()};
    const size_t y_stride[] = {lora ? size_t{cfg_.n_lora_q} : size_t{n_q}, size_t{n_row}};
    xa.matmul_many(w, y, y_stride);
  }
  if (cfg_.n_lora_q > 0) {
    for (uint32_t t = 0; t < n; ++t) {
      float* qa = q_a_.data() + size_t{t} * cfg_.n_lora_q;
      rms_norm(qa, l.attn_q_a_norm.f32(), qa, cfg_.n_lora_q, cfg_.norm_eps);
    }
    matmul(pool, l.wq_b.matrix(), q_a_.data(), cfg_.n_lora_q, n, q_.data(), n_q, xq_.data());
  }

  // RoPE on q_pe and k_pe, RMSNorm of c; the cache row is [c ; k_pe].
  for (uint32_t t = 0; t < n; ++t) {
    float* q = q_.data() + size_t{t} * n_q;
    float* kvr = k_.data() + size_t{t} * n_row;
    const float* cs = rope_cs(il, t);
    rope_apply(cfg_.rope_type, q + nope, n_head, hd, n_rot, cs);
    rope_apply(cfg_.rope_type, kvr + n_lat, 1, n_rot, n_rot, cs);
    rms_norm(kvr, l.attn_kv_a_norm.f32(), kvr, n_lat, cfg_.norm_eps);
    if (cfg_.is_mla()) kv.store(il, pos0 + t, kvr, nullptr);
  }
  if (!cfg_.is_mla()) {
    mla_decompressed(pool, l, il, n, pos0, kv, out);
    return;
  }

  // Absorbed queries per head: [W_kb[h] · q_nope_h ; q_pe_h].
  const size_t abs_stride = size_t{n_head} * n_row;
  head_matmul(pool, l.wk_b, n_head, n, q_.data(), n_q, hd, q_abs_.data(), abs_stride, n_row);
  for (uint32_t t = 0; t < n; ++t)
    for (uint32_t h = 0; h < n_head; ++h)
      std::memcpy(q_abs_.data() + t * abs_stride + size_t{h} * n_row + n_lat,
                  q_.data() + size_t{t} * n_q + size_t{h} * hd + nope, sizeof(float) * n_rot);

  // MQA over the latent cache; V is the c part of each cache row.
  AttentionShape shape{n_head, 1, n_row, n_lat, cfg_.kq_scale};
  shape.v_in_k = true;
  core(pool, shape, kv, il, pos0, n, q_abs_.data());

  // Decompress each head's latent output, then the output projection.
  const size_t lat_stride = size_t{n_head} * n_lat;
  const size_t v_stride = size_t{n_head} * hd_v;
  head_matmul(pool, l.wv_b, n_head, n, attn_.data(), lat_stride, n_lat, v_heads_.data(), v_stride,
              hd_v);
  matmul(pool, l.wo.matrix(), v_heads_.data(), v_stride, n, out, n_embd, xq_.data());
}

// Files converted before absorption: K and V of every head are decompressed from c by attn_kv_b
// and cached per head (n_head_kv = n_head): k_h = [k_nope_h ; k_pe], v_h, ordinary attention with
// the MLA scale. The same model as the absorbed form; llama.cpp runs such files this way.
void AttentionBlock::mla_decompressed(kernels::ThreadPool& pool, const LayerWeights& l, uint32_t il,
                                      uint32_t n, uint32_t pos0, KvCache& kv, float* out) {
  const uint32_t n_head = cfg_.n_head(il);
  const uint32_t n_rot = cfg_.n_rot;
  const uint32_t hd = cfg_.head_dim_k_mla;
  const uint32_t nope = hd - n_rot;
  const uint32_t hd_v = cfg_.head_dim_v_mla;
  const uint32_t n_lat = cfg_.n_lora_kv;
  const uint32_t n_row = n_lat + n_rot;
  const size_t kvb_stride = size_t{n_head} * (nope + hd_v);
  matmul(pool, l.wkv_b.matrix(), k_.data(), n_row, n, v_.data(), kvb_stride, xq_.data());
  for (uint32_t t = 0; t < n; ++t) {
    const float* kvb = v_.data() + t * kvb_stride;
    const float* k_pe = k_.data() + size_t{t} * n_row + n_lat;
    for (uint32_t h = 0; h < n_head; ++h) {
      const float* src = kvb + size_t{h} * (nope + hd_v);
      float* kh = q_abs_.data() + size_t{h} * hd;
      std::memcpy(kh, src, sizeof(float) * nope);
      std::memcpy(kh + nope, k_pe, sizeof(float) * n_rot);
      std::memcpy(v_heads_.data() + size_t{h} * hd_v, src + nope, sizeof(float) * hd_v);
    }
    kv.store(il, pos0 + t, q_abs_.data(), v_heads_.data());
  }
  const AttentionShape shape{n_head, n_head, hd, hd_v, cfg_.kq_scale};
  core(pool, shape, kv, il, pos0, n, q_.data());
  matmul(pool, l.wo.matrix(), attn_.data(), size_t{n_head} * hd_v, n, out, cfg_.n_embd, xq_.data());
}

}  // namespace strata::engine
