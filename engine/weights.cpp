// Binds the model's tensors with their expected shapes (see weights.h).
// Exercised by tests/test_model_config.cpp and tests/test_model_forward.cpp.
#include "engine/weights.h"

#include <fmt/format.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "engine/names.h"
#include "io/check.h"
#include "kernels/quant.h"

namespace strata::engine {
namespace {

// How a tensor is used decides which types are acceptable.
enum class Use {
  kMatmul,  // W·x through the GEMV kernels (also embeddings: rows are dequantized)
  kVector,  // norm weights, read as floats
};

class Binder {
 public:
  explicit Binder(const io::GgufFile& file) : file_(file) {}

  // expected: ne, innermost first; missing trailing dims are 1.
  WeightView bind(TensorId id, int layer, std::vector<int64_t> expected, Use use,
                  bool required = true) const {
    const std::string name = tensor_name(id, layer);
    const io::GgufTensorInfo* t = file_.find_tensor(name);
    WeightView w;
    w.name = name;
    if (!t) {
      if (required)
        fail(ErrorKind::kNotFound, "{}: tensor {} is missing (expected shape {})", file_.path(),
             name, shape_string(padded(expected), static_cast<int>(expected.size())));
      return w;
    }
    const auto want = padded(expected);
    std::array<int64_t, 4> have{};
    for (int d = 0; d < 4; ++d) have[d] = static_cast<int64_t>(t->ne[d]);
    if (have != want)
      fail(ErrorKind::kBadFile, "{}: tensor {} has shape {}, expected {}", file_.path(), name,
           shape_string(have, static_cast<int>(t->n_dims)),
           shape_string(want, static_cast<int>(expected.size())));
    const bool type_ok =
        use == Use::kVector ? t->type == GgmlType::F32 : kernels::gemv_supported(t->type);
    if (!type_ok)
      fail(ErrorKind::kUnsupported, "{}: tensor {} has type {}, which is not supported for {}",
           file_.path(), name, ggml_type_name(t->type),
           use == Use::kVector ? "a norm weight (F32 only)" : "matrix products");
    w.type = t->type;
    w.ne = have;
    w.data = file_.tensor_data(*t);
    w.file_offset = t->file_offset;
    w.n_bytes = t->n_bytes;
    w.row_bytes = t->row_bytes();
    return w;
  }

  bool has(TensorId id, int layer) const {
    return file_.find_tensor(tensor_name(id, layer)) != nullptr;
  }

