// Q8_0, Q4_1, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS models end to end (Q8_0 has fixtures
// too; here every REPACK path runs): tiny-qwen3moe's F32 fixture requantized with quantize_row
// (every matrix whose rows are whole blocks: experts, attention, embeddings and head; byte for
// byte what llama-quantize writes, bench/RESULTS.md session 19) against a peer made of the same
// weights dequantized back to F32 (the F32 path is checked against llama.cpp's references by
// test_model_forward). The only difference left is the activations' Q8_0 / Q8_K rounding, so the
// logits agree closely; and they are bit-identical across the kernel ISAs and thread counts.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "engine/logit_dump.h"
#include "engine/model.h"
#include "io/gguf.h"
#include "kernels/gemv.h"
#include "kernels/quant.h"
#include "tier_test_util.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::engine;

namespace {

const fs::path kF32 = fs::path(STRATA_FIXTURES_DIR) / "tiny-qwen3moe" / "tiny-qwen3moe-F32.gguf";

bool requantizable(const io::GgufTensorInfo& t, GgmlType type) {
  return t.type == GgmlType::F32 && t.n_dims >= 2 &&
         t.ne[0] % static_cast<uint64_t>(ggml_type_info(type).block_size) == 0;
}

// The F32 file with its K-quant-able matrices as `type` (dequantized = false), or as F32 holding
// the values those blocks decode to (dequantized = true).
fs::path requantize(GgmlType type, const fs::path& dst, bool dequantized) {
  const io::GgufFile in = io::GgufFile::open(kF32.string());
  io::GgufWriter w(in.alignment());
  for (const io::GgufKv& kv : in.metadata()) w.set(kv.key, kv.value);
  for (const io::GgufTensorInfo& t : in.tensors())
    w.add_tensor(t.name, requantizable(t, type) && !dequantized ? type : t.type,
                 std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims));
  w.write(dst.string(), [&](size_t i, std::span<std::byte> out) {
    const io::GgufTensorInfo& t = in.tensors()[i];
    const auto* src = reinterpret_cast<const float*>(in.tensor_data(t));
    if (!requantizable(t, type)) {
      std::memcpy(out.data(), src, out.size());
      return;
    }
    const auto n = static_cast<int64_t>(t.n_bytes / sizeof(float));
    std::vector<uint8_t> q(ggml_row_bytes(type, static_cast<uint64_t>(n)));
    kernels::quantize_row(type, src, q.data(), n);
    if (dequantized)
      kernels::dequantize_row(type, q.data(), reinterpret_cast<float*>(out.data()), n);
    else
      std::memcpy(out.data(), q.data(), out.size());
  });
  return dst;
}

std::vector<float> logits(const Model& m, const std::vector<int32_t>& ids, int threads) {
  ForwardOptions o;
  o.n_ctx = 64;
  o.n_threads = threads;
  Forward f(m, o);
  std::vector<float> out(ids.size() * m.config().n_vocab);
  f.prefill(ids, out.data());
  return out;
}

struct KquantCase {
  GgmlType type;
  double max_rel_rms;  // of the logits against the dequantized peer
};

class KquantModel : public ::testing::TestWithParam<KquantCase> {};

TEST_P(KquantModel, CloseToItsDequantizedPeerAndTheSameOnEveryIsa) {
  if (!fs::exists(kF32)) GTEST_SKIP() << "fixture missing: " << kF32;
  const auto [type, max_rel_rms] = GetParam();
  const tier_test::ScratchDir dir(fmt::format("kquant_model_{}", ggml_type_name(type)));
  const Model model = Model::load(requantize(type, dir / "model.gguf", false).string());
  const Model peer = Model::load(requantize(type, dir / "peer.gguf", true).string());
  int n_quant = 0;
  for (const io::GgufTensorInfo& t : model.file().tensors()) n_quant += t.type == type;
  EXPECT_GE(n_quant, 4 * 5);  // per layer q, k, v, output, gate and up experts at least

  const uint32_t n_vocab = model.config().n_vocab;
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % n_vocab));
  const std::vector<float> got = logits(model, ids, 2);
  const std::vector<float> want = logits(peer, ids, 2);
  size_t top1_same = 0;
  double err2 = 0, ref2 = 0;
  for (size_t p = 0; p < ids.size(); ++p) {
    const float* g = got.data() + p * n_vocab;
    const float* r = want.data() + p * n_vocab;
    size_t ag = 0, ar = 0;
    for (uint32_t v = 0; v < n_vocab; ++v) {
      ASSERT_TRUE(std::isfinite(g[v])) << "position " << p << " logit " << v;
      if (g[v] > g[ag]) ag = v;
      if (r[v] > r[ar]) ar = v;
      err2 += double(g[v] - r[v]) * (g[v] - r[v]);
      ref2 += double(r[v]) * r[v];
    }
    top1_same += ag == ar;
  }
  // Q8_0 / Q8_K activations against F32 ones: nearly every argmax, a few % of the logits' rms.
  EXPECT_LT(std::sqrt(err2 / ref2), max_rel_rms);

  EXPECT_GE(top1_same, ids.size() * 9 / 10) << top1_same << " of " << ids.size();

  // Every kernel ISA this CPU runs and one thread: the same bits.
  for (kernels::Isa isa : {kernels::Isa::kRef, kernels::Isa::kAvx2}) {
    if (!kernels::isa_supported(isa)) continue;
    kernels::set_isa_cap(isa);
    const std::vector<float> capped = logits(model, ids, 2);
    kernels::set_isa_cap(kernels::Isa::kAvx512);
    EXPECT_EQ(std::memcmp(capped.data(), got.data(), got.size() * sizeof(float)), 0)
        << "ISA " << kernels::isa_name(isa);
  }
  const std::vector<float> one = logits(model, ids, 1);
  EXPECT_EQ(std::memcmp(one.data(), got.data(), got.size() * sizeof(float)), 0) << "1 thread";
}

