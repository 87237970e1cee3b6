// KV_TYPE=f16 and KV_TYPE=q8_0 on the F32 fixtures: prefill, chunked prefill and decode agree to
// the bit (DESIGN invariant 1 holds with rounded rows: rounding happens at store, whatever the
// path); the logits stay close to the F32 cache's (llama.cpp's default cache is F16); the cache
// takes half (f16) or 34/128 (q8_0) of F32's bytes, MLA's latent rows (DeepSeek) included; a
// PROMPT_CACHE file round-trips the cache bit for bit and is refused by a run of another type
// with the reason; the serve stash trades the rows back bit for bit. q8_0 on a model whose KV
// heads are not multiples of 32 wide (the tiny DeepSeek's 80-wide latent) is a clear error; on a
// synthetic DeepSeek whose latent is whole blocks (96 = 64 + 32 RoPE, V the first 64) the MLA
// q8_0 path runs end to end.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "engine/chat_template.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/prompt_cache.h"
#include "engine/session.h"
#include "engine/synth.h"
#include "engine/tokenizer.h"
#include "io/check.h"

namespace fs = std::filesystem;
using namespace strata::engine;

namespace {

const fs::path kFixtures = STRATA_FIXTURES_DIR;

std::vector<float> logits_of(const Model& m, const std::vector<int32_t>& ids, KvType type,
                             uint32_t n_ubatch, bool decode) {
  ForwardOptions fo;
  fo.n_ctx = 256;
  fo.n_ubatch = n_ubatch;
  fo.n_threads = 2;
  fo.kv_type = type;
  Forward fwd(m, fo);
  const size_t nv = m.config().n_vocab;
  std::vector<float> out(ids.size() * nv);
  if (decode) {
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto row = fwd.decode(ids[i]);
      std::copy(row.begin(), row.end(), out.begin() + ptrdiff_t(i * nv));
    }
  } else {
    (void)fwd.prefill(ids, out.data());
  }
  return out;
}

// How far got's logits rows (n_vocab wide) are from ref's: the largest |difference|, the largest
// |ref logit|, the positions whose top token is the same, and whether every got logit is finite.
struct Drift {
  float worst = 0;
  float scale = 0;
  size_t same_top = 0;
  bool finite = true;
};
Drift drift_of(const std::vector<float>& ref, const std::vector<float>& got, size_t nv) {
  Drift d;
  for (size_t p = 0; p < ref.size() / nv; ++p) {
    const float* a = ref.data() + p * nv;
    const float* c = got.data() + p * nv;
    for (size_t i = 0; i < nv; ++i) {
      d.finite = d.finite && std::isfinite(c[i]);
      d.worst = std::max(d.worst, std::fabs(a[i] - c[i]));
      d.scale = std::max(d.scale, std::fabs(a[i]));
    }
    d.same_top += std::max_element(a, a + nv) - a == std::max_element(c, c + nv) - c;
  }
  return d;
}

class KvTypes : public ::testing::TestWithParam<std::tuple<const char*, KvType>> {
 protected:
  void SetUp() override {
    const char* name = std::get<0>(GetParam());
    type_ = std::get<1>(GetParam());
    path_ = kFixtures / name / (std::string(name) + "-F32.gguf");
    if (!fs::exists(path_)) GTEST_SKIP() << "fixture not found: " << path_;
    model_ = std::make_unique<Model>(Model::load(path_.string()));
    std::ifstream in(kFixtures / name / "ref" / "F32" / "ref.json");
    ids_ = nlohmann::json::parse(in)["streams"][0]["ids"].get<std::vector<int32_t>>();
  }
  KvType type_ = KvType::kF16;
  fs::path path_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> ids_;
};

TEST_P(KvTypes, PathsAgreeAndLogitsStayClose) {
  const std::vector<float> f32 = logits_of(*model_, ids_, KvType::kF32, 512, false);
  const std::vector<float> got = logits_of(*model_, ids_, type_, 512, false);
  EXPECT_TRUE(got == logits_of(*model_, ids_, type_, 512, true)) << "decode differs";
  EXPECT_TRUE(got == logits_of(*model_, ids_, type_, 7, false)) << "chunked differs";
  const uint64_t b32 = KvCache::position_bytes(model_->config(), KvType::kF32);
  const uint64_t b = KvCache::position_bytes(model_->config(), type_);
  if (type_ == KvType::kF16)
    EXPECT_EQ(2 * b, b32);
  else
    EXPECT_EQ(128 * b, 34 * b32);
  EXPECT_FALSE(got == f32) << "the type rounds K and V";
  const auto [worst, scale, same_top, finite] = drift_of(f32, got, model_->config().n_vocab);
  RecordProperty("max_abs_diff", fmt::format("{:.3g} of {:.3g}", worst, scale));
  std::printf("  KV_TYPE=%s: max |logit - f32's| %.3g of %.3g\n",
              std::string(kv_type_name(type_)).c_str(), worst, scale);
  // 2026-12-05, f16: 0.0019 of 8.1 (qwen3moe), 0.0012 of 8.7 (mixtral), 0.0009 of 7.9 (gpt-oss),
  // 0.0013 of 8.3 (deepseek2, MLA latents). q8_0: 0.22 (qwen3moe), 0.034 (mixtral), 0.86
  // (gpt-oss) — exactly the logits of an F32 cache holding the Q8_0 round trip of every row
  // (checked by hand): the tiny random models are sensitive to 8-bit K and V.
  EXPECT_LT(worst, (type_ == KvType::kF16 ? 1e-3f : 0.15f) * scale)
      << kv_type_name(type_) << " logits drifted from f32's";
  EXPECT_GE(same_top * 10, ids_.size() * 9) << "top token changed at too many positions";
}

