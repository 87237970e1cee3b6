// LOOKUP (engine/lookup): draft_lookup's matches (longest n-gram first, the most recent
// occurrence, the copy continuing its own period past the history's end), and LookupDecoder
// against plain Forward::decode on every architecture's fixture: every logits row bit-identical
// along a forced token stream that repeats and then breaks (drafts used and growing, drafts dropped
// from the cache), the same tokens greedy and seeded-sampled, the context's end respected, the
// cache usable after settle(). ChatSession replies are the same with and without it, turn after
// turn.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/forward.h"
#include "engine/lookup.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "engine/tokenizer.h"
#include "io/check.h"

namespace fs = std::filesystem;
using namespace strata::engine;

namespace {

const fs::path kFixtures = STRATA_FIXTURES_DIR;

std::vector<int32_t> draft(std::vector<int32_t> h, int max_draft, int min_ngram = 2) {
  LookupParams p;
  p.max_draft = max_draft;
  p.min_ngram = min_ngram;
  std::vector<int32_t> out = {99, 99};  // cleared by draft_lookup
  draft_lookup(h, p, out);
  return out;
}

using V = std::vector<int32_t>;

TEST(DraftLookup, LongestMatchThenMostRecent) {
  // [1 2 3] at 0 (n = 3) beats the more recent [2 3] at 5 (n = 2).
  EXPECT_EQ(draft({1, 2, 3, 7, 9, 2, 3, 8, 1, 2, 3}, 3), (V{7, 9, 2}));
  // Of two occurrences of [1 2], the later one's continuation.
  EXPECT_EQ(draft({1, 2, 5, 1, 2, 6, 1, 2}, 2), (V{6, 1}));
  // Past the history's end the copy continues from its own output: the period repeats.
  EXPECT_EQ(draft({1, 2, 3, 1, 2}, 8), (V{3, 1, 2, 3, 1, 2, 3, 1}));
  EXPECT_EQ(draft({4, 4, 4}, 5), (V{4, 4, 4, 4, 4}));
  EXPECT_EQ(draft({7, 1, 2, 9, 8, 1, 2}, 6), (V{9, 8, 1, 2, 9, 8}));
  // min_ngram: [3 1] never occurred; the single token 1 did.
  EXPECT_EQ(draft({1, 2, 3, 1}, 8), V{});
  EXPECT_EQ(draft({1, 2, 3, 1}, 4, /*min_ngram=*/1), (V{2, 3, 1, 2}));
  // max_ngram caps the match length: a 5-token suffix is found through its last 4.
  EXPECT_EQ(draft({1, 2, 3, 4, 5, 6, 9, 2, 3, 4, 5}, 2), (V{6, 9}));
  // Off, too short, or empty: no draft.
  EXPECT_EQ(draft({1, 2, 1, 2}, 0), V{});
  EXPECT_EQ(draft({1}, 4, 1), V{});
  EXPECT_EQ(draft({}, 4, 1), V{});
}

TEST(DraftLookup, KnobsAndTheirLimits) {
  const LookupParams off = lookup_params(Knobs::from_values({}));
  EXPECT_EQ(off.max_draft, 0);
  EXPECT_EQ(off.min_ngram, 3);
  const LookupParams on =
      lookup_params(Knobs::from_values({{"LOOKUP", "6"}, {"LOOKUP_NGRAM", "3"}}));
  EXPECT_EQ(on.max_draft, 6);
  EXPECT_EQ(on.min_ngram, 3);
  EXPECT_EQ(on.max_ngram, 4);
  EXPECT_THROW(Knobs::from_values({{"LOOKUP", "17"}}), strata::Error);
  EXPECT_THROW(Knobs::from_values({{"LOOKUP_NGRAM", "0"}}), strata::Error);
  try {
    lookup_params(Knobs::from_values({{"LOOKUP", "4"}, {"CUDA_DENSE", "2"}}));
    FAIL() << "LOOKUP with CUDA_DENSE=2 was accepted";
  } catch (const strata::Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA_DENSE=2"), std::string::npos) << e.what();
  }
  // CUDA_DENSE=2 alone, or with LOOKUP=0, is fine.
  EXPECT_EQ(lookup_params(Knobs::from_values({{"CUDA_DENSE", "2"}})).max_draft, 0);
}

class Lookup : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const fs::path path = kFixtures / GetParam();
    if (!fs::exists(path)) GTEST_SKIP() << "fixture not found: " << path;
    model_ = std::make_unique<Model>(Model::load(path.string()));
  }
  std::unique_ptr<Forward> forward(uint32_t n_ctx) const {
    ForwardOptions fo;
    fo.n_ctx = n_ctx;
    fo.n_threads = 2;
    return std::make_unique<Forward>(*model_, fo);
  }
  int32_t vocab() const { return int32_t(model_->config().n_vocab); }
  // A prompt of distinct-ish ids inside the vocabulary.
  std::vector<int32_t> prompt() const {
    std::vector<int32_t> p;
    for (int i = 0; i < 9; ++i) p.push_back((7 + 37 * i) % vocab());
    return p;
  }
  std::unique_ptr<Model> model_;
};

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// A forced stream: a five-token pattern six times and a half, a break, the pattern again. Each row
// the decoder returns equals plain decode's to the bit, whether it ran a pass or used a drafted
// row.
TEST_P(Lookup, ForcedStreamGivesDecodesBits) {
  std::vector<int32_t> stream;
  const int32_t v = vocab();
  for (int rep = 0; rep < 7; ++rep)
    for (int k = 0; k < (rep < 6 ? 5 : 2); ++k) stream.push_back((11 + 5 * k) % v);
  stream.push_back(3 % v);  // breaks the pattern mid-draft: the drafted rows after it are dropped
  for (int rep = 0; rep < 3; ++rep)
    for (int k = 0; k < 5; ++k) stream.push_back((11 + 5 * k) % v);

  const std::vector<int32_t> p = prompt();
  const uint32_t n_ctx = uint32_t(p.size() + stream.size() + 1);
  auto plain = forward(n_ctx);
  plain->prefill(p);
  std::vector<std::vector<float>> want;
  for (int32_t t : stream) {
    const auto row = plain->decode(t);
    want.emplace_back(row.begin(), row.end());
  }

  auto fwd = forward(n_ctx);
  fwd->prefill(p);
  LookupParams lp;
  lp.max_draft = 4;
  lp.min_ngram = 1;
  LookupDecoder lk(*fwd, lp);
  std::vector<int32_t> history = p;
  std::vector<uint32_t> drafts;  // each pass's draft length
  for (size_t i = 0; i < stream.size(); ++i) {
    history.push_back(stream[i]);
    const auto row = lk.decode(stream[i], history);
    if (lk.ran() && lk.drafted() > 0) drafts.push_back(lk.drafted());
    ASSERT_TRUE(same_bits(row, want[i])) << "row " << i << (lk.ran() ? " (ran)" : " (drafted)");
    EXPECT_EQ(lk.n_past(), p.size() + i + 1);
  }
  const LookupCounters& c = lk.counters();
  EXPECT_EQ(c.steps + c.accepted, stream.size());
  EXPECT_GT(c.accepted, 10u);        // the repeats ran from drafts
  EXPECT_GT(c.drafted, c.accepted);  // the break left a draft unused
  EXPECT_LT(c.steps, stream.size() / 2);
  // Drafts start at one token and double while used whole, up to max_draft.
  ASSERT_GE(drafts.size(), 3u);
  EXPECT_EQ(drafts[0], 1u);
  EXPECT_EQ(drafts[1], 2u);
  EXPECT_EQ(drafts[2], 4u);
  EXPECT_EQ(*std::max_element(drafts.begin(), drafts.end()), 4u);

  // After settle the cache ends at the last token: the next step is plain decode's again.
  lk.settle();
  EXPECT_EQ(fwd->n_past(), plain->n_past());
  const int32_t next = 5 % v;
  EXPECT_TRUE(same_bits(fwd->decode(next), plain->decode(next)));
}

