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

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  // Picks a token from logits [n_vocab] (not modified) and remembers it for the penalty.
  int32_t sample(std::span<const float> logits);
  // Tokens to count for the repetition penalty (e.g. the prompt).
  void accept(int32_t token);
  void reset();

 private:
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
};

// argmax, first maximum wins (llama.cpp's greedy).
int32_t argmax(std::span<const float> logits);

}  // namespace strata::engine
