// GEMV throughput per weight type and ISA, single- and multi-threaded, on 4096 x 4096 matrices
// rotated through a pool of weights far larger than the caches (each call reads fresh memory, as
// a decode step reads each expert once). Reports effective GB/s = weight bytes / time; compare
// with bench_membw at the same thread count (bench/RESULTS.md).
// Also: gemm_hot/<type>/<isa>/<layout>/<T>tok — one L2-resident 768 x 2048 matrix (the
// Qwen3-30B-A3B expert shape) in the GGUF layout (rows) or REPACK's (interleaved), times T tokens,
// GMAC/s and GB/s of weights per pass on-CPU (1 thread): the kernels' compute ceiling, which the
// streamed rate can only approach; and int8_peak/avx512 — independent vpdpbusd chains, the
// core's int8 multiply-accumulate ceiling those GMAC/s are a share of (% in the counter
// "of_int8_peak" once it has run: run it first, as the default order does).
// Run: bench_gemv [--gemv_mib=N] [--gemv_rows=R --gemv_cols=C] [--gemv_novnni]
//      [Google Benchmark flags, e.g.
//      --benchmark_filter=Q4_0]  (R x C: the streamed matrices' shape, default 4096 x 4096;
//      151936 x 2048 is Qwen3-30B-A3B's output head; --gemv_novnni: the avx2 kernels without
//      AVX-VNNI's, as ISA=avx2-plain)
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/gemv.h"
#include "kernels/interleave.h"
#include "kernels/quant.h"
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

using strata::GgmlType;
using strata::kernels::Isa;

int64_t g_rows = 4096;                     // --gemv_rows
int64_t g_cols = 4096;                     // --gemv_cols
size_t g_pool_bytes = size_t{2048} << 20;  // --gemv_mib

constexpr GgmlType kTypes[] = {GgmlType::Q4_0,   GgmlType::Q8_0, GgmlType::Q2_K,  GgmlType::Q3_K,
                               GgmlType::Q4_K,   GgmlType::Q5_K, GgmlType::Q6_K,  GgmlType::Q5_0,
                               GgmlType::Q4_1,   GgmlType::Q5_1, GgmlType::MXFP4, GgmlType::IQ4_NL,
                               GgmlType::IQ4_XS, GgmlType::F16,  GgmlType::BF16,  GgmlType::F32};

// The rotating weight pool, filled for one type at a time: 64 distinct quantized rows (from
// random floats, so every scale is a normal number) tiled over the whole pool.
struct WeightPool {
  GgmlType type = GgmlType::F32;
  bool filled = false;
  uint8_t* data = nullptr;
  size_t matrix_bytes = 0;
  int64_t n_matrices = 0;
  std::vector<uint8_t> xq;  // one activation row, vec_dot_type(type)

  void fill(GgmlType t) {
    if (filled && type == t) return;
    if (data == nullptr) {
      void* m =
          mmap(nullptr, g_pool_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) std::abort();
      madvise(m, g_pool_bytes, MADV_HUGEPAGE);
      data = static_cast<uint8_t*>(m);
    }
    type = t;
    const size_t row_bytes = strata::ggml_row_bytes(t, g_cols);
    matrix_bytes = row_bytes * g_rows;
    n_matrices = static_cast<int64_t>(g_pool_bytes / matrix_bytes);
    if (n_matrices < 2) std::abort();
    std::mt19937 rng(static_cast<uint32_t>(t));
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> x(g_cols);
    std::vector<uint8_t> rows(64 * row_bytes);
    for (int r = 0; r < 64; ++r) {
      for (auto& v : x) v = normal(rng);
      strata::kernels::quantize_row(t, x.data(), rows.data() + r * row_bytes, g_cols);
    }
    const size_t used = matrix_bytes * static_cast<size_t>(n_matrices);
    for (size_t off = 0; off < used; off += rows.size())
      std::memcpy(data + off, rows.data(), std::min(rows.size(), used - off));
    std::normal_distribution<float> act(0.0f, 1.0f);
    for (auto& v : x) v = act(rng);
    const GgmlType at = strata::kernels::vec_dot_type(t);
    xq.resize(strata::ggml_row_bytes(at, g_cols));
    strata::kernels::quantize_row(at, x.data(), xq.data(), g_cols);
    filled = true;
  }
};

