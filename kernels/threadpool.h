// A fixed pool of worker threads pinned to physical cores, spin-then-sleep waiting, and a
// parallel-for over work items weighted by cost (bytes). No allocation inside a parallel region.
// Tested by tests/test_threadpool.cpp.
#pragma once

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
  // bytes of item i; empty span = equal cost) and calls fn(begin, end, thread_index) for each
  // non-empty range. The split depends only on n_items, costs and size(), never on timing; which
  // OS thread runs a range may: a worker that has not started its range when the caller finishes
  // its own has that range run by the caller (same begin, end and thread_index), so a worker
  // descheduled by other load does not hold the join. steal = false keeps each range on its own
  // OS thread (work whose placement matters, e.g. NUMA first touch).
  template <typename F>
  void parallel_for(int64_t n_items, std::span<const uint64_t> cost, F&& fn, bool steal = true);

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

template <typename F>
void ThreadPool::parallel_for(int64_t n_items, std::span<const uint64_t> cost, F&& fn, bool steal) {
  constexpr int kMaxThreads = 1024;
  int64_t bounds[kMaxThreads + 1];
  const int n = size() < kMaxThreads ? size() : kMaxThreads;
  split_by_cost(n_items, cost, n, bounds);
  auto part = [&](int t, int) {
    if (t < n && bounds[t] < bounds[t + 1]) fn(bounds[t], bounds[t + 1], t);
  };
  run_impl(
      &part,
      [](void* ctx, int i, int n_threads) { (*static_cast<decltype(part)*>(ctx))(i, n_threads); },
      steal);
}

}  // namespace strata::kernels
