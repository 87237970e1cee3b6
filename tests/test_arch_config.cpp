// Config and weight binding of the second-batch architectures: the fixtures read as MODEL.json
// describes them; a glm4moe file with a trailing MTP (nextn) layer loads without running it and
// computes the same logits; DeepSeek files from before MLA absorption run decompressed; YaRN
// keys resolve (and run) as the published DeepSeek / gpt-oss configs ask; dense layers and shared
// experts stay out of the routed (tiered) stacks.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "engine/logit_dump.h"
#include "engine/model.h"
#include "engine/model_info.h"
#include "engine/names.h"
#include "engine/synth.h"
#include "io/check.h"
#include "io/gguf.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::engine;

namespace {

const fs::path kFixtures = STRATA_FIXTURES_DIR;

fs::path fixture(const std::string& model, const std::string& variant) {
  return kFixtures / model / (model + "-" + variant + ".gguf");
}

class TmpDir {
 public:
  TmpDir() : path_(fs::temp_directory_path() / fmt::format("strata_arch_cfg_{}", ::getpid())) {
    fs::create_directories(path_);
  }
  ~TmpDir() { fs::remove_all(path_); }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// A copy of a GGUF file with edits: keys set or dropped, tensors dropped, extra tensors whose
// bytes come from `extra_source` (a tensor of the source file) or are zero.
struct Rewrite {
  std::map<std::string, io::GgufValue> set;
  std::vector<std::string> drop_keys;
  std::vector<std::string> drop_tensors;
  struct Extra {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
    std::string copy_of;  // "" = zeros (or fill)
    std::function<void(std::span<std::byte>)> fill = {};
  };
  std::vector<Extra> extra;
};

fs::path rewrite(const fs::path& src, const Rewrite& r, const fs::path& dst) {
  const io::GgufFile in = io::GgufFile::open(src.string());
  io::GgufWriter w(in.alignment());
  for (const io::GgufKv& kv : in.metadata()) {
    if (std::find(r.drop_keys.begin(), r.drop_keys.end(), kv.key) != r.drop_keys.end()) continue;
    w.set(kv.key, kv.value);
  }
  for (const auto& [k, v] : r.set) w.set(k, v);
  std::vector<const io::GgufTensorInfo*> sources;
  std::vector<const Rewrite::Extra*> extras;
  for (const io::GgufTensorInfo& t : in.tensors()) {
    if (std::find(r.drop_tensors.begin(), r.drop_tensors.end(), t.name) != r.drop_tensors.end())
      continue;
    w.add_tensor(t.name, t.type, std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims));
    sources.push_back(&t);
    extras.push_back(nullptr);
  }
  for (const Rewrite::Extra& e : r.extra) {
    w.add_tensor(e.name, e.type, e.ne);
    sources.push_back(e.copy_of.empty() ? nullptr : in.find_tensor(e.copy_of));
    extras.push_back(&e);
  }
  w.write(dst.string(), [&](size_t i, std::span<std::byte> out) {
    if (extras[i] && extras[i]->fill) {
      extras[i]->fill(out);
    } else if (sources[i]) {
      std::memcpy(out.data(), in.tensor_data(*sources[i]), out.size());
    } else {
      std::memset(out.data(), 0, out.size());
    }
  });
  return dst;
}

std::vector<float> stream_logits(const Model& m, const std::vector<int32_t>& ids,
                                 KvType kv_type = KvType::kF32) {
  ForwardOptions o;
  o.n_ctx = 128;
  o.n_threads = 2;
  o.kv_type = kv_type;
  Forward f(m, o);
  std::vector<float> logits(ids.size() * m.config().n_vocab);
  f.prefill(ids, logits.data());
  return logits;
}

std::vector<int32_t> stream0(const std::string& model, const std::string& variant) {
  std::ifstream in(kFixtures / model / "ref" / variant / "ref.json");
  return nlohmann::json::parse(in)["streams"][0]["ids"].get<std::vector<int32_t>>();
}

#define REQUIRE_FIXTURE(p) \
  if (!fs::exists(p)) GTEST_SKIP() << "fixture missing: " << (p)

TEST(ArchConfig, FixtureConfigs) {
  for (const char* name : {"tiny-deepseek2", "tiny-glm4moe", "tiny-olmoe", "tiny-gpt-oss"}) {
    const fs::path dir = kFixtures / name;
    if (!fs::exists(dir)) GTEST_SKIP() << "fixtures not found at " << dir;
    std::ifstream in(dir / "MODEL.json");
    const auto j = nlohmann::json::parse(in);
    const auto& c = j["config"];
    for (const auto& [variant, info] : j["variants"].items()) {
      const fs::path p = dir / info["file"].get<std::string>();
      if (!fs::exists(p)) continue;
      SCOPED_TRACE(p.string());
      const Model m = Model::load(p.string());
      const ModelConfig& mc = m.config();
      EXPECT_EQ(mc.arch_name, c["arch"].get<std::string>());
      EXPECT_EQ(mc.n_layer, c["n_layer"].get<uint32_t>());
      EXPECT_EQ(mc.n_embd, c["d"].get<uint32_t>());
      EXPECT_EQ(mc.n_head(0), c["n_head"].get<uint32_t>());
      EXPECT_EQ(mc.n_expert, c["n_exp"].get<uint32_t>());
      EXPECT_EQ(mc.n_expert_used, c["k"].get<uint32_t>());
      EXPECT_EQ(mc.n_ff_exp, c["ff"].get<uint32_t>());
      EXPECT_EQ(mc.n_vocab, c["vocab"].get<uint32_t>());
      EXPECT_FLOAT_EQ(mc.rope_freq_base, c["rope_base"].get<float>());
      EXPECT_FLOAT_EQ(mc.norm_eps, c["eps"].get<float>());
      const uint32_t n_dense = c.value("n_dense", 0u);
      EXPECT_EQ(mc.n_layer_dense_lead, n_dense);
      for (uint32_t il = 0; il < mc.n_layer; ++il) {
        EXPECT_EQ(mc.is_moe(il), il >= n_dense) << il;
        const LayerWeights& l = m.weights().layers[il];
        // Routed experts (the tiers' unit) only in MoE layers; dense FFN and shared experts
        // are separate resident stacks.
        EXPECT_EQ(l.experts.n_expert, mc.is_moe(il) ? mc.n_expert : 1u) << il;
        EXPECT_EQ(l.shared.n_expert, mc.is_moe(il) && c.value("n_shared", 0) > 0 ? 1u : 0u) << il;
      }
      if (c.contains("n_shared") && c["n_shared"].get<int>() > 0) {
        EXPECT_EQ(mc.n_ff_shexp, c["ff"].get<uint32_t>() * c["n_shared"].get<uint32_t>());
      }
      if (c.contains("w_scale")) {
        EXPECT_FLOAT_EQ(mc.expert_weights_scale, c["w_scale"].get<float>());
      }
      if (c.contains("w_norm")) {
        EXPECT_EQ(mc.norm_topk_weights, c["w_norm"].get<bool>());
      }
      if (c.contains("groups")) {
        EXPECT_EQ(mc.n_expert_groups, c["groups"].get<uint32_t>());
        EXPECT_EQ(mc.n_group_used, c["groups_used"].get<uint32_t>());
      }
      const std::string arch = mc.arch_name;
      if (arch == "deepseek2") {
        EXPECT_TRUE(mc.is_mla());
        EXPECT_EQ(mc.n_lora_q, c["q_lora"].get<uint32_t>());
        EXPECT_EQ(mc.n_lora_kv, c["kv_lora"].get<uint32_t>());
        EXPECT_EQ(mc.head_dim_k_mla, c["nope"].get<uint32_t>() + c["rope"].get<uint32_t>());
        EXPECT_EQ(mc.head_dim_v_mla, c["vhd"].get<uint32_t>());
        EXPECT_EQ(mc.n_rot, c["rope"].get<uint32_t>());
        EXPECT_EQ(mc.kv_k_width(0) + mc.kv_v_width(0), mc.n_lora_kv + mc.n_rot);
        EXPECT_FLOAT_EQ(mc.kq_scale, 1.0f / std::sqrt(48.0f));
        EXPECT_EQ(mc.gating, GatingType::kSigmoid);
        EXPECT_EQ(mc.rope_type, RopeType::kNorm);
      } else if (arch == "glm4moe") {
        EXPECT_EQ(mc.gating, GatingType::kSigmoid);
        EXPECT_TRUE(mc.qk_norm);
        EXPECT_FALSE(mc.qk_norm_whole);
        EXPECT_EQ(mc.n_rot, 32u);
        EXPECT_TRUE(m.weights().layers[0].bq.present());
        EXPECT_EQ(mc.n_layer_nextn, 0u);
      } else if (arch == "olmoe") {
        EXPECT_EQ(mc.gating, GatingType::kSoftmax);
        EXPECT_FALSE(mc.norm_topk_weights);
        EXPECT_TRUE(mc.qk_norm_whole);
      } else if (arch == "gpt-oss") {
        EXPECT_EQ(mc.gating, GatingType::kSoftmaxTopK);
        EXPECT_EQ(mc.activation, FfnActivation::kSwigluOai);
        EXPECT_EQ(mc.n_swa, 16u);
        EXPECT_TRUE(mc.is_swa(0) && !mc.is_swa(1) && mc.is_swa(2) && !mc.is_swa(3));
        EXPECT_TRUE(m.weights().layers[0].attn_sinks.present());
        EXPECT_TRUE(m.weights().layers[0].experts.down_bias.present());
      }
      std::printf("  %s: %s\n", p.filename().c_str(), mc.describe().c_str());
    }
  }
}

// GLM-4.5 files carry nextn_predict_layers trailing MTP blocks counted in block_count. They are
// skipped (not bound, not run): the same file with one appended MTP block computes the same
// logits, bit for bit.
TEST(ArchConfig, Glm4moeSkipsTheMtpLayer) {
  const fs::path src = fixture("tiny-glm4moe", "Q4_0");
  REQUIRE_FIXTURE(src);
  TmpDir tmp;
  const io::GgufFile in = io::GgufFile::open(src.string());
  Rewrite r;
  r.set["glm4moe.block_count"] = uint32_t{5};
  r.set["glm4moe.nextn_predict_layers"] = uint32_t{1};
  for (const io::GgufTensorInfo& t : in.tensors()) {
    if (t.name.rfind("blk.3.", 0) != 0) continue;
    r.extra.push_back({"blk.4." + t.name.substr(6), t.type,
                       std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), t.name});
  }
  r.extra.push_back({"blk.4.nextn.eh_proj.weight", GgmlType::F32, {512, 256}, ""});
  r.extra.push_back({"blk.4.nextn.enorm.weight", GgmlType::F32, {256}, ""});
  r.extra.push_back({"blk.4.nextn.hnorm.weight", GgmlType::F32, {256}, ""});
  r.extra.push_back({"blk.4.nextn.shared_head_norm.weight", GgmlType::F32, {256}, ""});
  const Model with_mtp = Model::load(rewrite(src, r, tmp / "mtp.gguf").string());
  EXPECT_EQ(with_mtp.config().n_layer, 4u);
  EXPECT_EQ(with_mtp.config().n_layer_nextn, 1u);
  EXPECT_EQ(with_mtp.weights().layers.size(), 4u);
  const Model plain = Model::load(src.string());
  const auto ids = stream0("tiny-glm4moe", "Q4_0");
  EXPECT_TRUE(stream_logits(with_mtp, ids) == stream_logits(plain, ids));

