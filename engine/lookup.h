// LOOKUP: prompt-lookup decoding. When the tokens so far end with an n-gram that occurred before,
// the tokens that followed it are drafted, and the next decode step runs the sampled token and the
// draft as one chunk (each weight, each routed expert read once for all of them) with the logits of
// every position kept. The caller samples as it always does; while its samples equal the draft, the
// next logits are already there. Decode and prefill give the same bits (tests/test_arch_config,
// tests/test_lookup), so the tokens are exactly those of plain decoding, for greedy and seeded
// sampling alike: only the number of forward passes changes. Tested by tests/test_lookup.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "engine/knobs.h"

namespace strata::engine {

struct LookupParams {
  // Most tokens drafted per step; 0 = off (every step is Forward::decode). A run starts at 1 and
  // doubles while drafts are used whole (a miss cuts it to the part used); after a draft not used
  // at all the next 1, 2, 4 .. 64 drafts found are dropped.
  int max_draft = 0;
  int min_ngram = 3;  // the shortest suffix of the history that may select a draft
  int max_ngram = 4;  // the longest tried first
};

// LOOKUP and LOOKUP_NGRAM; LOOKUP > 0 with CUDA_DENSE=2 (prefill's GEMMs are not decode's bits)
// throws Error(kBadValue).
LookupParams lookup_params(const Knobs& knobs);

// The draft for `history`: for n = max_ngram .. min_ngram, the most recent earlier occurrence of
// the history's last n tokens; the max_draft tokens that followed it go to `out` (cleared first),
// copied LZ77-style (past the history's end the copy repeats what it drafted, so a periodic run
// continues its period). No match: `out` is empty. O(history * n).
void draft_lookup(std::span<const int32_t> history, const LookupParams& p,
                  std::vector<int32_t>& out);

struct LookupCounters {
  uint64_t steps = 0;     // forward passes run by decode()
  uint64_t drafted = 0;   // draft tokens run in those passes
  uint64_t accepted = 0;  // of those, the ones whose logits were used (the caller sampled them)
  uint64_t skipped = 0;   // drafts found but dropped while backing off after unused ones
};

// "16 forward passes instead of 127, 111 of 112 drafted tokens used, 0 drafts dropped after
// unused ones": the summary `run` and `chat` print.
std::string describe(const LookupCounters& c);

// Stands in for Forward::decode in a generation loop. Holds the logits of a step's drafted
// positions until the caller's next token shows whether they are used.
class LookupDecoder {
 public:
  // fwd must outlive the decoder; its cache must hold exactly the positions given to decode's
  // history so far. Allocates the logits rows for max_draft + 1 positions here, none in decode.
  LookupDecoder(Forward& fwd, const LookupParams& p);

  // `token` at the next position; returns its logits, like fwd.decode(token). history: every token
  // of the sequence so far, ending with `token` (the cache's positions then token). When the
  // previous step drafted `token` at this position, its row is returned and nothing runs;
  // otherwise the unused drafted positions are dropped from the cache and one forward pass runs
  // token plus a draft from the history (as much as the context holds).
  std::span<const float> decode(int32_t token, std::span<const int32_t> history);

  // Drops drafted positions the caller did not use, so fwd's cache ends at the last token given
  // to decode (call before anything else uses fwd: a new turn, a truncate).
  void settle();

  // Positions in use: fwd.n_past() less the drafted ones not yet used.
  uint32_t n_past() const { return base_ + next_; }
  // True when the last decode() ran a forward pass (false: a drafted row was used).
  bool ran() const { return ran_; }
  // The draft tokens the last decode() ran besides its token (0 when it ran none).
  uint32_t drafted() const { return ran_ ? uint32_t(chunk_.size() - 1) : 0; }
  const LookupCounters& counters() const { return c_; }
  const LookupParams& params() const { return p_; }

 private:
  Forward& fwd_;
  LookupParams p_;
  std::vector<int32_t> chunk_;  // the last step's tokens: token, then its draft
  std::vector<int32_t> draft_;  // scratch for draft_lookup
  std::vector<float> rows_;     // [max_draft + 1, n_vocab] their logits
  uint32_t base_ = 0;           // the cache position of chunk_[0]
  uint32_t next_ = 0;           // rows 0 .. next_-1 handed out; chunk_[next_] is the next expected
  bool ran_ = false;
  int cur_draft_ = 0;  // the next draft's most tokens: 1, doubling while drafts are used whole
  static constexpr int kMaxBackoff = 64;
  int backoff_ =
      0;          // after a draft not used at all: 1, doubling per such draft; 0 once one is used
  int skip_ = 0;  // drafts still to drop before the next one runs
  LookupCounters c_;
};

}  // namespace strata::engine
