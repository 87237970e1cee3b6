// REPACK's effect on one kernel: GEMV of expert-shaped matrices streamed from a 4 GiB pool, in the
// file's layout and interleaved (kernels/interleave.h), called in row items as the CPU executor
// calls them, in random matrix order, next to a read-bandwidth probe (512-bit or 256-bit loads)
// run in the same process between them. On-CPU rates (bytes / thread CPU time, 1 thread): a
// shared machine distorts them far less than wall time. Also the cache-resident rate of one
// matrix (the compute ceiling). Results are checked bit-identical before timing.
// Run: bench_layout [--type Q4_0|Q4_K] [--rows N] [--cols N] [--item N] [--rounds N]
//                   [--pool-mib N]
// Results and commands: bench/RESULTS.md ("CPU speed, session 4").
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemv.h"
#include "kernels/interleave.h"
#include "kernels/quant.h"

namespace {

using namespace strata;
using namespace strata::kernels;

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* p, size_t n) {
  __m512i a = _mm512_setzero_si512(), b = a;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a = _mm512_xor_si512(a, _mm512_load_si512(p + i));
    b = _mm512_xor_si512(b, _mm512_load_si512(p + i + 64));
  }
  alignas(64) uint64_t o[8];
  _mm512_store_si512(o, _mm512_xor_si512(a, b));
  return o[0];
}
__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a;
  for (size_t i = 0; i + 64 <= n; i += 64) {
    a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
  }
  alignas(32) uint64_t o[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(o), _mm256_xor_si256(a, b));
  return o[0];
}

uint8_t* huge_alloc(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "bench_layout: mmap of %zu bytes failed\n", n);
    std::exit(1);
  }
  madvise(p, n, MADV_HUGEPAGE);
  return static_cast<uint8_t*>(p);
}

