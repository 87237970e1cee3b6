// VRAM homes for experts on one device (plain C++ header, no CUDA types): one device allocation of
// exactly the caller's budget (VRAM_GB is the caller's knob; nothing is read here), carved into
// per-expert slots by a first-fit allocator on the host, filled from host memory through pinned
// staging buffers. After construction nothing is allocated on the device, so REPIN between tokens
// only moves bytes. Tested by tests/test_cuda_grouped.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "cuda/grouped.h"

namespace strata::cuda {

// An expert's three matrices in host memory (mmap'd GGUF, RAM arena, ...): contiguous rows.
struct HostExpert {
  const void* gate = nullptr;
  size_t gate_bytes = 0;
  const void* up = nullptr;
  size_t up_bytes = 0;
  const void* down = nullptr;
  size_t down_bytes = 0;
};

class VramStore {
 public:
  static constexpr int32_t kNoSlot = -1;
  static constexpr size_t kAlign = 256;  // every matrix starts on this boundary

  // Allocates budget_bytes on `device` at once (Error(kCuda) naming the size when it cannot) and
  // two pinned staging halves of staging_bytes / 2 each. Error(kUnsupported) without CUDA.
  VramStore(int device, uint64_t budget_bytes, size_t staging_bytes = size_t{32} << 20);
  ~VramStore();
  VramStore(const VramStore&) = delete;
  VramStore& operator=(const VramStore&) = delete;

  // Bytes an expert occupies: each matrix rounded up to kAlign.
  static uint64_t footprint(const HostExpert& e) {
    const auto up = [](uint64_t b) { return (b + kAlign - 1) / kAlign * kAlign; };
    return up(e.gate_bytes) + up(e.up_bytes) + up(e.down_bytes);
  }

  // Copies the expert into free VRAM and returns its slot, or kNoSlot when no free range is large
  // enough (the store never grows). The source may be reused when this returns; the device copy
  // is complete after sync(). Throws Error(kCuda) on a failed copy.
  int32_t put(const HostExpert& e);

  // Blocks until every put() so far has landed on the device.
  void sync();

  // Frees a slot (its range merges with free neighbours). The caller makes sure no launch in
  // flight still reads it.
  void release(int32_t slot);

  // Device pointers of a slot's matrices, for GroupedJob::w.
  ExpertWeights weights(int32_t slot) const;

  int device() const { return device_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  // The largest footprint a put() can take right now.
  uint64_t largest_free() const;

 private:
  struct Slot {
    uint64_t offset = 0;
    uint64_t bytes = 0;  // 0: the slot id is free for reuse
    uint64_t up = 0;     // offsets of up and down from `offset`
    uint64_t down = 0;
  };
  struct Device;  // CUDA-typed resources

  void upload(uint64_t dst_offset, const void* src, size_t bytes);

  int device_ = 0;
  uint64_t capacity_ = 0;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes, disjoint, non-adjacent
  std::vector<Slot> slots_;
  std::vector<int32_t> free_ids_;
  std::unique_ptr<Device> dev_;
};

}  // namespace strata::cuda