WeightPool& pool_for(GgmlType t) {
  static WeightPool pool;
  pool.fill(t);
  return pool;
}

void BM_Gemv(benchmark::State& state, GgmlType type, Isa isa, int n_threads) {
  if (!strata::kernels::isa_supported(isa)) {
    state.SkipWithError("CPU lacks this ISA");
    return;
  }
  WeightPool& weights = pool_for(type);
  const strata::kernels::GemvFn gemv = strata::kernels::gemv_kernels(type, isa).gemv;
  const size_t row_bytes = strata::ggml_row_bytes(type, g_cols);
  std::vector<float> y(g_rows);
  strata::kernels::ThreadPool threads(n_threads);
  int64_t m = 0;
  const double cpu0 = thread_cpu_seconds();
  for (auto _ : state) {
    const uint8_t* w = weights.data + static_cast<size_t>(m) * weights.matrix_bytes;
    if (n_threads == 1) {
      gemv(w, row_bytes, weights.xq.data(), y.data(), 0, g_rows, g_cols);
    } else {
      // Row groups of 16, as kernels::gemv hands them out (the kernels' rows per pass).
      threads.parallel_for((g_rows + 15) / 16, {}, [&](int64_t begin, int64_t end, int) {
        gemv(w, row_bytes, weights.xq.data(), y.data(), 16 * begin, std::min(16 * end, g_rows),
             g_cols);
      });
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    m = (m + 1) % weights.n_matrices;
  }
  const double cpu = thread_cpu_seconds() - cpu0;
  const double gb = static_cast<double>(weights.matrix_bytes) * state.iterations() / 1e9;
  state.counters["GB/s"] = benchmark::Counter(gb, benchmark::Counter::kIsRate);
  if (n_threads == 1) state.counters["GB/s_oncpu"] = gb / cpu;
}

double g_int8_peak = 0;  // GMAC/s of int8_peak/avx512, once it has run

// 12 independent vpdpbusd chains on registers: 64 int8 multiply-accumulates each.
__attribute__((target("avx512f,avx512vnni"))) void BM_Int8Peak(benchmark::State& state) {
  if (!strata::kernels::isa_supported(Isa::kAvx512)) {
    state.SkipWithError("CPU lacks AVX-512 VNNI");
    return;
  }
  constexpr int kChains = 12;
  constexpr int64_t kRounds = 1 << 20;
  __m512i acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_epi32(i);
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
  const double cpu0 = thread_cpu_seconds();
  for (auto _ : state) {
    for (int64_t r = 0; r < kRounds; ++r) {
#pragma GCC unroll 12
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
      __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    benchmark::DoNotOptimize(acc);
  }
  const double cpu = thread_cpu_seconds() - cpu0;
  const double macs = static_cast<double>(state.iterations()) * kRounds * kChains * 64;
  state.counters["GMAC/s_oncpu"] = macs / cpu / 1e9;
  g_int8_peak = std::max(g_int8_peak, macs / cpu / 1e9);
}

void BM_GemmHot(benchmark::State& state, GgmlType type, Isa isa, bool interleaved,
                int64_t n_tokens) {
  if (!strata::kernels::isa_supported(isa)) {
    state.SkipWithError("CPU lacks this ISA");
    return;
  }
  constexpr int64_t kHotRows = 768, kHotCols = 2048;
  using strata::kernels::WeightLayout;
  WeightLayout layout = interleaved ? strata::kernels::interleaved_layout(type, kHotRows, kHotCols)
                                    : WeightLayout::kRows;
  // The layouts an AVX2 CPU's REPACK picks: Q4_0 as kQ4_0x16 (kQ4_0x32 is AVX-512's).
  if (isa == Isa::kAvx2 && layout == WeightLayout::kQ4_0x32) layout = WeightLayout::kQ4_0x16;
  if (interleaved && layout == WeightLayout::kRows) {
    state.SkipWithError("no interleaved layout for this type and ISA");
    return;
  }
  const strata::kernels::GemvKernels k = strata::kernels::gemv_kernels(type, layout, isa);
  const size_t row_bytes = strata::ggml_row_bytes(type, kHotCols);
  const GgmlType at = strata::kernels::vec_dot_type(type);
  const size_t act_bytes = strata::ggml_row_bytes(at, kHotCols);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kHotCols);
  std::vector<uint8_t> w(row_bytes * kHotRows), xq(act_bytes * n_tokens);
  for (int64_t r = 0; r < kHotRows; ++r) {
    for (auto& v : x) v = 0.02f * normal(rng);
    strata::kernels::quantize_row(type, x.data(), w.data() + r * row_bytes, kHotCols);
  }
  if (interleaved) strata::kernels::interleave_in_place(layout, w.data(), kHotRows, kHotCols);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (auto& v : x) v = normal(rng);
    strata::kernels::quantize_row(at, x.data(), xq.data() + t * act_bytes, kHotCols);
  }
  std::vector<float> y(kHotRows * n_tokens);
  const double cpu0 = thread_cpu_seconds();
  for (auto _ : state) {
    if (n_tokens == 1)
      k.gemv(w.data(), row_bytes, xq.data(), y.data(), 0, kHotRows, kHotCols);
    else
      k.gemm(w.data(), row_bytes, xq.data(), act_bytes, y.data(), kHotRows, n_tokens, 0, kHotRows,
             kHotCols);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double cpu = thread_cpu_seconds() - cpu0;
  const double iters = static_cast<double>(state.iterations());
  state.counters["GMAC/s_oncpu"] = iters * kHotRows * kHotCols * n_tokens / cpu / 1e9;
  state.counters["GB/s_oncpu"] = iters * static_cast<double>(w.size()) / cpu / 1e9;
  if (g_int8_peak > 0)
    state.counters["of_int8_peak"] =
        iters * kHotRows * kHotCols * n_tokens / cpu / 1e9 / g_int8_peak;
}

// gemv/<type>/<isa>/<threads>t, for 1 thread and every hardware thread.
void register_all() {
  const int n_cpu = static_cast<int>(std::thread::hardware_concurrency());
  for (GgmlType type : kTypes)
    for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512})
      for (int n : {1, n_cpu}) {
        const std::string name = "gemv/" + std::string(strata::ggml_type_name(type)) + "/" +
                                 std::string(strata::kernels::isa_name(isa)) + "/" +
                                 std::to_string(n) + "t";
        benchmark::RegisterBenchmark(name.c_str(), BM_Gemv, type, isa, n)
            ->UseRealTime()
            ->ComputeStatistics("max", max_of)
            ->Unit(benchmark::kMicrosecond);
        if (n_cpu == 1) break;
      }
  benchmark::RegisterBenchmark("int8_peak/avx512", BM_Int8Peak)
      ->ComputeStatistics("max", max_of)
      ->Unit(benchmark::kMillisecond);
  for (GgmlType type : kTypes)
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
      for (bool interleaved : {false, true}) {
        if (interleaved &&
            strata::kernels::interleaved_layout(type) == strata::kernels::WeightLayout::kRows)
          continue;
        for (int64_t t : {1, 2, 3, 4, 8, 32}) {
          const std::string name = "gemm_hot/" + std::string(strata::ggml_type_name(type)) + "/" +
                                   std::string(strata::kernels::isa_name(isa)) + "/" +
                                   (interleaved ? "interleaved/" : "rows/") + std::to_string(t) +
                                   "tok";
          benchmark::RegisterBenchmark(name.c_str(), BM_GemmHot, type, isa, interleaved, t)
              ->ComputeStatistics("max", max_of)
              ->Unit(benchmark::kMicrosecond);
        }
      }
}

}  // namespace

int main(int argc, char** argv) {
  // Our own flag first: --gemv_mib=N sets the rotating weight pool size (default 2048).
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--gemv_mib=", 11) == 0)
      g_pool_bytes = static_cast<size_t>(std::strtoull(argv[i] + 11, nullptr, 10)) << 20;
    else if (std::strncmp(argv[i], "--gemv_rows=", 12) == 0)
      g_rows = std::strtoll(argv[i] + 12, nullptr, 10);
    else if (std::strncmp(argv[i], "--gemv_cols=", 12) == 0)
      g_cols = std::strtoll(argv[i] + 12, nullptr, 10);
    else if (std::strcmp(argv[i], "--gemv_novnni") == 0)
      strata::kernels::set_avxvnni_allowed(false);
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