// Generation: the sampler's tokens with LOOKUP are plain decoding's, greedy and sampled (one draw
// per token either way, so the seeded stream does not shift). The context's end bounds the draft.
TEST_P(Lookup, SampledTokensAreUnchanged) {
  const std::vector<int32_t> p = prompt();
  const int n_gen = 40;
  for (const float temp : {0.0f, 0.9f}) {
    SamplerParams sp;
    sp.temperature = temp;
    sp.seed = 1234;
    sp.min_p = 0;
    const uint32_t n_ctx = uint32_t(p.size() + n_gen);  // no room past the last token
    std::vector<int32_t> want;
    {
      auto fwd = forward(n_ctx);
      Sampler s(sp);
      auto logits = fwd->prefill(p);
      for (int i = 0; i < n_gen; ++i) {
        want.push_back(s.sample(logits));
        if (i + 1 < n_gen) logits = fwd->decode(want.back());
      }
    }
    for (const int max_draft : {1, 3, 16}) {
      auto fwd = forward(n_ctx);
      Sampler s(sp);
      LookupParams lp;
      lp.max_draft = max_draft;
      lp.min_ngram = 1;
      LookupDecoder lk(*fwd, lp);
      std::vector<int32_t> history = p;
      auto logits = fwd->prefill(p);
      std::vector<int32_t> got;
      for (int i = 0; i < n_gen; ++i) {
        got.push_back(s.sample(logits));
        history.push_back(got.back());
        if (i + 1 < n_gen) logits = lk.decode(got.back(), history);
        ASSERT_LE(fwd->n_past(), n_ctx);
      }
      EXPECT_EQ(got, want) << "temp " << temp << " LOOKUP=" << max_draft;
      EXPECT_EQ(lk.counters().steps + lk.counters().accepted, uint64_t(n_gen - 1));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Lookup,
                         ::testing::Values("tiny-qwen3moe/tiny-qwen3moe-F32.gguf",
                                           "tiny-qwen3moe/tiny-qwen3moe-Q4_0.gguf",
                                           "tiny-qwen3moe/tiny-qwen3moe-Q4_K_M.gguf",
                                           "tiny-mixtral/tiny-mixtral-Q4_0.gguf",
                                           "tiny-deepseek2/tiny-deepseek2-Q8_0.gguf",
                                           "tiny-glm4moe/tiny-glm4moe-Q4_0.gguf",
                                           "tiny-gpt-oss/tiny-gpt-oss-MXFP4.gguf",
                                           "tiny-olmoe/tiny-olmoe-Q4_0.gguf"),
                         [](const auto& info) {
                           std::string n = fs::path(info.param).stem().string();
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Drafts that keep missing back off: "A B C u_i" twelve times with a new u_i each time drafts the
// last u at every "A B C" and misses. After each unused draft the next 1, 2, 4 .. drafts found are
// dropped, so 4 of the 11 run (at the 2nd, 4th, 7th and 12th occurrence); the rows stay plain
// decode's.
TEST(LookupBackoff, DraftsThatMissBackOff) {
  const fs::path path = kFixtures / "tiny-qwen3moe" / "tiny-qwen3moe-Q4_0.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << "fixture not found: " << path;
  const Model model = Model::load(path.string());
  std::vector<int32_t> stream;
  for (int i = 0; i < 12; ++i) stream.insert(stream.end(), {101, 102, 103, 200 + i});
  const std::vector<int32_t> prompt = {7, 8, 9};
  ForwardOptions fo;
  fo.n_ctx = 64;
  fo.n_threads = 2;
  Forward plain(model, fo), fwd(model, fo);
  plain.prefill(prompt);
  fwd.prefill(prompt);
  LookupParams lp;
  lp.max_draft = 4;
  LookupDecoder lk(fwd, lp);
  std::vector<int32_t> history = prompt;
  for (size_t i = 0; i < stream.size(); ++i) {
    history.push_back(stream[i]);
    const auto want = plain.decode(stream[i]);
    const auto got = lk.decode(stream[i], history);
    ASSERT_TRUE(same_bits(got, want)) << "row " << i;
  }
  const LookupCounters& c = lk.counters();
  EXPECT_EQ(c.accepted, 0u);
  EXPECT_EQ(c.drafted, 4u);  // one token each: a miss cuts the draft to 1
  EXPECT_EQ(c.skipped, 7u);
  EXPECT_EQ(c.steps, stream.size());
}

// ChatSession: three turns, each reply (and the cache after it) the same with LOOKUP as without;
// the unused drafts of a reply never leak into the next turn's cache.
TEST(LookupChat, RepliesAreUnchanged) {
  const fs::path path = kFixtures / "tiny-qwen3moe" / "tiny-qwen3moe-Q8_0.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << "fixture not found: " << path;
  const Model model = Model::load(path.string());
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  const ChatFamily family = chat_family_for_template(tok.vocab().chat_template());
  SamplerParams sp;
  sp.temperature = 0;
  ForwardOptions fo;
  fo.n_ctx = 512;
  fo.n_threads = 2;
  const std::vector<std::string> turns = {"Hello! Say hello hello hello.", "Again, say it again.",
                                          "One two three one two three one two"};
  std::vector<std::string> want;
  std::vector<std::vector<int32_t>> want_kv;
  {
    Forward fwd(model, fo);
    ChatSession s(fwd, tok, family, sp);
    for (const auto& t : turns) {
      want.push_back(s.send(t, 24, nullptr).text);
      want_kv.emplace_back(s.kv_tokens().begin(), s.kv_tokens().end());
    }
  }
  Forward fwd(model, fo);
  LookupParams lp;
  lp.max_draft = 4;
  lp.min_ngram = 1;
  ChatSession s(fwd, tok, family, sp, {}, lp);
  for (size_t i = 0; i < turns.size(); ++i) {
    const TurnResult r = s.send(turns[i], 24, nullptr);
    EXPECT_EQ(r.text, want[i]) << "turn " << i;
    EXPECT_EQ(std::vector<int32_t>(s.kv_tokens().begin(), s.kv_tokens().end()), want_kv[i]);
    EXPECT_EQ(fwd.n_past(), s.kv_tokens().size());  // settled: no drafted position left over
    EXPECT_EQ(s.n_past(), fwd.n_past());
  }
  EXPECT_GT(s.lookup().counters().steps, 0u);
}

}  // namespace
