// Runs `strata replay` in a fresh child process (this same binary, /proc/self/exe) with extra knob
// flags, and reads back its PROF JSON: the unit of work of `strata sweep` and `strata ab`, so every
// measured point starts cold and no state leaks between points. Tested by tests/test_ab_sweep.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace strata::tools {

// "RAM_GB=4 THREADS=2" -> {RAM_GB: 4, THREADS: 2}; each name must be in the knob table, PROF and
// PROF_JSON are refused (the child's profile is ours to set). Error(kBadValue) names the word.
std::map<std::string, std::string> parse_knob_list(const std::string& text, const char* what);

struct ReplayChild {
  std::string model;
  std::string tokens;
  std::map<std::string, std::string> knobs;  // passed as --flag value
  std::string dump_logits;                   // "" = none
  std::string work_dir;                      // PROF JSON and the child's log go here
  std::string tag;                           // file name stem inside work_dir
};

// Runs the child to completion; Error(kIo) with the tail of its stderr when it fails. Returns the
// parsed PROF JSON.
nlohmann::json run_replay_child(const ReplayChild& c);

// The figures sweep and ab read from a replay's PROF JSON. The child replays at --ubatch 1, so
// each token goes through the model alone, as in decode: tok_s is its decode-like throughput.
struct ReplayPoint {
  double tok_s = 0;
  double hit_rate = 0;  // expert uses that read nothing from SSD
  double ssd_gb_per_token = 0;
  uint64_t tokens = 0;
  std::string verdict;
};
ReplayPoint replay_point(const nlohmann::json& prof);

// A fresh empty directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& stem);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace strata::tools
