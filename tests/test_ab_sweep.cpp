// `strata sweep` and `strata ab` end to end on a `strata synth --preset tiny` model: the sweep's
// CSV has the documented columns, sane values and a hit rate that never falls as RAM_GB rises; ab
// of THREADS=1 vs 2 reports byte-identical logits and a bootstrap interval; bad arms are refused;
// a replay's PROF JSON has the new keys and time shares summing to ~100%.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/expert_source.h"
#include "engine/model.h"
#include "placement/plan.h"
#include "tier_test_util.h"

namespace strata::tier_test {
namespace {

class AbSweep : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(kStrata)) return;
    dir_ = new ScratchDir("ab_sweep");
    model_ = *dir_ / "tiny.gguf";
    const Result r = run_strata(
        dir_->path(), fmt::format("synth --preset tiny --out '{}' --threads 2", model_.string()));
    ASSERT_EQ(r.rc, 0) << r.err;
    const engine::Model m = engine::Model::load(model_.string());
    write_streams(*dir_ / "tokens.txt", m.config().n_vocab, {24, 16});
    const placement::ExpertSizes sizes = engine::expert_sizes(m);
    min_ = placement::min_ram_bytes(sizes);
    all_ = placement::all_ram_bytes(sizes);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
  }
  static inline ScratchDir* dir_ = nullptr;
  static inline fs::path model_;
  static inline uint64_t min_ = 0, all_ = 0;
  std::string tokens() const { return (*dir_ / "tokens.txt").string(); }
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

TEST_F(AbSweep, SweepCsvIsSaneAndHitRateRisesWithRam) {
  const fs::path csv = *dir_ / "sweep.csv";
  const uint64_t mid = (min_ + all_) / 2;
  const Result r = run_strata(
      dir_->path(), fmt::format("sweep -m '{}' --tokens '{}' --ram-gb {},{},{} --knobs THREADS=2 "
                                "--csv '{}'",
                                model_.string(), tokens(), ram_gb(all_), ram_gb(min_), ram_gb(mid),
                                csv.string()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("RAM_GB"), std::string::npos) << r.out;
  std::istringstream in(slurp(csv));
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line, "ram_gb,hit_rate,ssd_gb_per_token,decode_tok_s,verdict");
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) rows.push_back(split(line, ','));
  ASSERT_EQ(rows.size(), 3u) << slurp(csv);
  double last_ram = -1, last_hit = -1, last_ssd = 1e30;
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 5u) << line;
    const double ram = std::stod(row[0]), hit = std::stod(row[1]), ssd = std::stod(row[2]),
                 tok_s = std::stod(row[3]);
    EXPECT_GT(ram, last_ram);  // sorted ascending
    EXPECT_GE(hit, 0.0);
    EXPECT_LE(hit, 1.0);
    EXPECT_GE(hit, last_hit) << "hit rate fell as RAM_GB rose to " << ram;
    EXPECT_LE(ssd, last_ssd) << "SSD bytes per token rose as RAM_GB rose to " << ram;
    EXPECT_GT(tok_s, 0.0);
    EXPECT_FALSE(row[4].empty());
    last_ram = ram;
    last_hit = hit;
    last_ssd = ssd;
  }
  EXPECT_LT(std::stod(rows[0][1]), 1.0);  // the minimum streams experts from SSD
  EXPECT_GT(std::stod(rows[0][2]), 0.0);
  EXPECT_DOUBLE_EQ(std::stod(rows[2][1]), 1.0);  // everything in RAM
  EXPECT_DOUBLE_EQ(std::stod(rows[2][2]), 0.0);
}

TEST_F(AbSweep, SweepWithoutGnuplotStillWritesCsv) {
  const fs::path png = *dir_ / "plot.png";
  const Result r = run_strata(dir_->path(),
                              fmt::format("sweep -m '{}' --tokens '{}' --ram-gb {} --plot '{}'",
                                          model_.string(), tokens(), ram_gb(all_), png.string()),
                              "PATH=/nonexistent");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("gnuplot is not installed"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(*dir_ / "plot.csv"));
}

TEST_F(AbSweep, AbThreadsOneVsTwoIsIdenticalWithAnInterval) {
  const fs::path json = *dir_ / "ab.json";
  const std::string ram = ram_gb(min_);
  const Result r =
      run_strata(dir_->path(), fmt::format("ab -m '{}' --tokens '{}' --a 'THREADS=1 RAM_GB={}' --b "
                                           "'THREADS=2 RAM_GB={}' --reps 2 --json '{}'",
                                           model_.string(), tokens(), ram, ram, json.string()));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("byte-identical"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("95% bootstrap CI"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  EXPECT_TRUE(j["logits_identical"].get<bool>());
  EXPECT_EQ(j["a"]["tok_s"].size(), 2u);
  EXPECT_EQ(j["b"]["tok_s"].size(), 2u);
  EXPECT_LE(j["diff_tok_s"]["ci95_lo"].get<double>(), j["diff_tok_s"]["ci95_hi"].get<double>());
  EXPECT_GT(j["a"]["median_tok_s"].get<double>(), 0.0);
  EXPECT_EQ(j["knobs_differ"], nlohmann::json::array({"THREADS"}));
  EXPECT_TRUE(j["numerics_knobs_differ"].empty());
}

TEST_F(AbSweep, AbRefusesBadArms) {
  for (const char* arm : {"NOPE=1", "PROF=1", "THREADS"}) {
    const Result r =
        run_strata(dir_->path(), fmt::format("ab -m '{}' --tokens '{}' --a '{}' --b THREADS=2",
                                             model_.string(), tokens(), arm));
    EXPECT_NE(r.rc, 0) << arm;
    EXPECT_NE(r.err.find("--a"), std::string::npos) << r.err;
  }
}

TEST_F(AbSweep, ReplayProfJsonHasTheReportKeys) {
  const fs::path json = *dir_ / "prof.json";
  const Result r = run_strata(dir_->path(),
                              fmt::format("replay -m '{}' --tokens '{}' -t 2 --ram-gb {} "
                                          "--prof-json '{}'",
                                          model_.string(), tokens(), ram_gb(min_), json.string()),
                              "PROF=1");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* s : {"prof: machine:", "prof: time:", "prof: verdict:", "prof: hit rates"})
    EXPECT_NE(r.err.find(s), std::string::npos) << s << "\n" << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  for (const char* k : {"time_shares", "hit_rates", "verdict", "machine", "ssd_gb_per_token",
                        "decode_latency_ms", "tiers", "cache", "io", "plan"})
    EXPECT_TRUE(j.contains(k)) << k;
  double s = 0;
  for (const auto& [k, v] : j["time_shares"].items()) s += v.get<double>();
  EXPECT_NEAR(s, 1.0, 1e-6);
  EXPECT_GT(
      j["time_shares"]["expert_ram"].get<double>() + j["time_shares"]["expert_ssd"].get<double>(),
      0.0);
  EXPECT_GT(j["hit_rates"]["expert_uses"].get<uint64_t>(), 0u);
}

}  // namespace
}  // namespace strata::tier_test
