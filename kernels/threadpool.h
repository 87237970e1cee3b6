// A fixed pool of worker threads pinned to physical cores, spin-then-sleep waiting, and a
// parallel-for over work items weighted by cost (bytes). No allocation inside a parallel region.
// Tested by tests/test_threadpool.cpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace strata::kernels {

class ThreadPool {
 public:
  // n_threads includes the calling thread (n_threads = 1: everything runs on the caller).
  // pin: pin worker i to the i-th physical core (SMT siblings skipped) when possible.
  explicit ThreadPool(int n_threads, bool pin = true);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  // True when every worker was pinned to its own physical core. Pinning is skipped (never an error)
  // when pin = false, n_threads = 1, there are more threads than allowed physical cores, or the
  // kernel refuses; the caller's own affinity is never changed.
  bool pinned() const;

  // Runs fn(thread_index, n_threads) once on every thread (the caller is index 0) and returns
  // when all are done. fn must not throw on a worker (that terminates); an exception on the caller
  // is rethrown after the workers finish. Not reentrant: fn must not call run() on the same pool.
  template <typename F>
  void run(F&& fn) {
    run_impl(
        &fn, [](void* ctx, int i, int n) { (*static_cast<F*>(ctx))(i, n); }, false);
  }

  // Splits [0, n_items) into contiguous ranges of about equal total cost (cost[i] >= 0, e.g.
  // bytes of item i; empty span = equal cost), one per thread, and calls fn(begin, end,
  // thread_index) on sub-ranges covering each item exactly once. Results must not depend on which
  // thread runs an item or how a range is cut (the callers write each item's output in one place).
  // steal = true: each thread works through its own range front to back in chunks of about
  // 1/kChunksPerPart of it, then takes chunks from the back of the other threads' ranges, so a
  // thread slowed by other load or by its memory does not hold the join; thread_index is always
  // the index of the thread running the call (per-thread scratch stays private). steal = false:
  // each range is one call on its own OS thread (work whose placement matters, e.g. NUMA first
  // touch). owner_chunk (steal = true): a thread takes up to this many items from the front of its
  // own range per call (callers that join adjacent items into one longer kernel call), but no more
  // than a quarter of what is left there (guided), so its last calls are short and a thread done
  // early finds work to take instead of waiting at the join for the other's last long call;
  // thieves take 1/kChunksPerPart of the range.
  template <typename F>
  void parallel_for(int64_t n_items, std::span<const uint64_t> cost, F&& fn, bool steal = true,
                    int64_t owner_chunk = 1);

  static constexpr int kChunksPerPart = 16;

  // Bytes a thread reads ahead into its L2 while it is idle after its part of the next run: the
  // caller while it waits at that run's join, a worker from the join until the fork after it. So
  // the bandwidth a join or the caller's serial steps leave unused fetches the start of the
  // thread's next work (the engine names it: the next matrix's rows that thread will take). Only
  // prefetches (never loads, so a range may be freed or unmapped while a worker is still reading
  // ahead through it): never changes a result. Applies to the next run()/parallel_for only;
  // entries beyond size() are ignored, bytes are capped at kIdleReadMax.
  struct IdleRead {
    const void* data = nullptr;
    size_t bytes = 0;
  };
  void set_idle_reads(std::span<const IdleRead> per_thread);
  static constexpr size_t kIdleReadMax = size_t{256} << 10;

 private:
  // steal: the caller runs the parts of workers that have not started when it is done with its own.
  void run_impl(void* ctx, void (*fn)(void*, int, int), bool steal);
  struct Impl;
  Impl* impl_;
};

// Logical CPUs the pool pins to, one per physical core (the lowest-numbered allowed SMT sibling),
// restricted to this process's affinity mask and ordered by (package, cpu). Read from
// /sys/devices/system/cpu/cpu*/topology; empty if that cannot be read.
std::vector<int> physical_core_cpus();

