// See perplexity.h.
#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>

#include "io/check.h"

namespace strata::engine {

double token_nll(std::span<const float> logits, int32_t target) {
  STRATA_ASSERT(target >= 0 && size_t(target) < logits.size(), "target {} outside {} logits",
                target, logits.size());
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float l : logits) sum += double(std::exp(l - max));  // float exp, double sum
  return std::log(sum) - double(logits[size_t(target)] - max);
}

TokenScore score_token(std::span<const float> logits, int32_t id, size_t top_n) {
  STRATA_ASSERT(id >= 0 && size_t(id) < logits.size(), "token {} outside {} logits", id,
                logits.size());
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float l : logits) sum += double(std::exp(l - max));
  const double log_sum = std::log(sum);
  const auto logprob = [&](int32_t t) { return float(double(logits[size_t(t)] - max) - log_sum); };
  TokenScore s{id, logprob(id), {}};
  // The top_n largest logits: a min-heap of the best so far (the worst on top).
  top_n = std::min(top_n, logits.size());
  const auto better = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] ||
           (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  std::vector<int32_t> heap;
  heap.reserve(top_n + 1);
  for (size_t t = 0; t < logits.size() && top_n > 0; ++t) {
    if (heap.size() == top_n && !better(int32_t(t), heap.front())) continue;
    heap.push_back(int32_t(t));
    std::push_heap(heap.begin(), heap.end(), better);
    if (heap.size() > top_n) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.pop_back();
    }
  }
  std::sort_heap(heap.begin(), heap.end(), better);
  for (const int32_t t : heap) s.top.push_back({t, logprob(t)});
  return s;
}

void NllStats::add(double nll) {
  sum_ += nll;
  sum2_ += nll * nll;
  ++count_;
}

void NllStats::add_stream(std::span<const int32_t> tokens, std::span<const float> logits,
                          size_t n_vocab, size_t from) {
  STRATA_ASSERT(logits.size() == tokens.size() * n_vocab, "{} logits for {} tokens x {}",
                logits.size(), tokens.size(), n_vocab);
  for (size_t i = from; i + 1 < tokens.size(); ++i)
    add(token_nll(logits.subspan(i * n_vocab, n_vocab), tokens[i + 1]));
}

double NllStats::ppl() const {
  return std::exp(mean_nll());
}

namespace {
// The standard error of the mean of count values from their sum and sum of squares (0 under 2).
double standard_error(double sum, double sum2, size_t count) {
  if (count < 2) return 0;
  const double mean = sum / double(count);
  return std::sqrt(std::max(0.0, sum2 / double(count) - mean * mean) / double(count - 1));
}
}  // namespace

double NllStats::ppl_error() const {
  return ppl() * standard_error(sum_, sum2_, count_);
}

namespace {
// log softmax(row) into out (double).
void log_softmax(std::span<const float> row, std::vector<double>& out) {
  const float max = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (const float l : row) sum += std::exp(double(l) - double(max));
  const double log_sum = std::log(sum);
  out.resize(row.size());
  for (size_t i = 0; i < row.size(); ++i) out[i] = double(row[i]) - double(max) - log_sum;
}
}  // namespace

double kl_divergence(std::span<const float> base, std::span<const float> test) {
  STRATA_ASSERT(base.size() == test.size() && !base.empty(), "KL of {} and {} logits", base.size(),
                test.size());
  thread_local std::vector<double> lb, lt;
  log_softmax(base, lb);
  log_softmax(test, lt);
  double kl = 0;
  for (size_t i = 0; i < lb.size(); ++i) kl += std::exp(lb[i]) * (lb[i] - lt[i]);
  return std::max(0.0, kl);  // rounding can leave a tiny negative for equal rows
}

void KlStats::add_stream(std::span<const float> base, std::span<const float> test, size_t n_tokens,
                         size_t n_vocab, size_t from) {
  STRATA_ASSERT(base.size() == n_tokens * n_vocab && test.size() == base.size(),
                "KL over {} tokens x {}: {} and {} logits", n_tokens, n_vocab, base.size(),
                test.size());
  for (size_t i = from; i + 1 < n_tokens; ++i) {
    const auto b = base.subspan(i * n_vocab, n_vocab), t = test.subspan(i * n_vocab, n_vocab);
    const double kl = kl_divergence(b, t);
    sum_ += kl;
    sum2_ += kl * kl;
    max_ = std::max(max_, kl);
    ++count_;
    same_top_ += std::max_element(b.begin(), b.end()) - b.begin() ==
                 std::max_element(t.begin(), t.end()) - t.begin();
  }
}

double KlStats::mean_error() const {
  return standard_error(sum_, sum2_, count_);
}

std::vector<std::vector<int32_t>> perplexity_chunks(std::span<const int32_t> tokens, size_t n,
                                                    int32_t bos, size_t max_chunks) {
  STRATA_ASSERT(n >= 2, "perplexity chunks of {} tokens", n);
  size_t n_chunks = tokens.size() / n;
  if (max_chunks > 0) n_chunks = std::min(n_chunks, max_chunks);
  std::vector<std::vector<int32_t>> chunks(n_chunks);
  for (size_t c = 0; c < n_chunks; ++c) {
    chunks[c].assign(tokens.begin() + c * n, tokens.begin() + (c + 1) * n);
    if (bos >= 0) chunks[c][0] = bos;
  }
  return chunks;
}

}  // namespace strata::engine
