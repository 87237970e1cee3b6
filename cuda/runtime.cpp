// Host side of cuda/runtime.h and the CUDA_CHECK error path (g++ with the CUDA runtime headers).
// Tested by tests/test_cuda_dequant.cpp.
#include "cuda/runtime.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "cuda/cuda_check.h"
#include "io/check.h"

namespace strata::cuda {
namespace {

// "cuda/dequant.cu" rather than the build machine's absolute path.
const char* short_path(const char* file) {
  const char* p = std::strstr(file, "cuda/");
  return p != nullptr ? p : file;
}

std::string version_string(int v) {
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

}  // namespace

void throw_cuda_error(int err, const char* call, const char* file, int line) {
  const auto e = static_cast<cudaError_t>(err);
  throw Error(ErrorKind::kCuda, fmt::format("{} failed: {}: {} ({}:{})", call, cudaGetErrorName(e),
                                            cudaGetErrorString(e), short_path(file), line));
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the recorded error so later calls start clean
    return 0;
  }
  return n;
}

std::string cuda_describe() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::string out = fmt::format("CUDA {} (driver {})", version_string(runtime),
                                driver == 0 ? std::string("none") : version_string(driver));
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return out +
           fmt::format(": no usable device ({}: {})", cudaGetErrorName(e), cudaGetErrorString(e));
  }
  out += fmt::format(": {} device{}", n, n == 1 ? "" : "s");
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
      (void)cudaGetLastError();
      out += fmt::format(": {} (properties unavailable)", d);
      continue;
    }
    out += fmt::format(": {} {} sm_{}{} {:.1f} GiB", d, p.name, p.major, p.minor,
                       static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  }
  return out;
}

CopyBandwidth probe_copy_bandwidth(int device, size_t bytes, int reps) {
  CopyBandwidth r;
  r.device = device;
  CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  r.name = prop.name;
  DeviceBuffer a(bytes), b(bytes);
  PinnedBuffer host(bytes);
  std::memset(host.data(), 1, bytes);  // fault the pages in before timing
  Stream stream;
  const auto s = static_cast<cudaStream_t>(stream.handle());
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  // Best seconds of reps copies (after one untimed warm-up).
  const auto best = [&](void* dst, const void* src, cudaMemcpyKind kind) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    float best_ms = 0;
    for (int i = 0; i < reps; ++i) {
      CUDA_CHECK(cudaEventRecord(start, s));
      CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
      CUDA_CHECK(cudaEventRecord(stop, s));
      CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (i == 0 || ms < best_ms) best_ms = ms;
    }
    return best_ms > 0 ? double(best_ms) / 1e3 : 1e-9;
  };
  try {
    r.h2d_gb_s = double(bytes) / 1e9 / best(a.data(), host.data(), cudaMemcpyHostToDevice);
    r.d2h_gb_s = double(bytes) / 1e9 / best(host.data(), a.data(), cudaMemcpyDeviceToHost);
    r.d2d_gb_s = 2.0 * double(bytes) / 1e9 / best(b.data(), a.data(), cudaMemcpyDeviceToDevice);
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return r;
}

void cuda_synchronize() {
  CUDA_CHECK(cudaDeviceSynchronize());
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);  // no throw from a destructor; a failure here is moot
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) CUDA_CHECK(cudaHostAlloc(&ptr_, bytes, cudaHostAllocPortable));
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void set_device(int device) {
  CUDA_CHECK(cudaSetDevice(device));
}

DeviceMemory device_memory(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  DeviceMemory m;
  CUDA_CHECK(cudaMemGetInfo(&m.free, &m.total));
  return m;
}

Stream::Stream() {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void Stream::synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
}

void copy_to_device(void* dev_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpy(dev_dst, host_src, bytes, cudaMemcpyHostToDevice));
  // From pageable memory cudaMemcpy may return before the DMA lands; a kernel on a non-blocking
  // stream does not wait for the legacy stream, so wait here.
  CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

void copy_to_host(void* host_dst, const void* dev_src, size_t bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMemcpy(host_dst, dev_src, bytes, cudaMemcpyDeviceToHost));
}

}  // namespace strata::cuda
