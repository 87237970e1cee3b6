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

double NllStats::ppl_error() const {
  if (count_ < 2) return 0;
  const double mean = mean_nll();
  const double var = std::max(0.0, sum2_ / double(count_) - mean * mean);
  return ppl() * std::sqrt(var / double(count_ - 1));
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
