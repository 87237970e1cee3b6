// Tier tests for tiers::ExpertStore on a real file: every home combination and I/O mode hands out
// bytes identical to the file's slices; cache eviction and pins under a small cache; counters;
// injected I/O faults and a file truncated under the store.
#include <gtest/gtest.h>

#include <random>

#include "io/check.h"
#include "kernels/interleave.h"
#include "placement/plan.h"
#include "test_tiers_util.h"
#include "tiers/expert_store.h"

namespace strata::tiers {
namespace {

using placement::Budgets;
using placement::Home;
using placement::HomeKind;
using placement::PlacementPlan;
using testing::pread_range;
using testing::TempFile;

constexpr int kLayers = 4;
constexpr int kExperts = 8;
constexpr int kTopK = 2;

// 100 kB slices by default, a 777-byte tail.
struct Model : testing::ExpertFile {
  explicit Model(const std::string& name, uint64_t slice_bytes = 100000)
      : ExpertFile(name, kLayers, kExperts, kTopK, slice_bytes, 777, 11) {}
};

// Runs a routed-looking workload: per token and layer, prepare the chosen experts, get each,
// compare with the file, release.
void run_tokens(ExpertStore& store, const Model& m, int n_tokens, uint32_t seed,
                bool prepare = true) {
  std::mt19937 rng(seed);
  for (int t = 0; t < n_tokens; ++t) {
    for (int l = 0; l < kLayers; ++l) {
      std::vector<int> chosen;
      while (static_cast<int>(chosen.size()) < kTopK) {
        const int e = static_cast<int>(rng() % kExperts);
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
      }
      if (prepare) store.prepare(l, chosen);
      for (int e : chosen) m.expect_identical(store.get(l, e), l, e);
      store.release(l);
    }
  }
}

struct Case {
  const char* name;
  int extra_mib;  // RAM budget above the minimum, in MiB (-1 = all experts, no cache)
  bool uring;
  bool direct;
};

class StoreHomes : public ::testing::TestWithParam<Case> {};

TEST_P(StoreHomes, EveryExpertIsByteIdenticalToTheFile) {
  const Case c = GetParam();
  Model m(std::string("store_") + c.name + ".bin");
  const uint64_t min = placement::min_ram_bytes(m.sizes);
  Budgets b;
  if (c.extra_mib < 0)
    b.ram_bytes = placement::arena_round(m.sizes.total_bytes());
  else
    b.ram_bytes = min + (static_cast<uint64_t>(c.extra_mib) << 20);
  const PlacementPlan plan = placement::default_plan(m.sizes, b);
  if (c.extra_mib == 0) {
    EXPECT_EQ(plan.count(HomeKind::kRam), 0);
  }
  if (c.extra_mib < 0) {
    EXPECT_EQ(plan.count(HomeKind::kSsd), 0);
  }
  if (c.extra_mib > 0) {
    EXPECT_GT(plan.count(HomeKind::kRam), 8) << plan.describe();
    EXPECT_GT(plan.count(HomeKind::kSsd), 8) << plan.describe();
  }

  StoreOptions opt;
  opt.uring = c.uring;
  opt.direct = c.direct;
  opt.queue_depth = 4;
  std::vector<std::string> notices;
  StoreHooks hooks;
  hooks.notice = [&](const std::string& l) { notices.push_back(l); };
  uint64_t last_done = 0, last_total = 0;
  hooks.progress = [&](uint64_t done, uint64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
  };
  ExpertStore store(m.file->path(), m.extents, plan, opt, hooks);
  for (const auto& n : notices) EXPECT_EQ(n.find("io_uring"), std::string::npos) << n;
  EXPECT_EQ(store.uring(), c.uring);
  EXPECT_EQ(store.direct(), c.direct);
  EXPECT_LE(store.ram_bytes(), b.ram_bytes);
  EXPECT_EQ(store.ram_bytes(), plan.ram_bytes_used());
  EXPECT_EQ(last_done, last_total);
  EXPECT_EQ(store.counters().ram.loads, static_cast<uint64_t>(plan.count(HomeKind::kRam)));

  // Every expert once, in order, then a routed workload.
  for (int l = 0; l < kLayers; ++l) {
    for (int e = 0; e < kExperts; ++e) {
      const ExpertView v = store.get(l, e);
      EXPECT_EQ(v.home, plan.home(l, e));
      m.expect_identical(v, l, e);
      store.release(l);
    }
  }
  run_tokens(store, m, 20, 5);
  run_tokens(store, m, 5, 6, /*prepare=*/false);

  const StoreCounters& k = store.counters();
  EXPECT_EQ(k.ram.served + k.ssd.served,
            static_cast<uint64_t>(kLayers * kExperts + 25 * kLayers * kTopK));
  if (plan.count(HomeKind::kSsd) == 0) {
    EXPECT_EQ(k.ssd.load_bytes, 0u);
    EXPECT_EQ(k.cache_misses, 0u);
  } else {
    EXPECT_GT(k.ssd.load_bytes, 0u);
    EXPECT_GT(k.ssd.loads, 0u);
    EXPECT_EQ(k.reads, 3 * k.ssd.loads);
    EXPECT_EQ(k.cache_hits + k.cache_misses, k.ssd.served);
    EXPECT_GT(k.io_service_seconds, 0.0);
  }
  if (store.uring() && store.cache()->n_slots() > 0) {
    EXPECT_TRUE(store.fixed_buffers());
  }
  EXPECT_EQ(store.cache()->pinned_slots(), 0);
}

INSTANTIATE_TEST_SUITE_P(All, StoreHomes,
                         ::testing::Values(Case{"all_ram_uring_direct", -1, true, true},
                                           Case{"all_ram_pread_buffered", -1, false, false},
                                           Case{"half_uring_direct", 4, true, true},
                                           Case{"half_uring_buffered", 4, true, false},
                                           Case{"half_pread_direct", 4, false, true},
                                           Case{"half_pread_buffered", 4, false, false},
                                           Case{"min_uring_direct", 0, true, true},
                                           Case{"min_pread_direct", 0, false, true},
                                           Case{"min_uring_buffered", 0, true, false}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ExpertStore, MixedNodesAndExplicitHomes) {
  Model m("store_explicit.bin");
  // Checkerboard: odd experts on SSD, even ones in RAM, node 0 or interleaved.
  std::vector<Home> homes;
  for (int l = 0; l < kLayers; ++l)
    for (int e = 0; e < kExperts; ++e)
      homes.push_back(e % 2 ? Home::ssd() : (l % 2 ? Home::ram(0) : Home::ram()));
  const PlacementPlan plan(m.sizes, homes, 4 * m.sizes.slot_bytes, {64ull << 20, {}});
  StoreOptions opt;
  opt.numa = NumaMode::kLocal;
  ExpertStore store(m.file->path(), m.extents, plan, opt);
  EXPECT_EQ(store.ram_bytes(), plan.ram_bytes_used());  // two node arenas + the cache
  run_tokens(store, m, 30, 9);
  EXPECT_GT(store.counters().ram.served, 0u);
  EXPECT_GT(store.counters().ssd.served, 0u);
}

// Two layers of four Q4_0 experts (32 x 128 slices), experts 0 and 1 RAM-homed and repacked
// (kQ4_0x16), 2 and 3 on SSD, a cache of four slots.
struct RepackedStore {
  static constexpr int64_t kRows = 32, kCols = 128;  // Q4_0: 32 rows of 4 blocks = 2304 bytes
  static constexpr uint64_t kSlice = kRows * (kCols / 32) * 18;
  ExtentTable ext = extents();
  TempFile file;
  placement::ExpertSizes sizes = expert_sizes(ext, 2);
  PlacementPlan plan{sizes, homes(), 4 * sizes.slot_bytes, {64ull << 20, {}}};
  ExpertStore store{file.path(), ext, plan, options()};

  RepackedStore(const char* name, uint32_t seed) : file(name, end_offset(), seed) {}

  static ExtentTable extents() {
    ExtentTable e(2, std::vector<ExpertExtents>(4));
    uint64_t at = 4096;
    for (int l = 0; l < 2; ++l)
      for (int i = 0; i < 3; ++i)
        for (int x = 0; x < 4; ++x, at += kSlice) e[l][x][i] = {at, kSlice};
    return e;
  }
  static uint64_t end_offset() { return 4096 + 2 * 3 * 4 * kSlice + 100; }
  static std::vector<Home> homes() {
    std::vector<Home> h;
    for (int l = 0; l < 2; ++l)
      for (int e = 0; e < 4; ++e) h.push_back(e < 2 ? Home::ram() : Home::ssd());
    return h;
  }
  static StoreOptions options() {
    StoreOptions opt;
    opt.ram_layouts.assign(2, {});
    for (auto& layer : opt.ram_layouts)
      for (auto& sl : layer) sl = {kernels::WeightLayout::kQ4_0x16, kRows, kCols};
    return opt;
  }

  // Each slice as the store must hand it out: the file's bytes, interleaved for a RAM home.
  void expect_slices(int l, int e, bool ram) {
    store.prepare(l, std::vector<int>{e});
    const ExpertView v = store.get(l, e);
    EXPECT_EQ(v.home.kind, ram ? HomeKind::kRam : HomeKind::kSsd);
    for (int i = 0; i < 3; ++i) {
      std::vector<std::byte> want = pread_range(file.path(), ext[l][e][i].offset, kSlice);
      if (ram) {
        std::vector<std::byte> packed(want.size());
        kernels::interleave(kernels::WeightLayout::kQ4_0x16, want.data(), packed.data(), kRows,
                            kCols);
        want = packed;
      }
      EXPECT_EQ(v.layout[i], ram ? kernels::WeightLayout::kQ4_0x16 : kernels::WeightLayout::kRows);
      EXPECT_EQ(std::memcmp(v.slice[i], want.data(), kSlice), 0)
          << "layer " << l << " expert " << e << " slice " << i;
    }
    store.release(l);
  }
};

// REPACK: RAM homes hold their slices interleaved (ram_layouts), cache slots the file's layout;
// swap_homes interleaves what it moves in and forgets what it moves out.
TEST(ExpertStore, RamHomesAreInterleavedPerRamLayouts) {
  RepackedStore r("store_repack.bin", 5);
  constexpr uint64_t kSlice = RepackedStore::kSlice;
  EXPECT_EQ(r.store.repacked_bytes(), 2u * 2u * 3u * kSlice);
  for (int l = 0; l < 2; ++l)
    for (int e = 0; e < 4; ++e) r.expect_slices(l, e, e < 2);
  // REPIN: (1, 3), cached now, takes (1, 0)'s RAM home.
  ASSERT_TRUE(r.store.swap_homes(1, 3, 1, 0));
  EXPECT_EQ(r.store.repacked_bytes(), 2u * 2u * 3u * kSlice);
  r.expect_slices(1, 3, true);
  r.expect_slices(1, 0, false);
}

// PROMPT_PLACE: promote_homes reads SSD experts not in the cache (and takes cached ones as they
// are), then moves them into RAM homes as swap_homes does (interleaved); counted apart from expert
// uses and from REPIN.
TEST(ExpertStore, PromoteHomesReadsAndMovesIntoRamHomes) {
  RepackedStore r("store_promote.bin", 7);
  constexpr uint64_t kSlice = RepackedStore::kSlice;
  ExpertStore& store = r.store;
  store.prepare(0, std::vector<int>{2});  // expert 2 cached; expert 3 is read by promote_homes
  store.release(0);
  const StoreCounters before = store.counters();
  const std::pair<int, int> pairs[] = {{3, 0}, {2, 1}};
  EXPECT_EQ(store.promote_homes(0, pairs), 2);
  const StoreCounters& after = store.counters();
  EXPECT_EQ(after.place_moves, 2u);
  EXPECT_EQ(after.place_passes, 1u);
  EXPECT_GE(after.place_read_bytes, 3u * kSlice);  // expert 3's three slices (4 KiB supersets)
  EXPECT_LE(after.place_read_bytes, 3u * (kSlice + 2 * 4096u));
  EXPECT_EQ(after.repin_moves, 0u);
  EXPECT_EQ(after.cache_misses, before.cache_misses);
  EXPECT_EQ(after.cache_hits, before.cache_hits);
  EXPECT_EQ(after.ssd.served, before.ssd.served);
  EXPECT_EQ(store.repacked_bytes(), 2u * 2u * 3u * kSlice);  // still two RAM homes per layer
  for (int e = 0; e < 4; ++e) r.expect_slices(0, e, e >= 2);
  // An empty pass moves nothing and is counted.
  EXPECT_EQ(store.promote_homes(1, {}), 0);
  EXPECT_EQ(store.counters().place_passes, 2u);
}

TEST(ExpertStore, SmallCacheEvictsLeastRecentlyUsedAndCountsHits) {
  Model m("store_lru.bin");
  const PlacementPlan plan(m.sizes, std::vector<Home>(kLayers * kExperts, Home::ssd()),
                           4 * m.sizes.slot_bytes, {64ull << 20, {}});
  ExpertStore store(m.file->path(), m.extents, plan);
  ASSERT_EQ(store.cache()->n_slots(), 4);
  const std::vector<int> a{0, 1}, b{2, 3}, c{4, 5};
  // Layer 0: {0,1}, {2,3} fill the four slots; {0,1} again hits.
  for (const auto* set : {&a, &b, &a}) {
    store.prepare(0, *set);
    for (int e : *set) m.expect_identical(store.get(0, e), 0, e);
    store.release(0);
  }
  EXPECT_EQ(store.counters().cache_misses, 4u);
  EXPECT_EQ(store.counters().cache_hits, 2u);
  // {4,5} evicts the least recently used pair, {2,3}; {0,1} still hit.
  store.prepare(0, c);
  store.release(0);
  EXPECT_EQ(store.counters().evictions, 2u);
  store.prepare(0, a);
  store.release(0);
  EXPECT_EQ(store.counters().cache_hits, 4u);
  store.prepare(0, b);
  for (int e : b) m.expect_identical(store.get(0, e), 0, e);
  store.release(0);
  EXPECT_EQ(store.counters().cache_misses, 8u);
}

TEST(ExpertStore, PartialReleaseKeepsTheOtherGroupPinned) {
  // A prefill chunk's SSD experts in groups of two over a four-slot cache: group g+1 is prepared
  // while group g is pinned, then only group g is released.
  Model m("store_partial.bin");
  const PlacementPlan plan(m.sizes, std::vector<Home>(kLayers * kExperts, Home::ssd()),
                           4 * m.sizes.slot_bytes, {64ull << 20, {}});
  ExpertStore store(m.file->path(), m.extents, plan);
  const std::vector<std::vector<int>> groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  store.prepare(1, groups[0]);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int e : groups[g]) m.expect_identical(store.get(1, e), 1, e);
    if (g + 1 < groups.size()) store.prepare(1, groups[g + 1]);
    EXPECT_EQ(store.cache()->pinned_slots(), g + 1 < groups.size() ? 4 : 2);
    store.release(1, groups[g]);
    EXPECT_EQ(store.cache()->pinned_slots(), g + 1 < groups.size() ? 2 : 0);
  }
  store.release(1);
  EXPECT_EQ(store.cache()->pinned_slots(), 0);
  EXPECT_EQ(store.counters().cache_misses, 8u);
  EXPECT_EQ(store.counters().cache_hits, 0u);
}

TEST(ExpertStore, PinnedSlotsSurviveAndAFullCacheIsAnError) {
  Model m("store_pins.bin");
  const PlacementPlan plan(m.sizes, std::vector<Home>(kLayers * kExperts, Home::ssd()),
                           4 * m.sizes.slot_bytes, {64ull << 20, {}});
  ExpertStore store(m.file->path(), m.extents, plan);
  // Layer 0 computes two experts while layer 1's two are prefetched: all four slots pinned.
  const std::vector<int> l0{1, 2}, l1{3, 4};
  store.prepare(0, l0);
  store.prepare(1, l1);
  const ExpertView v0 = store.get(0, 1);
  // A prefetch that finds no slot is skipped, not an error, and evicts nothing pinned.
  const std::vector<int> l2{5};
  store.prepare(2, l2);
  EXPECT_EQ(store.cache()->pinned_slots(), 4);
  const std::string msg = error_of([&] { store.get(2, 5); });
  EXPECT_NE(msg.find("RAM cache full: all 4 slots are pinned"), std::string::npos) << msg;
  m.expect_identical(v0, 0, 1);  // still intact
  m.expect_identical(store.get(1, 4), 1, 4);
  store.release(0);
  m.expect_identical(store.get(2, 5), 2, 5);  // now a slot is free
  store.release(1);
  store.release(2);
  EXPECT_EQ(store.cache()->pinned_slots(), 0);
}

TEST(ExpertStore, UnusedPrefetchIsReleasedSafely) {
  Model m("store_prefetch.bin");
  const PlacementPlan plan(m.sizes, std::vector<Home>(kLayers * kExperts, Home::ssd()),
                           4 * m.sizes.slot_bytes, {64ull << 20, {}});
  ExpertStore store(m.file->path(), m.extents, plan);
  for (int round = 0; round < 10; ++round) {
    const std::vector<int> guess{round % kExperts, (round + 3) % kExperts};
    store.prepare(round % kLayers, guess);
    store.release(round % kLayers);  // mispredicted: never read
  }
  run_tokens(store, m, 10, 1);
}

TEST(ExpertStore, RejectsMismatchedInputs) {
  Model m("store_bad.bin");
  const PlacementPlan plan = placement::default_plan(m.sizes, {64ull << 20, {}});
  ExtentTable bad = m.extents;
  bad[2][5][kDown].offset = m.file->size() - 100;
  std::string msg = error_of([&] { ExpertStore(m.file->path(), bad, plan); });
  EXPECT_NE(msg.find(m.file->path() + ": at byte " + std::to_string(m.file->size() - 100) +
                     ": layer 2 expert 5 down slice"),
            std::string::npos)
      << msg;
  bad = m.extents;
  bad.pop_back();
  msg = error_of([&] { ExpertStore(m.file->path(), bad, plan); });
  EXPECT_NE(msg.find("3 layers of extents, 4 in the plan"), std::string::npos) << msg;
  // A plan sized for smaller experts.
  placement::ExpertSizes small = m.sizes;
  small.expert_bytes[1] -= 64;
  const PlacementPlan small_plan = placement::default_plan(small, {64ull << 20, {}});
  msg = error_of([&] { ExpertStore(m.file->path(), m.extents, small_plan); });
  EXPECT_NE(msg.find("layer 1 experts take"), std::string::npos) << msg;
  // VRAM homes are the GPU lane's: accepted without a cache, never loaded or served.
  std::vector<Home> homes(kLayers * kExperts, Home::ram());
  homes[9] = Home::vram(0);
  const PlacementPlan vram(m.sizes, homes, 0, {64ull << 20, {1ull << 30}});
  ExpertStore store(m.file->path(), m.extents, vram);
  EXPECT_EQ(store.counters().ram.loads, uint64_t{kLayers * kExperts - 1});
  EXPECT_EQ(store.home(1, 1).kind, HomeKind::kVram);
  EXPECT_NO_THROW(store.get(1, 0));
  store.release(1);
}

class StoreFaults : public ::testing::TestWithParam<bool> {};

TEST_P(StoreFaults, ReadErrorNamesFileAndOffset) {
  Model m("store_eio.bin");
  const PlacementPlan plan(m.sizes, std::vector<Home>(kLayers * kExperts, Home::ssd()),
                           4 * m.sizes.slot_bytes, {64ull << 20, {}});
  StoreOptions opt;
  opt.uring = GetParam();
  opt.faults.fail_read = 4;  // the second expert's "up" slice
  ExpertStore store(m.file->path(), m.extents, plan, opt);
  const std::vector<int> chosen{6, 7};
  store.prepare(3, chosen);
  const AlignedRange up = aligned_superset(m.extents[3][7][kUp].offset, m.extents[3][7][kUp].bytes);
  const std::string msg = error_of([&] {
    store.get(3, 6);
    store.get(3, 7);
  });
  EXPECT_NE(msg.find(m.file->path() + ": read of " + std::to_string(up.bytes) +
                     " bytes at offset " + std::to_string(up.offset) + " failed"),
            std::string::npos)
      << msg;
}

TEST_P(StoreFaults, ShortReadsAreCompleted) {
  Model m("store_short.bin");
  const PlacementPlan plan(m.sizes, std::vector<Home>(kLayers * kExperts, Home::ssd()),
                           4 * m.sizes.slot_bytes, {64ull << 20, {}});
  StoreOptions opt;
  opt.uring = GetParam();
  opt.faults.short_read = 7;
  ExpertStore store(m.file->path(), m.extents, plan, opt);
  run_tokens(store, m, 5, 2);
}

TEST_P(StoreFaults, RamLoadErrorFailsConstruction) {
  Model m("store_load_eio.bin");
  const PlacementPlan plan = placement::default_plan(m.sizes, {64ull << 20, {}});
  StoreOptions opt;
  opt.uring = GetParam();
  opt.faults.fail_read = 10;
  const std::string msg = error_of([&] { ExpertStore(m.file->path(), m.extents, plan, opt); });
  EXPECT_NE(msg.find(m.file->path() + ": read of"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Input/output error"), std::string::npos) << msg;
}

TEST_P(StoreFaults, FileTruncatedWhileRunning) {
  Model m("store_truncated.bin");
  const PlacementPlan plan(m.sizes, std::vector<Home>(kLayers * kExperts, Home::ssd()),
                           4 * m.sizes.slot_bytes, {64ull << 20, {}});
  StoreOptions opt;
  opt.uring = GetParam();
  ExpertStore store(m.file->path(), m.extents, plan, opt);
  run_tokens(store, m, 2, 3);
  ASSERT_EQ(truncate(m.file->path().c_str(), 1 << 20), 0);
  const std::string msg = error_of([&] { run_tokens(store, m, 50, 4); });
  EXPECT_NE(msg.find(m.file->path() + ": model file changed while running"), std::string::npos)
      << msg;
}

TEST_P(StoreFaults, UringSetupFailureSaysSoOnce) {
  Model m("store_nouring.bin");
  const PlacementPlan plan = placement::default_plan(
      m.sizes, {placement::min_ram_bytes(m.sizes) + 8 * m.sizes.expert_bytes[0], {}});
  StoreOptions opt;
  opt.uring = GetParam();
  opt.faults.fail_uring_setup = true;
  std::vector<std::string> notices;
  StoreHooks hooks;
  hooks.notice = [&](const std::string& l) {
    if (l.find("NUMA") == std::string::npos) notices.push_back(l);
  };
  ExpertStore store(m.file->path(), m.extents, plan, opt, hooks);
  run_tokens(store, m, 10, 8);
  EXPECT_FALSE(store.uring());
  EXPECT_EQ(notices.size(), GetParam() ? 1u : 0u);
}

INSTANTIATE_TEST_SUITE_P(All, StoreFaults, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "uring" : "pread"; });

}  // namespace
}  // namespace strata::tiers
