// DENSE_ARENA: the dense weights a decode token reads, moved out of the file's address range into
// one 2 MiB-aligned huge-page arena, laid out in the order a token reads them (and interleaved on
// the way, REPACK). Exercised by tests/test_dense_arena.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/weights.h"
#include "tiers/ram_arena.h"

namespace strata::engine {

struct DenseArrangement {
  uint64_t moved_bytes = 0;     // tensor bytes copied into the arena
  uint64_t repacked_bytes = 0;  // of those, interleaved on the way (REPACK)
  uint64_t huge_bytes = 0;      // arena bytes the kernel backs with huge pages (/proc/self/smaps)
  uint64_t freed_bytes = 0;     // resident copies given back (whole pages of moved tensors)
};

// Moves decode_dense_views(w) into `arena` (allocated here, 2 MiB-aligned, MADV_HUGEPAGE, NUMA
// policy `numa`) and points the views there; interleave: Q4_0/Q4_K matrices are written in the
// interleaved layout (kernels::interleave_pays) instead of copied. The old bytes must be private
// anonymous memory (ExpertSource's make_resident): each tensor's whole pages there are released
// with MADV_DONTNEED once copied. The arena is read-only afterwards. Same bytes (or the same bytes
// rearranged): the numbers never change.
DenseArrangement arrange_dense(ModelWeights& w, bool interleave, tiers::NumaMode numa,
                               tiers::RamArena& arena);

// The system's transparent huge page mode (/sys/kernel/mm/transparent_hugepage/enabled: the
// bracketed word, "always", "madvise" or "never"); "unknown" when it cannot be read.
std::string thp_mode();

// The one-line notice for a DENSE_ARENA that did not get huge pages (fewer than half its bytes on
// them, for arenas of at least 64 MiB: small models do not matter), naming the THP mode and the
// fix; empty when there is nothing to say.
std::string dense_huge_page_notice(const DenseArrangement& a, const std::string& thp);

// Bytes of [p, p + n) that the kernel maps with transparent huge pages (AnonHugePages of the
// overlapping mappings in /proc/self/smaps, clipped to the range); 0 when smaps cannot be read.
uint64_t huge_page_bytes(const void* p, uint64_t n);

}  // namespace strata::engine