  Rewrite bad;
  bad.set["glm4moe.nextn_predict_layers"] = uint32_t{4};
  try {
    Model::load(rewrite(src, bad, tmp / "bad.gguf").string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nextn_predict_layers"), std::string::npos) << e.what();
  }
}

// DeepSeek GGUFs converted before MLA absorption (attn_kv_b, no key_length_mla, per-head K/V)
// run in the decompressed form. The tiny-deepseek2 F32 weights rewritten that way (attn_kv_b =
// per head [W_kbᵀ ; W_vb]) are the same model, so they must still match llama.cpp's references
// for the absorbed file to the F32 tolerance, and the absorbed logits to float rounding.
TEST(ArchConfig, LegacyDeepseekRunsDecompressed) {
  const fs::path src = fixture("tiny-deepseek2", "F32");
  REQUIRE_FIXTURE(src);
  TmpDir tmp;
  const io::GgufFile in = io::GgufFile::open(src.string());
  constexpr uint32_t kHeads = 4, kNope = 32, kLat = 64, kV = 32;
  Rewrite r;
  r.drop_keys = {"deepseek2.attention.key_length_mla", "deepseek2.attention.value_length_mla"};
  r.set["deepseek2.attention.key_length"] = uint32_t{48};
  r.set["deepseek2.attention.value_length"] = uint32_t{32};
  r.set["deepseek2.attention.head_count_kv"] = kHeads;
  for (int il = 0; il < 4; ++il) {
    const std::string kb = fmt::format("blk.{}.attn_k_b.weight", il);
    const std::string vb = fmt::format("blk.{}.attn_v_b.weight", il);
    r.drop_tensors.push_back(kb);
    r.drop_tensors.push_back(vb);
    const float* k = reinterpret_cast<const float*>(in.tensor_data(*in.find_tensor(kb)));
    const float* v = reinterpret_cast<const float*>(in.tensor_data(*in.find_tensor(vb)));
    r.extra.push_back({fmt::format("blk.{}.attn_kv_b.weight", il),
                       GgmlType::F32,
                       {kLat, kHeads * (kNope + kV)},
                       "",
                       [k, v](std::span<std::byte> out) {
                         auto* o = reinterpret_cast<float*>(out.data());
                         for (uint32_t h = 0; h < kHeads; ++h)
                           for (uint32_t j = 0; j < kNope + kV; ++j)
                             for (uint32_t c = 0; c < kLat; ++c)
                               o[(h * (kNope + kV) + j) * kLat + c] =
                                   j < kNope ? k[(h * kLat + c) * kNope + j]
                                             : v[(h * kV + (j - kNope)) * kLat + c];
                       }});
  }
  const Model legacy = Model::load(rewrite(src, r, tmp / "legacy.gguf").string());
  EXPECT_EQ(legacy.config().attention, AttentionKind::kMlaDecompressed);
  EXPECT_EQ(legacy.config().kv_k_width(0), kHeads * 48);
  EXPECT_EQ(legacy.config().kv_v_width(0), kHeads * kV);
  EXPECT_FLOAT_EQ(legacy.config().kq_scale, 1.0f / std::sqrt(48.0f));
  const auto ids = stream0("tiny-deepseek2", "F32");
  const std::vector<float> got = stream_logits(legacy, ids);
  const std::vector<float> absorbed = stream_logits(Model::load(src.string()), ids);
  const LogitDump ref = read_logit_dump(
      (kFixtures / "tiny-deepseek2" / "ref" / "F32" / "stream0.logits.bin").string());
  ASSERT_EQ(ref.logits.size(), got.size());
  double vs_ref = 0, vs_absorbed = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    vs_ref = std::max(vs_ref, std::fabs(double(got[i]) - ref.logits[i]));
    vs_absorbed = std::max(vs_absorbed, std::fabs(double(got[i]) - absorbed[i]));
  }
  std::printf("  decompressed MLA: max|dlogit| %.3g vs llama.cpp (absorbed file), %.3g vs ours\n",
              vs_ref, vs_absorbed);
  EXPECT_LE(vs_ref, 1e-4);
  EXPECT_LE(vs_absorbed, 1e-4);
  ForwardOptions o;
  o.n_ctx = 128;
  Forward f(legacy, o);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto row = f.decode(ids[i]);
    ASSERT_TRUE(std::equal(row.begin(), row.end(), got.begin() + i * legacy.config().n_vocab))
        << "decode differs from prefill at " << i;
  }
  // KV_TYPE=f16: the per-head rows as halves; decode still equals prefill, the logits move by
  // rounding only.
  const std::vector<float> halves = stream_logits(legacy, ids, KvType::kF16);
  o.kv_type = KvType::kF16;
  Forward f16(legacy, o);
  double vs_f32 = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto row = f16.decode(ids[i]);
    ASSERT_TRUE(std::equal(row.begin(), row.end(), halves.begin() + i * legacy.config().n_vocab))
        << "f16 decode differs from prefill at " << i;
  }
  for (size_t i = 0; i < got.size(); ++i)
    vs_f32 = std::max(vs_f32, std::fabs(double(halves[i]) - got[i]));
  EXPECT_GT(vs_f32, 0.0);
  EXPECT_LE(vs_f32, 1e-2);

  // A legacy file without its attn_kv_b is refused naming the tensor.
  Rewrite t = r;
  t.extra.erase(t.extra.begin() + 2);  // blk.2
  try {
    Model::load(rewrite(src, t, tmp / "no_kvb.gguf").string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("blk.2.attn_kv_b.weight"), std::string::npos) << e.what();
  }
}

