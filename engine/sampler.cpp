// Sampler (see sampler.h).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "io/check.h"

namespace strata::engine {

int32_t argmax(std::span<const float> logits) {
  STRATA_ASSERT(!logits.empty());
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {}

void Sampler::reset() {
  rng_.seed(p_.seed);
  recent_.clear();
}

void Sampler::accept(int32_t token) {
  if (p_.repeat_last_n <= 0) return;
  recent_.push_back(token);
  while (static_cast<int32_t>(recent_.size()) > p_.repeat_last_n) recent_.pop_front();
}

int32_t Sampler::sample(std::span<const float> logits) {
  // Greedy with nothing to penalize: the first best logit, without building the candidates (a
  // 150K-token vocabulary's copy took ~0.25 ms a token).
  if (p_.temperature <= 0.0f && (p_.repeat_penalty == 1.0f || recent_.empty())) {
    const int32_t token = argmax(logits);
    accept(token);
    return token;
  }
  const auto n = static_cast<int32_t>(logits.size());
  cand_.resize(logits.size());
  for (int32_t i = 0; i < n; ++i) cand_[i] = {i, logits[i], 0.0f};

  // Repetition penalty, as llama.cpp: positive logits divided, negative multiplied.
  if (p_.repeat_penalty != 1.0f) {
    for (int32_t t : recent_) {
      if (t < 0 || t >= n) continue;
      // From the original logit, so a token seen twice is penalized once.
      cand_[t].logit =
          logits[t] > 0 ? logits[t] / p_.repeat_penalty : logits[t] * p_.repeat_penalty;
    }
  }

  int32_t chosen;
  if (p_.temperature <= 0.0f) {
    chosen = 0;
    for (int32_t i = 1; i < n; ++i)
      if (cand_[i].logit > cand_[chosen].logit) chosen = i;
  } else {
    // Sort by logit, descending; ties by id so the order never depends on the sort.
    auto by_logit = [](const Candidate& a, const Candidate& b) {
      return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
    };
    size_t keep = cand_.size();
    if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
      keep = static_cast<size_t>(p_.top_k);
      std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
    } else {
      std::sort(cand_.begin(), cand_.end(), by_logit);
    }
    cand_.resize(keep);
    auto softmax = [&](float temp) {
      const float mx = cand_[0].logit;
      double sum = 0;
      for (auto& c : cand_) sum += (c.p = std::exp((c.logit - mx) / temp));
      for (auto& c : cand_) c.p = static_cast<float>(c.p / sum);
    };
    softmax(1.0f);
    if (p_.top_p < 1.0f) {
      double cum = 0;
      size_t k = 0;
      while (k < cand_.size()) {
        cum += cand_[k++].p;
        if (cum >= p_.top_p) break;
      }
      cand_.resize(std::max<size_t>(k, 1));
    }
    if (p_.min_p > 0.0f) {
      const float floor_p = cand_[0].p * p_.min_p;
      size_t k = 1;
      while (k < cand_.size() && cand_[k].p >= floor_p) ++k;
      cand_.resize(k);
    }
    softmax(p_.temperature);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const double r = u(rng_);
    double cum = 0;
    chosen = cand_.back().id;
    for (const auto& c : cand_) {
      cum += c.p;
      if (r < cum) {
        chosen = c.id;
        break;
      }
    }
  }
  const int32_t token = p_.temperature <= 0.0f ? cand_[chosen].id : chosen;
  accept(token);
  return token;
}

}  // namespace strata::engine
