// engine/perplexity: the next-token NLL against values worked by hand, the estimate and its
// error from known NLLs, llama-perplexity's chunking (BOS in front, whole chunks only, a cap).
// The end-to-end agreement with llama.cpp's own logits is in tests/test_model_replay.cpp.
#include "engine/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace strata::engine {
namespace {

TEST(Perplexity, TokenNllByHand) {
  // Uniform logits: every token has probability 1/n.
  const std::vector<float> flat(7, 2.5f);
  EXPECT_NEAR(token_nll(flat, 3), std::log(7.0), 1e-12);
  // Two logits a and b: -log(e^a / (e^a + e^b)) = log(1 + e^(b - a)); large values stay finite
  // (the maximum comes off first).
  const std::vector<float> two = {1000.0f, 1001.0f};
  EXPECT_NEAR(token_nll(two, 0), std::log1p(std::exp(1.0)), 1e-6);
  EXPECT_NEAR(token_nll(two, 1), std::log1p(std::exp(-1.0)), 1e-6);
}

TEST(Perplexity, ScoreTokenIsMinusTheNllWithTheTopInOrder) {
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f, -7.0f};
  const TokenScore s = score_token(logits, 4, 3);
  EXPECT_EQ(s.id, 4);
  EXPECT_NEAR(s.logprob, -token_nll(logits, 4), 1e-6);
  // Most likely first; the tie between ids 1 and 3 goes to the lower id.
  ASSERT_EQ(s.top.size(), 3u);
  EXPECT_EQ(s.top[0].id, 1);
  EXPECT_EQ(s.top[1].id, 3);
  EXPECT_EQ(s.top[2].id, 4);
  EXPECT_EQ(s.top[0].logprob, s.top[1].logprob);
  // The token's own logprob is its top entry's, bit for bit (a greedy check compares them).
  EXPECT_EQ(s.top[2].logprob, s.logprob);
  double total = 0;
  for (int32_t t = 0; t < 6; ++t) total += std::exp(double(score_token(logits, t, 0).logprob));
  EXPECT_NEAR(total, 1.0, 1e-6);
  // No alternatives asked; more asked than the vocabulary holds.
  EXPECT_TRUE(score_token(logits, 0, 0).top.empty());
  const TokenScore all = score_token(logits, 5, 99);
  ASSERT_EQ(all.top.size(), 6u);
  EXPECT_EQ(all.top.back().id, 5);
  for (size_t i = 1; i < all.top.size(); ++i) EXPECT_LE(all.top[i].logprob, all.top[i - 1].logprob);
}

TEST(Perplexity, StreamScoresFromAPositionOn) {
  // 4 tokens, vocabulary 2: row i predicts token i + 1.
  const std::vector<int32_t> tokens = {0, 1, 1, 0};
  const std::vector<float> logits = {0, 1, 0, 0, 3, 0, 9, 9};
  NllStats all;
  all.add_stream(tokens, logits, 2, 0);
  ASSERT_EQ(all.count(), 3u);  // the last row predicts nothing
  const double want = (token_nll({logits.data(), 2}, 1) + token_nll({logits.data() + 2, 2}, 1) +
                       token_nll({logits.data() + 4, 2}, 0)) /
                      3;
  EXPECT_NEAR(all.mean_nll(), want, 1e-12);
  NllStats tail;
  tail.add_stream(tokens, logits, 2, 2);
  EXPECT_EQ(tail.count(), 1u);
  EXPECT_NEAR(tail.mean_nll(), token_nll({logits.data() + 4, 2}, 0), 1e-12);
  NllStats none;
  none.add_stream(tokens, logits, 2, 3);
  EXPECT_EQ(none.count(), 0u);
}

TEST(Perplexity, EstimateAndError) {
  NllStats s;
  for (const double v : {1.0, 2.0, 3.0, 2.0}) s.add(v);
  EXPECT_NEAR(s.mean_nll(), 2.0, 1e-12);
  EXPECT_NEAR(s.ppl(), std::exp(2.0), 1e-9);
  // Population variance 0.5; standard error sqrt(0.5 / 3), carried through exp.
  EXPECT_NEAR(s.ppl_error(), std::exp(2.0) * std::sqrt(0.5 / 3), 1e-9);
  NllStats one;
  one.add(1.0);
  EXPECT_EQ(one.ppl_error(), 0.0);
}

TEST(Perplexity, ChunksAsLlamaPerplexity) {
  const std::vector<int32_t> ids = {5, 6, 7, 8, 9, 10, 11};
  const auto c = perplexity_chunks(ids, 3, 1, 0);
  ASSERT_EQ(c.size(), 2u);  // the 7th token makes no whole chunk
  EXPECT_EQ(c[0], (std::vector<int32_t>{1, 6, 7}));
  EXPECT_EQ(c[1], (std::vector<int32_t>{1, 9, 10}));
  EXPECT_EQ(perplexity_chunks(ids, 3, -1, 0)[1], (std::vector<int32_t>{8, 9, 10}));  // no BOS
  EXPECT_EQ(perplexity_chunks(ids, 3, 1, 1).size(), 1u);
  EXPECT_TRUE(perplexity_chunks(ids, 8, 1, 0).empty());
}

TEST(Perplexity, KlDivergenceByHand) {
  const std::vector<float> a = {0.0f, 1.0f, 2.0f};
  EXPECT_EQ(kl_divergence(a, a), 0.0);
  // Shifting every logit changes no probability.
  const std::vector<float> shifted = {5.0f, 6.0f, 7.0f};
  EXPECT_NEAR(kl_divergence(a, shifted), 0.0, 1e-12);
  // Two tokens: p = (1/2, 1/2), q = softmax(0, ln 3) = (1/4, 3/4):
  // KL = 1/2 ln(2) + 1/2 ln(2/3).
  const std::vector<float> p = {0.0f, 0.0f}, q = {0.0f, float(std::log(3.0))};
  EXPECT_NEAR(kl_divergence(p, q), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-7);

  // Over a stream: 3 tokens, 2 scored rows; row 0 equal, row 1 as above with the top token moved.
  const std::vector<float> base = {1, 0, 0, 0, 9, 9};
  const std::vector<float> test = {1, 0, 0, float(std::log(3.0)), 9, 9};
  KlStats st;
  st.add_stream(base, test, 3, 2, 0);
  ASSERT_EQ(st.count(), 2u);
  EXPECT_NEAR(st.mean(), kl_divergence(p, q) / 2, 1e-7);
  EXPECT_NEAR(st.max(), kl_divergence(p, q), 1e-7);
  EXPECT_DOUBLE_EQ(st.same_top(), 0.5);  // row 1's first maximum moved from token 0 to 1
}

}  // namespace
}  // namespace strata::engine
