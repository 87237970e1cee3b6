// RamArena: anonymous 2 MiB-aligned mappings with huge-page advice and a libnuma memory policy.
// Tested by tests/test_tiers_arena.cpp.
#include "tiers/ram_arena.h"

#include <numa.h>
#include <numaif.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdio>
#include <utility>

#include "io/check.h"
#include "placement/plan.h"

namespace strata::tiers {

namespace {

constexpr uint64_t kPage = 4096;

// Said once per process, however many arenas are made.
std::atomic<bool> g_topology_noticed{false};

}  // namespace

void notice_to_stderr(const std::string& line) {
  std::fprintf(stderr, "strata: %s\n", line.c_str());
}

void touch_pages(std::span<std::byte> range) {
  volatile std::byte* p = range.data();
  for (uint64_t off = 0; off < range.size(); off += kPage) p[off] = std::byte{0};
}

void touch_pages_keeping(std::span<std::byte> range) {
  volatile std::byte* p = range.data();
  for (uint64_t off = 0; off < range.size(); off += kPage) p[off] = p[off];
  if (!range.empty()) p[range.size() - 1] = p[range.size() - 1];  // a range that ends mid-page
}

NumaInfo numa_info() {
  NumaInfo info;
  if (numa_available() < 0) return info;
  info.available = true;
  info.n_nodes = std::max(1, numa_num_configured_nodes());
  return info;
}

RamArena::RamArena(uint64_t bytes, int node, NumaMode mode, const FirstTouch& touch,
                   const NoticeFn& notice)
    : node_(node) {
  const NumaInfo numa = numa_info();
  if (node != kAnyNode && (node < 0 || node >= numa.n_nodes))
    fail(ErrorKind::kBadValue, "RAM arena: NUMA node {} does not exist (this machine has {})", node,
         numa.n_nodes);
  if (notice && !g_topology_noticed.exchange(true)) {
    if (!numa.available)
      notice("libnuma unavailable: expert RAM uses plain mappings without a NUMA policy");
    else if (numa.n_nodes == 1)
      notice("one NUMA node: expert RAM is not interleaved or bound");
  }
  size_ = placement::arena_round(bytes);
  if (size_ == 0) return;

  // Over-map by one huge page, then trim both ends so the mapping starts on a 2 MiB boundary.
  const uint64_t align = placement::kArenaAlign;
  const uint64_t len = size_ + align;
  void* raw = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    fail(ErrorKind::kOutOfMemory, "RAM arena: mmap of {} failed: {}",
         placement::format_bytes(size_), std::strerror(errno));
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + align - 1) / align * align;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t tail = start + len - (aligned + size_);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size_), tail);
  base_ = reinterpret_cast<std::byte*>(aligned);
  map_ = base_;
  map_len_ = size_;

  // THP may be disabled system-wide; the arena works either way.
  huge_ = madvise(base_, size_, MADV_HUGEPAGE) == 0;

  if (numa.available && numa.n_nodes > 1 && mode != NumaMode::kOff) {
    bitmask* mask = numa_allocate_nodemask();
    int policy = MPOL_INTERLEAVE;
    if (mode == NumaMode::kLocal && node != kAnyNode) {
      numa_bitmask_setbit(mask, node);
      policy = MPOL_BIND;
    } else {
      copy_bitmask_to_bitmask(numa_all_nodes_ptr, mask);
    }
    const long rc = mbind(base_, size_, policy, mask->maskp, mask->size + 1, 0);
    const int err = errno;
    numa_free_nodemask(mask);
    if (rc != 0) {
      release();
      errno = err;
      fail_sys("mbind",
               fmt::format("RAM arena of {} on node {}", placement::format_bytes(size_), node));
    }
  }

  if (touch)
    touch(span());
  else
    touch_pages(span());
}

RamArena::~RamArena() {
  release();
}

void RamArena::release() {
  if (map_) munmap(map_, map_len_);
  map_ = nullptr;
  base_ = nullptr;
  map_len_ = 0;
  size_ = 0;
}

RamArena::RamArena(RamArena&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      map_(std::exchange(o.map_, nullptr)),
      map_len_(std::exchange(o.map_len_, 0)),
      node_(o.node_),
      huge_(o.huge_) {}

RamArena& RamArena::operator=(RamArena&& o) noexcept {
  if (this != &o) {
    release();
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    map_ = std::exchange(o.map_, nullptr);
    map_len_ = std::exchange(o.map_len_, 0);
    node_ = o.node_;
    huge_ = o.huge_;
  }
  return *this;
}

}  // namespace strata::tiers