// PROMPT_CACHE with a rounded cache: a restored prefix continues as the uninterrupted run, bit for
// bit; a file of another type is not used, and says so.
TEST_P(KvTypes, PromptCacheKeepsTheType) {
  const fs::path file = fs::temp_directory_path() / fmt::format("strata_kvf16_{}.kv", ::getpid());
  const size_t half = ids_.size() / 2;
  ForwardOptions fo;
  fo.n_ctx = 256;
  fo.n_threads = 2;
  fo.kv_type = type_;
  const uint32_t flag = prompt_cache_kv_flag(type_);
  Forward a(*model_, fo);
  (void)a.prefill(std::span(ids_).first(half));
  save_prompt_cache(file.string(), a, std::span(ids_).first(half), flag);

  Forward b(*model_, fo);
  const PromptCacheLoad load = load_prompt_cache(file.string(), b, ids_, uint32_t(half), flag);
  EXPECT_EQ(load.ignored, "");
  ASSERT_EQ(load.tokens.size(), half);
  const auto rest = b.prefill(std::span(ids_).subspan(half));
  const std::vector<float> got(rest.begin(), rest.end());
  Forward c(*model_, fo);
  const auto ref = c.prefill(ids_);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin(), ref.end()));

  ForwardOptions f32 = fo;
  f32.kv_type = KvType::kF32;
  Forward d(*model_, f32);
  const PromptCacheLoad other = load_prompt_cache(file.string(), d, ids_, uint32_t(half), 0);
  EXPECT_TRUE(other.tokens.empty());
  EXPECT_NE(
      other.ignored.find(fmt::format("KV_TYPE={} (this run's cache is f32)", kv_type_name(type_))),
      std::string::npos)
      << other.ignored;
  fs::remove(file);
}

// The serve stash with a rounded cache: a side request stashes the conversation's rows; the next
// turn trades them back and gives the logits of a session that never left it.
TEST_P(KvTypes, StashTradesRowsBack) {
  const Tokenizer tok = Tokenizer::from_gguf(model_->file());
  ForwardOptions fo;
  fo.n_ctx = 512;
  fo.n_threads = 2;
  fo.kv_type = type_;
  SamplerParams greedy;
  greedy.temperature = 0;
  std::vector<int32_t> main_conv = ids_, side(ids_.rbegin(), ids_.rend());
  Forward fwd(*model_, fo);
  ChatSession s(fwd, tok, ChatFamily::kChatml, greedy);
  s.set_stash(1);
  ASSERT_EQ(s.begin_tokens(main_conv), TurnStatus::kEndOfGeneration);
  ASSERT_EQ(s.begin_tokens(side), TurnStatus::kEndOfGeneration);
  EXPECT_GT(s.stash_bytes(), 0u);
  main_conv.push_back(ids_[3]);
  ASSERT_EQ(s.begin_tokens(main_conv), TurnStatus::kEndOfGeneration);
  EXPECT_TRUE(s.last_stats().from_stash);
  const std::vector<float> traded(s.logits().begin(), s.logits().end());
  Forward fresh_fwd(*model_, fo);
  ChatSession fresh(fresh_fwd, tok, ChatFamily::kChatml, greedy);
  ASSERT_EQ(fresh.begin_tokens(std::vector<int32_t>(ids_)), TurnStatus::kEndOfGeneration);
  ASSERT_EQ(fresh.begin_tokens(main_conv), TurnStatus::kEndOfGeneration);
  EXPECT_TRUE(
      std::equal(traded.begin(), traded.end(), fresh.logits().begin(), fresh.logits().end()));
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<const char*, KvType>>& info) {
  std::string n = std::get<0>(info.param);
  std::replace(n.begin(), n.end(), '-', '_');
  return n + "_" + std::string(kv_type_name(std::get<1>(info.param)));
}
INSTANTIATE_TEST_SUITE_P(F16, KvTypes,
                         ::testing::Combine(::testing::Values("tiny-qwen3moe", "tiny-mixtral",
                                                              "tiny-gpt-oss", "tiny-deepseek2"),
                                            ::testing::Values(KvType::kF16)),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Q8_0, KvTypes,
                         ::testing::Combine(::testing::Values("tiny-qwen3moe", "tiny-mixtral",
                                                              "tiny-gpt-oss"),
                                            ::testing::Values(KvType::kQ8_0)),
                         param_name);

