// Evidence that a pinned placement helps on text it was not learned from: on a `synth --preset
// tiny` model, usage stats learned from one set of token streams (train, through the engine's
// usage hook, saved and reloaded as a stats file) pin the hottest experts in RAM; a disjoint
// held-out set replayed at a small RAM budget gets a higher cache+pinned hit rate (the store's
// counters) than the usage-free default plan, and logits byte-identical with and without PIN; with
// REPIN and PREFETCH on top of PIN the held-out hit rate still beats no PIN and the logits stay
// byte-identical. PROMPT_PLACE: a prompt's own routing moves its experts into RAM homes before
// decode, with the same logits.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/expert_source.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "placement/planner.h"
#include "placement/usage_stats.h"
#include "tier_test_util.h"

namespace strata::tier_test {
namespace {

using Streams = std::vector<std::vector<int32_t>>;

Streams random_streams(uint32_t n_vocab, int n, int len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Streams s(static_cast<size_t>(n));
  for (auto& ids : s)
    for (int i = 0; i < len; ++i) ids.push_back(static_cast<int32_t>(rng() % n_vocab));
  return s;
}

struct Replay {
  std::vector<float> logits;  // every position of every stream
  tiers::StoreCounters counters;
};

// Decode-like replay (one token per chunk) through a tiered ExpertSource.
Replay replay(const engine::Model& model, const Streams& streams, engine::TierOptions opts) {
  opts.notice = [](const std::string&) {};
  opts.n_ctx = 64;
  engine::ExpertSource src(model, opts);
  engine::ForwardOptions fo;
  fo.n_ctx = 64;
  fo.n_ubatch = 1;
  fo.n_threads = 2;
  fo.experts = &src;
  engine::Forward fwd(model, fo);
  Replay r;
  const uint32_t n_vocab = model.config().n_vocab;
  for (const auto& ids : streams) {
    fwd.reset();
    const size_t at = r.logits.size();
    r.logits.resize(at + ids.size() * n_vocab);
    fwd.prefill(ids, r.logits.data() + at);
  }
  r.counters = src.store()->counters();
  return r;
}

// A `synth --preset tiny` model in dir.
fs::path write_synth_tiny(const ScratchDir& dir) {
  const fs::path path = dir / "synth-tiny.gguf";
  engine::SynthOptions so;
  so.preset = *engine::find_synth_preset("tiny");
  so.n_threads = 2;
  engine::SynthModel(so).write(path.string());
  return path;
}

double cache_pinned_hit_rate(const tiers::StoreCounters& c) {
  const double hits = static_cast<double>(c.ram.served + c.cache_hits);
  return hits / (hits + static_cast<double>(c.cache_misses));
}

TEST(PinHeldOut, PinnedPlanBeatsDefaultOnHeldOutStreams) {
  const ScratchDir dir("pin_heldout");
  const fs::path path = write_synth_tiny(dir);
  const engine::Model model = engine::Model::load(path.string());
  const placement::ExpertSizes sizes = engine::expert_sizes(model);
  const uint32_t n_vocab = model.config().n_vocab;
  const Streams train = random_streams(n_vocab, 6, 48, 1);
  const Streams held_out = random_streams(n_vocab, 6, 48, 2);

  // Train: every expert in RAM, the usage hook on, stats saved and read back.
  const fs::path stats_path = dir / "train.stats";
  {
    placement::UsageStats usage(placement::model_identity(model.file()), sizes.n_expert);
    engine::TierOptions opts;
    opts.usage = &usage;
    replay(model, train, opts);
    EXPECT_EQ(usage.decode_tokens(), 6u * 48u);
    usage.save(stats_path.string());
  }
  const placement::UsageStats stats = placement::UsageStats::load(stats_path.string());
  stats.check_compatible(placement::model_identity(model.file()), sizes.n_expert, false, "self");
  uint64_t selections = 0;
  for (uint64_t c : stats.counts()) selections += c;
  EXPECT_EQ(selections, 6u * 48u * 4u * sizes.n_expert_used);

  // Held out at a small budget: the minimum cache plus room for a quarter of the experts.
  engine::TierOptions opts;
  opts.ram_bytes = placement::min_ram_bytes(sizes) + sizes.total_bytes() / 4;
  const Replay base = replay(model, held_out, opts);
  opts.pin_counts = stats.counts();
  const Replay pinned = replay(model, held_out, opts);

  const double hit_base = cache_pinned_hit_rate(base.counters);
  const double hit_pin = cache_pinned_hit_rate(pinned.counters);
  std::printf("held-out cache+pinned hit rate: default %.3f, PIN %.3f (SSD reads %llu vs %llu)\n",
              hit_base, hit_pin, static_cast<unsigned long long>(base.counters.cache_misses),
              static_cast<unsigned long long>(pinned.counters.cache_misses));
  EXPECT_GT(hit_pin, hit_base);
  EXPECT_LT(pinned.counters.cache_misses, base.counters.cache_misses);
  ASSERT_EQ(base.logits.size(), pinned.logits.size());
  EXPECT_EQ(
      std::memcmp(base.logits.data(), pinned.logits.data(), base.logits.size() * sizeof(float)), 0);

  // REPIN and PREFETCH on and off: same numbers, and PIN with them still beats no PIN held out.
  // (One combined arm keeps the test short; tests/test_tier_invariance.cpp covers each alone.)
  for (const auto& [repin, prefetch] : {std::pair{8, 2}}) {
    engine::TierOptions o = opts;
    o.repin = repin;
    o.prefetch = prefetch;
    const Replay r = replay(model, held_out, o);
    const double hit = cache_pinned_hit_rate(r.counters);
    std::printf("held-out hit rate PIN + REPIN=%d PREFETCH=%d: %.3f\n", repin, prefetch, hit);
    EXPECT_GT(hit, hit_base) << "REPIN=" << repin << " PREFETCH=" << prefetch;
    EXPECT_EQ(std::memcmp(base.logits.data(), r.logits.data(), base.logits.size() * sizeof(float)),
              0)
        << "REPIN=" << repin << " PREFETCH=" << prefetch;
  }

  // The planner's prediction agrees on the direction.
  const std::vector<double> p =
      placement::selection_probabilities(sizes, stats.counts(), stats.tokens());
  const placement::Budgets b{*opts.ram_bytes, {}};
  const auto m = placement::default_machine_profile();
  EXPECT_LT(placement::predict(placement::plan_placement(sizes, b, {}, stats.counts()), p, m)
                .ms_per_token,
            placement::predict(placement::plan_placement(sizes, b, {}, {}), p, m).ms_per_token);
}

}  // namespace
}  // namespace strata::tier_test

