// Unit tests for tiers::ExpertCache: LRU order, pins that block eviction, fills that hold their
// own pin, aborted fills, the every-slot-pinned case, and the PREFETCH guard (begin_prefetch
// never takes a pinned or recently used slot; a used prefetch is no longer "prefetched").
#include <gtest/gtest.h>

#include "tiers/expert_cache.h"

namespace strata::tiers {
namespace {

constexpr uint64_t kSlot = 8192;

ExpertCache make_cache(int n_slots, int64_t n_keys = 100) {
  return ExpertCache(
      n_slots, kSlot, n_keys,
      RamArena(n_slots * kSlot, RamArena::kAnyNode, NumaMode::kOff, nullptr, nullptr));
}

// Fills key and releases the caller's pin: the slot is then cached and unpinned.
int fill(ExpertCache& c, int64_t key) {
  const int s = c.begin_fill(key);
  EXPECT_NE(s, ExpertCache::kNone);
  c.complete(s);
  c.release(s);
  return s;
}

TEST(ExpertCache, SlotsAreDistinctAlignedMemory) {
  ExpertCache c = make_cache(4);
  EXPECT_EQ(c.bytes(), 4u * 8192);  // below one huge page: whole 4 KiB pages
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data(s)) % 4096, 0u);
    if (s > 0) {
      EXPECT_EQ(c.data(s) - c.data(s - 1), static_cast<ptrdiff_t>(kSlot));
    }
  }
}

TEST(ExpertCache, EmptySlotsFirstThenLeastRecentlyUsed) {
  ExpertCache c = make_cache(3);
  const int a = fill(c, 10);
  const int b = fill(c, 11);
  const int d = fill(c, 12);
  EXPECT_EQ(c.evictions(), 0u);
  EXPECT_NE(a, b);
  EXPECT_NE(b, d);
  // Touch 10: 11 becomes the least recently used.
  const int hit = c.lookup(10);
  EXPECT_EQ(hit, a);
  c.release(hit);
  const int s = fill(c, 13);
  EXPECT_EQ(s, b);
  EXPECT_EQ(c.evictions(), 1u);
  EXPECT_EQ(c.lookup(11), ExpertCache::kNone);
  EXPECT_EQ(c.key(s), 13);
  // Next victim: 12, then 10.
  EXPECT_EQ(fill(c, 14), d);
  EXPECT_EQ(fill(c, 15), a);
}

TEST(ExpertCache, PinnedSlotsAreNeverEvicted) {
  ExpertCache c = make_cache(2);
  fill(c, 1);
  fill(c, 2);
  const int p1 = c.lookup(1);
  const int p2 = c.lookup(2);
  EXPECT_EQ(c.pinned_slots(), 2);
  EXPECT_EQ(c.begin_fill(3), ExpertCache::kNone);  // everything pinned
  c.release(p2);
  const int s = c.begin_fill(3);
  EXPECT_EQ(s, p2);
  EXPECT_EQ(c.key(p1), 1);
  c.complete(s);
  c.release(s);
  c.release(p1);
  EXPECT_EQ(c.pinned_slots(), 0);
}

TEST(ExpertCache, FillHoldsItsOwnPinUntilComplete) {
  ExpertCache c = make_cache(1);
  const int s = c.begin_fill(7);
  EXPECT_EQ(c.state(s), ExpertCache::SlotState::kFilling);
  c.release(s);  // the caller lets go (a prefetch that was not used) ...
  EXPECT_EQ(c.pins(s), 1);
  EXPECT_EQ(c.begin_fill(8), ExpertCache::kNone);  // ... but the read still owns the slot
  EXPECT_EQ(c.lookup(7), s);                       // a later use finds it in flight
  c.complete(s);
  EXPECT_EQ(c.state(s), ExpertCache::SlotState::kReady);
  c.release(s);
  EXPECT_EQ(c.pins(s), 0);
}

TEST(ExpertCache, AbortedFillForgetsTheKey) {
  ExpertCache c = make_cache(2);
  const int keep = fill(c, 1);
  const int s = c.begin_fill(2);
  c.abort_fill(s);
  c.release(s);
  EXPECT_EQ(c.state(s), ExpertCache::SlotState::kEmpty);
  EXPECT_EQ(c.lookup(2), ExpertCache::kNone);
  // The empty slot is reused before the cached one.
  EXPECT_EQ(fill(c, 3), s);
  EXPECT_EQ(c.key(keep), 1);
}