 private:
  static std::array<int64_t, 4> padded(const std::vector<int64_t>& ne) {
    std::array<int64_t, 4> out = {1, 1, 1, 1};
    for (size_t d = 0; d < ne.size() && d < 4; ++d) out[d] = ne[d];
    return out;
  }
  const io::GgufFile& file_;
};

MatrixRef matrix_of(const WeightView& w, const ByteRange& bytes) {
  return MatrixRef{w.type, w.ne[1], w.ne[0], w.row_bytes, bytes.data, bytes.layout};
}

}  // namespace

std::string shape_string(const std::array<int64_t, 4>& ne, int n_dims) {
  std::string s = "[";
  for (int d = 0; d < std::max(n_dims, 1); ++d) s += fmt::format("{}{}", d ? ", " : "", ne[d]);
  return s + "]";
}

ExpertSlice ExpertStack::expert_slice(uint32_t e) const {
  STRATA_ASSERT(e < n_expert, "expert {} of {}", e, n_expert);
  auto slice = [e](const WeightView& w) {
    const uint64_t per_expert = w.row_bytes * static_cast<uint64_t>(w.ne[1]);
    return ByteRange{w.file_offset + e * per_expert, per_expert, w.data + e * per_expert, w.layout};
  };
  return ExpertSlice{slice(gate), slice(up), slice(down)};
}

MatrixRef ExpertStack::gate_matrix(const ExpertSlice& s) const {
  return matrix_of(gate, s.gate);
}
MatrixRef ExpertStack::up_matrix(const ExpertSlice& s) const {
  return matrix_of(up, s.up);
}
MatrixRef ExpertStack::down_matrix(const ExpertSlice& s) const {
  return matrix_of(down, s.down);
}

namespace {

// Binds one FFN stack (routed experts, a dense FFN or a shared expert).
void bind_stack(const Binder& b, ExpertStack& x, int layer, TensorId gate, TensorId up,
                TensorId down, int64_t n_embd, int64_t n_ff, uint32_t n_expert) {
  x.n_embd = n_embd;
  x.n_ff = n_ff;
  x.n_expert = n_expert;
  if (n_expert == 1 && !tensor_spec(gate).stacked_experts) {
    x.gate = b.bind(gate, layer, {n_embd, n_ff}, Use::kMatmul);
    x.up = b.bind(up, layer, {n_embd, n_ff}, Use::kMatmul);
    x.down = b.bind(down, layer, {n_ff, n_embd}, Use::kMatmul);
  } else {
    const int64_t n_exp = n_expert;
    x.gate = b.bind(gate, layer, {n_embd, n_ff, n_exp}, Use::kMatmul);
    x.up = b.bind(up, layer, {n_embd, n_ff, n_exp}, Use::kMatmul);
    x.down = b.bind(down, layer, {n_ff, n_embd, n_exp}, Use::kMatmul);
  }
}

// Rows [row0, row0 + rows) of a 2-D matrix as a matrix of its own (named "<tensor>[what]").
WeightView row_slice(const WeightView& w, int64_t row0, int64_t rows, const char* what) {
  WeightView v = w;
  v.name = fmt::format("{}[{}]", w.name, what);
  v.ne = {w.ne[0], rows, 1, 1};
  const uint64_t skip = uint64_t(row0) * w.row_bytes;
  v.data = w.data + skip;
  v.file_offset = w.file_offset + skip;
  v.n_bytes = uint64_t(rows) * w.row_bytes;
  return v;
}

void bind_gqa(const Binder& b, const ModelConfig& cfg, LayerWeights& l, uint32_t il) {
  const int i = static_cast<int>(il);
  const int64_t n_embd = cfg.n_embd;
  const int64_t n_q = cfg.n_embd_q(il);
  const int64_t n_k = cfg.n_embd_k_gqa(il);
  const int64_t n_v = cfg.n_embd_v_gqa(il);
  // dbrx and bailingmoe2 always, phimoe optionally: one fused matrix whose consecutive row ranges
  // are q, k and v.
  const bool fused = cfg.arch == Arch::kDbrx || cfg.arch == Arch::kBailingMoe2 ||
                     (cfg.arch == Arch::kPhiMoe && b.has(TensorId::kAttnQkv, i));
  if (fused) {
    const WeightView qkv = b.bind(TensorId::kAttnQkv, i, {n_embd, n_q + n_k + n_v}, Use::kMatmul);
    l.wq = row_slice(qkv, 0, n_q, "q");
    l.wk = row_slice(qkv, n_q, n_k, "k");
    l.wv = row_slice(qkv, n_q + n_k, n_v, "v");
  } else {
    l.wq = b.bind(TensorId::kAttnQ, i, {n_embd, n_q}, Use::kMatmul);
    l.wk = b.bind(TensorId::kAttnK, i, {n_embd, n_k}, Use::kMatmul);
    l.wv = b.bind(TensorId::kAttnV, i, {n_embd, n_v}, Use::kMatmul);
  }
  l.wo = b.bind(TensorId::kAttnOut, i, {cfg.n_head(il) * cfg.head_dim_v, n_embd}, Use::kMatmul);
  // llama.cpp reads attention biases for these architectures only (required for gpt-oss,
  // qwen2moe and phimoe's separate q/k/v; a fused phimoe matrix has none; optional for glm4moe,
  // ernie4_5-moe and hunyuan-moe, whose graphs use no attn_output bias).
  const bool phi = cfg.arch == Arch::kPhiMoe;
  if (cfg.arch == Arch::kGlm4Moe || cfg.arch == Arch::kGptOss || cfg.arch == Arch::kQwen2Moe ||
      cfg.arch == Arch::kErnie45Moe || cfg.arch == Arch::kHunyuanMoe || (phi && !fused)) {
    const bool req = cfg.arch != Arch::kGlm4Moe && cfg.arch != Arch::kErnie45Moe &&
                     cfg.arch != Arch::kHunyuanMoe;
    l.bq = b.bind(TensorId::kAttnQBias, i, {n_q}, Use::kVector, req);
    l.bk = b.bind(TensorId::kAttnKBias, i, {n_k}, Use::kVector, req);
    l.bv = b.bind(TensorId::kAttnVBias, i, {n_v}, Use::kVector, req);
  }
  if (cfg.arch == Arch::kGptOss || phi) {
    l.bo = b.bind(TensorId::kAttnOutBias, i, {n_embd}, Use::kVector);
  }
  if (cfg.attn_sinks)
    l.attn_sinks = b.bind(TensorId::kAttnSinks, i, {cfg.n_head(il)}, Use::kVector);
  if (cfg.qk_norm) {
    const int64_t nq = cfg.qk_norm_whole ? n_q : cfg.head_dim_k;
    const int64_t nk = cfg.qk_norm_whole ? n_k : cfg.head_dim_k;
    l.attn_q_norm = b.bind(TensorId::kAttnQNorm, i, {nq}, Use::kVector);
    l.attn_k_norm = b.bind(TensorId::kAttnKNorm, i, {nk}, Use::kVector);
  }
}

void bind_mla(const Binder& b, const ModelConfig& cfg, LayerWeights& l, uint32_t il) {
  const int i = static_cast<int>(il);
  const int64_t n_embd = cfg.n_embd;
  const int64_t n_head = cfg.n_head(il);
  const int64_t n_q = n_head * cfg.head_dim_k_mla;
  const int64_t nope = cfg.head_dim_k_mla - cfg.n_rot;
  if (cfg.n_lora_q > 0) {
    l.wq_a = b.bind(TensorId::kAttnQA, i, {n_embd, cfg.n_lora_q}, Use::kMatmul);
    l.attn_q_a_norm = b.bind(TensorId::kAttnQANorm, i, {cfg.n_lora_q}, Use::kVector);
    l.wq_b = b.bind(TensorId::kAttnQB, i, {cfg.n_lora_q, n_q}, Use::kMatmul);
  } else {
    l.wq = b.bind(TensorId::kAttnQ, i, {n_embd, n_q}, Use::kMatmul);
  }
  l.wkv_a_mqa = b.bind(TensorId::kAttnKvAMqa, i, {n_embd, cfg.n_lora_kv + cfg.n_rot}, Use::kMatmul);
  l.attn_kv_a_norm = b.bind(TensorId::kAttnKvANorm, i, {cfg.n_lora_kv}, Use::kVector);
  if (cfg.is_mla()) {
    l.wk_b = b.bind(TensorId::kAttnKB, i, {nope, cfg.n_lora_kv, n_head}, Use::kMatmul);
    l.wv_b =
        b.bind(TensorId::kAttnVB, i, {cfg.n_lora_kv, cfg.head_dim_v_mla, n_head}, Use::kMatmul);
  } else {
    l.wkv_b = b.bind(TensorId::kAttnKvB, i, {cfg.n_lora_kv, n_head * (nope + cfg.head_dim_v_mla)},
                     Use::kMatmul);
  }
  l.wo = b.bind(TensorId::kAttnOut, i, {n_head * cfg.head_dim_v_mla, n_embd}, Use::kMatmul);
}

// A divisor must be finite and > 0 (the angle is divided by it); the file's n_rot may be less
// than the set's length (phimoe's sets are head dim / 2 long).
void require_rope_factors(const io::GgufFile& file, const ModelConfig& cfg, const WeightView& f) {
  if (!f.present()) return;
  for (uint32_t i = 0; i < cfg.n_rot / 2; ++i)
    if (!std::isfinite(f.f32()[i]) || !(f.f32()[i] > 0.0f))
      fail(ErrorKind::kBadFile, "{}: {}[{}] = {:g} must be finite and > 0", file.path(), f.name, i,
           f.f32()[i]);
}

}  // namespace

bool rope_long_set(const ModelWeights& w, const ModelConfig& cfg, uint32_t n_ctx) {
  return w.rope_long.present() && n_ctx > cfg.rope_n_ctx_orig();
}

const float* rope_freq_factors(const ModelWeights& w, const ModelConfig& cfg, uint32_t n_ctx) {
  if (w.rope_freqs.present()) return w.rope_freqs.f32();
  if (!w.rope_long.present()) return nullptr;
  return (rope_long_set(w, cfg, n_ctx) ? w.rope_long : w.rope_short).f32();
}

ModelWeights bind_weights(const io::GgufFile& file, const ModelConfig& cfg) {
  const Binder b(file);
  const int64_t n_embd = cfg.n_embd;
  ModelWeights m;
  m.token_embd = b.bind(TensorId::kTokenEmbd, -1, {n_embd, cfg.n_vocab}, Use::kMatmul);
  m.output_norm = b.bind(TensorId::kOutputNorm, -1, {n_embd}, Use::kVector);
  m.output = b.bind(TensorId::kOutput, -1, {n_embd, cfg.n_vocab}, Use::kMatmul, false);
  if (!m.output.present()) {
    m.output = m.token_embd;
    m.output_tied = true;
  }
  if (cfg.norm_bias) {  // phimoe (llama.cpp requires both)
    m.output_norm_b = b.bind(TensorId::kOutputNormBias, -1, {n_embd}, Use::kVector);
    m.output_b = b.bind(TensorId::kOutputBias, -1, {cfg.n_vocab}, Use::kVector);
  }
  // RoPE frequency divisors, optional, as llama.cpp binds them: rope_freqs [n_rot / 2] for its
  // llama graph (Mixtral, granitemoe; Llama-3.1-based files), LongRoPE's long and short sets
  // [head dim / 2] for phimoe.
  if (cfg.arch == Arch::kLlama || cfg.arch == Arch::kGraniteMoe)
    m.rope_freqs = b.bind(TensorId::kRopeFreqs, -1, {cfg.n_rot / 2}, Use::kVector, false);
  if (cfg.arch == Arch::kPhiMoe) {
    m.rope_long = b.bind(TensorId::kRopeFactorsLong, -1, {cfg.head_dim_k / 2}, Use::kVector, false);
    m.rope_short =
        b.bind(TensorId::kRopeFactorsShort, -1, {cfg.head_dim_k / 2}, Use::kVector, false);
    if (m.rope_long.present() != m.rope_short.present())
      fail(ErrorKind::kBadFile, "{}: {} without {}", file.path(),
           m.rope_long.present() ? m.rope_long.name : m.rope_short.name,
           tensor_name(m.rope_long.present() ? TensorId::kRopeFactorsShort
                                             : TensorId::kRopeFactorsLong));
    require_rope_factors(file, cfg, m.rope_long);
    require_rope_factors(file, cfg, m.rope_short);
  }
  require_rope_factors(file, cfg, m.rope_freqs);
  // glm4moe, gpt-oss and dbrx name the pre-FFN norm after its position.
  const TensorId ffn_norm = cfg.arch == Arch::kGlm4Moe || cfg.arch == Arch::kGptOss
                                ? TensorId::kPostAttnNorm
                            : cfg.arch == Arch::kDbrx ? TensorId::kAttnOutNorm
                                                      : TensorId::kFfnNorm;
  m.layers.resize(cfg.n_layer);
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    LayerWeights& l = m.layers[il];
    const int i = static_cast<int>(il);
    l.attn_norm = b.bind(TensorId::kAttnNorm, i, {n_embd}, Use::kVector);
    if (cfg.norm_bias) l.attn_norm_b = b.bind(TensorId::kAttnNormBias, i, {n_embd}, Use::kVector);
    if (cfg.has_mla_projections()) {
      bind_mla(b, cfg, l, il);
    } else {
      bind_gqa(b, cfg, l, il);
    }
    l.ffn_norm = b.bind(ffn_norm, i, {n_embd}, Use::kVector);
    if (cfg.post_norms) {  // grok: optional, as llama.cpp c392e50 applies them where present
      l.attn_post_norm = b.bind(TensorId::kAttnOutNorm, i, {n_embd}, Use::kVector, false);
      l.ffn_post_norm = b.bind(TensorId::kLayerOutNorm, i, {n_embd}, Use::kVector, false);
      if (!l.ffn_post_norm.present())  // its newer name
        l.ffn_post_norm = b.bind(TensorId::kFfnPostNorm, i, {n_embd}, Use::kVector, false);
    }
    if (cfg.norm_bias) l.ffn_norm_b = b.bind(TensorId::kFfnNormBias, i, {n_embd}, Use::kVector);

    if (cfg.is_moe(il)) {
      const int64_t n_exp = cfg.n_expert;
      l.ffn_gate_inp = b.bind(TensorId::kFfnGateInp, i, {n_embd, n_exp}, Use::kMatmul);
      if (cfg.arch == Arch::kGptOss)
        l.ffn_gate_inp_b = b.bind(TensorId::kFfnGateInpBias, i, {n_exp}, Use::kVector);
      if (cfg.gating == GatingType::kSigmoid || cfg.arch == Arch::kErnie45Moe)
        l.exp_probs_b = b.bind(TensorId::kFfnExpProbsB, i, {n_exp}, Use::kVector,
                               cfg.arch == Arch::kGlm4Moe || cfg.arch == Arch::kMinimaxM2);
      bind_stack(b, l.experts, i, TensorId::kFfnGateExps, TensorId::kFfnUpExps,
                 TensorId::kFfnDownExps, n_embd, cfg.n_ff_exp, cfg.n_expert);
      l.experts.activation = cfg.activation;
      if (cfg.arch == Arch::kGptOss) {
        l.experts.gate_bias =
            b.bind(TensorId::kFfnGateExpsBias, i, {cfg.n_ff_exp, n_exp}, Use::kVector);
        l.experts.up_bias =
            b.bind(TensorId::kFfnUpExpsBias, i, {cfg.n_ff_exp, n_exp}, Use::kVector);
        l.experts.down_bias = b.bind(TensorId::kFfnDownExpsBias, i, {n_embd, n_exp}, Use::kVector);
      }
      if (cfg.ffn_combine_scale != 0.0f) {  // grok-2: its dense FFN runs as the shared expert
        bind_stack(b, l.shared, i, TensorId::kFfnGate, TensorId::kFfnUp, TensorId::kFfnDown, n_embd,
                   cfg.n_ff_shexp, 1);
        l.shared.activation = cfg.activation;
      } else if (cfg.moe_beside_dense) {  // arctic: its dense residual FFN as the shared expert
        l.ffn_norm_exps = b.bind(TensorId::kFfnNormExps, i, {n_embd}, Use::kVector);
        bind_stack(b, l.shared, i, TensorId::kFfnGate, TensorId::kFfnUp, TensorId::kFfnDown, n_embd,
                   cfg.n_ff_shexp, 1);
      } else if (cfg.has_shared_experts(il)) {
        bind_stack(b, l.shared, i, TensorId::kFfnGateShexp, TensorId::kFfnUpShexp,
                   TensorId::kFfnDownShexp, n_embd, cfg.n_ff_shexp, 1);
      }
      // One output row: any matrix type (converted files keep the 1-row matrix as F16/F32).
      if (cfg.has_shared_experts(il) && cfg.shared_expert_gate)
        l.shared_gate = b.bind(TensorId::kFfnGateInpShexp, i, {n_embd, 1}, Use::kMatmul);
    } else {
      bind_stack(b, l.experts, i, TensorId::kFfnGate, TensorId::kFfnUp, TensorId::kFfnDown, n_embd,
                 cfg.n_ff(il), 1);
    }
  }
  return m;
}

