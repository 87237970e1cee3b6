// PROMPT_CACHE (engine/prompt_cache): on every architecture's fixture, a prefix restored from the
// file continues exactly as a recomputed one — the remaining prompt's logits rows and the decode
// steps after it are bit-identical — whether the file holds more or fewer tokens than the prompt
// shares, the cache is smaller than the file, or the restoring Forward chunks its prefill
// differently. A file for another model, a flags mismatch (CUDA_DENSE=2), a truncated or damaged
// file, a bad magic are not used and say why; a missing file is just absent; saving leaves no
// temp file. ChatSession::adopt_kv: a restored conversation gives a fresh session's reply (seeded
// sampling with a repeat penalty, so the sampler's history must match too). phimoe: a file from a
// context that picks the other LongRoPE factor set is not used.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
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

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class PromptCache : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const fs::path path = kFixtures / GetParam();
    if (!fs::exists(path)) GTEST_SKIP() << "fixture not found: " << path;
    model_ = std::make_unique<Model>(Model::load(path.string()));
    dir_ = fs::temp_directory_path() / fmt::format("strata_pc_{}", getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Forward> forward(uint32_t n_ctx, uint32_t ubatch = 512) const {
    ForwardOptions fo;
    fo.n_ctx = n_ctx;
    fo.n_ubatch = ubatch;
    fo.n_threads = 2;
    return std::make_unique<Forward>(*model_, fo);
  }
  std::vector<int32_t> tokens(int n, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(n);
    for (auto& id : t) id = int32_t(rng() % model_->config().n_vocab);
    return t;
  }
  // Every position's logits of a fresh run of `p`, then `steps` greedy decode steps' logits.
  std::vector<std::vector<float>> fresh(const std::vector<int32_t>& p, int steps) const {
    auto f = forward(64);
    const size_t nv = model_->config().n_vocab;
    std::vector<float> rows(p.size() * nv);
    f->prefill(p, rows.data());
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < p.size(); ++i)
      out.emplace_back(rows.begin() + i * nv, rows.begin() + (i + 1) * nv);
    std::span<const float> last(out.back());
    for (int s = 0; s < steps; ++s) {
      const int32_t next = int32_t(std::max_element(last.begin(), last.end()) - last.begin());
      const std::span<const float> l = f->decode(next);
      out.emplace_back(l.begin(), l.end());
      last = out.back();
    }
    return out;
  }
  // Runs p[reused..] after a restore, then the same decode steps; expects fresh()'s rows.
  void expect_continues(Forward& f, const std::vector<int32_t>& p, size_t reused,
                        const std::vector<std::vector<float>>& want, int steps) const {
    ASSERT_EQ(f.n_past(), reused);
    const size_t nv = model_->config().n_vocab;
    std::vector<float> rows((p.size() - reused) * nv);
    f.prefill(std::span(p).subspan(reused), rows.data());
    for (size_t i = reused; i < p.size(); ++i)
      EXPECT_TRUE(same_bits({rows.data() + (i - reused) * nv, nv}, want[i])) << "position " << i;
    std::span<const float> last(want[p.size() - 1]);
    for (int s = 0; s < steps; ++s) {
      const int32_t next = int32_t(std::max_element(last.begin(), last.end()) - last.begin());
      EXPECT_TRUE(same_bits(f.decode(next), want[p.size() + s])) << "decode step " << s;
      last = want[p.size() + s];
    }
  }
  std::string file(const char* name) const { return (dir_ / name).string(); }

  std::unique_ptr<Model> model_;
  fs::path dir_;
};

