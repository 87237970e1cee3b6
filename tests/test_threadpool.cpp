// Tests for kernels/threadpool.h: every index runs exactly once, split_by_cost is deterministic
// and balanced, many back-to-back runs never lose a wakeup (a guard thread aborts a hang after
// 60 s so CI fails instead of blocking), oversubscribed pools (8 threads on 2 cores) work.
#include "kernels/threadpool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace strata::kernels {
namespace {

// Aborts the process if not destroyed within `limit`: a lost wakeup fails the test run.
class HangGuard {
 public:
  explicit HangGuard(const char* what, std::chrono::seconds limit = std::chrono::seconds(60))
      : thread_([this, what, limit] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
            std::fprintf(stderr, "HangGuard: '%s' still running after %lld s; aborting\n", what,
                         static_cast<long long>(limit.count()));
            std::fflush(stderr);
            std::abort();
          }
        }) {}
  ~HangGuard() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

const int kThreadCounts[] = {1, 2, 3, 8};
const int64_t kItemCounts[] = {0, 1, 2, 3, 7, 8, 9, 31, 33, 100, 511, 1023};

TEST(ThreadPool, RunCallsEveryThreadIndexOnce) {
  HangGuard guard("RunCallsEveryThreadIndexOnce");
  for (int n : kThreadCounts) {
    ThreadPool pool(n);
    ASSERT_EQ(pool.size(), n);
    std::vector<std::atomic<int>> calls(n);
    std::atomic<int> bad_n{0};
    pool.run([&](int t, int nt) {
      calls[t].fetch_add(1);
      if (nt != n) bad_n.fetch_add(1);
    });
    for (int t = 0; t < n; ++t) EXPECT_EQ(calls[t].load(), 1) << "thread " << t << " of " << n;
    EXPECT_EQ(bad_n.load(), 0);
  }
}

TEST(ThreadPool, CallerIsThreadZero) {
  ThreadPool pool(3);
  const std::thread::id me = std::this_thread::get_id();
  std::thread::id ids[3];
  pool.run([&](int t, int) { ids[t] = std::this_thread::get_id(); });
  EXPECT_EQ(ids[0], me);
  EXPECT_NE(ids[1], me);
  EXPECT_NE(ids[2], me);
  EXPECT_NE(ids[1], ids[2]);
}

// Runs parallel_for and checks each item is visited exactly once. steal = false: by contiguous
// ranges that match split_by_cost, each handed to its own thread. steal = true: by non-empty
// sub-ranges, never two at once under the same thread index (per-thread scratch stays private),
// with owners taking owner_chunk items at a time.
void check_every_item_once(ThreadPool& pool, int64_t n_items, std::span<const uint64_t> cost,
                           bool steal, int64_t owner_chunk = 1) {
  const int n = pool.size();
  std::vector<int64_t> bounds(n + 1);
  split_by_cost(n_items, cost, n, bounds.data());
  std::vector<std::atomic<int>> hits(n_items);
  std::vector<std::atomic<int>> ranges(n);
  std::vector<std::atomic<int>> active(n);
  std::atomic<int> wrong{0};
  pool.parallel_for(
      n_items, cost,
      [&](int64_t begin, int64_t end, int t) {
        if (t < 0 || t >= n || begin >= end) {
          wrong.fetch_add(1);
          return;
        }
        if (!steal && (begin != bounds[t] || end != bounds[t + 1])) wrong.fetch_add(1);
        if (active[t].exchange(1) != 0) wrong.fetch_add(1);
        ranges[t].fetch_add(1);
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        active[t].store(0);
      },
      steal, owner_chunk);
  EXPECT_EQ(wrong.load(), 0) << "n_items=" << n_items << " threads=" << n << " steal=" << steal
                             << " owner_chunk=" << owner_chunk;
  if (!steal) {
    for (int t = 0; t < n; ++t)
      EXPECT_EQ(ranges[t].load(), bounds[t] < bounds[t + 1] ? 1 : 0) << "thread " << t;
  }
  int missed = 0;
  for (int64_t i = 0; i < n_items; ++i) {
    if (hits[i].load() != 1 && ++missed <= 5)
      ADD_FAILURE() << "item " << i << " ran " << hits[i].load() << " times (n_items=" << n_items
                    << ", threads=" << n << ", steal=" << steal << ")";
  }
}

void check_every_item_once(ThreadPool& pool, int64_t n_items, std::span<const uint64_t> cost) {
  check_every_item_once(pool, n_items, cost, true);
  check_every_item_once(pool, n_items, cost, false);
  // Owners taking several items per call (the expert executor: both halves of a matrix).
  check_every_item_once(pool, n_items, cost, true, 2);
  check_every_item_once(pool, n_items, cost, true, 7);
}