std::string arg(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind(name + "=", 0) == 0) return a.substr(name.size() + 1);
    if (a == name && i + 1 < argc) return argv[i + 1];
  }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string type_name = arg(argc, argv, "--type", "Q4_0");
  const GgmlType type = type_name == "Q4_K" ? GgmlType::Q4_K : GgmlType::Q4_0;
  const int64_t rows = std::stoll(arg(argc, argv, "--rows", "768"));
  const int64_t cols = std::stoll(arg(argc, argv, "--cols", "2048"));
  const int64_t item = std::stoll(arg(argc, argv, "--item", "64"));
  const int rounds = std::stoi(arg(argc, argv, "--rounds", "5"));
  const WeightLayout layout = interleaved_layout(type, rows, cols);
  if (layout == WeightLayout::kRows || item % 16 != 0) {
    std::fprintf(stderr, "bench_layout: no interleaved layout for %s %lld x %lld (item %lld)\n",
                 type_name.c_str(), static_cast<long long>(rows), static_cast<long long>(cols),
                 static_cast<long long>(item));
    return 1;
  }
  const size_t row_bytes = ggml_row_bytes(type, static_cast<uint64_t>(cols));
  const size_t mat = row_bytes * static_cast<size_t>(rows);
  // The pool (and the probe's buffer) must dwarf the last-level cache (this VM reports 480 MiB).
  const size_t pool = size_t(std::stoll(arg(argc, argv, "--pool-mib", "4096"))) << 20;
  const size_t n_mat = pool / mat;
  uint8_t* file = huge_alloc(n_mat * mat);
  uint8_t* packed = huge_alloc(n_mat * mat);
  uint8_t* probe = huge_alloc(pool);
  std::memset(probe, 1, pool);
  // 8 distinct random matrices, repeated through the pool (memory traffic is what counts).
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(cols));
  for (size_t m = 0; m < n_mat; ++m) {
    if (m < 8) {
      for (int64_t r = 0; r < rows; ++r) {
        for (float& v : f) v = normal(rng);
        quantize_row(type, f.data(), file + m * mat + r * row_bytes, cols);
      }
    } else {
      std::memcpy(file + m * mat, file + (m % 8) * mat, mat);
    }
    interleave(layout, file + m * mat, packed + m * mat, rows, cols);
  }
  for (float& v : f) v = normal(rng);
  const GgmlType vdt = vec_dot_type(type);
  std::vector<uint8_t> xq(ggml_row_bytes(vdt, static_cast<uint64_t>(cols)));
  quantize_activation_row(vdt, f.data(), xq.data(), cols);
  const GemvKernels k_file = gemv_kernels(type);
  const GemvKernels k_packed = gemv_kernels(type, layout);
  std::vector<float> y0(static_cast<size_t>(rows)), y1(static_cast<size_t>(rows));
  for (size_t m = 0; m < 8; ++m) {
    k_file.gemv(file + m * mat, row_bytes, xq.data(), y0.data(), 0, rows, cols);
    k_packed.gemv(packed + m * mat, row_bytes, xq.data(), y1.data(), 0, rows, cols);
    if (std::memcmp(y0.data(), y1.data(), y0.size() * sizeof(float)) != 0) {
      std::fprintf(stderr, "bench_layout: interleaved result differs from the file layout's\n");
      return 1;
    }
  }
  std::vector<size_t> order(n_mat);
  for (size_t i = 0; i < n_mat; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  const bool wide = __builtin_cpu_supports("avx512f");
  auto stream = [&](const GemvKernels& k, const uint8_t* base, float* y) {
    const double t0 = cpu_seconds();
    for (size_t m : order)
      for (int64_t r = 0; r < rows; r += item)
        k.gemv(base + m * mat, row_bytes, xq.data(), y, r, std::min(r + item, rows), cols);
    return static_cast<double>(n_mat * mat) / (cpu_seconds() - t0) / 1e9;
  };
  std::printf("%s %lld x %lld, %zu matrices (%.2f GiB), items of %lld rows, %s probe\n",
              type_name.c_str(), static_cast<long long>(rows), static_cast<long long>(cols), n_mat,
              static_cast<double>(n_mat * mat) / (1 << 30), static_cast<long long>(item),
              wide ? "512-bit" : "256-bit");
  std::printf("round  probe GB/s  file layout GB/s (%% probe)  interleaved GB/s (%% probe)\n");
  // Warm-up: the first pass over a fresh pool runs slow on some kernels (page tables, THP).
  uint64_t sink = wide ? read_avx512(probe, pool) : read_avx2(probe, pool);
  stream(k_file, file, y0.data());
  stream(k_packed, packed, y1.data());
  for (int rd = 0; rd < rounds; ++rd) {
    const double t0 = cpu_seconds();
    sink ^= wide ? read_avx512(probe, pool) : read_avx2(probe, pool);
    const double pr = static_cast<double>(pool) / (cpu_seconds() - t0) / 1e9;
    const double a = stream(k_file, file, y0.data());
    const double b = stream(k_packed, packed, y1.data());
    std::printf("%5d  %10.2f  %10.2f (%3.0f%%)  %10.2f (%3.0f%%)\n", rd, pr, a, 100 * a / pr, b,
                100 * b / pr);
  }
  const int reps = 1000;
  double t0 = cpu_seconds();
  for (int i = 0; i < reps; ++i) k_file.gemv(file, row_bytes, xq.data(), y0.data(), 0, rows, cols);
  const double ta = cpu_seconds() - t0;
  t0 = cpu_seconds();
  for (int i = 0; i < reps; ++i)
    k_packed.gemv(packed, row_bytes, xq.data(), y1.data(), 0, rows, cols);
  const double tb = cpu_seconds() - t0;
  std::printf(
      "cache-resident (one matrix, %d calls): file layout %.1f GB/s, interleaved %.1f GB/s\n", reps,
      reps * static_cast<double>(mat) / ta / 1e9, reps * static_cast<double>(mat) / tb / 1e9);
  return sink == 42 ? 2 : 0;
}
