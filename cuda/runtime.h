// Plain C++ view of the CUDA runtime (no CUDA types, so CPU code may include it): device count,
// a one-line description for probe/PROF, an RAII device buffer, streams and synchronous copies.
// A build without CUDA links cuda/stub.cpp: cuda_device_count() is 0 and the rest throws.
// Exercised by tests/test_cuda_dequant.cpp.
#pragma once

#include <cstddef>
#include <string>

namespace strata::cuda {

// Number of usable CUDA devices; 0 (never an error) when there is no device, no driver, or the
// build has no CUDA.
int cuda_device_count();

// One line: "CUDA 13.0 (driver 13.0): 1 device: 0 NVIDIA H200 sm_90 139.8 GiB" or why none.
std::string cuda_describe();

// One device's copy bandwidths in GB/s (1e9 bytes/s): pinned host -> device, device -> pinned
// host, and device -> device counted as bytes read + written (as CUDA's bandwidthTest does), the
// ceiling the grouped expert kernel's read rate is held against.
struct CopyBandwidth {
  int device = 0;
  std::string name;
  double h2d_gb_s = 0;
  double d2h_gb_s = 0;
  double d2d_gb_s = 0;
};
// Best of `reps` cudaMemcpyAsync's of `bytes` each way on one stream, timed with events (one
// untimed warm-up copy first). Throws Error(kCuda) on a failed call or in a build without CUDA.
CopyBandwidth probe_copy_bandwidth(int device, size_t bytes = size_t{256} << 20, int reps = 5);

// Blocks until all work on the current device is done; throws Error(kCuda) on a failed kernel.
void cuda_synchronize();

// Device memory from cudaMalloc, freed on destruction. Empty (data() == nullptr) by default.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A non-blocking cudaStream_t, destroyed on destruction. handle() is what the `void* stream`
// parameters of cuda/ take (nullptr there means the legacy default stream).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* handle() const { return stream_; }
  void synchronize();

 private:
  void* stream_ = nullptr;
};

// Page-locked host memory from cudaHostAlloc (portable: every device may DMA it), freed on
// destruction: the only host memory the decode loop copies through.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Makes `device` current for the calling thread (cudaSetDevice).
void set_device(int device);

// Free and total memory of a device, in bytes (cudaMemGetInfo): what a default VRAM budget is
// planned from.
struct DeviceMemory {
  size_t free = 0;
  size_t total = 0;
};
DeviceMemory device_memory(int device);

// Copies between host and device memory that are complete on return. copy_to_host waits only
// for the legacy default stream: synchronize a Stream first if a kernel there wrote the source.
void copy_to_device(void* dev_dst, const void* host_src, size_t bytes);
void copy_to_host(void* host_dst, const void* dev_src, size_t bytes);

}  // namespace strata::cuda