// The owner's guided claims: a quarter of what is left, between the thieves' chunk and
// owner_chunk, so the last claims of a range are short (a thread done early finds work to take
// instead of waiting for the other's last long call); thieves still take fixed chunks.
TEST(ThreadPool, StealRangeGuidedClaimsShrinkTowardTheEnd) {
  StealRange r;
  r.set(0, 32);
  std::vector<int64_t> sizes;
  int64_t b = 0, e = 0, next = 0;
  while (r.take(8, false, &b, &e, 2)) {
    EXPECT_EQ(b, next);
    next = e;
    sizes.push_back(e - b);
  }
  EXPECT_EQ(next, 32);
  EXPECT_EQ(sizes, (std::vector<int64_t>{8, 6, 4, 3, 2, 2, 2, 2, 2, 1}));
  // Without min_n the owner takes n each time; thieves take from the back.
  r.set(10, 20);
  ASSERT_TRUE(r.take(4, false, &b, &e));
  EXPECT_EQ(b, 10);
  EXPECT_EQ(e, 14);
  ASSERT_TRUE(r.take(4, true, &b, &e));
  EXPECT_EQ(b, 16);
  EXPECT_EQ(e, 20);
  ASSERT_TRUE(r.take(4, false, &b, &e, 1));  // 2 left: a quarter rounds to 0, min 1
  EXPECT_EQ(b, 14);
  EXPECT_EQ(e, 15);
  ASSERT_TRUE(r.take(4, true, &b, &e));
  EXPECT_EQ(b, 15);
  EXPECT_EQ(e, 16);
  EXPECT_FALSE(r.take(4, false, &b, &e));
}

TEST(ThreadPool, ParallelForEveryIndexExactlyOnce) {
  HangGuard guard("ParallelForEveryIndexExactlyOnce");
  std::mt19937_64 rng(42);
  for (int n : kThreadCounts) {
    ThreadPool pool(n);
    for (int64_t items : kItemCounts) {
      check_every_item_once(pool, items, {});
      std::vector<uint64_t> cost(items);
      for (auto& c : cost) c = rng() % 5000;
      check_every_item_once(pool, items, cost);
    }
  }
}

TEST(ThreadPool, ZeroItemsCallsNothing) {
  for (int n : kThreadCounts) {
    ThreadPool pool(n);
    std::atomic<int> calls{0};
    pool.parallel_for(0, {}, [&](int64_t, int64_t, int) { calls.fetch_add(1); });
    EXPECT_EQ(calls.load(), 0);
  }
}

TEST(ThreadPool, CostsWithZeros) {
  ThreadPool pool(3);
  const std::vector<std::vector<uint64_t>> cases = {
      {0, 0, 0, 0, 0},                      // all zero: equal counts
      {0, 0, 0, 0, 100},                    // one heavy item at the end
      {100, 0, 0, 0, 0, 0},                 // one heavy item first
      {0, 7, 0, 0, 7, 0, 0, 7, 0},          // zeros between equal items
      {0},                                  // one free item
      {5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}  // the middle is free
  };
  for (const auto& cost : cases) {
    check_every_item_once(pool, static_cast<int64_t>(cost.size()), cost);
  }
  // Three equal non-zero items separated by zeros: one each.
  const std::vector<uint64_t> cost = {0, 7, 0, 0, 7, 0, 0, 7, 0};
  int64_t b[4];
  split_by_cost(9, cost, 3, b);
  uint64_t per[3] = {};
  for (int t = 0; t < 3; ++t)
    for (int64_t i = b[t]; i < b[t + 1]; ++i) per[t] += cost[i];
  EXPECT_EQ(per[0], 7u);
  EXPECT_EQ(per[1], 7u);
  EXPECT_EQ(per[2], 7u);
}

TEST(SplitByCost, EqualWeightsWhenNoCost) {
  int64_t b[5];
  split_by_cost(10, {}, 4, b);
  const int64_t want[5] = {0, 2, 5, 7, 10};
  for (int t = 0; t <= 4; ++t) EXPECT_EQ(b[t], want[t]) << t;
  split_by_cost(2, {}, 4, b);  // more threads than items: some ranges empty
  EXPECT_EQ(b[0], 0);
  EXPECT_EQ(b[4], 2);
  for (int t = 0; t < 4; ++t) EXPECT_LE(b[t], b[t + 1]);
}

