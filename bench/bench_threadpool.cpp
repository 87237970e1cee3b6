// Fork/join latency of kernels::ThreadPool: an empty run() and a parallel_for over 64 weighted
// items, for 1..N threads, with back-to-back calls (workers spinning) and with a gap longer than
// the spin budget (workers asleep on the futex). Run: build/bench/bench_threadpool.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "kernels/threadpool.h"

namespace {

using strata::kernels::ThreadPool;

int max_threads() {
  return std::max<int>(1, static_cast<int>(strata::kernels::physical_core_cpus().size()));
}

void thread_args(benchmark::internal::Benchmark* b) {
  const int n = max_threads();
  for (int t = 1; t < n; t *= 2) b->Arg(t);
  b->Arg(n);
}

// Back-to-back empty runs: the decode loop's best case, workers still spinning. Time per
// iteration is the fork/join latency.
void BM_run_empty(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::atomic<int> sink{0};
  for (auto _ : state) pool.run([&](int t, int) { sink.fetch_add(t, std::memory_order_relaxed); });
}
BENCHMARK(BM_run_empty)->Apply(thread_args)->UseRealTime();

// A parallel_for split by bytes, as one MoE layer's CPU region would issue it.
void BM_parallel_for_64_items(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::vector<uint64_t> cost(64);
  for (size_t i = 0; i < cost.size(); ++i) cost[i] = 1000 + 37 * (i % 7);
  std::vector<int64_t> out(64);
  for (auto _ : state) {
    pool.parallel_for(64, cost, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) out[i] += i;
    });
  }
  benchmark::DoNotOptimize(out.data());
}
BENCHMARK(BM_parallel_for_64_items)->Apply(thread_args)->UseRealTime();

// Runs after an idle gap of 1 ms (beyond the ~100 µs spin): the cost of a futex wake-up. The gap
// is excluded from the timing.
void BM_run_after_sleep(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::atomic<int> sink{0};
  for (auto _ : state) {
    state.PauseTiming();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    state.ResumeTiming();
    pool.run([&](int t, int) { sink.fetch_add(t, std::memory_order_relaxed); });
  }
}
BENCHMARK(BM_run_after_sleep)->Apply(thread_args)->UseRealTime()->Iterations(300);

}  // namespace

BENCHMARK_MAIN();
