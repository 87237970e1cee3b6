// Perplexity of teacher-forced token streams, computed as llama.cpp's llama-perplexity does: the
// negative log-likelihood of each next token under the softmax of the logits before it (float
// logits less their maximum, float exponentials summed in double), averaged; perplexity is
// exp(mean NLL), its error the standard error of that mean carried through exp. And its text
// mode's chunks: the text tokenized once, cut into chunks of n tokens, each chunk's first token
// replaced by BOS when the vocabulary adds one, the second half of each chunk scored.
// And the KL divergence of one run's next-token distributions from a reference run's. Used by
// `strata replay`; tested by tests/test_perplexity.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace strata::engine {

// -log softmax(logits)[target].
double token_nll(std::span<const float> logits, int32_t target);

// A token's log-probability under the model — the log softmax of the raw logits (before
// temperature, penalties and top-k/top-p/min-p), token_nll's arithmetic — and the top_n most
// likely tokens with theirs (most likely first; ties by lower id). The token's own logprob is
// computed as the top entries' are, so a greedy token's equals top[0]'s bit for bit. `strata
// serve`'s logprobs.
struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0;
};
struct TokenScore {
  int32_t id = -1;
  float logprob = 0;  // NaN for a prompt's first token (nothing predicts it)
  std::vector<TokenLogprob> top;
};
TokenScore score_token(std::span<const float> logits, int32_t id, size_t top_n);

class NllStats {
 public:
  // Scores stream positions [from, n - 1): logits row i (of n rows, n_vocab wide) predicting
  // tokens[i + 1].
  void add_stream(std::span<const int32_t> tokens, std::span<const float> logits, size_t n_vocab,
                  size_t from);
  void add(double nll);

  size_t count() const { return count_; }
  double mean_nll() const { return count_ ? sum_ / double(count_) : 0.0; }
  double ppl() const;
  // One standard error of ppl() (0 with fewer than 2 predictions).
  double ppl_error() const;

 private:
  double sum_ = 0;
  double sum2_ = 0;
  size_t count_ = 0;
};

// KL(base || test) of the softmaxes of two logit rows (natural log, double precision), llama-
// perplexity --kl-divergence's measure of how far a file's next-token distributions drift from
// a reference run's (a quantization against F16, one placement against another: 0).
double kl_divergence(std::span<const float> base, std::span<const float> test);

class KlStats {
 public:
  // Positions [from, n - 1) of two runs over the same n tokens (rows n_vocab wide).
  void add_stream(std::span<const float> base, std::span<const float> test, size_t n_tokens,
                  size_t n_vocab, size_t from);
  size_t count() const { return count_; }
  double mean() const { return count_ ? sum_ / double(count_) : 0.0; }
  double mean_error() const;  // one standard error of mean()
  double max() const { return max_; }
  // Share of positions whose most likely token (first maximum) is the same in both runs.
  double same_top() const { return count_ ? double(same_top_) / double(count_) : 0.0; }

 private:
  double sum_ = 0;
  double sum2_ = 0;
  double max_ = 0;
  size_t count_ = 0;
  size_t same_top_ = 0;
};

// llama-perplexity's chunks of a tokenized text: floor(size / n) chunks of n tokens (at most
// max_chunks when it is > 0), the first token of each replaced by `bos` when bos >= 0.
std::vector<std::vector<int32_t>> perplexity_chunks(std::span<const int32_t> tokens, size_t n,
                                                    int32_t bos, size_t max_chunks);

}  // namespace strata::engine
