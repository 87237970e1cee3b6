// Sampler: greedy = first argmax, determinism per seed, and each filter's effect.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <random>

#include "engine/sampler.h"

using namespace strata::engine;

namespace {
std::vector<float> random_logits(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> l(n);
  for (auto& x : l) x = d(rng);
  return l;
}
}  // namespace

TEST(Sampler, GreedyIsFirstArgmax) {
  std::vector<float> l = {1.0f, 3.0f, 3.0f, -1.0f};
  SamplerParams p;
  p.temperature = 0.0f;
  Sampler s(p);
  EXPECT_EQ(s.sample(l), 1);
  EXPECT_EQ(argmax(l), 1);
}

// The scalar scan argmax replaced: the best index carried through the loop, first maximum wins,
// a NaN never wins (unless it is the first entry, which nothing then beats).
namespace {
int32_t argmax_ref(const std::vector<float>& l) {
  int32_t best = 0;
  for (size_t i = 1; i < l.size(); ++i)
    if (l[i] > l[best]) best = static_cast<int32_t>(i);
  return best;
}
}  // namespace

TEST(Sampler, ArgmaxMatchesTheScalarScan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(7);
  for (int n : {1, 2, 15, 16, 17, 31, 33, 100, 257, 151936}) {
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<float> l = random_logits(n, 1000 * n + trial);
      std::uniform_int_distribution<int> pos(0, n - 1);
      switch (trial % 6) {
        case 1:  // ties at the maximum, at random places
          for (int k = 0; k < 3; ++k) l[pos(rng)] = 100.0f;
          break;
        case 2:  // NaNs anywhere, the first entry included
          for (int k = 0; k < 4; ++k) l[pos(rng)] = nan;
          if (trial % 12 == 2) l[0] = nan;
          break;
        case 3:  // signed zeros as the maximum
          for (auto& x : l) x = -std::abs(x) - 1.0f;
          l[pos(rng)] = -0.0f;
          l[pos(rng)] = 0.0f;
          break;
        case 4:  // infinities
          l[pos(rng)] = inf;
          l[pos(rng)] = -inf;
          break;
        case 5:  // all equal
          std::fill(l.begin(), l.end(), 0.5f);
          break;
        default:
          break;
      }
      EXPECT_EQ(argmax(l), argmax_ref(l)) << "n " << n << " trial " << trial;
    }
  }
}

TEST(Sampler, SameSeedSameTokens) {
  SamplerParams p;
  p.seed = 42;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temperature = 1.0f;
  Sampler a(p), b(p);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 200; ++i) {
    const auto l = random_logits(50, i);
    ta.push_back(a.sample(l));
    tb.push_back(b.sample(l));
  }
  EXPECT_EQ(ta, tb);
  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> tc;
  for (int i = 0; i < 200; ++i) tc.push_back(c.sample(random_logits(50, i)));
  EXPECT_NE(ta, tc);
}

TEST(Sampler, TopKRestrictsAndDistributionFollowsSoftmax) {
  const std::vector<float> l = {0.0f, std::log(2.0f), std::log(3.0f), -5.0f};
  SamplerParams p;
  p.seed = 1;
  p.top_k = 3;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temperature = 1.0f;
  Sampler s(p);
  std::map<int, int> count;
  const int n = 60000;
  for (int i = 0; i < n; ++i) count[s.sample(l)]++;
  EXPECT_EQ(count[3], 0);  // outside the top 3
  EXPECT_NEAR(count[0] / double(n), 1.0 / 6, 0.01);
  EXPECT_NEAR(count[1] / double(n), 2.0 / 6, 0.01);
  EXPECT_NEAR(count[2] / double(n), 3.0 / 6, 0.01);
}

TEST(Sampler, TopPAndMinP) {
  const std::vector<float> l = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  SamplerParams p;
  p.top_k = 0;
  p.min_p = 0.0f;
  p.temperature = 1.0f;
  p.top_p = 0.5f;  // only the 0.6 token survives
  Sampler s(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(l), 0);
  p.top_p = 1.0f;
  p.min_p = 0.4f;  // keeps p >= 0.24: tokens 0 and 1
  Sampler m(p);
  for (int i = 0; i < 300; ++i) EXPECT_NE(m.sample(l), 2);
}

