// REPACK's effect on one kernel: GEMV of expert-shaped matrices streamed from a 4 GiB pool, in the
// file's layout and interleaved (kernels/interleave.h), called in row items as the CPU executor
// calls them, in random matrix order, next to a read-bandwidth probe run in the same process
// between them (the faster of a 256-bit loop and a 512-bit loop with an L1 prefetch). With
// --threads N each thread streams its own share of the matrices (and of the probe buffer) with no
// joins between calls: the kernels' aggregate rate, without the executor's synchronisation. With
// 1 thread the rates are on-CPU (bytes / thread CPU time), which a shared machine distorts far
// less than wall time; with several, wall time. Also the cache-resident rate of one matrix (the
// compute ceiling). Results are checked bit-identical before timing.
// Run: bench_layout [--type Q4_0|Q4_K|Q5_K|Q6_K|Q2_K|Q3_K|IQ4_XS|IQ4_NL|MXFP4|Q8_0]
//                   [--rows N] [--cols N] [--item N] [--rounds N]
//                   [--pool-mib N] [--threads N] [--isa best|avx2|avx2-plain|ref]
//                   [--q4-0-layout auto|x16|both]
// Results and commands: bench/RESULTS.md ("CPU speed, session 4" and "session 5").

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/read_probe.h"
#include "io/ggml_type.h"
#include "kernels/gemv.h"
#include "kernels/interleave.h"
#include "kernels/quant.h"

