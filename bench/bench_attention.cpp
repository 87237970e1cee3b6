// The attention core at decode, per KV cache type: one query token's pass over one GQA group (H
// query heads reading the same K and V rows, kernels::attention_rows_group, as the engine calls it)
// for F32, F16 and Q8_0 rows. Two rates per type, on one thread and in thread CPU time (a shared
// machine distorts that far less than wall time):
//   cached: the same group again and again (its rows stay in L2/L3): the compute ceiling;
//   stream: groups rotated over a pool larger than the caches (as a decode token finds a layer's
//           KV: evicted by the weights streamed since the last token), next to the read probe of
//           bench/read_probe.h in the same process.
// KV bytes / second, and for stream the % of the probe. Outputs are checked against the portable
// kernel on the widened rows (same bits) before timing.
// Run: bench_attention [--n-kv 4096] [--heads 8] [--dim 128] [--pool-mib 1024] [--rounds 5]
//                      [--isa avx2] (the AVX2 kernels on an AVX-512 host, as ISA=avx2 does)
// Results and commands: bench/RESULTS.md ("Session 29", "Session 30").

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

#include "bench/read_probe.h"
#include "io/ggml_type.h"
#include "kernels/attention_core.h"
#include "kernels/gemv.h"
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

std::string arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

enum class Kv { kF32, kF16, kQ8_0 };
const char* kv_name(Kv t) {
  return t == Kv::kF32 ? "f32" : t == Kv::kF16 ? "f16" : "q8_0";
}
size_t row_size(Kv t, uint32_t dim) {
  return t == Kv::kF32 ? 4 * dim : t == Kv::kF16 ? 2 * dim : dim / 32 * 34;
}

