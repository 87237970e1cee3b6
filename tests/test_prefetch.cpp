// Tier tests for PREFETCH and REPIN at the ExpertStore level, on a real file with real reads:
// prefetch() starts reads that a later get() uses (bytes identical, counters, precision), never
// evicts a pinned or recently used slot and caps prefetched-unused slots; swap_homes() (REPIN)
// moves a cached SSD expert into a RAM home without I/O and both experts still read back
// byte-identical; it refuses experts that are not cached or do not fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "placement/plan.h"
#include "test_tiers_util.h"
#include "tiers/expert_store.h"

namespace strata::tiers {
namespace {

using placement::Home;
using placement::HomeKind;
using placement::PlacementPlan;
using testing::pread_range;
using testing::TempFile;

constexpr int kLayers = 4;
constexpr int kExperts = 8;
constexpr int kTopK = 2;

// 50 kB slices, a 333-byte tail.
struct Model : testing::ExpertFile {
  explicit Model(const std::string& name)
      : ExpertFile(name, kLayers, kExperts, kTopK, 50000, 333, 5) {}
};

PlacementPlan all_ssd(const Model& m, int slots) {
  return PlacementPlan(m.sizes, std::vector<Home>(kLayers * kExperts, Home::ssd()),
                       slots * m.sizes.slot_bytes, {64ull << 20, {}});
}

class Prefetch : public ::testing::TestWithParam<bool> {};  // io_uring or the pread pool

TEST_P(Prefetch, ReadsStartEarlyAndGetUsesThem) {
  Model m("prefetch_use.bin");
  StoreOptions opt;
  opt.uring = GetParam();
  ExpertStore store(m.file->path(), m.extents, all_ssd(m, 8), opt);
  // Layer 0 is being computed (pinned) while layer 1's two experts are prefetched.
  const std::vector<int> l0{0, 1}, l1{2, 5};
  store.prepare(0, l0);
  EXPECT_EQ(store.prefetch(1, l1), 2);
  EXPECT_EQ(store.prefetch(1, l1), 0);  // already cached or in flight: nothing new
  for (int e : l0) m.expect_identical(store.get(0, e), 0, e);
  store.release(0);
  // The demand for layer 1 finds both (a hit each), bytes identical to the file.
  store.prepare(1, l1);
  for (int e : l1) m.expect_identical(store.get(1, e), 1, e);
  store.release(1);
  const StoreCounters& c = store.counters();
  EXPECT_EQ(c.prefetch_issued, 2u);
  EXPECT_EQ(c.prefetch_used, 2u);
  EXPECT_EQ(c.cache_hits, 2u);
  EXPECT_EQ(c.cache_misses, 2u);  // layer 0's demand reads only
  EXPECT_DOUBLE_EQ(c.prefetch_precision(), 1.0);
  EXPECT_GE(c.prefetch_head_start_seconds, 0.0);
  // A misprediction: prefetched, never used, then evicted by demand (counted as wasted).
  EXPECT_EQ(store.prefetch(2, std::vector<int>{7}), 1);
  // Its read landed before the demand below: a slot still filling is pinned, and demand would
  // evict around it (on a loaded machine the read can outlast layer 0's demand reads).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (store.cache()->pinned_slots() > 0 && std::chrono::steady_clock::now() < deadline) {
    store.prefetch(2, std::vector<int>{});  // reaps completions, issues nothing
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(store.cache()->pinned_slots(), 0) << "the prefetch read never completed";
  for (int l = 0; l < kLayers; ++l) {
    const std::vector<int> all{0, 1, 2, 3};
    store.prepare(l, all);
    for (int e : all) m.expect_identical(store.get(l, e), l, e);
    store.release(l);
  }
  EXPECT_EQ(store.counters().prefetch_used, 2u);
  EXPECT_EQ(store.counters().prefetch_issued, 3u);
  EXPECT_EQ(store.counters().prefetch_wasted, 1u);
}

TEST_P(Prefetch, GuardNeverEvictsPinnedOrRecentSlotsAndCapsPrefetches) {
  Model m("prefetch_guard.bin");
  StoreOptions opt;
  opt.uring = GetParam();
  opt.prefetch_min_age = 4;  // a slot used by any of the last 4 demand lookups is protected
  ExpertStore store(m.file->path(), m.extents, all_ssd(m, 4), opt);
  // Two slots pinned by layer 0's compute, two holding layer 1's just-used experts.
  const std::vector<int> l1{3, 4};
  store.prepare(1, l1);
  for (int e : l1) store.get(1, e);
  store.release(1);
  const std::vector<int> l0{1, 2};
  store.prepare(0, l0);
  for (int e : l0) store.get(0, e);
  // Layer 1's slots are the LRU tail but were used by the last 4 demand lookups: a prediction for
  // layer 2 is refused, nothing evicted.
  const uint64_t ev = store.counters().evictions;
  EXPECT_EQ(store.prefetch(2, std::vector<int>{5, 6}), 0);
  EXPECT_EQ(store.counters().prefetch_refused, 1u);
  EXPECT_EQ(store.counters().evictions, ev);
  EXPECT_EQ(store.cache()->pinned_slots(), 2);
  for (int e : l0) m.expect_identical(store.get(0, e), 0, e);  // still pinned, still intact
  store.release(0);
  // Layer 1's experts still hit.
  const uint64_t hits = store.counters().cache_hits;
  store.prepare(1, l1);
  for (int e : l1) m.expect_identical(store.get(1, e), 1, e);
  store.release(1);
  EXPECT_EQ(store.counters().cache_hits, hits + 2);

  // Cap: at most half of an 8-slot cache prefetched-unused, even with empty slots to spare.
  opt.prefetch_min_age = -1;
  ExpertStore big(m.file->path(), m.extents, all_ssd(m, 8), opt);
  const std::vector<int> many{0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(big.prefetch(3, many), 4);
  EXPECT_EQ(big.cache()->prefetched_slots(), 4);
  EXPECT_EQ(big.counters().prefetch_refused, 1u);
  // Every prefetched expert reads back right, and the ones not prefetched too.
  big.prepare(3, many);
  for (int e : many) m.expect_identical(big.get(3, e), 3, e);
  big.release(3);
  EXPECT_EQ(big.counters().prefetch_used, 4u);
  EXPECT_EQ(big.cache()->prefetched_slots(), 0);
}

INSTANTIATE_TEST_SUITE_P(Readers, Prefetch, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "uring" : "pool"; });

TEST(Repin, SwapHomesMovesACachedExpertIntoRamWithoutIo) {
  Model m("repin_swap.bin");
  // Layer 0 and 1: experts 0..3 in RAM, 4..7 on SSD; layers 2, 3 all on SSD.
  std::vector<Home> homes;
  for (int l = 0; l < kLayers; ++l)
    for (int e = 0; e < kExperts; ++e) homes.push_back(l < 2 && e < 4 ? Home::ram() : Home::ssd());
  const PlacementPlan plan(m.sizes, homes, 4 * m.sizes.slot_bytes, {64ull << 20, {}});
  ExpertStore store(m.file->path(), m.extents, plan);
  // Not cached: refused, nothing changes.
  EXPECT_FALSE(store.swap_homes(1, 6, 1, 0));
  // Layer 1 expert 6 computed from the cache, then promoted into layer 1 expert 0's RAM home.
  store.prepare(1, std::vector<int>{6});
  m.expect_identical(store.get(1, 6), 1, 6);
  store.release(1);
  EXPECT_TRUE(store.ready_in_cache(1, 6));
  const uint64_t reads = store.counters().reads;
  EXPECT_TRUE(store.swap_homes(1, 6, 1, 0));
  EXPECT_EQ(store.counters().reads, reads);  // no I/O
  EXPECT_EQ(store.counters().repin_moves, 1u);
  EXPECT_EQ(store.home(1, 6).kind, HomeKind::kRam);
  EXPECT_EQ(store.home(1, 0).kind, HomeKind::kSsd);
  EXPECT_FALSE(store.ready_in_cache(1, 6));  // its slot was emptied
  const uint64_t misses = store.counters().cache_misses;
  m.expect_identical(store.get(1, 6), 1, 6);  // from RAM now
  EXPECT_EQ(store.counters().cache_misses, misses);
  store.prepare(1, std::vector<int>{0});
  m.expect_identical(store.get(1, 0), 1, 0);  // read from the file on demand now
  store.release(1);
  EXPECT_EQ(store.counters().cache_misses, misses + 1);
  // A layer-3 expert (bigger slices) does not fit a layer-0 home: refused.
  store.prepare(3, std::vector<int>{2});
  store.get(3, 2);
  store.release(3);
  EXPECT_FALSE(store.swap_homes(3, 2, 0, 1));
  // A smaller one does: layer 0's expert 7 into layer 1 expert 2's home (layer 1 is larger).
  store.prepare(0, std::vector<int>{7});
  store.get(0, 7);
  store.release(0);
  EXPECT_TRUE(store.swap_homes(0, 7, 1, 2));
  m.expect_identical(store.get(0, 7), 0, 7);
  // Every expert still reads back byte-identical afterwards.
  for (int l = 0; l < kLayers; ++l)
    for (int e = 0; e < kExperts; e += 2) {
      store.prepare(l, std::vector<int>{e, e + 1});
      m.expect_identical(store.get(l, e), l, e);
      m.expect_identical(store.get(l, e + 1), l, e + 1);
      store.release(l);
    }
  EXPECT_EQ(store.counters().repin_moves, 2u);
}

}  // namespace
}  // namespace strata::tiers