namespace {

using namespace strata;
using namespace strata::kernels;
using strata::bench::read_avx2;
using strata::bench::read_avx512;

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
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
  // Any type name; one without an interleaved layout is refused below.
  const std::optional<GgmlType> parsed = strata::ggml_type_from_name(type_name);
  if (!parsed) {
    std::fprintf(stderr, "bench_layout: --type %s is not a ggml type name\n", type_name.c_str());
    return 1;
  }
  const GgmlType type = *parsed;
  const int64_t rows = std::stoll(arg(argc, argv, "--rows", "768"));
  const int64_t cols = std::stoll(arg(argc, argv, "--cols", "2048"));
  const int64_t item = std::stoll(arg(argc, argv, "--item", "64"));
  const int rounds = std::stoi(arg(argc, argv, "--rounds", "5"));
  // --isa avx2 (below) reads Q4_0 as kQ4_0x16, as an AVX2 CPU does; --q4-0-layout x16 makes an
  // AVX-512 CPU do so too (kQ4_0x32's pairs against single groups); --q4-0-layout both puts
  // kQ4_0x16 in the first column instead of the file layout, against kQ4_0x32.
  const std::string q4_0_layout = arg(argc, argv, "--q4-0-layout", "auto");
  const bool x16 = arg(argc, argv, "--isa", "best").starts_with("avx2") || q4_0_layout == "x16";
  WeightLayout layout = interleaved_layout(type, rows, cols);
  if (layout == WeightLayout::kQ4_0x32 && x16) layout = WeightLayout::kQ4_0x16;
  const bool both = q4_0_layout == "both";
  if (both && layout != WeightLayout::kQ4_0x32) {
    std::fprintf(stderr,
                 "bench_layout: --q4-0-layout both needs a Q4_0 matrix of 32k rows and an "
                 "AVX-512 CPU (kQ4_0x32)\n");
    return 1;
  }
  const WeightLayout base_layout = both ? WeightLayout::kQ4_0x16 : WeightLayout::kRows;
  const char* base_name = both ? "kQ4_0x16" : "file layout";
  const char* packed_name = both ? "kQ4_0x32" : "interleaved";
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
  if (base_layout != WeightLayout::kRows) {  // the first column's pool in its layout too
    std::vector<uint8_t> tmp(mat);
    for (size_t m = 0; m < n_mat; ++m) {
      interleave(base_layout, file + m * mat, tmp.data(), rows, cols);
      std::memcpy(file + m * mat, tmp.data(), mat);
    }
  }
  for (float& v : f) v = normal(rng);
  const GgmlType vdt = vec_dot_type(type);
  std::vector<uint8_t> xq(ggml_row_bytes(vdt, static_cast<uint64_t>(cols)));
  quantize_activation_row(vdt, f.data(), xq.data(), cols);
  // --isa avx2: the kernels a CPU without AVX-512 runs (the probe keeps its faster loop), with
  // AVX-VNNI's where the CPU has it; avx2-plain: without (as ISA=avx2-plain).
  const std::string isa_arg = arg(argc, argv, "--isa", "best");
  if (isa_arg == "avx2-plain") set_avxvnni_allowed(false);
  const Isa isa = isa_arg.starts_with("avx2") ? Isa::kAvx2
                  : isa_arg == "ref"          ? Isa::kRef
                                              : best_isa();
  const GemvKernels k_file = gemv_kernels(type, base_layout, isa);
  const GemvKernels k_packed = gemv_kernels(type, layout, isa);
  std::vector<float> y0(static_cast<size_t>(rows)), y1(static_cast<size_t>(rows));
  for (size_t m = 0; m < 8; ++m) {
    k_file.gemv(file + m * mat, row_bytes, xq.data(), y0.data(), 0, rows, cols);
    k_packed.gemv(packed + m * mat, row_bytes, xq.data(), y1.data(), 0, rows, cols);
    if (std::memcmp(y0.data(), y1.data(), y0.size() * sizeof(float)) != 0) {
      std::fprintf(stderr, "bench_layout: %s result differs from the %s's\n", packed_name,
                   base_name);
      return 1;
    }
  }
  std::vector<size_t> order(n_mat);
  for (size_t i = 0; i < n_mat; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  const bool wide = __builtin_cpu_supports("avx512f");
  const int threads = std::max(1, std::stoi(arg(argc, argv, "--threads", "1")));
  // fn(t) on threads t = 0..threads-1 (the caller is 0); returns seconds: thread CPU time with one
  // thread, wall time with several.
  auto timed = [&](auto&& fn) {
    const double c0 = cpu_seconds();
    const auto w0 = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (int t = 1; t < threads; ++t) workers.emplace_back([&fn, t] { fn(t); });
    fn(0);
    for (auto& w : workers) w.join();
    return threads == 1
               ? cpu_seconds() - c0
               : std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  };
  std::atomic<uint64_t> sink{0};
  // Each thread reads its own contiguous share of the probe buffer, with the faster probe loop.
  auto probe_gbs = [&] {
    const size_t per = pool / static_cast<size_t>(threads) / 256 * 256;
    double best = 0;
    for (int wide_loop = 0; wide_loop <= (wide ? 1 : 0); ++wide_loop) {
      const double s = timed([&](int t) {
        const uint8_t* p = probe + per * static_cast<size_t>(t);
        sink ^= wide_loop ? read_avx512(p, per) : read_avx2(p, per);
      });
      best = std::max(best, static_cast<double>(per) * threads / s / 1e9);
    }
    return best;
  };
  // Each thread streams its own share of the shuffled matrices (no joins between calls).
  std::vector<std::vector<float>> ys(static_cast<size_t>(threads),
                                     std::vector<float>(static_cast<size_t>(rows)));
  auto stream = [&](const GemvKernels& k, const uint8_t* base) {
    const size_t per = n_mat / static_cast<size_t>(threads);
    const double s = timed([&](int t) {
      float* y = ys[static_cast<size_t>(t)].data();
      for (size_t i = per * static_cast<size_t>(t); i < per * static_cast<size_t>(t + 1); ++i)
        for (int64_t r = 0; r < rows; r += item)
          k.gemv(base + order[i] * mat, row_bytes, xq.data(), y, r, std::min(r + item, rows), cols);
    });
    return static_cast<double>(per * static_cast<size_t>(threads) * mat) / s / 1e9;
  };
  std::printf(
      "%s %lld x %lld, %zu matrices (%.2f GiB), items of %lld rows, %d thread(s), %s kernels, %s\n",
      type_name.c_str(), static_cast<long long>(rows), static_cast<long long>(cols), n_mat,
      static_cast<double>(n_mat * mat) / (1 << 30), static_cast<long long>(item), threads,
      std::string(isa_name(gemv_kernel_isa(type, isa))).c_str(),
      threads == 1 ? "on-CPU rates" : "wall-clock rates");
  std::printf("round  probe GB/s  %s GB/s (%% probe)  %s GB/s (%% probe)  ratio\n", base_name,
              packed_name);
  // Warm-up: the first pass over a fresh pool runs slow on some kernels (page tables, THP).
  probe_gbs();
  stream(k_file, file);
  stream(k_packed, packed);
  // The two kernels in alternating order (odd rounds second one first); the ratio of each round's
  // pair is the steadier number on a shared host.
  std::vector<double> ratios;
  for (int rd = 0; rd < rounds; ++rd) {
    const double pr = probe_gbs();
    double a = 0, b = 0;
    if (rd % 2 == 0) {
      a = stream(k_file, file);
      b = stream(k_packed, packed);
    } else {
      b = stream(k_packed, packed);
      a = stream(k_file, file);
    }
    ratios.push_back(b / a);
    std::printf("%5d  %10.2f  %10.2f (%3.0f%%)  %10.2f (%3.0f%%)  %.3f\n", rd, pr, a, 100 * a / pr,
                b, 100 * b / pr, b / a);
  }
  std::sort(ratios.begin(), ratios.end());
  if (!ratios.empty())
    std::printf("%s / %s per round: median %.3f, quartiles %.3f-%.3f\n", packed_name, base_name,
                ratios[ratios.size() / 2], ratios[ratios.size() / 4],
                ratios[(3 * ratios.size()) / 4]);
  const int reps = 1000;
  double t0 = cpu_seconds();
  for (int i = 0; i < reps; ++i) k_file.gemv(file, row_bytes, xq.data(), y0.data(), 0, rows, cols);
  const double ta = cpu_seconds() - t0;
  t0 = cpu_seconds();
  for (int i = 0; i < reps; ++i)
    k_packed.gemv(packed, row_bytes, xq.data(), y1.data(), 0, rows, cols);
  const double tb = cpu_seconds() - t0;
  std::printf("cache-resident (one matrix, %d calls): %s %.1f GB/s, %s %.1f GB/s\n", reps,
              base_name, reps * static_cast<double>(mat) / ta / 1e9, packed_name,
              reps * static_cast<double>(mat) / tb / 1e9);
  return sink.load() == 42 ? 2 : 0;
}
