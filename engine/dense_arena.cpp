// DENSE_ARENA (see dense_arena.h). Exercised by tests/test_dense_arena.cpp.
#include "engine/dense_arena.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

#include "io/check.h"
#include "kernels/interleave.h"

namespace strata::engine {
namespace {

// Big matrices start on a page (the kernels' streams and the huge pages line up the same way every
// run); small tensors (norms, biases) on a cache line.
constexpr uint64_t kPageAlign = 4096;
constexpr uint64_t kLineAlign = 64;
constexpr uint64_t kBigTensor = 64 * 1024;

uint64_t align_for(uint64_t n_bytes) {
  return n_bytes >= kBigTensor ? kPageAlign : kLineAlign;
}

uint64_t round_up(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

}  // namespace

DenseArrangement arrange_dense(ModelWeights& w, bool interleave, tiers::NumaMode numa,
                               tiers::RamArena& arena) {
  DenseArrangement r;
  const std::vector<WeightView*> views = decode_dense_views(w);
  std::vector<WeightView*> repackable;
  if (interleave) repackable = repack_views(w);
  const auto is_repackable = [&repackable](const WeightView* v) {
    return std::find(repackable.begin(), repackable.end(), v) != repackable.end();
  };
  uint64_t total = 0;
  for (const WeightView* v : views) total = round_up(total, align_for(v->n_bytes)) + v->n_bytes;
  if (total == 0) return r;
  // No separate first touch: the copies below write every page (NUMA policy, if any, is set).
  // A fresh arena, swapped in at the end: views may point into `arena` (a second call).
  tiers::RamArena fresh(
      total, tiers::RamArena::kAnyNode, numa, [](std::span<std::byte>) {}, nullptr);

  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uint64_t at = 0;
  for (WeightView* v : views) {
    at = round_up(at, align_for(v->n_bytes));
    std::byte* dst = fresh.data() + at;
    const kernels::WeightLayout to = is_repackable(v) ? repack_layout(*v) : v->layout;
    if (to != v->layout) {
      STRATA_ASSERT(v->row_bytes * static_cast<uint64_t>(v->n_rows()) == v->n_bytes,
                    "{}: rows are not contiguous", v->name);
      kernels::interleave(to, v->data, dst, v->n_rows(), v->n_cols());
      r.repacked_bytes += v->n_bytes;
    } else {
      std::memcpy(dst, v->data, v->n_bytes);
    }
    // The resident copy's whole pages inside this tensor are not read again.
    const auto b = (reinterpret_cast<uintptr_t>(v->data) + page - 1) / page * page;
    const auto e = (reinterpret_cast<uintptr_t>(v->data) + v->n_bytes) / page * page;
    if (e > b && madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED) == 0)
      r.freed_bytes += e - b;
    v->data = dst;
    v->layout = to;
    r.moved_bytes += v->n_bytes;
    at += v->n_bytes;
  }
  // Whole arena at once: a protection change inside it would split its huge pages.
  if (mprotect(fresh.data(), fresh.size(), PROT_READ) != 0)
    fail_sys("mprotect", "dense weight arena");
  r.huge_bytes = huge_page_bytes(fresh.data(), fresh.size());
  arena = std::move(fresh);
  return r;
}

std::string thp_mode() {
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!f) return "unknown";
  char line[256] = {};
  const bool ok = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  const char* open = ok ? std::strchr(line, '[') : nullptr;
  const char* close = open ? std::strchr(open, ']') : nullptr;
  if (!close) return "unknown";
  return std::string(open + 1, close);
}

std::string dense_huge_page_notice(const DenseArrangement& a, const std::string& thp) {
  constexpr uint64_t kMinBytes = 64ull << 20;
  if (a.moved_bytes < kMinBytes || a.huge_bytes * 2 >= a.moved_bytes) return {};
  return fmt::format(
      "DENSE_ARENA: only {:.0f} of {:.0f} MiB of dense weights are on huge pages (transparent "
      "huge pages: {}); decode may read them up to 2x slower. As root: echo madvise > "
      "/sys/kernel/mm/transparent_hugepage/enabled",
      static_cast<double>(a.huge_bytes) / (1 << 20), static_cast<double>(a.moved_bytes) / (1 << 20),
      thp);
}

uint64_t huge_page_bytes(const void* p, uint64_t n) {
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return 0;
  const auto lo = reinterpret_cast<uintptr_t>(p);
  const uintptr_t hi = lo + n;
  uint64_t total = 0;
  bool inside = false;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    uintptr_t a = 0, b = 0;
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &a, &b) == 2) {  // a mapping's first line
      inside = a < hi && b > lo;
      continue;
    }
    unsigned long long kb = 0;
    if (inside && std::sscanf(line, "AnonHugePages: %llu kB", &kb) == 1) total += kb * 1024;
  }
  std::fclose(f);
  return total < n ? total : n;
}

}  // namespace strata::engine
