// The forward pass (see forward.h). Exercised by tests/test_model_forward.cpp.
#include "engine/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/ops.h"
#include "engine/prof.h"
#include "io/check.h"
#include "kernels/quant.h"
#include "placement/route_trace.h"
#include "tiers/ram_arena.h"

namespace strata::engine {
namespace {

// The KV cache's pages are faulted in ahead of the positions that fill them (Forward::fault_ahead):
// kFaultExtent positions at a time, the first extent by the constructor, each next one while
// decode is still kFaultLead positions short of it, kFaultRegionsPerToken regions a token.
constexpr uint32_t kFaultExtent = 4096;
constexpr uint32_t kFaultLead = 1024;
constexpr uint32_t kFaultRegionsPerToken = 1;
constexpr uint32_t kFaultAll = ~uint32_t{0};  // fault_ahead's budget: everything, on every thread

uint32_t max_layer_n_expert(const ModelConfig& cfg) {
  uint32_t m = 1;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) m = std::max(m, cfg.layer_n_expert(il));
  return m;
}

uint32_t resolve_n_ctx(const ModelConfig& cfg, const ForwardOptions& o) {
  const uint32_t n = o.n_ctx ? o.n_ctx : cfg.n_ctx_train;
  if (n == 0) fail(ErrorKind::kBadValue, "context size must be > 0");
  return n;
}

}  // namespace

Forward::Forward(const Model& model, const ForwardOptions& opts)
    : model_(model),
      cfg_(model.config()),
      w_(model.weights()),
      n_ubatch_(std::max<uint32_t>(1, opts.n_ubatch)),
      pool_(std::max(1, opts.n_threads)),
      kv_(cfg_, resolve_n_ctx(cfg_, opts), opts.kv_type),
      attn_(cfg_, n_ubatch_, std::max(1, opts.n_threads), kv_.n_ctx()),
      dispatch_(n_ubatch_ * cfg_.max_n_expert_used(), max_layer_n_expert(cfg_)),
      cpu_experts_(pool_, cfg_, n_ubatch_ * cfg_.max_n_expert_used()),
      shared_(cfg_, n_ubatch_),
      own_experts_(opts.experts ? nullptr : std::make_unique<ExpertSource>(model)),
      experts_(opts.experts ? opts.experts : own_experts_.get()),
      prof_(opts.prof),
      route_trace_(opts.route_trace) {
  const size_t nu = n_ubatch_;
  const uint32_t n_q = cfg_.max_n_embd_q();
  const uint32_t k = cfg_.max_n_expert_used();
  h_.resize(nu * cfg_.n_embd);
  layer_in_.resize(cfg_.moe_beside_dense ? nu * cfg_.n_embd : 0);
  x_.resize(nu * cfg_.n_embd);
  tmp_.resize(nu * cfg_.n_embd);
  xq_.resize(nu * activation_row_bytes(std::max(cfg_.n_embd, n_q)));
  probs_.resize(nu * max_layer_n_expert(cfg_));
  shared_gate_.resize(cfg_.shared_expert_gate ? nu : 0);
  topk_.resize(nu * k);
  weights_.resize(nu * k);
  moe_y_.resize(nu * k * cfg_.n_embd);
  last_logits_.resize(cfg_.n_vocab);
  attn_.set_gpu_dense(experts_->gpu_dense());  // CUDA_DENSE (null: off)
  attn_.set_rope_factors(rope_freq_factors(w_, cfg_, kv_.n_ctx()));
  shared_.set_gpu_dense(experts_->gpu_dense());
  if (prof_ && prof_->enabled()) {
    cpu_experts_.set_stage_times(&prof_->counters().expert_stages);
    attn_.set_core_seconds(&prof_->counters().attention_core_seconds);
  }
  // The KV cache is a huge-page arena whose group-major rows put position 0 of every (layer, head
  // group, K or V) region in a 2 MiB page of its own, zeroed by the kernel on its first write: a
  // first prompt of a few tokens paid for zeroing most of the cache inside its prefill (0.25 s of
  // a 17-token prompt at 4096 positions on the demo model, 1.2 s on the 30B), and a decode token
  // crossing into the next pages for every region at once stalled (0.62 s at position 8192 on
  // the demo model). So the first extent is faulted in here, on every thread, and later ones a
  // few regions a token ahead of decode (fault_ahead). RAM_GB auto counts the whole cache.
  kv_regions_ = kv_.prefix_ranges(kv_.n_ctx());
  fault_ahead(std::min(kv_.n_ctx(), kFaultExtent), kFaultAll);
}

