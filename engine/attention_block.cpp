// The attention block: scratch planning, RoPE caches and the GQA path (see attention_block.h;
// the MLA path is in mla.cpp). Exercised by tests/test_model_forward.cpp and
// tests/test_arch_forward.cpp.
#include "engine/attention_block.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/gpu_lane.h"
#include "engine/ops.h"
#include "io/check.h"

namespace strata::engine {
namespace {

uint32_t max_over_layers(const ModelConfig& cfg, uint32_t (ModelConfig::*f)(uint32_t) const) {
  uint32_t m = 1;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) m = std::max(m, (cfg.*f)(il));
  return m;
}

}  // namespace

AttentionBlock::AttentionBlock(const ModelConfig& cfg, uint32_t n_ubatch, int n_threads,
                               uint32_t n_ctx)
    : cfg_(cfg),
      n_ubatch_(n_ubatch),
      scratch_(n_threads, n_ctx, n_ubatch, max_over_layers(cfg, &ModelConfig::n_head)) {
  const size_t nu = n_ubatch;
  const uint32_t n_head = max_over_layers(cfg, &ModelConfig::n_head);
  uint32_t widest_in = std::max(cfg.n_embd, cfg.max_n_embd_q());
  cs_.resize(nu * cfg.n_rot);
  if (cfg.n_swa > 0) cs_swa_.resize(nu * cfg.n_rot);
  if (cfg.has_mla_projections()) {
    const uint32_t n_lat = cfg.n_lora_kv + cfg.n_rot;
    const uint32_t nope = cfg.head_dim_k_mla - cfg.n_rot;
    q_.resize(nu * n_head * cfg.head_dim_k_mla);
    k_.resize(nu * n_lat);
    q_a_.resize(nu * cfg.n_lora_q);
    if (cfg.is_mla()) {
      attn_.resize(nu * n_head * cfg.n_lora_kv);
      q_abs_.resize(nu * n_head * n_lat);
      v_heads_.resize(nu * n_head * cfg.head_dim_v_mla);
    } else {
      attn_.resize(nu * n_head * cfg.head_dim_v_mla);
      v_.resize(nu * n_head * (nope + cfg.head_dim_v_mla));  // W_kv_b · c: [k_nope | v] per head
      // One token's cache rows, K [k_nope | k_pe] and V per head, as KvCache::store takes them.
      q_abs_.resize(size_t{n_head} * cfg.head_dim_k_mla);
      v_heads_.resize(size_t{n_head} * cfg.head_dim_v_mla);
    }
    // head_matmul() packs every head's rows of one input: n_head × n_lora_kv floats per token.
    widest_in = std::max({widest_in, cfg.n_lora_q, n_head * cfg.n_lora_kv,
                          n_head * cfg.head_dim_v_mla, n_head * cfg.head_dim_k_mla});
    const uint32_t max_rows = std::max(cfg.n_lora_kv, cfg.head_dim_v_mla);
    head_items_.reserve(size_t{n_head} * ((max_rows + kHeadRowBlock - 1) / kHeadRowBlock));
  } else {
    q_.resize(nu * cfg.max_n_embd_q());
    k_.resize(nu * cfg.max_n_embd_kv());
    v_.resize(nu * cfg.max_n_embd_kv());
    attn_.resize(nu * cfg.max_n_embd_q());
  }
  xq_.resize(nu * activation_row_bytes(widest_in));
}

void AttentionBlock::begin_chunk(uint32_t pos0, uint32_t n) {
  STRATA_ASSERT(n <= n_ubatch_, "chunk of {} > n_ubatch {}", n, n_ubatch_);
  const size_t nr = cfg_.n_rot;
  for (uint32_t t = 0; t < n; ++t) {
    rope_cache(cfg_.rope, pos0 + t, cs_.data() + t * nr, rope_factors_);
    if (!cs_swa_.empty())
      rope_cache(cfg_.rope_swa, pos0 + t, cs_swa_.data() + t * nr, rope_factors_);
  }
}

const float* AttentionBlock::rope_cs(uint32_t il, uint32_t t) const {
  const std::vector<float>& cs = cfg_.is_swa(il) ? cs_swa_ : cs_;
  return cs.data() + size_t{t} * cfg_.n_rot;
}

void AttentionBlock::core(kernels::ThreadPool& pool, const AttentionShape& shape, const KvCache& kv,
                          uint32_t il, uint32_t pos0, uint32_t n, const float* q) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = core_seconds_ ? Clock::now() : Clock::time_point{};
  attention(pool, shape, kv, il, pos0, n, q, attn_.data(), scratch_);
  if (core_seconds_)
    (*core_seconds_)[n > 1 ? 0 : 1] += std::chrono::duration<double>(Clock::now() - t0).count();
}

void AttentionBlock::run(kernels::ThreadPool& pool, const LayerWeights& l, uint32_t il, uint32_t n,
                         uint32_t pos0, const float* x, KvCache& kv, float* out) {
  STRATA_ASSERT(n <= n_ubatch_, "chunk of {} > n_ubatch {}", n, n_ubatch_);
  switch (cfg_.attention) {
    case AttentionKind::kGqa:
      gqa(pool, l, il, n, pos0, x, kv, out);
      return;
    case AttentionKind::kMla:
    case AttentionKind::kMlaDecompressed:
      mla(pool, l, il, n, pos0, x, kv, out);
      return;
  }
}