TEST(Sampler, RepeatPenaltyDiscouragesRecentTokens) {
  const std::vector<float> l = {2.0f, 1.9f};
  SamplerParams p;
  p.temperature = 0.0f;
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  EXPECT_EQ(s.sample(l), 0);  // nothing recent yet (the greedy shortcut); 0 is now recent
  EXPECT_EQ(s.sample(l), 1);  // 2.0/1.5 < 1.9
  Sampler s2(p);
  s2.accept(0);
  EXPECT_EQ(s2.sample(l), 1);
}

namespace {
// The sampler as it was before the top-k scan: every candidate built, penalized, then
// partial_sort for top-k; the same filters and draw after that.
struct SamplerRef {
  SamplerParams p;
  std::mt19937_64 rng;
  std::deque<int32_t> recent;
  explicit SamplerRef(const SamplerParams& q) : p(q), rng(q.seed) {}
  int32_t sample(const std::vector<float>& logits) {
    struct C {
      int32_t id;
      float logit;
      float p;
    };
    const auto n = static_cast<int32_t>(logits.size());
    std::vector<C> c(logits.size());
    for (int32_t i = 0; i < n; ++i) c[i] = {i, logits[i], 0.0f};
    if (p.repeat_penalty != 1.0f)
      for (int32_t t : recent)
        c[t].logit = logits[t] > 0 ? logits[t] / p.repeat_penalty : logits[t] * p.repeat_penalty;
    int32_t chosen = 0;
    if (p.temperature <= 0.0f) {
      for (int32_t i = 1; i < n; ++i)
        if (c[i].logit > c[chosen].logit) chosen = i;
    } else {
      auto by = [](const C& a, const C& b) {
        return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
      };
      size_t keep = c.size();
      if (p.top_k > 0 && size_t(p.top_k) < keep) {
        keep = size_t(p.top_k);
        std::partial_sort(c.begin(), c.begin() + keep, c.end(), by);
      } else {
        std::sort(c.begin(), c.end(), by);
      }
      c.resize(keep);
      auto softmax = [&](float temp) {
        double sum = 0;
        for (auto& e : c) sum += (e.p = std::exp((e.logit - c[0].logit) / temp));
        for (auto& e : c) e.p = static_cast<float>(e.p / sum);
      };
      softmax(1.0f);
      if (p.top_p < 1.0f) {
        double cum = 0;
        size_t k = 0;
        while (k < c.size()) {
          cum += c[k++].p;
          if (cum >= p.top_p) break;
        }
        c.resize(std::max<size_t>(k, 1));
      }
      if (p.min_p > 0.0f) {
        const float floor_p = c[0].p * p.min_p;
        size_t k = 1;
        while (k < c.size() && c[k].p >= floor_p) ++k;
        c.resize(k);
      }
      softmax(p.temperature);
      const double r = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      double cum = 0;
      chosen = c.back().id;
      for (const auto& e : c) {
        cum += e.p;
        if (r < cum) {
          chosen = e.id;
          break;
        }
      }
    }
    recent.push_back(chosen);
    while (int32_t(recent.size()) > p.repeat_last_n) recent.pop_front();
    return chosen;
  }
};
}  // namespace

// The one-pass top-k (a heap of the best k) and the penalty on a copy draw exactly the tokens of
// the build-every-candidate sampler: ties (quantized logits), penalties above and below 1, top-k
// larger than the vocabulary, greedy with a penalty.
TEST(Sampler, SameTokensAsBuildingEveryCandidate) {
  struct Case {
    float temp;
    int32_t top_k;
    float top_p, min_p, penalty;
  };
  const Case cases[] = {{0.8f, 40, 0.95f, 0.05f, 1.0f}, {1.0f, 5, 1.0f, 0.0f, 1.3f},
                        {1.5f, 1, 1.0f, 0.0f, 1.0f},    {0.7f, 200, 0.9f, 0.0f, 0.8f},
                        {1.0f, 0, 1.0f, 0.0f, 1.1f},    {0.0f, 40, 0.95f, 0.05f, 1.5f},
                        {1.0f, 5000, 1.0f, 0.0f, 1.0f}};
  for (const Case& c : cases) {
    SamplerParams p;
    p.temperature = c.temp;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.repeat_penalty = c.penalty;
    p.seed = 99;
    Sampler s(p);
    SamplerRef ref(p);
    for (int i = 0; i < 150; ++i) {
      std::vector<float> l = random_logits(1000, 77 + i);
      for (auto& x : l) x = std::round(x * 4.0f) / 4.0f;  // many ties
      ASSERT_EQ(s.sample(l), ref.sample(l))
          << "temp " << c.temp << " top_k " << c.top_k << " penalty " << c.penalty << " step " << i;
    }
  }
}