TEST_P(PromptCache, RestoredPrefixContinuesBitIdentically) {
  const std::vector<int32_t> p = tokens(40, 3);
  const auto want = fresh(p, 4);
  // The file: the first 25 prompt tokens, computed in chunks of 7.
  {
    auto w = forward(48, 7);
    w->prefill(std::span(p).first(25));
    const uint64_t bytes = save_prompt_cache(file("a.kv"), *w, std::span(p).first(25), 0);
    EXPECT_EQ(bytes, fs::file_size(file("a.kv")));
    EXPECT_FALSE(fs::exists(file("a.kv.tmp")));
  }
  // The file holds fewer tokens than the prompt: all 25 restored.
  {
    auto f = forward(64, 5);
    const PromptCacheLoad r = load_prompt_cache(file("a.kv"), *f, p, uint32_t(p.size() - 1), 0);
    EXPECT_TRUE(r.found);
    EXPECT_EQ(r.ignored, "");
    EXPECT_EQ(r.file_tokens, std::vector<int32_t>(p.begin(), p.begin() + 25));
    EXPECT_EQ(r.tokens, r.file_tokens);
    expect_continues(*f, p, 25, want, 4);
  }
  // The prompt shares 12 tokens with the file, then differs.
  {
    std::vector<int32_t> q(p.begin(), p.begin() + 12);
    const auto tail = tokens(10, 9);
    q.insert(q.end(), tail.begin(), tail.end());
    const auto want_q = fresh(q, 2);
    auto f = forward(64);
    const PromptCacheLoad r = load_prompt_cache(file("a.kv"), *f, q, uint32_t(q.size() - 1), 0);
    EXPECT_EQ(r.tokens.size(), 12u);
    expect_continues(*f, q, 12, want_q, 2);
  }
  // A cache smaller than the file (rows copied through scratch), and max_tokens below the match.
  {
    auto f = forward(20);
    const PromptCacheLoad r = load_prompt_cache(file("a.kv"), *f, p, 19, 0);
    EXPECT_EQ(r.tokens.size(), 19u);
    std::vector<int32_t> p20(p.begin(), p.begin() + 20);
    expect_continues(*f, p20, 19, want, 0);
    auto g = forward(64);
    EXPECT_EQ(load_prompt_cache(file("a.kv"), *g, p, 10, 0).tokens.size(), 10u);
    EXPECT_EQ(g->n_past(), 10u);
  }
  // No prompt to match (chat): every token the file holds.
  {
    auto f = forward(64);
    const PromptCacheLoad r = load_prompt_cache(file("a.kv"), *f, {}, 63, 0);
    EXPECT_EQ(r.tokens.size(), 25u);
    expect_continues(*f, p, 25, want, 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PromptCache,
                         ::testing::Values("tiny-qwen3moe/tiny-qwen3moe-Q4_0.gguf",
                                           "tiny-qwen3moe/tiny-qwen3moe-Q4_K_M.gguf",
                                           "tiny-mixtral/tiny-mixtral-Q4_0.gguf",
                                           "tiny-deepseek2/tiny-deepseek2-Q8_0.gguf",
                                           "tiny-glm4moe/tiny-glm4moe-Q4_0.gguf",
                                           "tiny-gpt-oss/tiny-gpt-oss-MXFP4.gguf",
                                           "tiny-olmoe/tiny-olmoe-Q4_0.gguf"),
                         [](const auto& info) {
                           std::string n = fs::path(info.param).stem().string();
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

class PromptCacheFiles : public PromptCache {};

TEST_P(PromptCacheFiles, UnusableFilesSayWhy) {
  const std::vector<int32_t> p = tokens(16, 5);
  auto w = forward(32);
  w->prefill(p);
  save_prompt_cache(file("ok.kv"), *w, p, 0);
  const auto load = [&](const std::string& path, uint32_t flags = 0) {
    auto f = forward(32);
    f->prefill(std::span(p).first(3));  // load resets whatever was there
    PromptCacheLoad r = load_prompt_cache(path, *f, p, 15, flags);
    EXPECT_EQ(f->n_past(), r.tokens.size());
    return r;
  };
  EXPECT_EQ(load(file("ok.kv")).tokens.size(), 15u);

  const PromptCacheLoad missing = load(file("none.kv"));
  EXPECT_FALSE(missing.found);
  EXPECT_EQ(missing.ignored, "");

  EXPECT_NE(load(file("ok.kv"), kPromptCacheGpuPrefill).ignored.find("CUDA_DENSE=2"),
            std::string::npos);

  const auto bytes = [&] {
    std::ifstream in(file("ok.kv"), std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(in)), {});
  }();
  const auto write = [&](const char* name, const std::vector<char>& b) {
    std::ofstream(file(name), std::ios::binary).write(b.data(), std::streamsize(b.size()));
    return file(name);
  };
  std::vector<char> b = bytes;
  b.resize(b.size() - 100);
  EXPECT_NE(load(write("short.kv", b)).ignored.find("truncated?"), std::string::npos);
  b = bytes;
  b[b.size() / 2] ^= 1;
  const PromptCacheLoad flipped = load(write("flip.kv", b));
  EXPECT_NE(flipped.ignored.find("checksum mismatch"), std::string::npos) << flipped.ignored;
  EXPECT_TRUE(flipped.tokens.empty());
  b = bytes;
  b[0] = 'X';
  EXPECT_NE(load(write("magic.kv", b)).ignored.find("not a strata prompt cache"),
            std::string::npos);
  b = bytes;
  b[8] = 1;  // a version 1 file: rows from before the attention order fused its multiply-adds
  EXPECT_EQ(load(write("v1.kv", b)).ignored, "version 1 (this build reads 3)");
  b[8] = 2;  // version 2: its KV_TYPE=f16 files kept MLA layers as floats
  EXPECT_EQ(load(write("v2.kv", b)).ignored, "version 2 (this build reads 3)");
  b = bytes;
  b[16] ^= 1;  // the model fingerprint's file size
  EXPECT_NE(load(write("other.kv", b)).ignored.find("another model"), std::string::npos);

  // A file another model wrote.
  const Model other =
      Model::load((kFixtures / "tiny-qwen3moe" / "tiny-qwen3moe-Q8_0.gguf").string());
  ForwardOptions fo;
  fo.n_ctx = 32;
  Forward o(other, fo);
  o.prefill(std::vector<int32_t>{1, 2, 3, 4});
  save_prompt_cache(file("q8.kv"), o, std::vector<int32_t>{1, 2, 3, 4}, 0);
  EXPECT_NE(load(file("q8.kv")).ignored.find("another model"), std::string::npos);
  EXPECT_TRUE(fs::exists(file("q8.kv")));
}

INSTANTIATE_TEST_SUITE_P(Qwen3, PromptCacheFiles,
                         ::testing::Values("tiny-qwen3moe/tiny-qwen3moe-Q4_0.gguf"));

// A conversation restored into a new session: the next turn keeps what it shares with it, and
// the reply is a fresh session's, seeded sampling and repeat penalty included.
TEST(PromptCacheChat, RestoredConversationRepliesAsAFreshOne) {
  const fs::path path = kFixtures / "tiny-qwen3moe" / "tiny-qwen3moe-Q8_0.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << "fixture not found: " << path;
  const Model model = Model::load(path.string());
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  const ChatFamily family = chat_family_for_template(tok.vocab().chat_template());
  SamplerParams sp;
  sp.temperature = 0.9f;
  sp.repeat_penalty = 1.3f;
  sp.seed = 42;
  ForwardOptions fo;
  fo.n_ctx = 256;
  fo.n_threads = 2;
  const std::string system = "You answer in short sentences about foxes and dogs.";
  const fs::path file = fs::temp_directory_path() / fmt::format("strata_pc_chat_{}.kv", getpid());

  {
    Forward fwd(model, fo);
    ChatSession s(fwd, tok, family, sp, system);
    s.send("Tell me about foxes.", 12, nullptr);
    save_prompt_cache(file.string(), fwd, s.kv_tokens(), 0);
  }
  std::string want;
  std::vector<float> want_logits;
  {
    Forward fwd(model, fo);
    ChatSession s(fwd, tok, family, sp, system);
    ASSERT_EQ(s.begin_turn("And dogs?"), TurnStatus::kEndOfGeneration);
    want_logits.assign(s.logits().begin(), s.logits().end());
    want = s.generate(16, nullptr).text;
  }
  Forward fwd(model, fo);
  ChatSession s(fwd, tok, family, sp, system);
  const PromptCacheLoad r = load_prompt_cache(file.string(), fwd, {}, fo.n_ctx - 1, 0);
  ASSERT_GT(r.tokens.size(), 0u);
  s.adopt_kv(r.tokens);
  ASSERT_EQ(s.begin_turn("And dogs?"), TurnStatus::kEndOfGeneration);
  EXPECT_GT(s.last_stats().n_reused, 10u);  // the system prompt at least
  EXPECT_LT(s.last_stats().n_prefilled, s.last_stats().n_prompt);
  EXPECT_TRUE(same_bits(s.logits(), want_logits));
  EXPECT_EQ(s.generate(16, nullptr).text, want);
  fs::remove(file);
}

}  // namespace

namespace {

// phimoe (LongRoPE): the context size picks the factor set keys are turned by, so a file written
// at a context that picks the other set is not used (and says so); one from the same side of the
// original context (256 in tiny-phimoe) restores bit-identically.
TEST(PromptCacheLongRope, FactorSetMustMatch) {
  SynthOptions o;
  o.preset = *find_synth_preset("tiny-phimoe");
  o.n_threads = 2;
  const fs::path dir = fs::temp_directory_path() / fmt::format("strata_pc_rope_{}", getpid());
  fs::create_directories(dir);
  const fs::path gguf = dir / "tiny-phimoe.gguf";
  SynthModel(o).write(gguf.string());
  const Model model = Model::load(gguf.string());
  const auto forward = [&](uint32_t n_ctx) {
    ForwardOptions fo;
    fo.n_ctx = n_ctx;
    fo.n_threads = 2;
    return std::make_unique<Forward>(model, fo);
  };
  std::vector<int32_t> p(24);
  for (size_t i = 0; i < p.size(); ++i) p[i] = int32_t(i * 37 % 500);
  for (const uint32_t ctx : {128u, 512u}) {  // short set, long set
    auto w = forward(ctx);
    w->prefill(p);
    save_prompt_cache((dir / fmt::format("{}.kv", ctx)).string(), *w, p, 0);
  }
  const auto fresh = forward(200);  // the short set, like 128
  const std::span<const float> fresh_last = fresh->prefill(p);
  const std::vector<float> want(fresh_last.begin(), fresh_last.end());
  {
    auto f = forward(200);
    const PromptCacheLoad r = load_prompt_cache((dir / "512.kv").string(), *f, p, 23, 0);
    EXPECT_NE(r.ignored.find("LongRoPE's long factor set (this run's context picks the short set)"),
              std::string::npos)
        << r.ignored;
    EXPECT_TRUE(r.tokens.empty());
  }
  {
    auto f = forward(200);
    const PromptCacheLoad r = load_prompt_cache((dir / "128.kv").string(), *f, p, 23, 0);
    EXPECT_EQ(r.ignored, "");
    ASSERT_EQ(r.tokens.size(), 23u);
    const std::span<const float> last = f->prefill(std::span(p).subspan(23));
    EXPECT_TRUE(same_bits(last, want)) << "restored short-set keys continue differently";
  }
  fs::remove_all(dir);
}

}  // namespace
