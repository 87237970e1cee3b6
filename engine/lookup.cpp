// LOOKUP: n-gram drafts from the sequence itself, verified in one forward pass per step.
// Exercised by tests/test_lookup.cpp.
#include "engine/lookup.h"

#include <fmt/format.h>

#include <algorithm>

#include "io/check.h"

namespace strata::engine {

LookupParams lookup_params(const Knobs& knobs) {
  LookupParams p;
  p.max_draft = int(knobs.get_int("LOOKUP"));
  p.min_ngram = int(knobs.get_int("LOOKUP_NGRAM"));
  p.max_ngram = std::max(p.min_ngram, 4);
  if (p.max_draft > 0 && knobs.get_int("CUDA_DENSE") == 2)
    fail(ErrorKind::kBadValue,
         "LOOKUP={} needs decode's bits in its verify passes; CUDA_DENSE=2 runs them as prefill "
         "GEMMs (use CUDA_DENSE=1 or LOOKUP=0)",
         p.max_draft);
  return p;
}

void draft_lookup(std::span<const int32_t> history, const LookupParams& p,
                  std::vector<int32_t>& out) {
  out.clear();
  const size_t len = history.size();
  if (p.max_draft <= 0 || p.min_ngram <= 0) return;
  for (int n = std::min<int>(p.max_ngram, int(len) - 1); n >= p.min_ngram; --n) {
    const int32_t* suffix = history.data() + len - size_t(n);
    // Most recent first: an occurrence starting at i ends before the suffix starts at len - n
    // may overlap it (a repeating run drafts its own continuation).
    for (size_t i = len - size_t(n); i-- > 0;) {
      if (!std::equal(suffix, suffix + n, history.data() + i)) continue;
      // Copy what followed, LZ77-style: past the history's end the copy reads its own output,
      // so a run that repeats with period len - from is drafted as far as max_draft.
      const size_t from = i + size_t(n);
      for (size_t j = 0; j < size_t(p.max_draft); ++j)
        out.push_back(from + j < len ? history[from + j] : out[from + j - len]);
      return;
    }
  }
}

std::string describe(const LookupCounters& c) {
  return fmt::format(
      "{} forward passes instead of {}, {} of {} drafted tokens used, {} drafts dropped after "
      "unused ones",
      c.steps, c.steps + c.accepted, c.accepted, c.drafted, c.skipped);
}

LookupDecoder::LookupDecoder(Forward& fwd, const LookupParams& p)
    : fwd_(fwd), p_(p), base_(fwd.n_past()), cur_draft_(std::min(p.max_draft, 1)) {
  STRATA_ASSERT(p.max_draft >= 0 && p.min_ngram >= 1 && p.max_ngram >= p.min_ngram,
                "bad lookup params {} {} {}", p.max_draft, p.min_ngram, p.max_ngram);
  chunk_.reserve(size_t(p.max_draft) + 1);
  draft_.reserve(size_t(p.max_draft));
  rows_.resize((size_t(p.max_draft) + 1) * fwd.model().config().n_vocab);
}

void LookupDecoder::settle() {
  if (base_ + next_ < fwd_.n_past() && next_ < chunk_.size()) fwd_.truncate(base_ + next_);
  chunk_.clear();
  next_ = 0;
  base_ = fwd_.n_past();
}

std::span<const float> LookupDecoder::decode(int32_t token, std::span<const int32_t> history) {
  STRATA_ASSERT(!history.empty() && history.back() == token,
                "lookup: the history must end with the token");
  const size_t n_vocab = fwd_.model().config().n_vocab;
  if (next_ > 0 && next_ < chunk_.size() && chunk_[next_] == token) {
    // The previous step ran this token here: its logits are in rows_.
    ran_ = false;
    ++c_.accepted;
    return {rows_.data() + next_++ * n_vocab, n_vocab};
  }
  // The draft length follows the drafts' fate: doubled after a draft used whole, cut to the
  // part used after one that missed (at least 1). A multi-token pass costs more than a plain
  // step, so drafts grow only while they keep paying.
  // A draft not used at all also backs drafting off: the next 1, 2, 4 .. 64 drafts found are
  // dropped (plain steps instead), so text whose matches keep missing (common phrases with
  // varying continuations) pays for few wasted passes; any draft used resets it.
  if (chunk_.size() > 1) {
    const uint32_t used = next_ - 1, drafted = uint32_t(chunk_.size() - 1);
    cur_draft_ =
        used == drafted ? std::min(2 * cur_draft_, p_.max_draft) : std::max<int>(1, int(used));
    backoff_ = used > 0 ? 0 : std::min(backoff_ > 0 ? 2 * backoff_ : 1, kMaxBackoff);
    skip_ = backoff_;
  }
  settle();
  ran_ = true;
  ++c_.steps;
  chunk_.push_back(token);
  // Room for the draft: the context's free positions after token's.
  const uint32_t free = fwd_.n_ctx() > base_ + 1 ? fwd_.n_ctx() - base_ - 1 : 0;
  LookupParams p = p_;
  p.max_draft = int(std::min<int64_t>(cur_draft_, free));
  if (p.max_draft > 0) {
    draft_lookup(history, p, draft_);  // within the capacity reserved at construction
    if (!draft_.empty() && skip_ > 0) {
      --skip_;
      ++c_.skipped;
    } else {
      chunk_.insert(chunk_.end(), draft_.begin(), draft_.end());
    }
  }
  next_ = 1;
  if (chunk_.size() == 1) return fwd_.decode(token);
  c_.drafted += chunk_.size() - 1;
  fwd_.prefill(chunk_, rows_.data());
  return {rows_.data(), n_vocab};
}

}  // namespace strata::engine
