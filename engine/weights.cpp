// Binds the model's tensors with their expected shapes (see weights.h).
// Exercised by tests/test_model_config.cpp and tests/test_model_forward.cpp.
#include "engine/weights.h"

#include <fmt/format.h>

#include <algorithm>

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

 private:
  static std::array<int64_t, 4> padded(const std::vector<int64_t>& ne) {
    std::array<int64_t, 4> out = {1, 1, 1, 1};
    for (size_t d = 0; d < ne.size() && d < 4; ++d) out[d] = ne[d];
    return out;
  }
  const io::GgufFile& file_;
};

MatrixRef matrix_of(const WeightView& w, const ByteRange& bytes) {
  return MatrixRef{w.type, w.ne[1], w.ne[0], w.row_bytes, bytes.data};
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
    return ByteRange{w.file_offset + e * per_expert, per_expert, w.data + e * per_expert};
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
  m.layers.resize(cfg.n_layer);
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    LayerWeights& l = m.layers[il];
    const int i = static_cast<int>(il);
    l.attn_norm = b.bind(TensorId::kAttnNorm, i, {n_embd}, Use::kVector);
    l.wq = b.bind(TensorId::kAttnQ, i, {n_embd, cfg.n_embd_q(il)}, Use::kMatmul);
    l.wk = b.bind(TensorId::kAttnK, i, {n_embd, cfg.n_embd_k_gqa(il)}, Use::kMatmul);
    l.wv = b.bind(TensorId::kAttnV, i, {n_embd, cfg.n_embd_v_gqa(il)}, Use::kMatmul);
    l.wo = b.bind(TensorId::kAttnOut, i, {cfg.n_head(il) * cfg.head_dim_v, n_embd}, Use::kMatmul);
    if (cfg.qk_norm) {
      l.attn_q_norm = b.bind(TensorId::kAttnQNorm, i, {cfg.head_dim_k}, Use::kVector);
      l.attn_k_norm = b.bind(TensorId::kAttnKNorm, i, {cfg.head_dim_k}, Use::kVector);
    }
    l.ffn_norm = b.bind(TensorId::kFfnNorm, i, {n_embd}, Use::kVector);

    ExpertStack& x = l.experts;
    x.n_embd = n_embd;
    x.n_ff = cfg.layer_n_ff(il);
    x.n_expert = cfg.layer_n_expert(il);
    if (cfg.is_moe(il)) {
      const int64_t n_exp = cfg.n_expert;
      l.ffn_gate_inp = b.bind(TensorId::kFfnGateInp, i, {n_embd, n_exp}, Use::kMatmul);
      x.gate = b.bind(TensorId::kFfnGateExps, i, {n_embd, x.n_ff, n_exp}, Use::kMatmul);
      x.up = b.bind(TensorId::kFfnUpExps, i, {n_embd, x.n_ff, n_exp}, Use::kMatmul);
      x.down = b.bind(TensorId::kFfnDownExps, i, {x.n_ff, n_embd, n_exp}, Use::kMatmul);
    } else {
      x.gate = b.bind(TensorId::kFfnGate, i, {n_embd, x.n_ff}, Use::kMatmul);
      x.up = b.bind(TensorId::kFfnUp, i, {n_embd, x.n_ff}, Use::kMatmul);
      x.down = b.bind(TensorId::kFfnDown, i, {x.n_ff, n_embd}, Use::kMatmul);
    }
  }
  return m;
}

}  // namespace strata::engine
