// Sampler (see sampler.h).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "io/check.h"

namespace strata::engine {

int32_t argmax(std::span<const float> logits) {
  STRATA_ASSERT(!logits.empty());
  // Two passes: the maximum over independent lanes (no loop-carried index, so the compiler keeps
  // it in SIMD max instructions), then the first index holding it. The scalar scan with the best
  // index carried through a compare-and-move took ~0.65 ms on a 151,936-entry vocabulary in the
  // decode loop (about 2% of a token); this takes ~0.05 ms. `x > m ? x : m` never takes a NaN, as
  // the scalar scan never did; a NaN first entry stays the answer, as before.
  constexpr size_t kLanes = 16;
  const float* v = logits.data();
  const size_t n = logits.size();
  float lane[kLanes];
  for (float& m : lane) m = v[0];
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) lane[j] = v[i + j] > lane[j] ? v[i + j] : lane[j];
  float best = v[0];
  for (float m : lane) best = m > best ? m : best;
  for (; i < n; ++i) best = v[i] > best ? v[i] : best;
  if (best != best) return 0;  // v[0] is NaN: nothing compares greater
  for (i = 0; i < n; ++i)
    if (v[i] == best) return static_cast<int32_t>(i);
  return 0;
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
  const int32_t chosen = pick(penalized(logits));
  accept(chosen);
  return chosen;
}

int32_t Sampler::sample(std::span<const float> logits, TokenFilter* filter) {
  if (!filter) return sample(logits);
  const std::span<const float> l = penalized(logits);
  int32_t chosen = pick(l);
  if (!filter->allows(chosen)) {
    masked_.assign(l.begin(), l.end());
    filter->mask(masked_);
    if (std::none_of(masked_.begin(), masked_.end(), [](float x) { return x > -INFINITY; }))
      return -1;
    chosen = pick(masked_);
  }
  accept(chosen);
  return chosen;
}

// The logits the filters see: the repetition penalty (as llama.cpp: positive logits divided,
// negative multiplied) applied to a copy only when it changes something.
std::span<const float> Sampler::penalized(std::span<const float> logits) {
  const auto n = static_cast<int32_t>(logits.size());
  if (p_.repeat_penalty == 1.0f || recent_.empty()) return logits;
  pen_.assign(logits.begin(), logits.end());
  for (int32_t t : recent_) {
    if (t < 0 || t >= n) continue;
    // From the original logit, so a token seen twice is penalized once.
    pen_[t] = logits[t] > 0 ? logits[t] / p_.repeat_penalty : logits[t] * p_.repeat_penalty;
  }
  return pen_;
}

int32_t Sampler::pick(std::span<const float> l) {
  const auto n = static_cast<int32_t>(l.size());

  // Candidates in rank order: by logit, descending; ties by id so the order never depends on the
  // sort.
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
  };
  int32_t chosen;
  if (p_.temperature <= 0.0f) {
    chosen = argmax(l);
  } else {
    if (p_.top_k > 0 && p_.top_k < n) {
      // The top k in one pass over the logits: a heap of the best k so far, its worst on top.
      // Few entries beat the k-th best once the scan is under way, so this is one predictable
      // compare per token instead of building (and partially sorting) all n candidates.
      const auto k = static_cast<size_t>(p_.top_k);
      cand_.clear();
      for (int32_t i = 0; i < n; ++i) {
        const Candidate c{i, l[i], 0.0f};
        if (cand_.size() < k) {
          cand_.push_back(c);
          std::push_heap(cand_.begin(), cand_.end(), by_logit);
        } else if (by_logit(c, cand_.front())) {
          std::pop_heap(cand_.begin(), cand_.end(), by_logit);
          cand_.back() = c;
          std::push_heap(cand_.begin(), cand_.end(), by_logit);
        }
      }
      std::sort_heap(cand_.begin(), cand_.end(), by_logit);
    } else {
      cand_.resize(l.size());
      for (int32_t i = 0; i < n; ++i) cand_[i] = {i, l[i], 0.0f};
      std::sort(cand_.begin(), cand_.end(), by_logit);
    }
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
  return chosen;
}

}  // namespace strata::engine