// YaRN keys as DeepSeek-V3's converter writes them: the config resolves the rotation and the MLA
// attention scale (values checked against HF's formulas in tests/test_arch_rope.cpp), and the
// model runs with them (finite logits; decode equals prefill).
TEST(ArchConfig, DeepseekYarnKeysResolveAndRun) {
  const fs::path src = fixture("tiny-deepseek2", "Q4_0");
  REQUIRE_FIXTURE(src);
  TmpDir tmp;
  Rewrite r;
  r.set["deepseek2.rope.scaling.type"] = "yarn";
  r.set["deepseek2.rope.scaling.factor"] = 40.0f;
  r.set["deepseek2.rope.scaling.original_context_length"] = uint32_t{64};
  r.set["deepseek2.rope.scaling.yarn_log_multiplier"] = 0.1f;
  const Model m = Model::load(rewrite(src, r, tmp / "yarn.gguf").string());
  const ModelConfig& c = m.config();
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_FLOAT_EQ(c.rope.freq_scale, 1.0f / 40);
  EXPECT_EQ(c.rope.ext_factor, 1.0f);
  // The rotation magnitude cancels to 1; the scale carries mscale² = (1 + 0.1 ln 40)².
  EXPECT_NEAR(c.rope.attn_factor * (1 + 0.1 * std::log(40.0)), 1.0, 1e-6);
  const double want = std::pow(1 + 0.1 * std::log(40.0), 2) / std::sqrt(48.0);
  EXPECT_NEAR(c.kq_scale, want, 1e-6 * want);
  const auto ids = stream0("tiny-deepseek2", "Q4_0");
  const std::vector<float> logits = stream_logits(m, ids);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  ForwardOptions o;
  o.n_ctx = 128;
  Forward f(m, o);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto row = f.decode(ids[i]);
    ASSERT_TRUE(std::equal(row.begin(), row.end(), logits.begin() + i * c.n_vocab)) << i;
  }
  // And the unscaled file's logits differ (the keys are not ignored).
  EXPECT_FALSE(logits == stream_logits(Model::load(src.string()), ids));
  // rope.scaling.attn_factor scales every rotated q and k: not finite or <= 0 is refused.
  for (const float bad : {0.0f, -1.0f, std::nanf(""), INFINITY}) {
    Rewrite b = r;
    b.set["deepseek2.rope.scaling.attn_factor"] = bad;
    try {
      (void)Model::load(rewrite(src, b, tmp / "bad_attn_factor.gguf").string());
      ADD_FAILURE() << "attn_factor " << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rope.scaling.attn_factor"), std::string::npos)
          << e.what();
    }
  }
}

