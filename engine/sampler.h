// Token sampler: repetition penalty → top-k → top-p → min-p → temperature → draw, the order
// llama.cpp's default chain uses; temperature <= 0 is greedy (first maximum wins). The same seed
// and logits give the same tokens. Tested by tests/test_sampler.cpp.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

namespace strata::engine {

struct SamplerParams {
  float temperature = 0.8f;     // <= 0: greedy
  int32_t top_k = 40;           // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off; > 1 discourages the last repeat_last_n tokens
  int32_t repeat_last_n = 64;
  uint64_t seed = 0;
};

// Which tokens may come next (structured output: token_constraint.h).
class TokenFilter {
 public:
  virtual ~TokenFilter() = default;
  virtual bool allows(int32_t id) = 0;
  // Sets every token the filter does not allow to -infinity.
  virtual void mask(std::span<float> logits) = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  // Picks a token from logits [n_vocab] (not modified) and remembers it for the penalty.
  int32_t sample(std::span<const float> logits);
  // The same among the tokens `filter` allows (null: all). The pick from all the logits stands
  // when the filter allows it; else the filter masks the (penalized) logits and the pick is made
  // again from those — for greedy and plain temperature sampling exactly the masked
  // distribution's pick, and the mask (a pass over the vocabulary) runs only on a refusal.
  // -1 when the filter allows no token.
  int32_t sample(std::span<const float> logits, TokenFilter* filter);
  // Tokens to count for the repetition penalty (e.g. the prompt).
  void accept(int32_t token);
  void reset();

 private:
  std::span<const float> penalized(std::span<const float> logits);
  int32_t pick(std::span<const float> l);

  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };
  SamplerParams p_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;
  std::vector<Candidate> cand_;  // scratch, reused
  std::vector<float> pen_;       // the penalized logits, when the penalty applies
  std::vector<float> masked_;    // the filter's masked logits
};

// argmax, first maximum wins (llama.cpp's greedy).
int32_t argmax(std::span<const float> logits);

}  // namespace strata::engine