// One group's K then V rows (n_kv each) of type t at p, from normal floats.
void fill_group(Kv t, uint32_t n_kv, uint32_t dim, std::mt19937& rng, std::byte* p) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(dim);
  for (uint32_t r = 0; r < 2 * n_kv; ++r) {
    for (auto& f : row) f = normal(rng);
    std::byte* dst = p + size_t{r} * row_size(t, dim);
    if (t == Kv::kF32) {
      std::memcpy(dst, row.data(), 4 * dim);
    } else if (t == Kv::kF16) {
      for (uint32_t i = 0; i < dim; ++i) {
        const uint16_t h = f32_to_fp16(row[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
    } else {
      quantize_row(GgmlType::Q8_0, row.data(), dst, dim);
    }
  }
}

// The rows of the group at p as the kernel takes them.
std::vector<AttentionRow> group_rows(Kv t, const std::byte* p, uint32_t n_kv, uint32_t dim,
                                     uint32_t heads, const float* q) {
  std::vector<AttentionRow> rows(heads);
  const size_t row = row_size(t, dim);
  const std::byte* v = p + size_t{n_kv} * row;
  for (uint32_t h = 0; h < heads; ++h) {
    AttentionRow& a = rows[h];
    a.q = q + size_t{h} * dim;
    a.n_kv = n_kv;
    a.head_dim_k = a.head_dim_v = dim;
    a.scale = 0.088f;
    if (t == Kv::kF32) {
      a.k = reinterpret_cast<const float*>(p);
      a.v = reinterpret_cast<const float*>(v);
      a.k_stride = a.v_stride = dim;
    } else if (t == Kv::kF16) {
      a.k16 = reinterpret_cast<const uint16_t*>(p);
      a.v16 = reinterpret_cast<const uint16_t*>(v);
      a.k_stride = a.v_stride = dim;
    } else {
      a.k8 = p;
      a.v8 = v;
      a.k_stride = a.v_stride = row;
    }
  }
  return rows;
}

uint64_t probe(const uint8_t* p, size_t n) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") ? read_avx512(p, n) : read_avx2(p, n);
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t n_kv = static_cast<uint32_t>(std::stoul(arg(argc, argv, "--n-kv", "4096")));
  const uint32_t heads = static_cast<uint32_t>(std::stoul(arg(argc, argv, "--heads", "8")));
  const uint32_t dim = static_cast<uint32_t>(std::stoul(arg(argc, argv, "--dim", "128")));
  const size_t pool = size_t(std::stoll(arg(argc, argv, "--pool-mib", "1024"))) << 20;
  const int rounds = std::stoi(arg(argc, argv, "--rounds", "5"));
  const std::string isa = arg(argc, argv, "--isa", "auto");
  if (isa == "avx2") {
    set_isa_cap(Isa::kAvx2);
  } else if (isa != "auto") {
    std::fprintf(stderr, "bench_attention: --isa is auto or avx2, not %s\n", isa.c_str());
    return 1;
  }
  if (n_kv == 0 || heads == 0 || heads > kAttentionGroupMax || dim % 32 != 0 || dim == 0 ||
      rounds < 1) {
    std::fprintf(stderr,
                 "bench_attention: need --n-kv >= 1, --heads 1..%u, --dim a multiple of 32, "
                 "--rounds >= 1\n",
                 kAttentionGroupMax);
    return 1;
  }
  std::printf(
      "# attention core, one decode token's pass over a GQA group: %u heads x %u dims, "
      "%u keys; 1 thread, thread CPU time; %s\n",
      heads, dim, n_kv,
      // attention_rows_group's dispatch (kernels/attention_core.cpp): --dim is a multiple of 32.
      attention_pair_one_pass(dim, dim) && heads % 2 == 0 ? "AVX-512 one-pass group kernel"
      : attention_avx2_supported()                        ? "AVX2 group kernel"
                                                          : "portable kernel");
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(size_t{heads} * dim), sc(size_t{heads} * n_kv), out(size_t{heads} * dim),
      want(dim);
  for (auto& f : q) f = normal(rng);
  std::vector<float*> outs(heads);
  for (uint32_t h = 0; h < heads; ++h) outs[h] = out.data() + size_t{h} * dim;

  auto* mem = static_cast<std::byte*>(
      mmap(nullptr, pool, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (mem == MAP_FAILED) {
    std::fprintf(stderr, "bench_attention: mmap of %zu bytes failed\n", pool);
    return 1;
  }
  madvise(mem, pool, MADV_HUGEPAGE);

  std::printf(
      "\n| KV type | bytes / group pass | cached us | cached GB/s | stream us | stream GB/s "
      "| probe GB/s | stream %% of probe |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (Kv t : {Kv::kF32, Kv::kF16, Kv::kQ8_0}) {
    const size_t group_bytes = 2 * size_t{n_kv} * row_size(t, dim);
    const size_t n_groups = std::max<size_t>(1, pool / group_bytes);
    for (size_t g = 0; g < n_groups; ++g) fill_group(t, n_kv, dim, rng, mem + g * group_bytes);
    // The widened twin of group 0 and its portable result: every variant must give these bits.
    {
      std::vector<float> kw(size_t{2} * n_kv * dim);
      const auto rows = group_rows(t, mem, n_kv, dim, heads, q.data());
      for (uint32_t r = 0; r < 2 * n_kv; ++r)
        for (uint32_t i = 0; i < dim; ++i) {
          const std::byte* row = mem + size_t{r} * row_size(t, dim);
          kw[size_t{r} * dim + i] = t == Kv::kF32 ? widen_at(reinterpret_cast<const float*>(row), i)
                                    : t == Kv::kF16
                                        ? widen_at(reinterpret_cast<const uint16_t*>(row), i)
                                        : widen_at(row, i);
        }
      attention_rows_group(rows.data(), heads, sc.data(), outs.data());
      for (uint32_t h = 0; h < heads; ++h) {
        AttentionRow w = rows[h];
        w.k16 = w.v16 = nullptr;
        w.k8 = w.v8 = nullptr;
        w.k = kw.data();
        w.v = kw.data() + size_t{n_kv} * dim;
        w.k_stride = w.v_stride = dim;
        attention_row_portable(w, sc.data(), want.data());
        if (std::memcmp(want.data(), outs[h], 4 * dim) != 0) {
          std::fprintf(stderr, "bench_attention: %s head %u differs from the portable kernel\n",
                       kv_name(t), h);
          return 1;
        }
      }
    }
    std::vector<double> cached, stream, probes;
    for (int round = 0; round < rounds; ++round) {
      const auto rows0 = group_rows(t, mem, n_kv, dim, heads, q.data());
      const int reps = std::max(4, static_cast<int>((64u << 20) / group_bytes));
      double t0 = cpu_seconds();
      for (int r = 0; r < reps; ++r)
        attention_rows_group(rows0.data(), heads, sc.data(), outs.data());
      cached.push_back((cpu_seconds() - t0) / reps);
      t0 = cpu_seconds();
      for (size_t g = 0; g < n_groups; ++g) {
        const auto rows = group_rows(t, mem + g * group_bytes, n_kv, dim, heads, q.data());
        attention_rows_group(rows.data(), heads, sc.data(), outs.data());
      }
      stream.push_back((cpu_seconds() - t0) / double(n_groups));
      t0 = cpu_seconds();
      const uint64_t sink = probe(reinterpret_cast<const uint8_t*>(mem), n_groups * group_bytes);
      probes.push_back(double(n_groups * group_bytes) / (cpu_seconds() - t0) / 1e9);
      if (sink == 42) std::printf(" ");
    }
    std::sort(cached.begin(), cached.end());
    std::sort(stream.begin(), stream.end());
    std::sort(probes.begin(), probes.end());
    const double c = cached[cached.size() / 2], s = stream[stream.size() / 2];
    const double p = probes[probes.size() / 2];
    const double gb = double(group_bytes) / 1e9;
    std::printf("| %s | %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f%% |\n", kv_name(t),
                group_bytes, c * 1e6, gb / c, s * 1e6, gb / s, p, 100.0 * gb / s / p);
  }
  std::printf("\n(median of %d rounds; stream: %zu MiB of groups, each read once a round)\n",
              rounds, pool >> 20);
  munmap(mem, pool);
  return 0;
}
