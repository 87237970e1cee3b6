// Prefill's dense matrices: strata's own blocked GEMM against oneDNN's on the same shapes.
// Issue 8 asks for prefill's dense matrices through oneDNN, or through our own blocked kernels if
// those are faster: this shows which. One chunk of T tokens through one weight matrix (the 30B's
// attention q: 4096 x 2048, its o: 2048 x 4096), best of R repetitions after a warm-up:
//   - strata: kernels::gemm over the matrix REPACK leaves in RAM (the interleaved layout of a
//     quantized type, as prefill runs it), the activation quantization included;
//   - oneDNN sgemm: the same weights dequantized to F32 (4x the bytes, but prefill is
//     compute-bound), X · W^T;
//   - oneDNN u8s8s32: the weights as int8 with no scales at all — less work than any 4-bit format
//     needs, so a lower bound on the time an int8 oneDNN path could reach.
// oneDNN's threads are its CPU runtime's (OpenMP: OMP_NUM_THREADS); strata's pool has --threads.
// Run: OMP_NUM_THREADS=2 bench_prefill_dense [--type=Q4_0|Q4_K] [--tokens=512] [--threads=2]
//                                            [--reps=3]
// Results and commands: bench/RESULTS.md (session 41).
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io/ggml_type.h"
#include "kernels/gemv.h"
#include "kernels/interleave.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"

namespace {

using namespace strata;
using namespace strata::kernels;

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "bench_prefill_dense: %s\n", what.c_str());
  std::exit(2);
}

// --name=value flags; anything else, or a flag this bench does not take, is an error.
std::string arg(int argc, char** argv, const std::string& name, const std::string& def) {
  static const char* const kFlags[] = {"type", "tokens", "threads", "reps"};
  std::string value = def;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string flag =
        a.starts_with("--") && eq != std::string::npos ? a.substr(2, eq - 2) : std::string();
    if (std::find(std::begin(kFlags), std::end(kFlags), flag) == std::end(kFlags))
      usage_error("unknown argument " + a + " (flags: --type= --tokens= --threads= --reps=)");
    if (flag == name) value = a.substr(eq + 1);
  }
  return value;
}

// An integer flag in [lo, hi].
int64_t int_arg(int argc, char** argv, const std::string& name, int64_t def, int64_t lo,
                int64_t hi) {
  const std::string s = arg(argc, argv, name, std::to_string(def));
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
    usage_error("--" + name + "=" + s + ": want an integer from " + std::to_string(lo) + " to " +
                std::to_string(hi));
  return v;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best wall seconds of reps calls of fn, after one warm-up call.
// The other engine's threads (OpenMP's, the pool's) spin a while after their last region before
// they sleep: each measurement starts half a second after the previous one.
template <typename Fn>
double best_of(int reps, Fn&& fn) {
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now();
    fn();
    best = std::min(best, now() - t0);
  }
  return best;
}

void check(dnnl_status_t s, const char* what) {
  if (s != dnnl_success) {
    std::fprintf(stderr, "bench_prefill_dense: %s failed (oneDNN status %d)\n", what,
                 static_cast<int>(s));
    std::exit(1);
  }
}

