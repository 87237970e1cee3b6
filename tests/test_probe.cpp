// `strata probe` as a user runs it: RAM read bandwidth per thread count and SSD O_DIRECT reads at
// queue depths 1..32 on a real temp file, saved as a machine profile that loads back, with the QD
// knob's auto value taken from it; a directory it cannot write is a one-line error.
#include <gtest/gtest.h>

#include "placement/machine_profile.h"
#include "tier_test_util.h"

namespace strata::tier_test {
namespace {

TEST(Probe, WritesAProfileWithEveryQueueDepth) {
  ScratchDir dir("probe");
  const fs::path profile = dir / "machine.json";
  const Result r =
      run_strata(dir.path(), fmt::format("probe -o '{}' --dir '{}' --ssd-mib 48 --ram-mib 16 "
                                         "--read-kib 128",
                                         profile.string(), dir.path().string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  const placement::MachineProfile p = placement::load_machine_profile(profile.string());
  EXPECT_TRUE(p.measured);
  EXPECT_EQ(p.ssd_read_bytes, 128u << 10);
  for (int qd : {1, 2, 4, 8, 16, 32}) {
    ASSERT_EQ(p.ssd_read_gbps.count(qd), 1u) << "QD " << qd;
    EXPECT_GT(p.ssd_read_gbps.at(qd), 0.0) << "QD " << qd;
  }
  EXPECT_EQ(p.ssd_read_gbps.size(), 6u);
  EXPECT_GT(p.best_queue_depth(), 0);
  EXPECT_NE(r.out.find(fmt::format("QD {} is the deepest within 5%", p.best_queue_depth())),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(p.ram_read_gbps.empty());
  // The temp file is gone: only the profile and the captured output remain.
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().extension() == ".tmp", false) << e.path();
}

// With -m and no --dir the model file itself is read (read-only) at its expert read size.
TEST(Probe, ReadsTheModelFileItself) {
  const fs::path model = kFixtures / "tiny-qwen3moe" / "tiny-qwen3moe-Q8_0.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << "fixture missing: " << model;
  ScratchDir dir("probe_model");
  const auto before = fs::last_write_time(model);
  const fs::path profile = dir / "machine.json";
  const Result r = run_strata(dir.path(), fmt::format("probe -o '{}' -m '{}' --ram-mib 16",
                                                      profile.string(), model.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("(read-only)"), std::string::npos) << r.out;
  const placement::MachineProfile p = placement::load_machine_profile(profile.string());
  EXPECT_EQ(p.ssd_read_bytes % 4096, 0u);
  EXPECT_GT(p.ssd_read_bytes, 0u);
  EXPECT_EQ(p.ssd_read_gbps.size(), 6u);
  EXPECT_EQ(fs::last_write_time(model), before);
}

TEST(Probe, UnwritableDirectoryIsAOneLineError) {
  ScratchDir dir("probe_bad");
  const Result r = run_strata(dir.path(), fmt::format("probe -o '{}' --dir /proc/strata-nope "
                                                      "--ssd-mib 8 --ram-mib 8",
                                                      (dir / "m.json").string()));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("strata-nope"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "m.json"));
}

}  // namespace
}  // namespace strata::tier_test
