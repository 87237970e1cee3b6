// Unit tests for placement::plan_placement and predict (the cost model: bytes per tier over its
// bandwidth, tiers in parallel) and the machine profile file (round trip, bad keys, defaults).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "io/check.h"
#include "placement/machine_profile.h"
#include "placement/planner.h"

namespace strata::placement {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kMiB = 1ull << 20;

ExpertSizes sizes_2x8() {
  ExpertSizes s;
  s.n_expert = {8, 8};
  s.expert_bytes = {kMiB, kMiB};
  s.n_expert_used = 2;
  s.slot_bytes = kMiB;
  return s;
}

TEST(Planner, HottestExpertsGoToRam) {
  const ExpertSizes s = sizes_2x8();
  // Room for the minimum cache (4 slots) + 4 homes.
  const Budgets b{8 * kMiB, {}};
  std::vector<uint64_t> counts(16, 1);
  counts[3] = 100;
  counts[5] = 90;
  counts[8 + 6] = 80;
  counts[8 + 0] = 70;
  const PlacementPlan plan = plan_placement(s, b, {}, counts);
  EXPECT_EQ(plan.count(HomeKind::kRam), 4);
  EXPECT_EQ(plan.home(0, 3).kind, HomeKind::kRam);
  EXPECT_EQ(plan.home(0, 5).kind, HomeKind::kRam);
  EXPECT_EQ(plan.home(1, 6).kind, HomeKind::kRam);
  EXPECT_EQ(plan.home(1, 0).kind, HomeKind::kRam);
  EXPECT_EQ(plan.home(0, 0).kind, HomeKind::kSsd);
}

TEST(Planner, PredictionIsBytesOverBandwidthMaxOverTiers) {
  const ExpertSizes s = sizes_2x8();
  std::vector<uint64_t> counts(16, 0);
  counts[6] = 10;  // every token: layer 0 experts 6 and 7, layer 1 experts 6 and 7
  counts[7] = 10;
  counts[8 + 6] = 10;
  counts[8 + 7] = 10;
  const PlacementPlan plan = plan_placement(s, {6 * kMiB, {}}, {}, counts);  // 2 homes
  const std::vector<double> p = selection_probabilities(s, counts, 10);
  EXPECT_DOUBLE_EQ(p[6], 1.0);
  EXPECT_DOUBLE_EQ(p[0], 0.0);
  MachineProfile m;
  m.ram_read_gbps[1] = 10;
  m.ssd_read_gbps[1] = 1;
  m.measured = true;
  const Prediction r = predict(plan, p, m);
  const TierPrediction& ram = r.tier[size_t(HomeKind::kRam)];
  const TierPrediction& ssd = r.tier[size_t(HomeKind::kSsd)];
  EXPECT_EQ(ram.experts, 2);
  EXPECT_DOUBLE_EQ(ram.hit_share, 0.5);
  EXPECT_DOUBLE_EQ(ram.bytes_per_token, 2.0 * kMiB);
  EXPECT_NEAR(ram.ms_per_token, 2.0 * kMiB / 10e9 * 1e3, 1e-12);
  EXPECT_NEAR(ssd.ms_per_token, 2.0 * kMiB / 1e9 * 1e3, 1e-12);
  EXPECT_DOUBLE_EQ(r.ms_per_token, ssd.ms_per_token);
  // A usage-free plan puts cold experts in RAM: predicted slower on this usage.
  const PlacementPlan blind = plan_placement(s, {6 * kMiB, {}}, {}, {});
  EXPECT_GT(predict(blind, p, m).ms_per_token, r.ms_per_token);
  EXPECT_NE(r.table().find("predicted expert time per token"), std::string::npos);
}

TEST(Planner, UniformWithoutStats) {
  const ExpertSizes s = sizes_2x8();
  const std::vector<double> p = selection_probabilities(s, {}, 0);
  EXPECT_DOUBLE_EQ(p[0], 0.25);
  const PlacementPlan plan = plan_placement(s, {64 * kMiB, {}}, {}, {});
  const Prediction r = predict(plan, {}, default_machine_profile());
  EXPECT_DOUBLE_EQ(r.tier[size_t(HomeKind::kRam)].hit_share, 1.0);
  EXPECT_EQ(r.tier[size_t(HomeKind::kSsd)].experts, 0);
}

TEST(MachineProfile, RoundTripAndErrors) {
  const fs::path dir = fs::path(STRATA_BINARY_DIR) / "test_planner";
  fs::create_directories(dir);
  const std::string path = (dir / "machine.json").string();
  MachineProfile m;
  m.ram_read_gbps = {{1, 12.5}, {2, 20.0}};
  m.ssd_read_bytes = 3 << 20;
  m.ssd_read_gbps = {{1, 0.5}, {4, 1.5}, {16, 2.5}};
  save_machine_profile(m, path);
  const MachineProfile r = load_machine_profile(path);
  EXPECT_TRUE(r.measured);
  EXPECT_DOUBLE_EQ(r.ram_gbps(), 20.0);
  EXPECT_DOUBLE_EQ(r.ram_gbps_at(1), 12.5);
  EXPECT_DOUBLE_EQ(r.ram_gbps_at(2), 20.0);
  EXPECT_DOUBLE_EQ(r.ram_gbps_at(3), 20.0);  // the most threads measured below
  MachineProfile three;
  three.ram_read_gbps = {{2, 20.0}, {4, 30.0}};
  EXPECT_DOUBLE_EQ(three.ram_gbps_at(1), 20.0);  // below every probe: the fewest threads measured
  EXPECT_EQ(three.ram_probe_threads(1), 2);
  EXPECT_EQ(three.ram_probe_threads(3), 2);
  EXPECT_EQ(three.ram_probe_threads(8), 4);
  EXPECT_EQ(MachineProfile{}.ram_probe_threads(2), 0);
  EXPECT_DOUBLE_EQ(r.ssd_gbps(), 2.5);
  EXPECT_EQ(r.ssd_read_bytes, 3u << 20);
  EXPECT_TRUE(r.gpus.empty());

  // GPUs round trip; a profile written without them (a CPU build) loads with none (above).
  m.gpus.push_back({0, "NVIDIA H200", 55.1, 52.3, 3900.0});
  m.gpus.push_back({1, "NVIDIA H200", 54.9, 52.0, 3850.0});
  save_machine_profile(m, path);
  const MachineProfile g = load_machine_profile(path);
  ASSERT_EQ(g.gpus.size(), 2u);
  EXPECT_EQ(g.gpus[1].device, 1);
  EXPECT_EQ(g.gpus[0].name, "NVIDIA H200");
  EXPECT_DOUBLE_EQ(g.gpus[0].h2d_gbps, 55.1);
  EXPECT_DOUBLE_EQ(g.gpus[1].d2d_gbps, 3850.0);
  EXPECT_NE(g.describe().find("GPU 1"), std::string::npos) << g.describe();
  {
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("3850.0");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 6, "-1.0");  // a negative device copy bandwidth
    std::ofstream(path) << text;
  }
  try {
    load_machine_profile(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPU entry for device 1"), std::string::npos) << e.what();
  }

  std::ofstream(path) << "{\"version\": 1, \"ram_read_gbps\": {\"1\": 3}}";
  try {
    load_machine_profile(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ssd_read_bytes"), std::string::npos) << e.what();
  }
  const MachineProfile d = machine_profile_or_defaults((dir / "none.json").string());
  EXPECT_FALSE(d.measured);
  EXPECT_DOUBLE_EQ(d.ram_gbps(), 10.0);
  EXPECT_DOUBLE_EQ(d.ssd_gbps(), 1.0);
}

// The QD knob's auto value: the deepest queue within 5% of the best rate (this VM's virtual disk
// peaks at QD 4-8 and is 30% slower at 32), 0 without SSD measurements.
TEST(MachineProfile, BestQueueDepthIsTheDeepestNearTheBest) {
  MachineProfile m;
  EXPECT_EQ(m.best_queue_depth(), 0);
  m.ssd_read_gbps = {{1, 2.2}, {2, 2.7}, {4, 2.9}, {8, 3.04}, {16, 2.5}, {32, 2.1}};
  EXPECT_EQ(m.best_queue_depth(), 8);
  m.ssd_read_gbps = {{1, 1.85}, {2, 1.94}, {4, 1.87}, {8, 1.58}, {16, 1.61}, {32, 1.55}};
  EXPECT_EQ(m.best_queue_depth(), 4);  // 1.87 >= 0.95 x 1.94; 8 is not
  EXPECT_EQ(m.best_queue_depth(0.99), 2);
  m.ssd_read_gbps = {{1, 0.3}, {4, 0.8}, {16, 0.9}};
  EXPECT_EQ(m.best_queue_depth(), 16);
  EXPECT_EQ(default_machine_profile().best_queue_depth(), 0);
}

TEST(MachineProfile, MeasuresRam) {
  EXPECT_GT(measure_ram_read_gbps(1, 16 << 20, 2), 0.1);
  EXPECT_GT(measure_ram_read_gbps(2, 16 << 20, 1, 0.05), 0.1);  // passes until 50 ms are measured
}

// The probe PROF_PROBE_EVERY holds for a run: whole pages per thread, a rate per pass, and a
// buffer too small for one page per thread refused with a clear error.
TEST(MachineProfile, RamReadProbeKeepsItsBuffer) {
  RamReadProbe p(3, (8 << 20) + 100);
  EXPECT_EQ(p.threads(), 3);
  EXPECT_EQ(p.bytes(), uint64_t(((8 << 20) + 100) / 3 & ~4095) * 3);
  EXPECT_GT(p.pass(), 0.1);
  EXPECT_GT(p.pass(), 0.1);
  try {
    RamReadProbe tiny(2, 4096);
    ADD_FAILURE() << "a 4096-byte buffer over 2 threads was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadValue);
    EXPECT_NE(std::string(e.what()).find("under a page per thread"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::placement