TEST(SplitByCost, DeterministicAndBalancedByBytes) {
  std::mt19937_64 rng(7);
  for (int n : {1, 2, 3, 5, 8, 16, 64}) {
    for (int64_t items : {1, 3, 31, 33, 128, 511, 1023, 5000}) {
      // Expert-like byte sizes: a few formats, some big, some tiny.
      std::vector<uint64_t> cost(items);
      for (auto& c : cost) c = (rng() % 4 == 0) ? 3'000'000 + rng() % 1'000'000 : rng() % 200'000;
      std::vector<int64_t> a(n + 1), b(n + 1);
      split_by_cost(items, cost, n, a.data());
      split_by_cost(items, cost, n, b.data());
      ASSERT_EQ(a, b) << "not deterministic: n=" << n << " items=" << items;
      ASSERT_EQ(a[0], 0);
      ASSERT_EQ(a[n], items);
      uint64_t total = 0, max_item = 0;
      for (uint64_t c : cost) {
        total += c;
        max_item = std::max(max_item, c);
      }
      for (int t = 0; t < n; ++t) {
        ASSERT_LE(a[t], a[t + 1]);
        uint64_t got = 0;
        for (int64_t i = a[t]; i < a[t + 1]; ++i) got += cost[i];
        // Each boundary is the item edge nearest its ideal position, so a range is off the ideal
        // total/n by at most one item.
        EXPECT_LE(got, total / n + max_item + 1) << "n=" << n << " items=" << items << " t=" << t;
        EXPECT_GE(got + max_item + 1, total / n) << "n=" << n << " items=" << items << " t=" << t;
      }
    }
  }
}

TEST(SplitByCost, UniformCostsSplitEvenly) {
  std::vector<uint64_t> cost(96, 1000);
  int64_t b[9];
  split_by_cost(96, cost, 8, b);
  for (int t = 0; t <= 8; ++t) EXPECT_EQ(b[t], 12 * t);
}

TEST(SplitByCost, OneItemSpanningSeveralShares) {
  // The heavy item covers several threads' ideal shares; later boundaries must not move back.
  for (const std::vector<uint64_t>& cost :
       {std::vector<uint64_t>{100, 1}, {1, 1000, 1}, {1000, 1, 1, 1}, {1, 1, 1, 1000}}) {
    for (int n : {2, 3, 4, 8}) {
      std::vector<int64_t> b(n + 1);
      split_by_cost(static_cast<int64_t>(cost.size()), cost, n, b.data());
      EXPECT_EQ(b[0], 0);
      EXPECT_EQ(b[n], static_cast<int64_t>(cost.size()));
      for (int t = 0; t < n; ++t) EXPECT_LE(b[t], b[t + 1]) << "n=" << n << " t=" << t;
    }
  }
  int64_t b[5];
  const std::vector<uint64_t> cost = {100, 1};
  split_by_cost(2, cost, 4, b);
  const int64_t want[5] = {0, 0, 1, 1, 2};
  for (int t = 0; t <= 4; ++t) EXPECT_EQ(b[t], want[t]) << t;
}

TEST(SplitByCost, HugeCostsDoNotOverflow) {
  std::vector<uint64_t> cost(4, UINT64_MAX / 2);
  int64_t b[3];
  split_by_cost(4, cost, 2, b);
  EXPECT_EQ(b[1], 2);
}

