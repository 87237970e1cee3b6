// The routed-expert part of one decode step, measured on its own: CpuExpertExecutor::compute for
// one token's top-k experts per layer, over several layers of Qwen3-30B-A3B-shaped experts
// (128 experts x 768 x 2048, top-8 by default) that are far larger than the caches, with random
// routing. Reports the expert GEMV effective read bandwidth (expert weight bytes read / time in
// compute) next to a read-bandwidth probe taken in the same process, interleaved with it, so a
// busy machine moves both alike. With 1 thread it also reports on-CPU rates (bytes / thread CPU
// time), which a shared machine distorts far less than wall time.
// Run: bench_moe [--type Q4_0|Q4_K|Q8_0|MXFP4] [--threads N] [--layers N] [--steps N]
//                [--rounds N] [--k N] [--tokens N] [--hot] [--huge=0|1] [--repack=0|1]
// Results and commands: bench/RESULTS.md ("CPU speed").
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/read_probe.h"
#include "engine/model_config.h"
#include "engine/moe.h"
#include "engine/weights.h"
#include "kernels/gemv.h"
#include "kernels/interleave.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"

namespace {

using strata::GgmlType;
using namespace strata::engine;
using strata::bench::read_avx2;
using strata::bench::read_avx512;

double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// --huge=0: no MADV_HUGEPAGE on the expert layers (4 KiB pages under THP=madvise); the probe
// buffer always asks for huge pages.
bool g_huge = true;
// --repack=1: every expert matrix interleaved as REPACK does for RAM homes (kernels/interleave.h).
bool g_repack = false;

uint8_t* alloc_huge(size_t bytes, bool huge = true) {
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "bench_moe: mmap of %zu bytes failed\n", bytes);
    std::exit(1);
  }
  if (huge) madvise(m, bytes, MADV_HUGEPAGE);
  return static_cast<uint8_t*>(m);
}

struct Rate {
  double wall_gbs = 0;
  double cpu_gbs = 0;  // 1 thread only
};

Rate probe(strata::kernels::ThreadPool& pool, const uint8_t* buf, size_t bytes) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int n = pool.size();
  const size_t per = (bytes / n) & ~size_t{255};
  const double gb = static_cast<double>(per * n) / 1e9;
  Rate best;
  for (int wide = 0; wide <= (avx512 ? 1 : 0); ++wide) {
    volatile uint64_t sink = 0;
    const double c0 = thread_cpu_seconds();
    const double t0 = wall_seconds();
    pool.run([&](int t, int) {
      const uint8_t* p = buf + per * t;
      sink = sink + (wide ? read_avx512(p, per) : read_avx2(p, per));
    });
    const double wall = wall_seconds() - t0;
    const double cpu = thread_cpu_seconds() - c0;
    best.wall_gbs = std::max(best.wall_gbs, gb / wall);
    if (n == 1) best.cpu_gbs = std::max(best.cpu_gbs, gb / cpu);
  }
  return best;
}

struct Args {
  GgmlType type = GgmlType::Q4_0;
  int threads = 1;
  int layers = 6;
  int steps = 96;
  int rounds = 5;
  int k = 8;
  int tokens = 1;
  bool hot = false;  // --hot: the same k experts of layer 0 every step (cache-resident)
};

GgmlType parse_type(const std::string& s) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::MXFP4,
                     GgmlType::Q5_0, GgmlType::Q6_K})
    if (s == strata::ggml_type_name(t)) return t;
  std::fprintf(stderr, "bench_moe: unknown --type %s\n", s.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto val = [&](const char* flag) -> const char* {
      const size_t n = std::strlen(flag);
      if (s.compare(0, n, flag) == 0 && s.size() > n && s[n] == '=') return argv[i] + n + 1;
      return nullptr;
    };
    if (const char* v = val("--type")) {
      a.type = parse_type(v);
    } else if (const char* v2 = val("--threads")) {
      a.threads = std::atoi(v2);
    } else if (const char* v3 = val("--layers")) {
      a.layers = std::atoi(v3);
    } else if (const char* v4 = val("--steps")) {
      a.steps = std::atoi(v4);
    } else if (const char* v5 = val("--rounds")) {
      a.rounds = std::atoi(v5);
    } else if (const char* v6 = val("--k")) {
      a.k = std::atoi(v6);
    } else if (const char* v7 = val("--tokens")) {
      a.tokens = std::atoi(v7);
    } else if (const char* v8 = val("--huge")) {
      g_huge = std::atoi(v8) != 0;
    } else if (const char* v9 = val("--repack")) {
      g_repack = std::atoi(v9) != 0;
    } else if (s == "--hot") {
      a.hot = true;
    } else {
      std::fprintf(stderr, "bench_moe: unknown argument %s (flags take --name=value)\n", argv[i]);
      std::exit(2);
    }
  }
  if (a.threads < 1 || a.layers < 1 || a.steps < 1 || a.rounds < 1 || a.k < 1 || a.k > 128 ||
      a.tokens < 1) {
    std::fprintf(stderr, "bench_moe: bad argument value\n");
    std::exit(2);
  }
  return a;
}