void Forward::fault_ahead(uint32_t target, uint32_t budget) {
  const uint32_t n_ctx = kv_.n_ctx();
  target = std::min(target, n_ctx);
  const size_t n_regions = kv_regions_.size();
  const bool all = budget == kFaultAll;
  while (faulted_ < target && n_regions > 0 && budget > 0) {
    const uint32_t end = std::min(n_ctx, faulted_ + kFaultExtent);
    const size_t stop = all ? n_regions : std::min(n_regions, fault_next_ + budget);
    const auto part = [&](size_t r) {
      const std::span<std::byte> rows = kv_regions_[r];
      const size_t row = rows.size() / n_ctx;
      tiers::touch_pages_keeping(
          rows.subspan(size_t{faulted_} * row, size_t{end - faulted_} * row));
    };
    if (all) {  // on every thread
      const size_t first = fault_next_;
      pool_.parallel_for(int64_t(stop - first), {}, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) part(first + size_t(i));
      });
    } else {
      for (size_t r = fault_next_; r < stop; ++r) part(r);
      budget -= uint32_t(stop - fault_next_);
    }
    fault_next_ = stop;
    if (fault_next_ < n_regions) return;  // the budget ran out inside this extent
    faulted_ = end;
    fault_next_ = 0;
  }
}

void Forward::check_tokens(std::span<const int32_t> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || uint32_t(tokens[i]) >= cfg_.n_vocab)
      fail(ErrorKind::kBadValue, "token id {} at index {} is out of range (n_vocab {})", tokens[i],
           i, cfg_.n_vocab);
  if (n_past_ + tokens.size() > kv_.n_ctx())
    fail(ErrorKind::kBadValue, "context full: {} past + {} new tokens > n_ctx {}", n_past_,
         tokens.size(), kv_.n_ctx());
}

void Forward::recover() {
  experts_->recover();
}

void Forward::restored(uint32_t n) {
  STRATA_ASSERT(n <= kv_.n_ctx(), "restored {} positions into a cache of {}", n, kv_.n_ctx());
  n_past_ = n;
}

std::span<const float> Forward::prefill(std::span<const int32_t> tokens, float* all_logits,
                                        RoutingTrace* trace) {
  check_tokens(tokens);
  if (tokens.empty()) return {};
  const uint32_t n_new = uint32_t(tokens.size());
  fault_ahead(n_past_ + n_new, kFaultAll);  // the rows it writes
  // And ahead: a whole chunk or more is throughput work (all of it, on every thread); a short
  // call (a LOOKUP draft) is decode's latency, a few regions a token.
  fault_ahead(n_past_ + n_new + kFaultLead,
              n_new >= n_ubatch_ ? kFaultAll : n_new * kFaultRegionsPerToken);
  if (trace) trace->ensure_positions(n_past_ + uint32_t(tokens.size()));
  for (size_t done = 0; done < tokens.size();) {
    const uint32_t n = uint32_t(std::min<size_t>(n_ubatch_, tokens.size() - done));
    float* rows = all_logits ? all_logits + done * cfg_.n_vocab : nullptr;
    run_chunk(tokens.data() + done, n, n_past_, rows, trace);
    n_past_ += n;
    done += n;
    if (progress_ && tokens.size() > n_ubatch_) progress_(done, tokens.size());
  }
  return last_logits_;
}

std::span<const float> Forward::decode(int32_t token, RoutingTrace* trace) {
  check_tokens({&token, 1});
  fault_ahead(n_past_ + 1, kFaultAll);
  fault_ahead(n_past_ + 1 + kFaultLead, kFaultRegionsPerToken);
  if (trace) trace->ensure_positions(n_past_ + 1);
  run_chunk(&token, 1, n_past_, nullptr, trace);
  ++n_past_;
  return last_logits_;
}

void Forward::run_chunk(const int32_t* tokens, uint32_t n, uint32_t pos0, float* all_logits,
                        RoutingTrace* trace) {
  const uint32_t n_embd = cfg_.n_embd;
  // Embedding rows are dequantized (token_embd may be quantized).
  for (uint32_t t = 0; t < n; ++t)
    kernels::dequantize_row(w_.token_embd.type, w_.token_embd.row(tokens[t]),
                            h_.data() + size_t{t} * n_embd, n_embd);
  if (cfg_.embedding_scale != 0.0f)  // granitemoe
    for (size_t i = 0; i < size_t{n} * n_embd; ++i) h_[i] *= cfg_.embedding_scale;
  // RoPE angles depend only on the position: once per chunk for every layer.
  attn_.begin_chunk(pos0, n);
  cpu_experts_.begin_pass(n);

  for (uint32_t il = 0; il < cfg_.n_layer; ++il) {
    if (cfg_.moe_beside_dense) std::copy_n(h_.begin(), size_t{n} * cfg_.n_embd, layer_in_.begin());
    {
      const ScopedTimer t(prof_, prof_ ? prof_->counters().attention_seconds : unused_seconds_);
      const ScopedTimer tp(prof_, prof_ ? prof_->counters().attention_phase_seconds[n > 1 ? 0 : 1]
                                        : unused_seconds_);
      attention_block(il, n, pos0);
    }
    ffn_block(il, n, pos0, trace);
  }
  output_head(n, all_logits);
}

