// Unit tests for placement::PlacementPlan (validation, byte totals, printing) and default_plan()
// (budget fill, spread order, hottest-first, the minimum RAM error).
#include <gtest/gtest.h>

#include <map>

#include "error_of.h"
#include "io/check.h"
#include "placement/plan.h"
#include "plan_sizes.h"

namespace strata::placement {
namespace {

TEST(Plan, ValidatesCounts) {
  const ExpertSizes s = sizes_4x16();
  const std::string msg = error_of([&] {
    PlacementPlan(s, std::vector<Home>(63, Home::ssd()), 8 * s.slot_bytes, {1ull << 40, {}});
  });
  EXPECT_NE(msg.find("63 homes for 64 routed experts"), std::string::npos) << msg;
}

TEST(Plan, BudgetErrorNamesTheMinimum) {
  const ExpertSizes s = sizes_4x16();
  // Everything in RAM but only 32 MiB of budget.
  const std::string msg = error_of([&] {
    PlacementPlan(s, std::vector<Home>(64, Home::ram()), 0, {32 * kMiB, {}});
  });
  EXPECT_NE(msg.find("needs 64.0 MiB of RAM"), std::string::npos) << msg;
  EXPECT_NE(msg.find("minimum RAM budget for this model is " + format_bytes(min_ram_bytes(s))),
            std::string::npos)
      << msg;
}

TEST(Plan, SsdHomesNeedTheMinimumCache) {
  const ExpertSizes s = sizes_4x16();
  EXPECT_EQ(min_cache_slots(s), 8);
  const std::string msg = error_of([&] {
    PlacementPlan(s, std::vector<Home>(64, Home::ssd()), 7 * s.slot_bytes, {1ull << 40, {}});
  });
  EXPECT_NE(msg.find("holds 7 slot(s); the minimum is 8 slots"), std::string::npos) << msg;
  // All RAM needs no cache.
  EXPECT_NO_THROW(PlacementPlan(s, std::vector<Home>(64, Home::ram()), 0, {64 * kMiB, {}}));
}

TEST(Plan, VramHomesNeedABudget) {
  const ExpertSizes s = sizes_4x16();
  std::vector<Home> homes(64, Home::ram());
  homes[5] = Home::vram(1);
  EXPECT_NE(error_of([&] {
              PlacementPlan(s, homes, 0, {1ull << 40, {1ull << 30}});
            }).find("GPU 1 but only 1 GPU budget"),
            std::string::npos);
  EXPECT_NO_THROW(PlacementPlan(s, homes, 0, {1ull << 40, {1ull << 30, 1ull << 30}}));
  EXPECT_NE(error_of([&] {
              PlacementPlan(s, homes, 0, {1ull << 40, {0, kMiB / 2}});
            }).find("VRAM budget"),
            std::string::npos);
}

TEST(Plan, RejectsInconsistentSizes) {
  ExpertSizes s = sizes_4x16();
  s.slot_bytes = kMiB / 2;
  EXPECT_NE(error_of([&] {
              default_plan(s, {1ull << 40, {}});
            }).find("smaller than an expert"),
            std::string::npos);
  s = sizes_4x16();
  s.n_expert_used = 17;
  EXPECT_NE(error_of([&] { default_plan(s, {1ull << 40, {}}); }).find("top-17"), std::string::npos);
}

TEST(DefaultPlan, EverythingFitsInRam) {
  const ExpertSizes s = sizes_4x16();
  const PlacementPlan p = default_plan(s, {64 * kMiB, {}});
  EXPECT_EQ(p.count(HomeKind::kRam), 64);
  EXPECT_EQ(p.count(HomeKind::kSsd), 0);
  EXPECT_EQ(p.cache_bytes(), 0u);
  EXPECT_EQ(p.ram_bytes_used(), 64 * kMiB);
}

TEST(DefaultPlan, BelowTheMinimumNamesIt) {
  const ExpertSizes s = sizes_4x16();
  const uint64_t min = min_ram_bytes(s);
  EXPECT_EQ(min, arena_round(8 * s.slot_bytes));
  const std::string msg = error_of([&] { default_plan(s, {min - 1, {}}); });
  EXPECT_NE(msg.find("is below the minimum " + format_bytes(min)), std::string::npos) << msg;
  const PlacementPlan p = default_plan(s, {min, {}});
  EXPECT_EQ(p.count(HomeKind::kSsd), 64);
  EXPECT_EQ(p.cache_slots(), 8);
}

TEST(DefaultPlan, FillsEveryLayerEvenlyWithinBudget) {
  const ExpertSizes s = sizes_4x16();
  const uint64_t cache = arena_round(8 * s.slot_bytes);  // 10 MiB
  const Budgets b{cache + 20 * kMiB, {}};                // room for 20 experts
  const PlacementPlan p = default_plan(s, b);
  EXPECT_EQ(p.count(HomeKind::kRam), 20);
  EXPECT_EQ(p.count(HomeKind::kSsd), 44);
  EXPECT_LE(p.ram_bytes_used(), b.ram_bytes);
  for (int l = 0; l < 4; ++l) {
    int n_ram = 0;
    for (Home h : p.layer_homes(l)) n_ram += h.kind == HomeKind::kRam;
    EXPECT_EQ(n_ram, 5) << "layer " << l;
    // Spread order: expert ids ascending within a layer.
    for (int e = 0; e < 5; ++e) EXPECT_EQ(p.home(l, e).kind, HomeKind::kRam);
  }
  EXPECT_EQ(p.describe(),
            "plan: 64 experts: 0 VRAM (0 B), 20 RAM (20.0 MiB), 44 SSD (44.0 MiB); RAM cache "
            "8.4 MiB (8 slots of 1.0 MiB); RAM used 30.0 MiB of 30.0 MiB\n"
            "layer 0-3: 20 RAM (20.0 MiB), 44 SSD (44.0 MiB)\n");
}

TEST(DefaultPlan, HottestFirst) {
  const ExpertSizes s = sizes_4x16();
  std::vector<uint64_t> counts(64, 1);
  // Layer 2 experts 3, 7, 9 and layer 0 expert 15 are hot.
  counts[2 * 16 + 3] = 100;
  counts[2 * 16 + 7] = 90;
  counts[2 * 16 + 9] = 80;
  counts[0 * 16 + 15] = 70;
  const uint64_t cache = arena_round(8 * s.slot_bytes);
  const PlacementPlan p = default_plan(s, {cache + 4 * kMiB, {}}, {}, counts);
  EXPECT_EQ(p.count(HomeKind::kRam), 4);
  EXPECT_EQ(p.home(2, 3).kind, HomeKind::kRam);
  EXPECT_EQ(p.home(2, 7).kind, HomeKind::kRam);
  EXPECT_EQ(p.home(2, 9).kind, HomeKind::kRam);
  EXPECT_EQ(p.home(0, 15).kind, HomeKind::kRam);
  EXPECT_NE(error_of([&] {
              default_plan(s, {1ull << 40, {}}, {}, std::vector<uint64_t>(3));
            }).find("3 usage counts for 64"),
            std::string::npos);
}

TEST(DefaultPlan, NodeLocalAlternatesLayersAndChargesEachArena) {
  const ExpertSizes s = sizes_4x16();
  DefaultPolicy policy;
  policy.ram = RamPlacement::kLocal;
  policy.n_nodes = 2;
  const uint64_t cache = arena_round(8 * s.slot_bytes);
  const PlacementPlan p = default_plan(s, {cache + 20 * kMiB, {}}, policy);
  EXPECT_LE(p.ram_bytes_used(), cache + 20 * kMiB);
  std::map<int, int> per_node;
  for (int l = 0; l < 4; ++l)
    for (Home h : p.layer_homes(l))
      if (h.kind == HomeKind::kRam) {
        EXPECT_EQ(h.index, l % 2);
        ++per_node[h.index];
      }
  EXPECT_EQ(per_node[0] + per_node[1], 20);
  EXPECT_NE(p.describe().find("RAM@node1"), std::string::npos) << p.describe();
}

TEST(DefaultPlan, ArenasAreChargedInWholeHugePages) {
  // Odd-sized experts: three arenas' rounding must stay inside the budget.
  ExpertSizes s;
  s.n_expert = {10, 0, 7};  // layer 1 has no routed experts
  s.expert_bytes = {300000, 0, 700001};
  s.n_expert_used = 2;
  s.slot_bytes = 704512;
  for (uint64_t budget : {4 * kMiB, 5 * kMiB, 7 * kMiB + 12345, 9 * kMiB}) {
    DefaultPolicy policy;
    policy.ram = RamPlacement::kLocal;
    policy.n_nodes = 2;
    const PlacementPlan p = default_plan(s, {budget, {}}, policy);
    EXPECT_LE(p.ram_bytes_used(), budget);
    EXPECT_EQ(p.count(HomeKind::kRam) + p.count(HomeKind::kSsd), 17);
  }
  const PlacementPlan all = default_plan(s, {1ull << 30, {}});
  EXPECT_EQ(all.count(HomeKind::kRam), 17);
  EXPECT_NE(all.describe().find("layer 1: no routed experts"), std::string::npos) << all.describe();
}

TEST(Plan, FormatBytes) {
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(4096), "4.0 KiB");
  EXPECT_EQ(format_bytes(512 * kMiB), "512.0 MiB");
  EXPECT_EQ(format_bytes(12.1 * 1024 * kMiB), "12.1 GiB");
}

}  // namespace
}  // namespace strata::placement
