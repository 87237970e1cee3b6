// Helpers for the engine-level tier tests: run the built `strata` binary, read files, find the
// fixture models the engine supports, make a scratch directory on the real disk (O_DIRECT does not
// work on tmpfs). Used by tests/test_tier_invariance.cpp and tests/test_tier_faults.cpp.
#pragma once

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "error_of.h"
#include "io/check.h"

namespace strata::tier_test {

namespace fs = std::filesystem;

inline const fs::path kFixtures = fs::path(STRATA_FIXTURES_DIR);
inline const fs::path kStrata = fs::path(STRATA_BINARY_DIR) / "tools" / "strata";

// n token ids drawn uniformly from [0, n_vocab).
inline std::vector<int32_t> tokens(uint32_t n_vocab, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % n_vocab);
  return ids;
}

struct Result {
  int rc = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A scratch directory under the build tree (a real disk), removed with the object.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) {
    path_ = fs::path(STRATA_BINARY_DIR) / "tier-test-tmp" / fmt::format("{}_{}", name, getpid());
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// Runs `env strata args` with stdout/stderr captured in dir. VRAM_GB=0 unless env or args say
// otherwise: the tier tests check RAM/SSD placements, which the automatic VRAM_GB would change on
// a host with a GPU (test_gpu_lane passes --vram-gb itself).
inline Result run_strata(const fs::path& dir, const std::string& args,
                         const std::string& env = "") {
  const fs::path out = dir / "out.txt";
  const fs::path err = dir / "err.txt";
  const std::string cmd = fmt::format("VRAM_GB=0 {} '{}' {} > '{}' 2> '{}'", env, kStrata.string(),
                                      args, out.string(), err.string());
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

// Every fixture GGUF (tiny-*/<name>-<VARIANT>.gguf), sorted.
inline std::vector<fs::path> fixture_models() {
  std::vector<fs::path> out;
  if (!fs::exists(kFixtures)) return out;
  for (const auto& dir : fs::directory_iterator(kFixtures)) {
    if (!dir.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(dir.path()))
      if (f.path().extension() == ".gguf") out.push_back(f.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Token streams of random ids < n_vocab, one per line (lengths as given).
inline void write_streams(const fs::path& path, uint32_t n_vocab, std::vector<int> lengths,
                          uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::ofstream out(path);
  for (int n : lengths) {
    for (int i = 0; i < n; ++i) out << (rng() % n_vocab) << (i + 1 < n ? " " : "\n");
  }
}

// RAM_GB for a byte count, precise to well under a byte.
inline std::string ram_gb(uint64_t bytes) {
  return fmt::format("{:.12f}", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace strata::tier_test
