// How much memory this process may still use: MemAvailable from /proc/meminfo, capped by the
// memory cgroup (v2 memory.max - memory.current, or v1 limit_in_bytes - usage_in_bytes) of this
// process and each of its ancestors. The automatic RAM_GB budget starts from it.
// Tested by tests/test_tier_faults.cpp (parsers) and exercised by bench/e2e_tiers.sh (8 GiB
// cgroup).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata::engine {

struct MemoryInfo {
  uint64_t mem_available = 0;               // bytes, /proc/meminfo MemAvailable
  std::optional<uint64_t> cgroup_headroom;  // bytes, smallest (limit - usage) up the cgroup tree
  std::string cgroup;                       // the limiting cgroup's directory, when one limits

  // min(mem_available, cgroup_headroom).
  uint64_t available() const;
};

// Reads /proc/meminfo and this process's memory cgroup. Missing files leave fields unset (a
// machine without cgroups is only limited by MemAvailable).
MemoryInfo memory_info();

// Parsers, exposed for tests. MemAvailable in bytes (0 when absent).
uint64_t parse_meminfo_available(std::string_view meminfo);
// The memory cgroup path of /proc/self/cgroup text: v1 "N:...memory...:/path" wins over v2
// "0::/path"; second = true for v2.
std::optional<std::pair<std::string, bool>> parse_memory_cgroup(std::string_view proc_cgroup);

}  // namespace strata::engine