WeightView view(GgmlType t, int64_t cols, int64_t rows, int64_t n_expert, const uint8_t* data) {
  WeightView w;
  w.type = t;
  w.ne = {cols, rows, n_expert, 1};
  w.row_bytes = strata::ggml_row_bytes(t, static_cast<uint64_t>(cols));
  w.n_bytes = w.row_bytes * static_cast<uint64_t>(rows * n_expert);
  w.data = reinterpret_cast<const std::byte*>(data);
  return w;
}

// Fills [p, p + bytes) with 64 distinct random rows of `type` (row_bytes each), tiled.
void fill_rows(uint8_t* p, size_t bytes, GgmlType type, int64_t cols, std::mt19937& rng) {
  const size_t row_bytes = strata::ggml_row_bytes(type, static_cast<uint64_t>(cols));
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x(static_cast<size_t>(cols));
  std::vector<uint8_t> rows(64 * row_bytes);
  for (int r = 0; r < 64; ++r) {
    for (auto& v : x) v = normal(rng);
    strata::kernels::quantize_row(type, x.data(), rows.data() + r * row_bytes, cols);
  }
  for (size_t off = 0; off < bytes; off += rows.size())
    std::memcpy(p + off, rows.data(), std::min(rows.size(), bytes - off));
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  constexpr int64_t kEmbd = 2048, kFf = 768, kExperts = 128;

  ModelConfig cfg;
  cfg.n_layer = static_cast<uint32_t>(a.layers);
  cfg.n_embd = kEmbd;
  cfg.n_expert = kExperts;
  cfg.n_expert_used = static_cast<uint32_t>(a.k);
  cfg.n_ff_exp = kFf;
  cfg.n_head_arr.assign(cfg.n_layer, 32);
  cfg.n_head_kv_arr.assign(cfg.n_layer, 4);
  cfg.n_ff_arr.assign(cfg.n_layer, 0);
  cfg.is_moe_arr.assign(cfg.n_layer, 1);
  cfg.is_swa_arr.assign(cfg.n_layer, 0);

  const size_t mat_bytes = strata::ggml_row_bytes(a.type, kEmbd) * kFf;  // gate, up, down alike
  const size_t layer_bytes = 3 * mat_bytes * kExperts;
  std::mt19937 rng(1234);
  std::vector<ExpertStack> stacks(static_cast<size_t>(a.layers));
  std::vector<uint8_t*> mem;
  for (int l = 0; l < a.layers; ++l) {
    uint8_t* p = alloc_huge(layer_bytes, g_huge);
    mem.push_back(p);
    fill_rows(p, 2 * mat_bytes * kExperts, a.type, kEmbd, rng);
    fill_rows(p + 2 * mat_bytes * kExperts, mat_bytes * kExperts, a.type, kFf, rng);
    ExpertStack& s = stacks[static_cast<size_t>(l)];
    s.n_expert = kExperts;
    s.n_embd = kEmbd;
    s.n_ff = kFf;
    s.gate = view(a.type, kEmbd, kFf, kExperts, p);
    s.up = view(a.type, kEmbd, kFf, kExperts, p + mat_bytes * kExperts);
    s.down = view(a.type, kFf, kEmbd, kExperts, p + 2 * mat_bytes * kExperts);
    if (g_repack) {
      for (WeightView* w : {&s.gate, &s.up, &s.down}) {
        const auto layout = strata::kernels::interleaved_layout(a.type, w->ne[1], w->ne[0]);
        if (layout == strata::kernels::WeightLayout::kRows) continue;
        for (int64_t e = 0; e < kExperts; ++e)
          strata::kernels::interleave_in_place(
              layout, const_cast<std::byte*>(w->data) + e * w->row_bytes * w->ne[1], w->ne[1],
              w->ne[0]);
        w->layout = layout;
      }
    }
  }
  // Far past the LLC (this VM reports 480 MiB; a 1 GiB buffer read partly from it).
  const size_t probe_bytes = size_t{4} << 30;
  uint8_t* probe_buf = alloc_huge(probe_bytes);
  std::memset(probe_buf, 1, probe_bytes);

  strata::kernels::ThreadPool pool(a.threads);
  const uint32_t n_tok = static_cast<uint32_t>(a.tokens);
  const uint32_t max_rows = n_tok * static_cast<uint32_t>(a.k);
  CpuExpertExecutor exec(pool, cfg, max_rows);
  Dispatch d(max_rows, kExperts);
  std::vector<float> x(size_t{n_tok} * kEmbd), y(size_t{max_rows} * kEmbd);
  std::normal_distribution<float> act(0.0f, 1.0f);
  for (auto& v : x) v = act(rng);
  std::vector<float> probs(size_t{n_tok} * kExperts), weights(max_rows);
  std::vector<int32_t> topk(max_rows);
  Routing r;
  r.n_tokens = n_tok;
  r.n_expert = kExperts;
  r.k = static_cast<uint32_t>(a.k);
  r.probs = probs.data();
  r.topk = topk.data();
  r.weights = weights.data();
  std::vector<int32_t> ids(kExperts);
  std::iota(ids.begin(), ids.end(), 0);

  std::printf(
      "bench_moe: type %s, %d thread(s), %d layers x %lld experts (%.0f MiB each), top-%d, "
      "%d token(s)/step, %d steps x %d rounds\n",
      std::string(strata::ggml_type_name(a.type)).c_str(), a.threads, a.layers,
      static_cast<long long>(kExperts), layer_bytes / 1048576.0, a.k, a.tokens, a.steps, a.rounds);
  std::vector<double> moe_wall, moe_cpu, pr_wall, pr_cpu, bare_items, bare_whole;
  const strata::kernels::GemvKernels bare =
      strata::kernels::gemv_kernels(a.type, stacks[0].gate.layout);
  std::vector<uint8_t> bare_xq(
      strata::ggml_row_bytes(strata::kernels::vec_dot_type(a.type), kEmbd));
  std::vector<uint8_t> bare_hq(strata::ggml_row_bytes(strata::kernels::vec_dot_type(a.type), kFf));
  std::vector<float> bare_y(2 * kFf + kEmbd);
  {
    std::vector<float> v(kEmbd);
    for (auto& e : v) e = act(rng);
    strata::kernels::quantize_row(strata::kernels::vec_dot_type(a.type), v.data(), bare_xq.data(),
                                  kEmbd);
    strata::kernels::quantize_row(strata::kernels::vec_dot_type(a.type), v.data(), bare_hq.data(),
                                  kFf);
  }
  // The same kind of steps with the bare kernels on the calling thread, no executor: each
  // routed expert's gate and up in 64-row calls alternating as the executor's items do ("items"),
  // or one call per matrix ("whole"); activations quantized once outside the timing.
  constexpr int64_t kItemRows = 64;  // engine/moe.cpp's kRowBlock
  auto run_bare = [&] {
    for (int mode = 0; mode < 2 && a.threads == 1 && a.tokens == 1; ++mode) {
      uint64_t bare_bytes = 0;
      double bare_cpu = 0;
      for (int step = 0; step < a.steps; ++step) {
        for (int l = 0; l < a.layers; ++l) {
          if (!a.hot) std::shuffle(ids.begin(), ids.end(), rng);
          std::sort(ids.begin(), ids.begin() + a.k);
          const ExpertStack& s = stacks[a.hot ? 0 : static_cast<size_t>(l)];
          const double c0 = thread_cpu_seconds();
          for (int j = 0; j < a.k; ++j) {
            const ExpertSlice slice = s.expert_slice(static_cast<uint32_t>(ids[j]));
            const MatrixRef g = s.gate_matrix(slice), u = s.up_matrix(slice);
            const MatrixRef dn = s.down_matrix(slice);
            if (mode == 0) {
              for (int64_t r = 0; r < kFf; r += kItemRows) {
                bare.gemv(g.data, g.row_bytes, bare_xq.data(), bare_y.data(), r, r + kItemRows,
                          kEmbd);
                bare.gemv(u.data, u.row_bytes, bare_xq.data(), bare_y.data() + kFf, r,
                          r + kItemRows, kEmbd);
              }
              for (int64_t r = 0; r < kEmbd; r += kItemRows)
                bare.gemv(dn.data, dn.row_bytes, bare_hq.data(), bare_y.data(), r, r + kItemRows,
                          kFf);
            } else {
              bare.gemv(g.data, g.row_bytes, bare_xq.data(), bare_y.data(), 0, kFf, kEmbd);
              bare.gemv(u.data, u.row_bytes, bare_xq.data(), bare_y.data() + kFf, 0, kFf, kEmbd);
              bare.gemv(dn.data, dn.row_bytes, bare_hq.data(), bare_y.data(), 0, kEmbd, kFf);
            }
          }
          bare_cpu += thread_cpu_seconds() - c0;
          bare_bytes += static_cast<uint64_t>(a.k) * 3 * mat_bytes;
        }
      }
      (mode == 0 ? bare_items : bare_whole).push_back(bare_bytes / 1e9 / bare_cpu);
    }
  };
  for (int round = 0; round < a.rounds; ++round) {
    const Rate pr = probe(pool, probe_buf, probe_bytes);
    if (round % 2 == 1) run_bare();  // alternate which goes first
    pr_wall.push_back(pr.wall_gbs);
    pr_cpu.push_back(pr.cpu_gbs);
    uint64_t bytes = 0;
    double wall = 0, cpu = 0;
    for (int step = 0; step < a.steps; ++step) {
      for (int l = 0; l < a.layers; ++l) {
        for (uint32_t t = 0; t < n_tok; ++t) {
          if (!a.hot) std::shuffle(ids.begin(), ids.end(), rng);
          std::sort(ids.begin(), ids.begin() + a.k);
          for (int j = 0; j < a.k; ++j) {
            topk[t * r.k + j] = ids[j];
            weights[t * r.k + j] = 1.0f / a.k;
          }
        }
        const ExpertStack& s = stacks[a.hot ? 0 : static_cast<size_t>(l)];
        dispatch(r, s, d);
        const auto& jobs = d.jobs[0];
        bytes += jobs.size() * 3 * mat_bytes;
        const double c0 = thread_cpu_seconds();
        const double t0 = wall_seconds();
        exec.compute(s, jobs, d.row_token.data(), x.data(), y.data());
        wall += wall_seconds() - t0;
        cpu += thread_cpu_seconds() - c0;
      }
    }
    moe_wall.push_back(bytes / 1e9 / wall);
    moe_cpu.push_back(a.threads == 1 ? bytes / 1e9 / cpu : 0.0);
    if (round % 2 == 0) run_bare();

    std::printf(
        "round %d: probe %.2f GB/s wall, %.2f on-cpu | experts %.2f GB/s wall (%.0f%% of "
        "probe)",
        round, pr.wall_gbs, pr.cpu_gbs, moe_wall.back(), 100.0 * moe_wall.back() / pr.wall_gbs);
    if (a.threads == 1)
      std::printf(" %.2f GB/s on-cpu (%.0f%% of probe on-cpu)", moe_cpu.back(),
                  100.0 * moe_cpu.back() / pr.cpu_gbs);
    if (!bare_items.empty())
      std::printf(" | bare kernels %.2f (items) / %.2f (whole) GB/s on-cpu (%.0f%% / %.0f%%)",
                  bare_items.back(), bare_whole.back(), 100.0 * bare_items.back() / pr.cpu_gbs,
                  100.0 * bare_whole.back() / pr.cpu_gbs);
    std::printf(" | %.3f ms/layer\n", 1e3 * wall / (a.steps * a.layers));
  }
  auto best = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  auto worst = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  std::printf(
      "best: probe %.2f GB/s wall (min %.2f), experts %.2f GB/s wall (min %.2f) = %.0f%% "
      "of best probe",
      best(pr_wall), worst(pr_wall), best(moe_wall), worst(moe_wall),
      100.0 * best(moe_wall) / best(pr_wall));
  if (a.threads == 1)
    std::printf("; on-cpu: probe %.2f, experts %.2f GB/s = %.0f%%", best(pr_cpu), best(moe_cpu),
                100.0 * best(moe_cpu) / best(pr_cpu));
  if (!bare_items.empty())
    std::printf("; bare kernels %.2f (items) / %.2f (whole) = %.0f%% / %.0f%%", best(bare_items),
                best(bare_whole), 100.0 * best(bare_items) / best(pr_cpu),
                100.0 * best(bare_whole) / best(pr_cpu));
  std::printf("\n");
  for (uint8_t* p : mem) munmap(p, layer_bytes);
  munmap(probe_buf, probe_bytes);
  return 0;
}
