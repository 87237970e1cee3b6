// Memory this process may use: /proc/meminfo + the memory cgroup (see sysmem.h).
// Tested by tests/test_tier_faults.cpp.
#include "engine/sysmem.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace strata::engine {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> read_text(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A cgroup value file: a byte count, or "max" (v2 unlimited) -> nullopt.
std::optional<uint64_t> read_bytes(const fs::path& p) {
  const auto text = read_text(p);
  if (!text) return std::nullopt;
  uint64_t v = 0;
  const char* begin = text->data();
  const auto r = std::from_chars(begin, begin + text->size(), v);
  if (r.ec != std::errc()) return std::nullopt;
  return v;
}

}  // namespace

uint64_t MemoryInfo::available() const {
  return cgroup_headroom ? std::min(mem_available, *cgroup_headroom) : mem_available;
}

uint64_t parse_meminfo_available(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  const auto at = meminfo.find(kKey);
  if (at == std::string_view::npos) return 0;
  size_t i = at + kKey.size();
  while (i < meminfo.size() && meminfo[i] == ' ') ++i;
  uint64_t kib = 0;
  std::from_chars(meminfo.data() + i, meminfo.data() + meminfo.size(), kib);
  return kib * 1024;  // the file says "kB" and means KiB
}

std::optional<std::pair<std::string, bool>> parse_memory_cgroup(std::string_view text) {
  std::optional<std::pair<std::string, bool>> v2;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    const auto c1 = line.find(':');
    const auto c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string path(line.substr(c2 + 1));
    if (line.substr(0, c1) == "0" && controllers.empty()) {
      v2 = std::make_pair(path, true);
      continue;
    }
    // v1: the controllers field is a comma-separated list.
    std::string_view rest = controllers;
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      if (rest.substr(0, comma) == "memory") return std::make_pair(path, false);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
  }
  return v2;
}

MemoryInfo memory_info() {
  MemoryInfo info;
  if (const auto m = read_text("/proc/meminfo")) info.mem_available = parse_meminfo_available(*m);
  const auto text = read_text("/proc/self/cgroup");
  const auto cg = text ? parse_memory_cgroup(*text) : std::nullopt;
  if (!cg) return info;
  const auto& [rel, v2] = *cg;
  const fs::path root =
      v2 ? (fs::exists("/sys/fs/cgroup/cgroup.controllers") ? fs::path("/sys/fs/cgroup")
                                                            : fs::path("/sys/fs/cgroup/unified"))
         : fs::path("/sys/fs/cgroup/memory");
  const char* limit_file = v2 ? "memory.max" : "memory.limit_in_bytes";
  const char* usage_file = v2 ? "memory.current" : "memory.usage_in_bytes";
  // Every ancestor's limit applies; the tightest one decides.
  fs::path dir = root;
  if (!fs::path(rel).relative_path().empty()) dir /= fs::path(rel).relative_path();
  for (;;) {
    const auto limit = read_bytes(dir / limit_file);
    const auto usage = read_bytes(dir / usage_file);
    // v1 says "no limit" with a huge number (PAGE_COUNTER_MAX pages).
    if (limit && usage && *limit < (uint64_t{1} << 60)) {
      const uint64_t room = *limit > *usage ? *limit - *usage : 0;
      if (!info.cgroup_headroom || room < *info.cgroup_headroom) {
        info.cgroup_headroom = room;
        info.cgroup = dir.string();
      }
    }
    if (dir == root || !dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
    if (dir.string().size() < root.string().size()) break;
  }
  return info;
}

}  // namespace strata::engine