TEST(ExpertCache, ManyPinsOneSlot) {
  ExpertCache c = make_cache(2);
  fill(c, 5);
  const int s = c.lookup(5);
  c.pin(s);
  c.release(s);
  EXPECT_EQ(c.pins(s), 1);
  fill(c, 6);
  fill(c, 7);  // evicts 6, not the pinned 5
  EXPECT_EQ(c.lookup(6), ExpertCache::kNone);
  c.release(s);
}

TEST(ExpertCache, PrefetchGuardNeverEvictsPinnedOrRecentlyUsedSlots) {
  ExpertCache c = make_cache(4);
  // Empty slots are always fair game.
  const int p = c.begin_prefetch(50, 1000);
  ASSERT_NE(p, ExpertCache::kNone);
  EXPECT_TRUE(c.prefetched(p));
  EXPECT_EQ(c.pins(p), 1);  // only the fill's pin: nobody asked for it yet
  EXPECT_EQ(c.prefetched_slots(), 1);
  c.complete(p);
  EXPECT_EQ(c.pins(p), 0);
  // Three demand fills take the other slots; one stays pinned (being computed).
  const int a = fill(c, 10);
  const int b = fill(c, 11);
  const int pinned = c.begin_fill(12);
  c.complete(pinned);
  EXPECT_EQ(c.pinned_slots(), 1);
  // The LRU tail is now the completed prefetch (pushed to the head when it landed, then aged by
  // three demand uses), then 10, 11. With min_age 4 nothing is old enough: refused, nothing
  // evicted.
  const uint64_t ev = c.evictions();
  EXPECT_EQ(c.begin_prefetch(60, 4), ExpertCache::kNone);
  EXPECT_EQ(c.evictions(), ev);
  EXPECT_EQ(c.find(10), a);
  EXPECT_EQ(c.find(11), b);
  // With min_age 3 the tail (the unused prefetch, age 3) may go; the pinned slot never does.
  const int q = c.begin_prefetch(61, 3);
  EXPECT_EQ(q, p);
  EXPECT_EQ(c.prefetch_wasted(), 1u);  // 50 was prefetched and never used
  EXPECT_EQ(c.find(50), ExpertCache::kNone);
  c.complete(q);
  // Next tail: key 10 (age 2: 11 and 12 were used since); 11 is younger. min_age 2 allows 10.
  EXPECT_EQ(c.age(a), 2u);
  EXPECT_EQ(c.age(b), 1u);
  const int r = c.begin_prefetch(62, 2);
  EXPECT_EQ(r, a);
  c.complete(r);
  // 11 is now the tail, age 1 < 2: refused. The pinned slot (12) was never a candidate.
  EXPECT_EQ(c.begin_prefetch(63, 2), ExpertCache::kNone);
  EXPECT_EQ(c.find(12), pinned);
  EXPECT_EQ(c.pins(pinned), 1);
  // Even min_age 0 never reaches a pinned slot: with every other slot pinned, nothing.
  const int l61 = c.lookup(61), l62 = c.lookup(62), l11 = c.lookup(11);
  EXPECT_EQ(c.prefetched_slots(), 0);  // both used by the lookups
  EXPECT_EQ(c.begin_prefetch(64, 0), ExpertCache::kNone);
  for (int s : {l61, l62, l11, pinned}) c.release(s);
  EXPECT_EQ(c.pinned_slots(), 0);
}

TEST(ExpertCache, DropEmptiesASlotFirstToBeReused) {
  ExpertCache c = make_cache(2);
  const int a = fill(c, 1);
  const int b = fill(c, 2);
  c.drop(b);
  EXPECT_EQ(c.find(2), ExpertCache::kNone);
  EXPECT_EQ(c.state(b), ExpertCache::SlotState::kEmpty);
  const int s = c.begin_fill(3);  // the dropped slot, not the LRU one
  EXPECT_EQ(s, b);
  EXPECT_EQ(c.find(1), a);
  c.complete(s);
  c.release(s);
}

}  // namespace
}  // namespace strata::tiers
