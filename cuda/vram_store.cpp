// VramStore (cuda/vram_store.h): the budget-sized device arena, first-fit slots with coalescing,
// and double-buffered pinned staging (memcpy into one half while the other half's DMA runs).
// Tested by tests/test_cuda_grouped.cpp.
#include "cuda/vram_store.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "cuda/cuda_check.h"
#include "cuda/runtime.h"
#include "io/check.h"

namespace strata::cuda {
namespace {

uint64_t align_up(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

// The whole budget in one cudaMalloc; a failure names the size.
DeviceBuffer alloc_arena(uint64_t budget) {
  try {
    return DeviceBuffer(budget);
  } catch (const Error& e) {
    (void)cudaGetLastError();  // an allocation failure must not surface at a later launch check
    fail(ErrorKind::kCuda, "VRAM store: {} bytes ({:.2f} GiB) on the device: {}", budget,
         static_cast<double>(budget) / double(uint64_t{1} << 30), e.what());
  }
}

}  // namespace

struct VramStore::Device {
  DeviceBuffer arena;
  PinnedBuffer staging;  // two halves
  size_t half = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t half_free[2] = {nullptr, nullptr};  // recorded after each half's DMA
  int next = 0;

  Device(uint64_t budget, size_t staging_bytes)
      : staging(std::max<size_t>(staging_bytes, 2 * kAlign)), half(staging.bytes() / 2) {
    if (budget > 0) arena = alloc_arena(budget);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (auto& ev : half_free) CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  }
  ~Device() {
    if (stream != nullptr) {
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    for (auto ev : half_free)
      if (ev != nullptr) cudaEventDestroy(ev);
  }
};

VramStore::VramStore(int device, uint64_t budget_bytes, size_t staging_bytes)
    : device_(device), capacity_(budget_bytes / kAlign * kAlign) {
  set_device(device);
  dev_ = std::make_unique<Device>(capacity_, staging_bytes);
  if (capacity_ > 0) free_[0] = capacity_;
}

VramStore::~VramStore() = default;

uint64_t VramStore::largest_free() const {
  uint64_t best = 0;
  for (const auto& [off, bytes] : free_) best = std::max(best, bytes);
  return best;
}

int32_t VramStore::put(const HostExpert& e) {
  const uint64_t need = footprint(e);
  STRATA_ASSERT(need > 0, "VRAM store: empty expert");
  auto it =
      std::find_if(free_.begin(), free_.end(), [&](const auto& f) { return f.second >= need; });
  if (it == free_.end()) return kNoSlot;
  const uint64_t offset = it->first;
  const uint64_t rest = it->second - need;
  free_.erase(it);
  if (rest > 0) free_[offset + need] = rest;

  Slot s;
  s.offset = offset;
  s.bytes = need;
  s.up = align_up(e.gate_bytes, kAlign);
  s.down = s.up + align_up(e.up_bytes, kAlign);
  set_device(device_);
  upload(offset, e.gate, e.gate_bytes);
  upload(offset + s.up, e.up, e.up_bytes);
  upload(offset + s.down, e.down, e.down_bytes);
  used_ += need;

  int32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
    slots_[static_cast<size_t>(id)] = s;
  } else {
    id = static_cast<int32_t>(slots_.size());
    slots_.push_back(s);
  }
  return id;
}

void VramStore::upload(uint64_t dst_offset, const void* src, size_t bytes) {
  Device& d = *dev_;
  auto* dst = d.arena.as<uint8_t>() + dst_offset;
  const auto* from = static_cast<const uint8_t*>(src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(d.half, bytes - done);
    const int h = d.next;
    d.next ^= 1;
    CUDA_CHECK(cudaEventSynchronize(d.half_free[h]));  // this half's previous DMA has finished
    uint8_t* stage = d.staging.as<uint8_t>() + static_cast<size_t>(h) * d.half;
    std::memcpy(stage, from + done, n);
    CUDA_CHECK(cudaMemcpyAsync(dst + done, stage, n, cudaMemcpyHostToDevice, d.stream));
    CUDA_CHECK(cudaEventRecord(d.half_free[h], d.stream));
    done += n;
  }
}

void VramStore::sync() {
  CUDA_CHECK(cudaStreamSynchronize(dev_->stream));
}

void VramStore::release(int32_t slot) {
  STRATA_ASSERT(slot >= 0 && static_cast<size_t>(slot) < slots_.size() &&
                    slots_[static_cast<size_t>(slot)].bytes > 0,
                "VRAM store: release of slot {} that is not in use", slot);
  Slot& s = slots_[static_cast<size_t>(slot)];
  uint64_t off = s.offset, bytes = s.bytes;
  used_ -= bytes;
  s = Slot{};
  free_ids_.push_back(slot);
  // Merge with the free neighbours on both sides.
  auto next = free_.lower_bound(off);
  if (next != free_.end() && next->first == off + bytes) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      bytes += prev->second;
      free_.erase(prev);
    }
  }
  free_[off] = bytes;
}

ExpertWeights VramStore::weights(int32_t slot) const {
  STRATA_ASSERT(slot >= 0 && static_cast<size_t>(slot) < slots_.size() &&
                    slots_[static_cast<size_t>(slot)].bytes > 0,
                "VRAM store: slot {} is not in use", slot);
  const Slot& s = slots_[static_cast<size_t>(slot)];
  const auto* base = dev_->arena.as<uint8_t>() + s.offset;
  return ExpertWeights{base, base + s.up, base + s.down};
}

}  // namespace strata::cuda
