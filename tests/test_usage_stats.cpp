// Unit tests for placement::UsageStats: the text round trip, merge, halve, subtract, the refusal of
// another model's file (--force relaxes identity, never shape), atomic save, and one-line file:line
// errors for malformed input (a small mutation fuzz: no crash, only typed errors).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "io/check.h"
#include "placement/usage_stats.h"

namespace strata::placement {
namespace {

namespace fs = std::filesystem;

UsageStats sample(uint64_t fingerprint = 0x1234, std::string name = "tiny-a") {
  UsageStats s({std::move(name), fingerprint}, {4, 0, 4});
  s.record(0, 1, 3, true);
  s.record(0, 1, 2, false);
  s.record(2, 3, 7, true);
  s.add_tokens(5, true);
  s.add_tokens(2, false);
  return s;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(UsageStats, RoundTrip) {
  const UsageStats s = sample();
  const UsageStats r = UsageStats::parse(s.to_text(), "x.stats");
  EXPECT_EQ(r.identity().name, "tiny-a");
  EXPECT_EQ(r.identity().fingerprint, 0x1234u);
  EXPECT_EQ(r.n_expert(), (std::vector<int>{4, 0, 4}));
  EXPECT_EQ(r.decode_count(0, 1), 3u);
  EXPECT_EQ(r.prefill_count(0, 1), 2u);
  EXPECT_EQ(r.decode_count(2, 3), 7u);
  EXPECT_EQ(r.decode_tokens(), 5u);
  EXPECT_EQ(r.prefill_tokens(), 2u);
  EXPECT_EQ(r.to_text(), s.to_text());
  EXPECT_EQ(r.first_moe_layer(), 0);
  const std::vector<uint64_t> c = r.counts();
  ASSERT_EQ(c.size(), 8u);
  EXPECT_EQ(c[1], 5u);
  EXPECT_EQ(c[7], 7u);
}

TEST(UsageStats, Merge) {
  UsageStats a = sample();
  a.merge(sample());
  EXPECT_EQ(a.decode_count(0, 1), 6u);
  EXPECT_EQ(a.prefill_count(0, 1), 4u);
  EXPECT_EQ(a.tokens(), 14u);
}

TEST(UsageStats, HalveRoundsEveryCountDown) {
  UsageStats a = sample();
  a.halve();
  EXPECT_EQ(a.decode_count(0, 1), 1u);   // 3 / 2
  EXPECT_EQ(a.prefill_count(0, 1), 1u);  // 2 / 2
  EXPECT_EQ(a.decode_count(2, 3), 3u);   // 7 / 2
  EXPECT_EQ(a.decode_tokens(), 2u);
  EXPECT_EQ(a.prefill_tokens(), 1u);
  EXPECT_EQ(a.identity().fingerprint, 0x1234u);
}

TEST(UsageStats, SubtractLeavesWhatWasCountedSince) {
  const UsageStats earlier = sample();
  UsageStats now = sample();
  now.record(0, 1, 4, true);
  now.record(2, 0, 1, false);
  now.add_tokens(3, true);
  now.subtract(earlier);
  EXPECT_EQ(now.decode_count(0, 1), 4u);
  EXPECT_EQ(now.prefill_count(0, 1), 0u);
  EXPECT_EQ(now.prefill_count(2, 0), 1u);
  EXPECT_EQ(now.decode_count(2, 3), 0u);
  EXPECT_EQ(now.decode_tokens(), 3u);
  EXPECT_EQ(now.prefill_tokens(), 0u);
}

TEST(UsageStats, RefusesAnotherModelNamingBoth) {
  UsageStats a = sample();
  const UsageStats other = sample(0x9999, "tiny-b");
  const std::string msg = error_of([&] { a.merge(other); });
  EXPECT_NE(msg.find("tiny-a"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tiny-b"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--force"), std::string::npos) << msg;
  a.merge(other, /*force=*/true);  // identity relaxed
  EXPECT_EQ(a.decode_count(2, 3), 14u);
}

TEST(UsageStats, ForceNeverRelaxesTheShape) {
  UsageStats a = sample();
  UsageStats b({"tiny-c", 0x1234}, {4, 0, 8});
  const std::string msg = error_of([&] { a.merge(b, /*force=*/true); });
  EXPECT_NE(msg.find("tiny-c"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shapes must match"), std::string::npos) << msg;
}

TEST(UsageStats, SaveIsAtomicAndLoads) {
  const fs::path dir = fs::path(STRATA_BINARY_DIR) / "test_usage_stats";
  fs::create_directories(dir);
  const std::string path = (dir / "a.stats").string();
  sample().save(path);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(UsageStats::load(path).to_text(), sample().to_text());
  const std::string msg = error_of([&] { sample().save((dir / "no/such/dir/x").string()); });
  EXPECT_NE(msg.find("cannot create"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { UsageStats::load((dir / "missing").string()); }).find("missing"),
            std::string::npos);
}

TEST(UsageStats, MalformedLinesNameFileAndLine) {
  const std::string good = sample().to_text();
  const auto err = [](const std::string& text) {
    return error_of([&] { UsageStats::parse(text, "f.stats"); });
  };
  EXPECT_EQ(err(""), "f.stats:0: truncated: expected 'strata-usage'");
  EXPECT_NE(err("strata-usage 2\n").find("f.stats:1: unsupported version"), std::string::npos);
  std::string t = good + "0 9 1 1\n";
  EXPECT_NE(err(t).find("expert 9 out of range"), std::string::npos) << err(t);
  t = good + "7 0 1 1\n";
  EXPECT_NE(err(t).find("layer 7 out of range"), std::string::npos) << err(t);
  t = good + "0 1 1 1\n";
  EXPECT_NE(err(t).find("duplicate line"), std::string::npos) << err(t);
  t = good + "0 2 -1 1\n";
  EXPECT_NE(err(t).find("'-1' is not"), std::string::npos) << err(t);
  t = good + "0 2 1\n";
  EXPECT_NE(err(t).find(":10: expected 'layer expert"), std::string::npos) << err(t);
  t = good + "1 0 1 1\n";  // layer 1 has no routed experts
  EXPECT_NE(err(t).find("expert 0 out of range (layer 1 has 0)"), std::string::npos) << err(t);
}

TEST(UsageStats, MutationFuzzOnlyTypedErrors) {
  const std::string good = sample().to_text();
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string t = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % (t.size() + 1);
      switch (rng() % 3) {
        case 0:
          if (pos < t.size()) t[pos] = static_cast<char>(rng() % 256);
          break;
        case 1:
          t.insert(pos, 1, "0123456789 \n-x#f"[rng() % 16]);
          break;
        case 2:
          t.resize(pos);
          break;
      }
    }
    try {
      UsageStats::parse(t, "fuzz");
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("fuzz:", 0), 0u) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace strata::placement
