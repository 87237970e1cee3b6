// RamArena: one anonymous mapping for expert bytes, 2 MiB-aligned with MADV_HUGEPAGE, placed on
// NUMA nodes with libnuma (interleaved, or bound to one node) and first-touched by the caller's
// workers. Tested by tests/test_tiers_arena.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace strata::tiers {

// How arenas use NUMA nodes (the NUMA knob).
enum class NumaMode {
  kInterleave,  // pages spread round-robin over every node (the default)
  kLocal,       // each arena bound to the node it was asked for
  kOff,         // no NUMA policy: plain mapping, first touch decides
};

// Called once per arena with its whole range; it must write every page (touch_pages() does) from
// the threads that will read the bytes, so kOff arenas land on their nodes. The engine passes a
// function that splits the range over its pinned workers.
using FirstTouch = std::function<void(std::span<std::byte>)>;
// Writes one zero byte per 4 KiB page (a 2 MiB huge page is faulted by its first write).
void touch_pages(std::span<std::byte> range);
// The same faults for writing, but each byte written is the one read there: bytes already in the
// range stay (the KV cache's rows restored ahead of its faulting, engine/forward.cpp).
void touch_pages_keeping(std::span<std::byte> range);

// One-line notices ("one NUMA node", fallbacks): the engine routes them to its log.
using NoticeFn = std::function<void(const std::string&)>;
void notice_to_stderr(const std::string& line);

struct NumaInfo {
  bool available = false;  // numa_available() >= 0
  int n_nodes = 1;         // configured nodes (1 when unavailable)
};
NumaInfo numa_info();

class RamArena {
 public:
  static constexpr int kAnyNode = -1;  // interleave in kInterleave mode; no binding otherwise

  RamArena() = default;
  // bytes is rounded up by placement::arena_round (2 MiB; 4 KiB below 2 MiB). node: kAnyNode, or a
  // node id < n_nodes (kLocal binds to it; kInterleave/kOff ignore it). Throws Error(kOutOfMemory)
  // naming the size, Error(kBadValue) for a node that does not exist. touch: nullptr =
  // touch_pages() here. On a one-node machine (or without libnuma) no policy is applied; `notice`
  // hears once per process "one NUMA node: ..." (or "libnuma unavailable: ...").
  RamArena(uint64_t bytes, int node, NumaMode mode, const FirstTouch& touch = nullptr,
           const NoticeFn& notice = notice_to_stderr);
  ~RamArena();
  RamArena(RamArena&& o) noexcept;
  RamArena& operator=(RamArena&& o) noexcept;
  RamArena(const RamArena&) = delete;
  RamArena& operator=(const RamArena&) = delete;

  std::byte* data() const { return base_; }
  uint64_t size() const { return size_; }  // mapped bytes: placement::arena_round(bytes)
  std::span<std::byte> span() const { return {base_, size_}; }
  int node() const { return node_; }
  bool huge_pages_advised() const { return huge_; }

 private:
  void release();

  std::byte* base_ = nullptr;  // 2 MiB-aligned start of the usable range
  uint64_t size_ = 0;
  void* map_ = nullptr;  // the raw mapping (base_ minus alignment slack)
  uint64_t map_len_ = 0;
  int node_ = kAnyNode;
  bool huge_ = false;
};

}  // namespace strata::tiers