namespace strata::tier_test {
namespace {

struct PromptRun {
  std::vector<float> logits;          // the prompt's last position, then every decode step
  tiers::StoreCounters after_prompt;  // the store's counters after the prefill
  tiers::StoreCounters end;           // and after the decode steps
  tiers::StoreCounters last;          // after every round
};

// A prompt prefilled in chunks of ubatch tokens, then decode steps (fixed tokens), through a tiered
// ExpertSource.
PromptRun prompt_then_decode(const engine::Model& model, std::span<const int32_t> prompt,
                             std::span<const int32_t> steps, engine::TierOptions opts,
                             uint32_t ubatch = 64, std::span<const int32_t> next_prompt = {},
                             int first_reply_hint = -1) {
  opts.notice = [](const std::string&) {};
  opts.n_ctx = 256;
  engine::ExpertSource src(model, opts);
  engine::ForwardOptions fo;
  fo.n_ctx = 256;
  fo.n_ubatch = ubatch;
  fo.n_threads = 2;
  fo.experts = &src;
  engine::Forward fwd(model, fo);
  PromptRun r;
  const int rounds = next_prompt.empty() ? 1 : 2;
  for (int round = 0; round < rounds; ++round) {  // another turn: next_prompt, then the steps
    src.set_reply_hint(round == 0 ? first_reply_hint : -1);
    const std::span<const float> last = fwd.prefill(round == 0 ? prompt : next_prompt);
    r.logits.insert(r.logits.end(), last.begin(), last.end());
    if (round == 0) r.after_prompt = src.store()->counters();
    for (const int32_t t : steps) {
      const std::span<const float> l = fwd.decode(t);
      r.logits.insert(r.logits.end(), l.begin(), l.end());
    }
    if (round == 0) r.end = src.store()->counters();
  }
  r.last = src.store()->counters();
  return r;
}

// Expert uses served by RAM homes between two counter snapshots (decode only).
double ram_home_share(const tiers::StoreCounters& a, const tiers::StoreCounters& b) {
  const double ram = double(b.ram.served - a.ram.served);
  const double ssd = double(b.ssd.served - a.ssd.served);
  return ram / (ram + ssd);
}

// PROMPT_PLACE: after a prompt chunk of 32+ tokens, the first decode step (once per run) moves the
// experts the prompt used most into RAM homes; decode then serves more uses from RAM homes, with
// the same logits; a shorter prompt, or a PIN plan, moves nothing.
TEST(PromptPlace, ThePromptsExpertsTakeRamHomesSameNumbers) {
  const ScratchDir dir("prompt_place");
  const fs::path path = write_synth_tiny(dir);
  const engine::Model model = engine::Model::load(path.string());
  const placement::ExpertSizes sizes = engine::expert_sizes(model);
  const uint32_t n_vocab = model.config().n_vocab;
  const Streams s = random_streams(n_vocab, 2, 48, 5);
  const std::span<const int32_t> prompt(s[0]);
  const std::span<const int32_t> steps(s[1].data(), 24);
  engine::TierOptions opts;
  opts.ram_bytes = placement::min_ram_bytes(sizes) + sizes.total_bytes() / 4;

  const PromptRun off = prompt_then_decode(model, prompt, steps, opts);
  opts.prompt_place = true;
  const PromptRun on = prompt_then_decode(model, prompt, steps, opts);
  ASSERT_EQ(off.logits.size(), on.logits.size());
  EXPECT_EQ(std::memcmp(off.logits.data(), on.logits.data(), off.logits.size() * sizeof(float)), 0);
  EXPECT_EQ(off.end.place_passes, 0u);
  int n_moe = 0;
  for (int n : sizes.n_expert) n_moe += n > 0;
  EXPECT_EQ(on.end.place_passes, static_cast<uint64_t>(n_moe));  // one pass per MoE layer, once
  EXPECT_GT(on.end.place_moves, 0u);
  EXPECT_GT(on.end.place_read_bytes, 0u);
  EXPECT_EQ(on.end.repin_moves, 0u);
  const double share_off = ram_home_share(off.after_prompt, off.end);
  const double share_on = ram_home_share(on.after_prompt, on.end);
  std::printf("decode uses served by RAM homes: PROMPT_PLACE=0 %.3f, =1 %.3f (%llu moves)\n",
              share_off, share_on, static_cast<unsigned long long>(on.end.place_moves));
  EXPECT_GT(share_on, share_off);

  // Under 32 prompt tokens, or chunks under 32 tokens (LOOKUP's verify passes look so): nothing
  // moves. A PIN plan: nothing moves.
  const PromptRun short_prompt = prompt_then_decode(model, prompt.first(20), steps, opts);
  EXPECT_EQ(short_prompt.end.place_passes, 0u);
  const PromptRun small_chunks = prompt_then_decode(model, prompt, steps, opts, 16);
  EXPECT_EQ(small_chunks.end.place_passes, 0u);
  // A second prompt (a chat's next turn) places nothing more: once per run.
  const Streams other = random_streams(n_vocab, 1, 48, 6);
  const PromptRun two_turns = prompt_then_decode(model, prompt, steps, opts, 64, other[0]);
  EXPECT_EQ(two_turns.last.place_passes, static_cast<uint64_t>(n_moe));
  EXPECT_EQ(two_turns.last.place_moves, on.end.place_moves);
  // A first reply announced under 16 tokens (serve's max_tokens) puts placement off to the next.
  const PromptRun deferred = prompt_then_decode(model, prompt, steps, opts, 64, other[0], 8);
  EXPECT_EQ(deferred.end.place_passes, 0u);
  EXPECT_EQ(deferred.last.place_passes, static_cast<uint64_t>(n_moe));
  EXPECT_GT(deferred.last.place_moves, 0u);
  opts.pin_counts.assign(static_cast<size_t>(sizes.total_experts()), 1);
  const PromptRun pinned = prompt_then_decode(model, prompt, steps, opts);
  EXPECT_EQ(pinned.end.place_passes, 0u);
}

}  // namespace
}  // namespace strata::tier_test