namespace {

template <typename Weights, typename View>
std::vector<View*> collect_decode_dense(Weights& w) {
  std::vector<View*> out;
  const auto add = [&out](View& v) {
    if (!v.present()) return;
    for (const View* seen : out)
      if (seen->data == v.data) return;  // one tensor bound twice (a tied view)
    out.push_back(&v);
  };
  for (auto& l : w.layers) {
    for (View* v : {&l.attn_norm,
                    &l.attn_norm_b,
                    &l.wq_a,
                    &l.attn_q_a_norm,
                    &l.wq_b,
                    &l.wq,
                    &l.wk,
                    &l.wv,
                    &l.bq,
                    &l.bk,
                    &l.bv,
                    &l.attn_q_norm,
                    &l.attn_k_norm,
                    &l.wkv_a_mqa,
                    &l.attn_kv_a_norm,
                    &l.wk_b,
                    &l.wv_b,
                    &l.attn_sinks,
                    &l.wo,
                    &l.bo,
                    &l.ffn_norm,
                    &l.ffn_norm_b,
                    &l.ffn_norm_exps,
                    &l.attn_post_norm,
                    &l.ffn_post_norm,
                    &l.ffn_gate_inp,
                    &l.ffn_gate_inp_b,
                    &l.exp_probs_b,
                    &l.shared_gate})
      add(*v);
    // MLA reads the absorbed wk_b / wv_b when the file has them, else the decompressed wkv_b.
    if (!l.wk_b.present() || !l.wv_b.present()) add(l.wkv_b);
    if (l.experts.n_expert == 1 && !l.ffn_gate_inp.present())  // a dense FFN, not routed
      for (View* v : {&l.experts.gate, &l.experts.up, &l.experts.down, &l.experts.gate_bias,
                      &l.experts.up_bias, &l.experts.down_bias})
        add(*v);
    if (l.shared.n_expert == 1)
      for (View* v : {&l.shared.gate, &l.shared.up, &l.shared.down}) add(*v);
  }
  add(w.output_norm);
  add(w.output_norm_b);
  if (!w.output_tied) add(w.output);
  add(w.output_b);
  return out;
}

uint64_t interleave_view(WeightView& v) {
  const kernels::WeightLayout to = repack_layout(v);
  if (to == v.layout) return 0;
  STRATA_ASSERT(v.row_bytes * static_cast<uint64_t>(v.n_rows()) == v.n_bytes,
                "{}: rows are not contiguous", v.name);
  // make_resident left the private copy read-only: writable while it is rearranged.
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(v.data) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(v.data) + v.n_bytes + page - 1) / page * page;
  auto* pages = reinterpret_cast<void*>(begin);
  if (mprotect(pages, end - begin, PROT_READ | PROT_WRITE) != 0)
    fail(ErrorKind::kIo, "REPACK of {}: its weights are not private memory (mprotect: {})", v.name,
         std::strerror(errno));
  kernels::interleave_in_place(to, const_cast<std::byte*>(v.data), v.n_rows(), v.n_cols());
  mprotect(pages, end - begin, PROT_READ);
  v.layout = to;
  return v.n_bytes;
}

}  // namespace