// grok's multipliers are read from the file where it has them (newer converters write them),
// Grok-1's values otherwise: the keys at those values change nothing, another value changes the
// logits, and a value that would divide by zero or make no sense is refused with the key's name.
TEST(ArchConfig, GrokKeysAreReadWithGrok1Defaults) {
  TmpDir tmp;
  SynthOptions o;
  o.preset = *find_synth_preset("tiny-grok");
  o.n_threads = 2;
  const fs::path src = tmp / "grok.gguf";
  SynthModel(o).write(src.string());
  const std::vector<int32_t> ids = {1, 17, 99, 250, 3, 42, 7, 300};
  const Model base = Model::load(src.string());
  EXPECT_FLOAT_EQ(base.config().rope_scaling.beta_fast, 8.0f);  // llama.cpp's grok default
  const std::vector<float> want = stream_logits(base, ids);
  Rewrite same;
  same.set["grok.embedding_scale"] = 78.38367176906169f;
  same.set["grok.logit_scale"] = 0.5773502691896257f;
  same.set["grok.attention.output_scale"] = 0.08838834764831845f;
  same.set["grok.attn_logit_softcapping"] = 30.0f;
  same.set["grok.final_logit_softcapping"] = 0.0f;
  EXPECT_TRUE(stream_logits(Model::load(rewrite(src, same, tmp / "same.gguf").string()), ids) ==
              want);
  for (const char* key : {"grok.embedding_scale", "grok.logit_scale", "grok.attention.output_scale",
                          "grok.attn_logit_softcapping", "grok.final_logit_softcapping"}) {
    SCOPED_TRACE(key);
    Rewrite other;
    other.set[key] = 2.0f;
    EXPECT_FALSE(
        stream_logits(Model::load(rewrite(src, other, tmp / "other.gguf").string()), ids) == want);
    for (const float bad : {-1.0f, std::nanf(""), INFINITY}) {
      Rewrite b;
      b.set[key] = bad;
      try {
        (void)Model::load(rewrite(src, b, tmp / "bad.gguf").string());
        ADD_FAILURE() << key << " = " << bad << " was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      }
    }
  }
  Rewrite zero_cap;
  zero_cap.set["grok.attn_logit_softcapping"] = 0.0f;
  EXPECT_THROW((void)Model::load(rewrite(src, zero_cap, tmp / "zero.gguf").string()), Error);
}

// `strata inspect` shows how the engine runs each architecture: its specific hyperparameters.
TEST(ArchConfig, InspectShowsArchitectureDetails) {
  const std::pair<const char*, std::vector<std::string>> expect[] = {
      {"tiny-deepseek2",
       {"kv_lora_rank", "head dim q/k (nope + rope)", "expert groups", "shared experts",
        "leading dense layers", "gating"}},
      {"tiny-glm4moe", {"q/k norm", "shared experts", "leading dense layers", "gating"}},
      {"tiny-olmoe", {"q/k norm", "weights"}},
      {"tiny-gpt-oss", {"attention sinks", "sliding window", "expert activation", "gating"}},
  };
  for (const auto& [model, keys] : expect) {
    const fs::path p = fixture(model, "Q4_0");
    if (!fs::exists(p)) GTEST_SKIP() << "fixture missing: " << p;
    const ModelInfo info = inspect_model(p.string());
    EXPECT_TRUE(info.engine_error.empty()) << info.engine_error;
    const std::string text = format_model_info(info);
    const auto j = model_info_json(info);
    EXPECT_TRUE(j["engine"]["supported"].get<bool>());
    for (const std::string& k : keys) {
      EXPECT_NE(text.find(k), std::string::npos) << model << ": no '" << k << "' in\n" << text;
      EXPECT_TRUE(j["engine"]["details"].contains(k)) << model << ": " << k;
    }
  }
  const ModelInfo ds = inspect_model(fixture("tiny-deepseek2", "Q4_0").string());
  const std::string text = format_model_info(ds);
  EXPECT_NE(text.find("MLA (absorbed; cache holds [c ; k_pe])"), std::string::npos) << text;
  EXPECT_NE(text.find("2 of 4 kept"), std::string::npos) << text;
  EXPECT_NE(text.find("kv cache floats/token/layer          80"), std::string::npos) << text;
  const ModelInfo oss = inspect_model(fixture("tiny-gpt-oss", "MXFP4").string());
  EXPECT_NE(format_model_info(oss).find("16 (layers SFSF"), std::string::npos)
      << format_model_info(oss);
}

}  // namespace
