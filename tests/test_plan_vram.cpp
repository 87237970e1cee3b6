// Unit tests for VRAM homes in placement::default_plan / plan_placement (pure, no GPU): VRAM is
// filled first with the hottest experts, each device within its budget; with two devices the hot
// experts are balanced by expected routed rows (usage counts), not by bytes; layers the GPU cannot
// run get no VRAM homes; VRAM homes need no RAM cache (the cache is there only for SSD homes).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "io/check.h"
#include "placement/plan.h"
#include "placement/planner.h"
#include "plan_sizes.h"

namespace strata::placement {
namespace {

// Zipf-like skewed counts with a different hot set per layer.
std::vector<uint64_t> skewed_counts(const ExpertSizes& s) {
  std::vector<uint64_t> c;
  for (int l = 0; l < s.n_layer(); ++l)
    for (int e = 0; e < s.n_expert[l]; ++e) c.push_back(1000 / (1 + (e * 7 + l * 3) % 16));
  return c;
}

TEST(PlanVram, HottestExpertsGoToVramFirstWithinTheBudget) {
  const ExpertSizes s = sizes_4x16();
  const std::vector<uint64_t> counts = skewed_counts(s);
  Budgets b;
  b.ram_bytes = 40 * kMiB;
  b.vram_bytes = {10 * kMiB};
  const PlacementPlan p = plan_placement(s, b, DefaultPolicy{}, counts);
  EXPECT_EQ(p.count(HomeKind::kVram), 10);
  EXPECT_LE(p.bytes(HomeKind::kVram), 10 * kMiB);
  // Every VRAM expert is at least as hot as every non-VRAM one.
  uint64_t coldest_vram = UINT64_MAX, hottest_other = 0;
  for (int l = 0, i = 0; l < s.n_layer(); ++l)
    for (int e = 0; e < s.n_expert[l]; ++e, ++i) {
      if (p.home(l, e).kind == HomeKind::kVram)
        coldest_vram = std::min(coldest_vram, counts[i]);
      else
        hottest_other = std::max(hottest_other, counts[i]);
    }
  EXPECT_GE(coldest_vram, hottest_other);
  // The rest: RAM after the minimum cache (kept because experts live in VRAM), then SSD.
  EXPECT_GE(p.cache_slots(), min_cache_slots(s));
  EXPECT_GT(p.count(HomeKind::kRam), 0);
  EXPECT_GT(p.count(HomeKind::kSsd), 0);
  EXPECT_LE(p.ram_bytes_used(), b.ram_bytes);
}

TEST(PlanVram, VramHomesNeedNoRamCache) {
  const ExpertSizes s = sizes_4x16();
  Budgets b;
  b.ram_bytes = min_ram_bytes(s);
  b.vram_bytes = {64 * kMiB};
  // Everything in VRAM: no cache, no RAM used (even a zero RAM budget plans).
  const PlacementPlan p = default_plan(s, b);
  EXPECT_EQ(p.count(HomeKind::kVram), 64);
  EXPECT_EQ(p.cache_slots(), 0);
  EXPECT_EQ(p.ram_bytes_used(), 0u);
  const PlacementPlan z = default_plan(s, {0, {64 * kMiB}});
  EXPECT_EQ(z.count(HomeKind::kVram), 64);
  // Without VRAM the same RAM budget streams everything.
  const PlacementPlan q = default_plan(s, {b.ram_bytes, {}});
  EXPECT_EQ(q.count(HomeKind::kSsd), 64);
  // VRAM + RAM for the rest: no cache, every RAM byte for homes.
  const uint64_t rest = all_ram_bytes(s) / 2;
  const PlacementPlan r = default_plan(s, {rest + 2 * kMiB, {32 * kMiB}});
  EXPECT_EQ(r.count(HomeKind::kVram), 32);
  EXPECT_EQ(r.count(HomeKind::kRam), 32);
  EXPECT_EQ(r.count(HomeKind::kSsd), 0);
  EXPECT_EQ(r.cache_slots(), 0);
  // VRAM + SSD: the cache is there for the SSD homes.
  const PlacementPlan m = default_plan(s, {min_ram_bytes(s), {32 * kMiB}});
  EXPECT_EQ(m.count(HomeKind::kVram), 32);
  EXPECT_GT(m.count(HomeKind::kSsd), 0);
  EXPECT_EQ(m.cache_slots(), min_cache_slots(s));
}

TEST(PlanVram, TwoDevicesBalanceExpectedRowsNotBytes) {
  const ExpertSizes s = sizes_4x16();
  const std::vector<uint64_t> counts = skewed_counts(s);
  Budgets b;
  b.ram_bytes = 64 * kMiB;
  b.vram_bytes = {12 * kMiB, 12 * kMiB};
  const PlacementPlan p = plan_placement(s, b, DefaultPolicy{}, counts);
  ASSERT_EQ(p.count(HomeKind::kVram), 24);
  std::vector<double> rows(2, 0);
  std::vector<std::vector<double>> layer_rows(s.n_layer(), std::vector<double>(2, 0));
  uint64_t max_count = 0;
  for (int l = 0, i = 0; l < s.n_layer(); ++l)
    for (int e = 0; e < s.n_expert[l]; ++e, ++i) {
      const Home h = p.home(l, e);
      if (h.kind != HomeKind::kVram) continue;
      ASSERT_TRUE(h.index == 0 || h.index == 1);
      rows[h.index] += double(counts[i]);
      layer_rows[l][h.index] += double(counts[i]);
      max_count = std::max(max_count, counts[i]);
    }
  // Balanced within one expert's rows in every layer (each layer is one launch per device: its
  // rows are that launch's work), and within 10% overall.
  EXPECT_LE(std::abs(rows[0] - rows[1]), 0.1 * (rows[0] + rows[1])) << rows[0] << " vs " << rows[1];
  for (int l = 0; l < s.n_layer(); ++l)
    EXPECT_LE(std::abs(layer_rows[l][0] - layer_rows[l][1]), double(max_count)) << "layer " << l;
  // Both devices used, each within its budget.
  EXPECT_GT(rows[0], 0);
  EXPECT_GT(rows[1], 0);
}

TEST(PlanVram, UnequalBudgetsAreRespectedPerDevice) {
  const ExpertSizes s = sizes_4x16();
  Budgets b;
  b.ram_bytes = 64 * kMiB;
  b.vram_bytes = {3 * kMiB, 20 * kMiB};
  const PlacementPlan p = plan_placement(s, b, DefaultPolicy{}, skewed_counts(s));
  int64_t on[2] = {0, 0};
  for (int l = 0; l < s.n_layer(); ++l)
    for (Home h : p.layer_homes(l))
      if (h.kind == HomeKind::kVram) ++on[h.index];
  EXPECT_EQ(on[0], 3);
  EXPECT_EQ(on[1], 20);
}

TEST(PlanVram, LayersTheGpuCannotRunStayOff) {
  const ExpertSizes s = sizes_4x16();
  DefaultPolicy policy;
  policy.vram_layers = {1, 0, 1, 0};
  Budgets b;
  b.ram_bytes = 64 * kMiB;
  b.vram_bytes = {64 * kMiB};
  const PlacementPlan p = default_plan(s, b, policy);
  for (int l = 0; l < s.n_layer(); ++l)
    for (Home h : p.layer_homes(l))
      EXPECT_EQ(h.kind == HomeKind::kVram, policy.vram_layers[l] != 0) << "layer " << l;
  policy.vram_layers = {1, 1};
  EXPECT_THROW(default_plan(s, b, policy), Error);
}

TEST(PlanVram, WithoutVramBudgetsNothingChanges) {
  const ExpertSizes s = sizes_4x16();
  const PlacementPlan a = default_plan(s, {40 * kMiB, {}});
  const PlacementPlan b = default_plan(s, {40 * kMiB, {0}});
  EXPECT_EQ(a.count(HomeKind::kVram), 0);
  EXPECT_EQ(b.count(HomeKind::kVram), 0);
  for (int l = 0; l < s.n_layer(); ++l)
    EXPECT_TRUE(
        std::equal(a.layer_homes(l).begin(), a.layer_homes(l).end(), b.layer_homes(l).begin()));
  EXPECT_EQ(a.cache_bytes(), b.cache_bytes());
}

}  // namespace
}  // namespace strata::placement