// The split parallel_for uses: thread t gets [bounds[t], bounds[t+1]); bounds has n_threads + 1
// entries.
void split_by_cost(int64_t n_items, std::span<const uint64_t> cost, int n_threads, int64_t* bounds);

// One thread's remaining range [front, back) as one word, so the owner taking from the front and
// thieves taking from the back agree with a single compare-and-swap.
struct alignas(64) StealRange {
  static constexpr int64_t kGuidedDiv = 4;
  std::atomic<uint64_t> word{0};
  void set(int64_t front, int64_t back) {
    word.store(uint64_t(front) << 32 | uint64_t(back), std::memory_order_relaxed);
  }
  // Claims up to n items from the front (from_back = false) or the back; false when empty.
  // min_n > 0 (guided): takes a quarter of what is left, between min_n and n items.
  bool take(int64_t n, bool from_back, int64_t* begin, int64_t* end, int64_t min_n = 0) {
    uint64_t w = word.load(std::memory_order_relaxed);
    const int64_t max_n = n;
    for (;;) {
      const int64_t f = int64_t(w >> 32), b = int64_t(w & 0xffffffffu);
      if (f >= b) return false;
      if (min_n > 0) n = std::clamp((b - f) / kGuidedDiv, min_n, max_n);
      const int64_t nf = from_back ? f : (b - f > n ? f + n : b);
      const int64_t nb = from_back ? (b - f > n ? b - n : f) : b;
      if (word.compare_exchange_weak(w, uint64_t(nf) << 32 | uint64_t(nb),
                                     std::memory_order_relaxed)) {
        *begin = from_back ? nb : f;
        *end = from_back ? b : nf;
        return true;
      }
    }
  }
};

template <typename F>
void ThreadPool::parallel_for(int64_t n_items, std::span<const uint64_t> cost, F&& fn, bool steal,
                              int64_t owner_chunk) {
  constexpr int kMaxThreads = 1024;
  constexpr int kMaxStealThreads = 64;
  int64_t bounds[kMaxThreads + 1];
  const int n = size() < kMaxThreads ? size() : kMaxThreads;
  split_by_cost(n_items, cost, n, bounds);
  if (!steal || n == 1 || n > kMaxStealThreads || n_items >= (int64_t{1} << 31)) {
    auto part = [&](int t, int) {
      if (t < n && bounds[t] < bounds[t + 1]) fn(bounds[t], bounds[t + 1], t);
    };
    run_impl(
        &part,
        [](void* ctx, int i, int n_threads) { (*static_cast<decltype(part)*>(ctx))(i, n_threads); },
        steal);
    return;
  }
  StealRange ranges[kMaxStealThreads];
  int64_t chunk[kMaxStealThreads];  // what a thief takes from thread t's range
  int64_t own[kMaxStealThreads];    // what thread t takes from its own
  for (int t = 0; t < n; ++t) {
    ranges[t].set(bounds[t], bounds[t + 1]);
    const int64_t len = bounds[t + 1] - bounds[t];
    chunk[t] = len / kChunksPerPart > 1 ? len / kChunksPerPart : 1;
    own[t] = owner_chunk > chunk[t] ? owner_chunk : chunk[t];
  }
  auto part = [&](int t, int) {
    if (t >= n) return;
    int64_t b = 0, e = 0;
    while (ranges[t].take(own[t], false, &b, &e, chunk[t])) fn(b, e, t);
    for (int k = 1; k < n; ++k) {
      const int v = (t + k) % n;
      while (ranges[v].take(chunk[v], true, &b, &e)) fn(b, e, t);
    }
  };
  // The caller may also run a worker's part that has not started (it finds the ranges empty or
  // takes what is left, under that part's index).
  run_impl(
      &part,
      [](void* ctx, int i, int n_threads) { (*static_cast<decltype(part)*>(ctx))(i, n_threads); },
      true);
}

}  // namespace strata::kernels