void Forward::attention_block(uint32_t il, uint32_t n, uint32_t pos0) {
  const LayerWeights& l = w_.layers[il];
  const uint32_t n_embd = cfg_.n_embd;
  for (uint32_t t = 0; t < n; ++t)
    block_norm(cfg_, h_.data() + size_t{t} * n_embd, l.attn_norm, l.attn_norm_b,
               x_.data() + size_t{t} * n_embd);
  attn_.run(pool_, l, il, n, pos0, x_.data(), kv_, tmp_.data());
  post_norm(l.attn_post_norm, n);
  add_residual(n);
}

void Forward::post_norm(const WeightView& norm, uint32_t n) {
  if (!norm.present()) return;
  const uint32_t n_embd = cfg_.n_embd;
  for (uint32_t t = 0; t < n; ++t) {
    float* row = tmp_.data() + size_t{t} * n_embd;
    block_norm(cfg_, row, norm, WeightView{}, row);
  }
}

void Forward::add_shared(uint32_t il, uint32_t n, const float* gate_logits) {
  const ScopedTimer t(prof_, prof_ ? prof_->counters().shared_expert_seconds : unused_seconds_);
  const uint64_t bytes =
      shared_.add(il, w_.layers[il].shared, n, x_.data(), cpu_experts_, tmp_.data(), gate_logits);
  if (prof_) prof_->counters().shared_expert_bytes += bytes;
}

void Forward::dense_residual(uint32_t il, uint32_t n) {
  const LayerWeights& l = w_.layers[il];
  const uint32_t n_embd = cfg_.n_embd;
  for (uint32_t t = 0; t < n; ++t)
    block_norm(cfg_, h_.data() + size_t{t} * n_embd, l.ffn_norm, l.ffn_norm_b,
               x_.data() + size_t{t} * n_embd);
  std::fill_n(tmp_.begin(), size_t{n} * n_embd, 0.0f);
  add_shared(il, n, nullptr);
  add_residual(n);  // llama.cpp: ffn_out = dense + (input + attention)
}

void Forward::ffn_block(uint32_t il, uint32_t n, uint32_t pos0, RoutingTrace* trace) {
  const LayerWeights& l = w_.layers[il];
  const uint32_t n_embd = cfg_.n_embd;
  // arctic: the dense residual FFN first; the experts then read the layer's input.
  const bool beside = cfg_.moe_beside_dense && cfg_.is_moe(il);
  if (beside) dense_residual(il, n);
  const float* ffn_in = beside ? layer_in_.data() : h_.data();
  for (uint32_t t = 0; t < n; ++t)
    block_norm(cfg_, ffn_in + size_t{t} * n_embd, beside ? l.ffn_norm_exps : l.ffn_norm,
               l.ffn_norm_b, x_.data() + size_t{t} * n_embd);

  // CUDA_DENSE: a dense FFN on GPU 0 where it is held (one token: the CPU's bits, its one-expert
  // combine multiplies by weight 1; chunks only with CUDA_DENSE=2); no routing, dispatch or
  // executor then.
  GpuDense* dense = cfg_.is_moe(il) ? nullptr : experts_->gpu_dense();
  if (dense && dense->ffn(il, GpuDense::kDenseFfn, x_.data(), n, tmp_.data())) {
    if (n == 1) experts_->prefetch_ahead(il, h_.data(), xq_.data());  // PREFETCH: next MoE layers
    if (l.shared.n_expert > 0) add_shared(il, n, nullptr);
    post_norm(l.ffn_post_norm, n);
    add_residual(n);
    return;
  }

  Routing r;
  r.n_tokens = n;
  r.n_expert = cfg_.layer_n_expert(il);
  r.k = cfg_.layer_n_expert_used(il);
  r.probs = probs_.data();
  r.topk = topk_.data();
  r.weights = weights_.data();
  r.shared_gate = l.shared_gate.present() ? shared_gate_.data() : nullptr;
  {
    const ScopedTimer t(prof_, prof_ ? prof_->counters().router_seconds : unused_seconds_);
    route(pool_, cfg_, l, x_.data(), r, xq_.data());
  }
  if (route_trace_ && cfg_.is_moe(il)) route_trace_->add(il, pos0, n, r.topk, r.weights);
  if (trace && cfg_.is_moe(il)) {
    for (uint32_t t = 0; t < n; ++t) {
      std::copy_n(r.topk + size_t{t} * r.k, r.k, trace->topk_at(il, pos0 + t));
      std::copy_n(r.weights + size_t{t} * r.k, r.k, trace->weight_at(il, pos0 + t));
      std::copy_n(r.probs + size_t{t} * r.n_expert, r.n_expert, trace->prob_at(il, pos0 + t));
    }
  }

  dispatch(r, l.experts, dispatch_, experts_->layer_homes(il));
  experts_->start(il, dispatch_);  // this layer's SSD reads go out first
  if (n == 1) experts_->prefetch_ahead(il, h_.data(), xq_.data());  // PREFETCH
  // The next parallel region's matrices, for the threads to start on while they wait: the next
  // layer's q, k and v, or the output head (not with shared experts, whose regions come first,
  // nor when CUDA_DENSE holds them).
  const bool next_on_cpu = (l.shared.n_expert == 0 || beside) && experts_->gpu_dense() == nullptr;
  if (next_on_cpu && il + 1 < cfg_.n_layer && w_.layers[il + 1].wq.present()) {
    const LayerWeights& nl = w_.layers[il + 1];
    const MatrixRef qkv[] = {nl.wq.matrix(), nl.wk.matrix(), nl.wv.matrix()};
    cpu_experts_.set_reads_after(qkv);
  } else if (next_on_cpu && il + 1 == cfg_.n_layer) {
    const MatrixRef head[] = {w_.output.matrix()};
    cpu_experts_.set_reads_after(head);
  }
  experts_->compute(il, l.experts, dispatch_, cpu_experts_, x_.data(), moe_y_.data());
  combine(pool_, r, dispatch_, moe_y_.data(), n_embd, tmp_.data());
  if (l.shared.n_expert > 0 && !beside) add_shared(il, n, r.shared_gate);
  if (cfg_.ffn_combine_scale != 0.0f)  // grok-2: (MoE + dense FFN) × √2/2
    for (size_t i = 0; i < size_t{n} * n_embd; ++i) tmp_[i] *= cfg_.ffn_combine_scale;
  post_norm(l.ffn_post_norm, n);
  add_residual(n);
}