// q8_0 on the tiny DeepSeek, whose latent rows are 64 + 16 = 80 wide (not whole Q8_0 blocks): one
// clear error, from the RAM sizing and from the cache itself.
// MLA with a Q8_0 cache (the latent rows as Q8_0 blocks, V read from the K row's first blocks, as
// DeepSeek-V3's 576 = 512 + 64 latent would be): the tiny-deepseek2 synth with a 96-wide latent
// (kv_lora 64, 32 RoPE dims). Prefill, chunked prefill and decode agree to the bit; the rows are
// 34/128 of F32's; the logits stay near the F32 cache's.
TEST(KvTypesMla, Q8_0OnWholeBlockLatents) {
  SynthOptions o;
  o.preset = *find_synth_preset("tiny-deepseek2");
  o.preset.qk_rope = 32;
  o.preset.head_dim = 64;  // qk_nope 32 + qk_rope 32
  o.preset.kv_lora = 64;
  o.seed = 5;
  o.n_threads = 2;
  const SynthModel sm(o);
  const std::vector<std::byte> bytes = sm.to_bytes();
  const Model m = Model::from_file(strata::io::GgufFile::parse("mla96", bytes));
  ASSERT_TRUE(m.config().is_mla());
  EXPECT_EQ(128 * KvCache::position_bytes(m.config(), KvType::kQ8_0),
            34 * KvCache::position_bytes(m.config(), KvType::kF32));
  std::vector<int32_t> ids(80);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + 13) % m.config().n_vocab);
  const std::vector<float> f32 = logits_of(m, ids, KvType::kF32, 512, false);
  const std::vector<float> q8 = logits_of(m, ids, KvType::kQ8_0, 512, false);
  EXPECT_TRUE(q8 == logits_of(m, ids, KvType::kQ8_0, 512, true)) << "decode differs";
  EXPECT_TRUE(q8 == logits_of(m, ids, KvType::kQ8_0, 7, false)) << "chunked differs";
  EXPECT_FALSE(q8 == f32) << "q8_0 rounds the latents";
  const size_t nv = m.config().n_vocab;
  const auto [worst, scale, same_top, finite] = drift_of(f32, q8, nv);
  ASSERT_TRUE(finite);
  // The f16 latents on the same model, for scale. Synthetic models are far more sensitive to KV
  // rounding than llama.cpp's fixtures (random weights make near one-hot attention): here f16
  // itself moves the logits by ~0.6 of ~4.8 (on the deepseek2 fixture 0.0013 of 8.3), so the bound
  // is q8_0's drift against f16's, and the top token, which a misread row would scramble.
  const std::vector<float> f16 = logits_of(m, ids, KvType::kF16, 512, false);
  const float worst16 = drift_of(f32, f16, nv).worst;
  std::printf(
      "  MLA KV_TYPE=q8_0: max |logit - f32's| %.3g of %.3g (f16: %.3g), top token same at "
      "%zu/%zu\n",
      worst, scale, worst16, same_top, ids.size());
  // 2026-12-06: q8_0 0.576 of 4.82, f16 0.593; top token 78/80.
  EXPECT_LT(worst, 2.0f * worst16 + 0.01f * scale);
  EXPECT_GE(same_top * 10, ids.size() * 9);
}

TEST(KvTypesRefused, Q8_0NeedsWholeBlocks) {
  const fs::path path = kFixtures / "tiny-deepseek2" / "tiny-deepseek2-F32.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << "fixture not found: " << path;
  const Model m = Model::load(path.string());
  try {
    (void)KvCache::position_bytes(m.config(), KvType::kQ8_0);
    ADD_FAILURE() << "no error";
  } catch (const strata::Error& e) {
    EXPECT_EQ(e.kind(), strata::ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("KV_TYPE=q8_0: layer 0's KV heads are 80 (K)"),
              std::string::npos)
        << e.what();
  }
  ForwardOptions fo;
  fo.kv_type = KvType::kQ8_0;
  EXPECT_THROW(Forward(m, fo), strata::Error);
  EXPECT_THROW(parse_kv_type("q4_0"), strata::Error);
  EXPECT_EQ(parse_kv_type("q8_0"), KvType::kQ8_0);
}

}  // namespace
