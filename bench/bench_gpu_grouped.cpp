// Grouped expert kernel bandwidth at decode sizes (Qwen3-30B-A3B experts: n_embd 2048, n_ff 768,
// one token per expert, Q4_0 and Q4_K) next to the device-to-device copy bandwidth measured in
// the same run, as a percentage of it. Weights rotate over enough layers (> 1 GiB) that the
// 50 MB L2 never holds them; launches are queued back to back on one stream and timed with
// events (median of repeats). Prints a Markdown table. Run by bench/gpu_check.sh; results in
// bench/RESULTS.md. Usage: bench_gpu_grouped [--quick]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/grouped.h"
#include "cuda/runtime.h"
#include "io/check.h"
#include "io/ggml_type.h"
#include "kernels/quant.h"

namespace strata::cuda {
namespace {

constexpr int64_t kEmbd = 2048;
constexpr int64_t kFf = 768;

struct Timer {
  cudaEvent_t a = nullptr, b = nullptr;
  Timer() {
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  template <typename Fn>
  double ms(cudaStream_t s, Fn&& fn) {
    CUDA_CHECK(cudaEventRecord(a, s));
    fn();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    return t;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device-to-device cudaMemcpyAsync of `bytes`; GB/s counts bytes read + bytes written.
double copy_gbps(size_t bytes, int reps, cudaStream_t s) {
  DeviceBuffer a(bytes), b(bytes);
  CUDA_CHECK(cudaMemsetAsync(a.data(), 1, bytes, s));
  Timer t;
  std::vector<double> ms;
  for (int r = 0; r < reps + 2; ++r) {
    const double m = t.ms(s, [&] {
      CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, s));
    });
    if (r >= 2) ms.push_back(m);
  }
  return 2.0 * static_cast<double>(bytes) / (median(ms) * 1e-3) / 1e9;
}

// One matrix of random codes with small fp16 scales (bandwidth does not care about the values;
// finite ones keep the arithmetic ordinary).
std::vector<uint8_t> random_matrix(GgmlType t, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  const auto info = ggml_type_info(t);
  std::vector<uint8_t> w(ggml_row_bytes(t, cols) * rows);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  const uint16_t d = kernels::f32_to_fp16(1.0f / 512);
  // The block's fp16 scale fields: d (and dmin) first, except Q2_K's and Q3_K's at the end.
  std::vector<size_t> fields = {0};
  if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) fields = {0, 2};
  if (t == GgmlType::Q2_K) fields = {80, 82};
  if (t == GgmlType::Q3_K) fields = {108};
  for (size_t off = 0; off < w.size(); off += info.type_size)
    for (size_t f : fields) std::memcpy(&w[off + f], &d, 2);
  return w;
}

struct Row {
  std::string type;
  int experts;
  const char* stages;
  bool overlap;  // programmatic dependent launches (sm_90+)
  double mb;     // weight bytes read per launch, MB
  double us;     // per launch
  double gbps;
};

// `experts` experts per layer, layers enough for > 1 GiB of weights; `launches` launches per timed
// run, `reps` runs.
void bench_type(GgmlType type, int experts, int launches, int reps, cudaStream_t s,
                std::vector<Row>* rows) {
  std::mt19937_64 rng(42);
  const size_t gate_bytes = ggml_row_bytes(type, kEmbd) * kFf;
  const size_t down_bytes = ggml_row_bytes(type, kFf) * kEmbd;
  const size_t expert_bytes = 2 * gate_bytes + down_bytes;  // multiples of 256 at these sizes
  const size_t layer_bytes = expert_bytes * static_cast<size_t>(experts);
  const int n_layers = static_cast<int>(std::max<size_t>(2, (size_t{1} << 30) / layer_bytes + 1));

  // One layer's experts on the host, copied to every layer's place on the device.
  std::vector<uint8_t> host(layer_bytes);
  for (int e = 0; e < experts; ++e) {
    uint8_t* p = host.data() + e * expert_bytes;
    for (const auto& [rows_, cols, off] :
         {std::tuple{kFf, kEmbd, size_t{0}}, std::tuple{kFf, kEmbd, gate_bytes},
          std::tuple{kEmbd, kFf, 2 * gate_bytes}}) {
      const std::vector<uint8_t> m = random_matrix(type, rows_, cols, rng);
      std::memcpy(p + off, m.data(), m.size());
    }
  }
  DeviceBuffer weights(layer_bytes * n_layers);
  for (int l = 0; l < n_layers; ++l)
    copy_to_device(weights.as<uint8_t>() + l * layer_bytes, host.data(), layer_bytes);

  std::vector<std::vector<GroupedJob>> jobs(n_layers);
  std::vector<int32_t> row_token(experts, 0);
  for (int l = 0; l < n_layers; ++l)
    for (int e = 0; e < experts; ++e) {
      const uint8_t* base = weights.as<uint8_t>() + l * layer_bytes + e * expert_bytes;
      GroupedJob j;
      j.w = ExpertWeights{base, base + gate_bytes, base + 2 * gate_bytes};
      j.row_begin = static_cast<uint32_t>(e);
      j.row_end = static_cast<uint32_t>(e + 1);
      jobs[l].push_back(j);
    }
  DeviceBuffer x(kEmbd * 4), rows_dev(experts * 4), y(static_cast<size_t>(experts) * kEmbd * 4);
  std::vector<float> xh(kEmbd);
  std::mt19937_64 xr(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : xh) v = normal(xr);
  copy_to_device(x.data(), xh.data(), x.bytes());
  copy_to_device(rows_dev.data(), row_token.data(), rows_dev.bytes());

  Timer t;
  for (const auto& [overlap, stages] : {std::pair{true, GroupedExperts::Stages::kGateUp},
                                        std::pair{true, GroupedExperts::Stages::kAll},
                                        std::pair{false, GroupedExperts::Stages::kGateUp},
                                        std::pair{false, GroupedExperts::Stages::kAll}}) {
    GroupedExperts g(GroupedLimits{0, kEmbd, kFf, 1, static_cast<uint32_t>(experts), overlap});
    const bool all = stages == GroupedExperts::Stages::kAll;
    int layer = 0;
    auto run = [&](int n) {
      for (int i = 0; i < n; ++i) {
        GroupedLayer gl;
        gl.shape = ExpertShape{kEmbd, kFf, type, type, type};
        gl.jobs = jobs[layer].data();
        gl.n_jobs = static_cast<uint32_t>(experts);
        gl.n_rows = static_cast<uint32_t>(experts);
        gl.n_tokens = 1;
        g.launch_device(gl, x.as<float>(), rows_dev.as<int32_t>(), y.as<float>(), s, stages);
        layer = (layer + 1) % n_layers;
      }
    };
    run(20);  // warm up (and set the shared-memory attributes)
    g.wait();
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      ms.push_back(t.ms(s, [&] { run(launches); }));
      g.wait();
    }
    const double per_launch_s = median(ms) * 1e-3 / launches;
    const double bytes = static_cast<double>(experts) * (all ? expert_bytes : 2 * gate_bytes);
    rows->push_back(Row{std::string(ggml_type_name(type)), experts,
                        all ? "gate+up+down" : "gate+up", overlap, bytes / 1e6, per_launch_s * 1e6,
                        bytes / per_launch_s / 1e9});
  }
}

int run(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (cuda_device_count() == 0) {
    std::printf("bench_gpu_grouped: no CUDA device: %s\n", cuda_describe().c_str());
    return 1;
  }
  std::printf("# grouped expert kernel, decode (1 token per expert)\n\n%s\n\n",
              cuda_describe().c_str());
  set_device(0);
  Stream stream;
  const auto s = static_cast<cudaStream_t>(stream.handle());
  const double copy = copy_gbps(size_t{1} << 30, quick ? 5 : 10, s);
  std::printf("device-to-device cudaMemcpy, 1 GiB: %.0f GB/s (bytes read + written)\n\n", copy);

  std::vector<Row> rows;
  const int launches = quick ? 100 : 400;
  const int reps = quick ? 3 : 7;
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_K})
    for (int experts : {8, 64}) bench_type(type, experts, launches, reps, s, &rows);
  // The other K-quant and IQ4 experts (Q5_K_M, Q3_K_M and IQ4_XS files), at the decode width.
  for (GgmlType type : {GgmlType::Q5_K, GgmlType::Q3_K, GgmlType::IQ4_XS})
    bench_type(type, 64, launches, reps, s, &rows);

  std::printf(
      "| type | experts | stages | overlap | MB/launch | us/launch | GB/s | %% of copy |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %d | %s | %s | %.2f | %.2f | %.0f | %.1f%% |\n", r.type.c_str(), r.experts,
                r.stages, r.overlap ? "PDL" : "off", r.mb, r.us, r.gbps, 100.0 * r.gbps / copy);
  std::printf(
      "\n(n_embd %lld, n_ff %lld; %d launches per timed run, median of %d runs; weights "
      "rotate over > 1 GiB)\n",
      static_cast<long long>(kEmbd), static_cast<long long>(kFf), launches, reps);
  return 0;
}

}  // namespace
}  // namespace strata::cuda

int main(int argc, char** argv) {
  try {
    return strata::cuda::run(argc, argv);
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "bench_gpu_grouped: %s\n", e.what());
    return 1;
  }
}