uint64_t dense_bytes_per_token(const ModelWeights& w) {
  uint64_t bytes = 0;
  for (const WeightView* v : decode_dense_views(w)) bytes += v->n_bytes;
  // A tied head reads the whole embedding; otherwise a token reads one row of it.
  if (w.output_tied) return bytes + w.output.n_bytes;
  if (w.token_embd.present()) bytes += w.token_embd.row_bytes;
  return bytes;
}

std::vector<WeightView*> decode_dense_views(ModelWeights& w) {
  return collect_decode_dense<ModelWeights, WeightView>(w);
}
std::vector<const WeightView*> decode_dense_views(const ModelWeights& w) {
  return collect_decode_dense<const ModelWeights, const WeightView>(w);
}

kernels::WeightLayout repack_layout(const WeightView& v) {
  if (!v.present() || v.layout != kernels::WeightLayout::kRows || v.ne[2] != 1 || v.ne[3] != 1 ||
      !kernels::interleave_pays(v.type))
    return v.layout;
  return kernels::interleaved_layout(v.type, v.n_rows(), v.n_cols());
}

std::vector<WeightView*> repack_views(ModelWeights& w) {
  std::vector<WeightView*> out;
  for (LayerWeights& l : w.layers) {
    for (WeightView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.wq_a, &l.wq_b, &l.wkv_a_mqa, &l.wkv_b})
      out.push_back(v);
    if (l.experts.n_expert == 1 && !l.ffn_gate_inp.present())  // a dense FFN, not routed
      for (WeightView* v : {&l.experts.gate, &l.experts.up, &l.experts.down}) out.push_back(v);
    if (l.shared.n_expert == 1)
      for (WeightView* v : {&l.shared.gate, &l.shared.up, &l.shared.down}) out.push_back(v);
  }
  // The output head, unless it is the token embedding (read row by row for lookups).
  if (!w.output_tied) out.push_back(&w.output);
  return out;
}

uint64_t interleave_dense(ModelWeights& w) {
  uint64_t bytes = 0;
  for (WeightView* v : repack_views(w)) bytes += interleave_view(*v);
  return bytes;
}

}  // namespace strata::engine