void Forward::add_residual(uint32_t n) {
  const size_t count = size_t{n} * cfg_.n_embd;
  if (cfg_.residual_scale != 0.0f) {  // granitemoe
    for (size_t i = 0; i < count; ++i) h_[i] += tmp_[i] * cfg_.residual_scale;
    return;
  }
  for (size_t i = 0; i < count; ++i) h_[i] += tmp_[i];
}

void Forward::output_head(uint32_t n, float* all_logits) {
  const ScopedTimer timer(prof_, prof_ ? prof_->counters().head_seconds : unused_seconds_);
  const uint32_t n_embd = cfg_.n_embd;
  // Only the rows whose logits are wanted go through the head.
  const uint32_t first = all_logits ? 0 : n - 1;
  for (uint32_t t = first; t < n; ++t)
    block_norm(cfg_, h_.data() + size_t{t} * n_embd, w_.output_norm, w_.output_norm_b,
               x_.data() + size_t{t} * n_embd);
  float* out = all_logits ? all_logits : last_logits_.data();
  GpuDense* dense = experts_->gpu_dense();  // CUDA_DENSE: a one-token head on the GPU
  if (n - first != 1 || !dense || !dense->output(x_.data() + size_t{first} * n_embd, out))
    matmul(pool_, w_.output.matrix(), x_.data() + size_t{first} * n_embd, n_embd, n - first, out,
           cfg_.n_vocab, xq_.data());
  if (w_.output_b.present())  // phimoe
    add_bias_rows(w_.output_b.f32(), out, cfg_.n_vocab, n - first, 0, cfg_.n_vocab);
  // granitemoe: × 1/logit_scale, as llama.cpp scales; grok: × its output multiplier.
  const float mul = cfg_.logit_scale != 0.0f ? 1.0f / cfg_.logit_scale : cfg_.logit_multiplier;
  if (mul != 0.0f)
    for (size_t i = 0; i < size_t{n - first} * cfg_.n_vocab; ++i) out[i] *= mul;
  if (cfg_.final_logit_softcap > 0.0f) {  // grok-2: c·tanh(logits · (1/c)), as ggml scales
    const float c = cfg_.final_logit_softcap, inv = 1.0f / c;
    for (size_t i = 0; i < size_t{n - first} * cfg_.n_vocab; ++i)
      out[i] = c * std::tanh(out[i] * inv);
  }
  if (!all_logits) return;
  std::memcpy(last_logits_.data(), all_logits + size_t{n - 1} * cfg_.n_vocab,
              sizeof(float) * cfg_.n_vocab);
}

}  // namespace strata::engine