// Through `strata replay` (the tiers, the dense arena): REPACK=1, the default, interleaves the
// matrices of types with a layout this CPU's kernels run faster (IQ4_XS with AVX-512, like Q4_K);
// REPACK=0 keeps the file's layout. The logits must not change (DESIGN.md invariant 1).
TEST_P(KquantModel, ReplayIsTheSameWithAndWithoutRepack) {
  if (!fs::exists(kF32)) GTEST_SKIP() << "fixture missing: " << kF32;
  const GgmlType type = GetParam().type;
  const tier_test::ScratchDir dir(fmt::format("kquant_replay_{}", ggml_type_name(type)));
  const fs::path model = requantize(type, dir / "model.gguf", false);
  const uint32_t n_vocab = Model::load(model.string()).config().n_vocab;
  tier_test::write_streams(dir / "streams.txt", n_vocab, {30, 17});
  auto replay = [&](const std::string& tag, const std::string& env) {
    const tier_test::Result r = tier_test::run_strata(
        dir.path(),
        fmt::format("replay -m '{}' --tokens '{}' --ubatch 8 --dump-logits '{}' -t 2",
                    model.string(), (dir / "streams.txt").string(), (dir / tag).string()),
        env);
    EXPECT_EQ(r.rc, 0) << tag << ": " << r.err;
  };
  replay("file", "REPACK=0 DENSE_ARENA=0");
  std::vector<std::string> tags = {"repack"};
  replay("repack", "");
  // The AVX2 path's own interleaved kernels (an AVX2-only host's), where this CPU has AVX-512.
  if (kernels::isa_supported(kernels::Isa::kAvx2) && kernels::best_isa() != kernels::Isa::kAvx2) {
    tags.push_back("repack-avx2");
    replay("repack-avx2", "ISA=avx2");
  }
  // With AVX-VNNI, ISA=avx2 runs the VNNI kernels (and repacks Q8_0); ISA=avx2-plain those of a
  // plain AVX2 CPU (Zen 2/3), which keep Q8_0 in the file's layout.
  if (kernels::isa_supported(kernels::Isa::kAvx2) && __builtin_cpu_supports("avxvnni")) {
    tags.push_back("repack-avx2-plain");
    replay("repack-avx2-plain", "ISA=avx2-plain");
  }
  for (const std::string& tag : tags)
    for (int s = 0; s < 2; ++s) {
      const std::string name = fmt::format("stream{}.logits.bin", s);
      const engine::LogitDump a = engine::read_logit_dump((dir / tag / name).string());
      const engine::LogitDump b = engine::read_logit_dump((dir / "file" / name).string());
      ASSERT_EQ(a.logits.size(), b.logits.size());
      EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0)
          << tag << " stream " << s;
    }
}

// Measured: Q4_1 1.6%, Q5_1 1.5%, Q2_K 2.2%, Q3_K 2.5%, Q5_K 2.4%, Q6_K 3.0% (the Q8_K activations
// dominate it), IQ4_NL 1.1%, IQ4_XS 2.2% (a Q4_K model in the same comparison: 2.8%); 39-40 of 40
// argmax.
INSTANTIATE_TEST_SUITE_P(
    Types, KquantModel,
    ::testing::Values(KquantCase{GgmlType::Q8_0, 0.03}, KquantCase{GgmlType::Q4_1, 0.03},
                      KquantCase{GgmlType::Q5_0, 0.03}, KquantCase{GgmlType::Q5_1, 0.03},
                      KquantCase{GgmlType::Q2_K, 0.03}, KquantCase{GgmlType::Q3_K, 0.03},
                      KquantCase{GgmlType::Q5_K, 0.03}, KquantCase{GgmlType::Q6_K, 0.04},
                      KquantCase{GgmlType::IQ4_NL, 0.03}, KquantCase{GgmlType::IQ4_XS, 0.03}),
    [](const auto& info) { return std::string(ggml_type_name(info.param.type)); });

}  // namespace