void run_shape(GgmlType type, int64_t n_rows, int64_t n_cols, int64_t n_tok, ThreadPool& pool,
               int reps) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const size_t row_bytes = ggml_row_bytes(type, static_cast<uint64_t>(n_cols));
  std::vector<float> wf(static_cast<size_t>(n_rows * n_cols));
  for (float& v : wf) v = normal(rng);
  std::vector<uint8_t> wq(row_bytes * static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r)
    quantize_row(type, wf.data() + r * n_cols, wq.data() + r * row_bytes, n_cols);
  // What oneDNN multiplies: the same (quantized) weights, dequantized.
  for (int64_t r = 0; r < n_rows; ++r)
    dequantize_row(type, wq.data() + r * row_bytes, wf.data() + r * n_cols, n_cols);
  const WeightLayout layout = interleaved_layout(type, n_rows, n_cols);
  std::vector<uint8_t> packed(wq.size());
  interleave(layout, wq.data(), packed.data(), n_rows, n_cols);

  std::vector<float> x(static_cast<size_t>(n_tok * n_cols));
  for (float& v : x) v = normal(rng) * 50.0f;
  const GgmlType vdt = vec_dot_type(type);
  const size_t xq_stride = ggml_row_bytes(vdt, static_cast<uint64_t>(n_cols));
  std::vector<uint8_t> xq(xq_stride * static_cast<size_t>(n_tok));
  std::vector<float> y(static_cast<size_t>(n_tok * n_rows));

  const double t_ours = best_of(reps, [&] {
    pool.parallel_for(n_tok, {}, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t)
        quantize_activation_row(vdt, x.data() + t * n_cols, xq.data() + t * xq_stride, n_cols);
    });
    gemm(&pool, type, layout, packed.data(), row_bytes, xq.data(), xq_stride, y.data(),
         static_cast<size_t>(n_rows), n_tok, n_rows, n_cols);
  });

  std::vector<float> c(y.size());
  const double t_sgemm = best_of(reps, [&] {
    check(dnnl_sgemm('N', 'T', n_tok, n_rows, n_cols, 1.0f, x.data(), n_cols, wf.data(), n_cols,
                     0.0f, c.data(), n_rows),
          "dnnl_sgemm");
  });

  std::vector<uint8_t> xu8(x.size());
  std::vector<int8_t> ws8(wf.size());
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& v : xu8) v = static_cast<uint8_t>(byte(rng));
  for (int8_t& v : ws8) v = static_cast<int8_t>(byte(rng) - 128);
  std::vector<int32_t> c32(y.size());
  const int32_t co = 0;
  const double t_s8 = best_of(reps, [&] {
    check(dnnl_gemm_u8s8s32('N', 'T', 'F', n_tok, n_rows, n_cols, 1.0f, xu8.data(), n_cols, 0,
                            ws8.data(), n_cols, 0, 0.0f, c32.data(), n_rows, &co),
          "dnnl_gemm_u8s8s32");
  });

  const double gflop = 2.0 * static_cast<double>(n_tok * n_rows * n_cols) * 1e-9;
  std::printf(
      "%-5s %5lld x %-5lld %4lld tokens | strata %7.2f ms %6.1f GFLOP/s | oneDNN sgemm "
      "%7.2f ms %6.1f GFLOP/s (strata %.2fx) | oneDNN u8s8s32, no scales (a bound) %7.2f ms %6.1f "
      "GFLOP/s\n",
      std::string(ggml_type_name(type)).c_str(), static_cast<long long>(n_rows),
      static_cast<long long>(n_cols), static_cast<long long>(n_tok), t_ours * 1e3, gflop / t_ours,
      t_sgemm * 1e3, gflop / t_sgemm, t_sgemm / t_ours, t_s8 * 1e3, gflop / t_s8);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string type_name = arg(argc, argv, "type", "Q4_0");
  const int64_t n_tok = int_arg(argc, argv, "tokens", 512, 1, 8192);
  const int threads = static_cast<int>(int_arg(argc, argv, "threads", 2, 1, 256));
  const int reps = static_cast<int>(int_arg(argc, argv, "reps", 3, 1, 1000));
  GgmlType type;
  if (type_name == "Q4_0") {
    type = GgmlType::Q4_0;
  } else if (type_name == "Q4_K") {
    type = GgmlType::Q4_K;
  } else {
    usage_error("--type=Q4_0 or Q4_K, not " + type_name);
  }
  const dnnl_version_t* v = dnnl_version();
  const char* omp = std::getenv("OMP_NUM_THREADS");
  std::printf(
      "bench_prefill_dense: %s, %lld tokens, strata %d thread(s), %s kernels; oneDNN "
      "%d.%d.%d (cpu runtime %u, OMP_NUM_THREADS=%s)\n",
      type_name.c_str(), static_cast<long long>(n_tok), threads,
      std::string(isa_name(best_isa())).c_str(), v->major, v->minor, v->patch, v->cpu_runtime,
      omp ? omp : "unset");
  ThreadPool pool(threads, false);
  run_shape(type, 4096, 2048, n_tok, pool, reps);  // the 30B's attention q
  run_shape(type, 2048, 4096, n_tok, pool, reps);  // its attention o
  return 0;
}