// Back-to-back runs, the pattern of a decode loop: no wakeup may be lost, whether workers are
// spinning (short gaps) or asleep on the futex (gaps longer than the spin budget).
TEST(ThreadPool, TenThousandSequentialRunsNoLostWakeups) {
  HangGuard guard("TenThousandSequentialRunsNoLostWakeups");
  for (int n : kThreadCounts) {
    ThreadPool pool(n);
    std::vector<uint64_t> cost = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    std::atomic<int64_t> sum{0};
    int64_t want = 0;
    for (int iter = 0; iter < 10000; ++iter) {
      if (iter % 2 == 0) {
        pool.run([&](int t, int) { sum.fetch_add(t + 1, std::memory_order_relaxed); });
        want += int64_t{n} * (n + 1) / 2;
      } else {
        pool.parallel_for(11, cost, [&](int64_t begin, int64_t end, int) {
          for (int64_t i = begin; i < end; ++i) sum.fetch_add(i, std::memory_order_relaxed);
        });
        want += 55;
      }
      // Now and then let the workers fall asleep so the futex path is exercised too.
      if (iter % 1000 == 999) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    EXPECT_EQ(sum.load(), want) << "threads=" << n;
  }
}

// Idle reads (prefetch hints for the time a thread waits) never change what runs: every run with
// hints set, some naming more threads than the pool has, some for a run that does not steal,
// still visits every item once, and the hints' buffer may be freed right after the run that used
// them while a worker is still reading ahead through it (prefetches never fault).
TEST(ThreadPool, IdleReadsChangeNothing) {
  HangGuard guard("IdleReadsChangeNothing");
  for (int n : kThreadCounts) {
    ThreadPool pool(n);
    for (int iter = 0; iter < 200; ++iter) {
      auto buffer = std::make_unique<std::vector<char>>(size_t(1) << 20, char(iter));
      std::vector<ThreadPool::IdleRead> reads;
      for (int t = 0; t < n + 2; ++t)
        reads.push_back({buffer->data() + size_t(t) * 4096 * 16, size_t(iter % 7) * 40000});
      pool.set_idle_reads(reads);
      std::vector<uint64_t> cost(33, 1);
      check_every_item_once(pool, 33, cost, iter % 3 != 0, iter % 4 + 1);
      buffer.reset();
      if (iter % 50 == 49) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    // Hints larger than kIdleReadMax are capped (this buffer is just that large).
    std::vector<char> big(ThreadPool::kIdleReadMax, 1);
    const ThreadPool::IdleRead huge[] = {{big.data(), size_t(1) << 40},
                                         {big.data(), size_t(1) << 40}};
    pool.set_idle_reads(huge);
    check_every_item_once(pool, 100, {}, true);
  }
}

// parallel_for lets a thread that is done with its own range take chunks from the back of the
// others' (and the caller run the parts of workers that have not started). Oversubscribed pools
// (8 threads on fewer cores) make that happen often, and a worker may stall between seeing a run
// and claiming its part: every item must still run exactly once per run, never under a thread
// index that is running something else, across many back-to-back runs mixed with run() (which
// never steals).
TEST(ThreadPool, StolenPartsRunExactlyOnce) {
  HangGuard guard("StolenPartsRunExactlyOnce");
  for (int n : {2, 3, 8}) {
    ThreadPool pool(n);
    const int64_t n_items = 40 * n;
    std::vector<std::atomic<int>> hits(n_items);
    std::vector<std::atomic<int>> active(n);
    std::vector<std::atomic<int>> runs(n);
    std::atomic<int> wrong{0};
    int64_t want_runs = 0;
    for (int iter = 0; iter < 20000; ++iter) {
      for (auto& h : hits) h.store(0, std::memory_order_relaxed);
      for (auto& r : runs) r.store(0, std::memory_order_relaxed);
      if (iter % 7 == 6) {
        pool.run([&](int t, int) { runs[t].fetch_add(1, std::memory_order_relaxed); });
        for (int t = 0; t < n; ++t)
          if (runs[t].load(std::memory_order_relaxed) != 1) wrong.fetch_add(1);
      } else {
        pool.parallel_for(n_items, {}, [&](int64_t begin, int64_t end, int t) {
          if (active[t].exchange(1) != 0) wrong.fetch_add(1);
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
          active[t].store(0);
        });
        for (int64_t i = 0; i < n_items; ++i)
          if (hits[i].load(std::memory_order_relaxed) != 1) wrong.fetch_add(1);
      }
      ++want_runs;
      if (iter % 2000 == 1999) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    EXPECT_EQ(wrong.load(), 0) << "threads=" << n << " over " << want_runs << " runs";
  }
}

// A worker that stalls in its first chunk does not hold its whole range: the caller, done with
// its own, takes the rest of it (or the whole part, if the worker had not started).
TEST(ThreadPool, SlowWorkersRangeIsFinishedByTheCaller) {
  HangGuard guard("SlowWorkersRangeIsFinishedByTheCaller");
  ThreadPool pool(2);
  const std::thread::id me = std::this_thread::get_id();
  for (int iter = 0; iter < 20; ++iter) {
    int64_t bounds[3];
    split_by_cost(64, {}, 2, bounds);
    std::vector<std::atomic<int>> hits(64);
    std::atomic<int> on_caller{0};  // items of range 1 the caller ran
    std::atomic<bool> slept{false};
    pool.parallel_for(64, {}, [&](int64_t begin, int64_t end, int) {
      const bool caller = std::this_thread::get_id() == me;
      if (!caller && !slept.exchange(true))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      for (int64_t i = begin; i < end; ++i) {
        hits[i].fetch_add(1);
        if (caller && i >= bounds[1]) on_caller.fetch_add(1);
      }
    });
    for (int i = 0; i < 64; ++i) ASSERT_EQ(hits[i].load(), 1) << "item " << i;
    EXPECT_GT(on_caller.load(), (bounds[2] - bounds[1]) / 2) << "iteration " << iter;
  }
}

// steal = false: every range runs on its own worker, even when the caller is done first.
TEST(ThreadPool, ParallelForWithoutStealingKeepsRangesOnTheirThreads) {
  HangGuard guard("ParallelForWithoutStealingKeepsRangesOnTheirThreads");
  ThreadPool pool(3);
  const std::thread::id me = std::this_thread::get_id();
  for (int iter = 0; iter < 200; ++iter) {
    // Workers asleep (past their spin): the caller's tiny part ends before they wake.
    if (iter % 2 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    std::thread::id ids[3];
    pool.parallel_for(
        3, {}, [&](int64_t begin, int64_t, int) { ids[begin] = std::this_thread::get_id(); },
        /*steal=*/false);
    ASSERT_EQ(ids[0], me);
    ASSERT_NE(ids[1], me);
    ASSERT_NE(ids[2], me);
  }
}

TEST(ThreadPool, UnevenWorkAndSleepingCaller) {
  HangGuard guard("UnevenWorkAndSleepingCaller");
  ThreadPool pool(3);
  for (int iter = 0; iter < 200; ++iter) {
    std::atomic<int> done{0};
    pool.run([&](int t, int) {
      // One thread is much slower than the spin budget, so the caller sleeps on the futex.
      if (t == (iter % 3)) std::this_thread::sleep_for(std::chrono::microseconds(400));
      done.fetch_add(1);
    });
    ASSERT_EQ(done.load(), 3);
  }
}

TEST(ThreadPool, CreateAndDestroyRepeatedly) {
  HangGuard guard("CreateAndDestroyRepeatedly");
  for (int k = 0; k < 200; ++k) {
    ThreadPool pool(1 + k % 4);
    if (k % 2 == 0) {
      std::atomic<int> c{0};
      pool.run([&](int, int) { c.fetch_add(1); });
      EXPECT_EQ(c.load(), pool.size());
    }
  }
}

TEST(ThreadPool, CallerExceptionWaitsForWorkersThenRethrows) {
  ThreadPool pool(3);
  std::atomic<int> workers_done{0};
  EXPECT_THROW(pool.run([&](int t, int) {
    if (t == 0) throw std::runtime_error("caller failed");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    workers_done.fetch_add(1);
  }),
               std::runtime_error);
  EXPECT_EQ(workers_done.load(), 2);
  std::atomic<int> c{0};
  pool.run([&](int, int) { c.fetch_add(1); });  // the pool is still usable
  EXPECT_EQ(c.load(), 3);
}

TEST(ThreadPool, SingleThreadRunsInline) {
  ThreadPool pool(1);
  EXPECT_FALSE(pool.pinned());
  const std::thread::id me = std::this_thread::get_id();
  int calls = 0;
  pool.parallel_for(5, {}, [&](int64_t begin, int64_t end, int t) {
    EXPECT_EQ(std::this_thread::get_id(), me);
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 5);
    EXPECT_EQ(t, 0);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST(ThreadPool, PhysicalCoresAreAllowedAndDistinct) {
  const std::vector<int> cores = physical_core_cpus();
  ASSERT_FALSE(cores.empty()) << "could not read CPU topology";
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  std::vector<int> sorted = cores;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  for (int c : cores) EXPECT_TRUE(c < CPU_SETSIZE && CPU_ISSET(c, &allowed)) << "cpu " << c;
  EXPECT_LE(static_cast<int>(cores.size()), CPU_COUNT(&allowed));
}

TEST(ThreadPool, PinsOnlyWhenThereAreEnoughCores) {
  const int cores = static_cast<int>(physical_core_cpus().size());
  // More threads than physical cores: no pinning, still correct.
  ThreadPool over(cores + 1);
  EXPECT_FALSE(over.pinned());
  std::atomic<int> c{0};
  over.run([&](int, int) { c.fetch_add(1); });
  EXPECT_EQ(c.load(), cores + 1);
  ThreadPool unpinned(std::min(cores, 2), /*pin=*/false);
  EXPECT_FALSE(unpinned.pinned());
  if (cores >= 2) {
    ThreadPool pool(2);
    // Pinning may still be refused (a container may forbid it); when it worked, the worker runs
    // on the second physical core.
    if (pool.pinned()) {
      const int want = physical_core_cpus()[1];
      int got = -1;
      pool.run([&](int t, int) {
        if (t == 1) got = sched_getcpu();
      });
      EXPECT_EQ(got, want);
    }
  }
}

TEST(ThreadPoolDeathTest, NestedRunAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ThreadPool pool(2);
        pool.run([&](int t, int) {
          if (t == 0) pool.run([](int, int) {});
        });
      },
      "nested or concurrent");
}

}  // namespace
}  // namespace strata::kernels