void AttentionBlock::gqa(kernels::ThreadPool& pool, const LayerWeights& l, uint32_t il, uint32_t n,
                         uint32_t pos0, const float* x, KvCache& kv, float* out) {
  const uint32_t n_embd = cfg_.n_embd;
  const uint32_t n_head = cfg_.n_head(il);
  const uint32_t n_head_kv = cfg_.n_head_kv(il);
  const uint32_t hd_k = cfg_.head_dim_k;
  const uint32_t n_q = cfg_.n_embd_q(il);
  const uint32_t n_k = cfg_.n_embd_k_gqa(il);
  const uint32_t n_v = cfg_.n_embd_v_gqa(il);

  // q, k and v read the same x: one parallel region for the three (or one GPU call, CUDA_DENSE).
  float* const qkv_y[] = {q_.data(), k_.data(), v_.data()};
  const MatrixRef wo[] = {l.wo.matrix()};  // idle reads: o's first rows
  static constexpr GpuDense::Proj kQkv[] = {GpuDense::kQ, GpuDense::kK, GpuDense::kV};
  if (!dense_ || !dense_->project(il, kQkv, x, n, qkv_y)) {
    ActivationRows xa(pool, x, n_embd, n, n_embd, xq_.data());
    const MatrixRef qkv[] = {l.wq.matrix(), l.wk.matrix(), l.wv.matrix()};
    idle_read_rows(pool, wo);  // while waiting at the join and through RoPE
    const size_t qkv_stride[] = {n_q, n_k, n_v};
    xa.matmul_many(qkv, qkv_y, qkv_stride);
  }

  for (uint32_t t = 0; t < n; ++t) {
    float* q = q_.data() + size_t{t} * n_q;
    float* k = k_.data() + size_t{t} * n_k;
    float* v = v_.data() + size_t{t} * n_v;
    if (cfg_.clamp_kqv > 0.0f) {  // dbrx: the fused projection's output clamped (ggml_clamp)
      const float c = cfg_.clamp_kqv;
      const auto clamp = [c](float* p, uint32_t w) {
        for (uint32_t i = 0; i < w; ++i) p[i] = std::max(std::min(p[i], c), -c);
      };
      clamp(q, n_q);
      clamp(k, n_k);
      clamp(v, n_v);
    }
    // Biases are added to the projection before any norm (llama.cpp's build_qkv).
    if (l.bq.present()) add_bias_rows(l.bq.f32(), q, n_q, 1, 0, n_q);
    if (l.bk.present()) add_bias_rows(l.bk.f32(), k, n_k, 1, 0, n_k);
    if (l.bv.present()) add_bias_rows(l.bv.f32(), v, n_v, 1, 0, n_v);
    // The q/k norms: over the whole projection or per head; before RoPE but for hunyuan-moe's.
    const auto qk_norm = [&] {
      if (cfg_.qk_norm && cfg_.qk_norm_whole) {
        rms_norm(q, l.attn_q_norm.f32(), q, n_q, cfg_.norm_eps);
        rms_norm(k, l.attn_k_norm.f32(), k, n_k, cfg_.norm_eps);
      } else if (cfg_.qk_norm) {
        for (uint32_t h = 0; h < n_head; ++h)
          rms_norm(q + h * hd_k, l.attn_q_norm.f32(), q + h * hd_k, hd_k, cfg_.norm_eps);
        for (uint32_t h = 0; h < n_head_kv; ++h)
          rms_norm(k + h * hd_k, l.attn_k_norm.f32(), k + h * hd_k, hd_k, cfg_.norm_eps);
      }
    };
    if (!cfg_.qk_norm_after_rope) qk_norm();
    const float* cs = rope_cs(il, t);
    rope_apply(cfg_.rope_type, q, n_head, hd_k, cfg_.n_rot, cs);
    rope_apply(cfg_.rope_type, k, n_head_kv, hd_k, cfg_.n_rot, cs);
    if (cfg_.qk_norm_after_rope) qk_norm();
    if (cfg_.kq_scale_on_q)  // ggml_scale of q: not the same rounding as scaling the scores
      for (uint32_t i = 0; i < n_q; ++i) q[i] *= cfg_.kq_scale;
    kv.store(il, pos0 + t, k, v);
  }

  AttentionShape shape{n_head, n_head_kv, hd_k, cfg_.head_dim_v,
                       cfg_.kq_scale_on_q ? 1.0f : cfg_.kq_scale};
  shape.n_swa = cfg_.is_swa(il) ? cfg_.n_swa : 0;
  shape.sinks = l.attn_sinks.present() ? l.attn_sinks.f32() : nullptr;
  shape.softcap = cfg_.attn_softcap;
  if (!dense_) idle_read_rows(pool, wo);
  core(pool, shape, kv, il, pos0, n, q_.data());

  const uint32_t n_attn = n_head * cfg_.head_dim_v;
  static constexpr GpuDense::Proj kWo[] = {GpuDense::kO};
  if (l.ffn_gate_inp.present()) {  // the router's rows, the next region after o
    const MatrixRef router[] = {l.ffn_gate_inp.matrix()};
    idle_read_rows(pool, router);
  }
  if (!dense_ || !dense_->project(il, kWo, attn_.data(), n, &out))
    matmul(pool, l.wo.matrix(), attn_.data(), n_attn, n, out, n_embd, xq_.data());
  if (l.bo.present()) add_bias_rows(l.bo.f32(), out, n_embd, n, 0, n_embd);
}

}  // namespace strata::engine
