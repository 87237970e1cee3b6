// Unit tests for tiers::RamArena: 2 MiB alignment and rounding, the first-touch callback, the
// one-time NUMA topology notice, node checks and move semantics.
#include <gtest/gtest.h>

#include <numeric>

#include "io/check.h"
#include "tiers/ram_arena.h"

namespace strata::tiers {
namespace {

constexpr uint64_t kHuge = 2ull << 20;

// Runs first in this executable: the topology notice is said once per process.
TEST(RamArena, TopologyNoticeOnce) {
  std::vector<std::string> lines;
  const NoticeFn notice = [&](const std::string& l) { lines.push_back(l); };
  { RamArena a(4096, RamArena::kAnyNode, NumaMode::kInterleave, nullptr, notice); }
  { RamArena b(4096, RamArena::kAnyNode, NumaMode::kInterleave, nullptr, notice); }
  const NumaInfo numa = numa_info();
  if (numa.available && numa.n_nodes > 1) {
    EXPECT_TRUE(lines.empty());
  } else {
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_TRUE(lines[0].find("one NUMA node") != std::string::npos ||
                lines[0].find("libnuma unavailable") != std::string::npos)
        << lines[0];
  }
}

TEST(RamArena, AlignedRoundedAndWritable) {
  for (uint64_t bytes : {uint64_t{1}, kHuge - 1, kHuge, kHuge + 1, 5 * kHuge + 77}) {
    RamArena a(bytes, RamArena::kAnyNode, NumaMode::kInterleave, nullptr, nullptr);
    // Whole huge pages; below one huge page, whole 4 KiB pages.
    const uint64_t page = bytes < kHuge ? 4096 : kHuge;
    EXPECT_EQ(a.size() % page, 0u);
    EXPECT_GE(a.size(), bytes);
    EXPECT_LT(a.size(), bytes + page);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % kHuge, 0u);
    std::memset(a.data(), 0xab, a.size());
    EXPECT_EQ(static_cast<unsigned char>(a.data()[a.size() - 1]), 0xab);
  }
  RamArena empty(0, RamArena::kAnyNode, NumaMode::kOff, nullptr, nullptr);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
}

TEST(RamArena, FirstTouchCallbackSeesTheWholeRange) {
  int calls = 0;
  std::span<std::byte> seen;
  const FirstTouch touch = [&](std::span<std::byte> r) {
    ++calls;
    seen = r;
    // What the engine does: split the range over workers; here two halves.
    touch_pages(r.first(r.size() / 2));
    touch_pages(r.subspan(r.size() / 2));
  };
  RamArena a(3 * kHuge, RamArena::kAnyNode, NumaMode::kLocal, touch, nullptr);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen.data(), a.data());
  EXPECT_EQ(seen.size(), a.size());
  EXPECT_EQ(static_cast<int>(a.data()[4096]), 0);
}

TEST(RamArena, NodesMustExist) {
  const int n = numa_info().n_nodes;
  EXPECT_NO_THROW(RamArena(kHuge, 0, NumaMode::kLocal, nullptr, nullptr));
  try {
    RamArena a(kHuge, n, NumaMode::kLocal, nullptr, nullptr);
    FAIL() << "node " << n << " accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NUMA node " + std::to_string(n) + " does not exist"),
              std::string::npos)
        << e.what();
  }
}

TEST(RamArena, MovesOwnership) {
  RamArena a(kHuge, RamArena::kAnyNode, NumaMode::kOff, nullptr, nullptr);
  std::byte* p = a.data();
  RamArena b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);
  RamArena c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), kHuge);
  c = RamArena();
  EXPECT_EQ(c.data(), nullptr);
}

}  // namespace
}  // namespace strata::tiers
