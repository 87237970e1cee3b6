// Read-bandwidth probe: 1..N threads (the kernels' ThreadPool, pinned as in decode) stream through
// a buffer far larger than the caches with AVX2 or AVX-512 loads, reporting GB/s. This is the
// ceiling bench_gemv's GB/s is compared against in bench/RESULTS.md.
// Run: bench_membw [--membw_mib=N] [Google Benchmark flags]
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "kernels/threadpool.h"

namespace {

// CPU time of the calling thread: with 1 thread, bytes / this time is the rate while actually on
// a core, which a shared (busy) machine does not distort the way it distorts wall time.
double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Google Benchmark statistic: the best repetition (max of a rate counter).
double max_of(const std::vector<double>& v) {
  double m = v.empty() ? 0.0 : v[0];
  for (double x : v) m = x > m ? x : m;
  return m;
}

using strata::kernels::ThreadPool;

size_t g_buffer_bytes = size_t{2048} << 20;  // --membw_mib

// One buffer for the whole process, touched once so its pages exist (and are huge if THP allows).
uint8_t* buffer() {
  static uint8_t* p = [] {
    void* m =
        mmap(nullptr, g_buffer_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) std::abort();
    madvise(m, g_buffer_bytes, MADV_HUGEPAGE);
    std::memset(m, 1, g_buffer_bytes);
    return static_cast<uint8_t*>(m);
  }();
  return p;
}

// Sums [p, p + n) as 64-bit lanes with 4 independent accumulators (n a multiple of 256).
__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 256) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 128)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 160)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 192)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 224)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 3));
}

__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
  }
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  return lanes[0] + lanes[7];
}

enum Isa { kAvx2, kAvx512 };

// Each iteration reads the whole buffer once, one contiguous slice per thread.
void BM_ReadBandwidth(benchmark::State& state, Isa isa, int n_threads) {
  if (isa == kAvx512 && !__builtin_cpu_supports("avx512f")) {
    state.SkipWithError("CPU lacks AVX-512");
    return;
  }
  if (!__builtin_cpu_supports("avx2")) {
    state.SkipWithError("CPU lacks AVX2");
    return;
  }
  const uint8_t* p = buffer();
  const size_t slice = g_buffer_bytes / n_threads / 256 * 256;
  ThreadPool pool(n_threads);
  uint64_t sink[1024] = {};
  const double cpu0 = thread_cpu_seconds();
  for (auto _ : state) {
    pool.run([&](int t, int) {
      const uint8_t* mine = p + static_cast<size_t>(t) * slice;
      sink[t] += isa == kAvx512 ? read_avx512(mine, slice) : read_avx2(mine, slice);
    });
  }
  benchmark::DoNotOptimize(sink);
  const double cpu = thread_cpu_seconds() - cpu0;
  const double gb = static_cast<double>(slice) * n_threads * state.iterations() / 1e9;
  state.counters["GB/s"] = benchmark::Counter(gb, benchmark::Counter::kIsRate);
  if (n_threads == 1) state.counters["GB/s_oncpu"] = gb / cpu;
  state.SetLabel(std::to_string(g_buffer_bytes >> 20) + " MiB");
}

// membw/<isa>/<threads>t for 1, 2, 4, ... and every hardware thread.
void register_all() {
  const int n_cpu = static_cast<int>(std::thread::hardware_concurrency());
  for (Isa isa : {kAvx2, kAvx512})
    for (int t = 1; t <= n_cpu; t = t < n_cpu && 2 * t > n_cpu ? n_cpu : 2 * t) {
      const std::string name = std::string("membw/") + (isa == kAvx512 ? "avx512" : "avx2") + "/" +
                               std::to_string(t) + "t";
      benchmark::RegisterBenchmark(name.c_str(), BM_ReadBandwidth, isa, t)
          ->UseRealTime()
          ->ComputeStatistics("max", max_of)
          ->Unit(benchmark::kMillisecond);
    }
}

}  // namespace

int main(int argc, char** argv) {
  // Our own flag first: --membw_mib=N sets the buffer size (default 2048).
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--membw_mib=", 12) == 0)
      g_buffer_bytes = static_cast<size_t>(std::strtoull(argv[i] + 12, nullptr, 10)) << 20;
    else
      argv[out++] = argv[i];
  }
  argc = out;
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
