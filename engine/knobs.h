// The knob table: every user-tunable setting, each both an env var (RAM_GB, or STRATA_RAM_GB) and a
// CLI flag (--ram-gb), parsed once, validated once, listed by `strata knobs` and docs/KNOBS.md.
// This is the only place in strata that reads the environment. Tested by tests/test_knobs.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::engine {

// QD's auto value when `strata probe` has not measured the disk.
inline constexpr int kDefaultQueueDepth = 16;

enum class KnobType { kInt, kFloat, kBool, kString, kEnum };

struct KnobSpec {
  std::string_view name;  // env var name, e.g. "RAM_GB"; the flag is --ram-gb
  KnobType type;
  std::string_view default_value;  // "" = auto (decided at run time; the doc says how)
  std::string_view unit;           // "GiB", "threads", "" ...
  std::string_view allowed;        // enum values "a|b|c", or a numeric range "0..2"; "" = any
  std::string_view doc;
};

std::span<const KnobSpec> knob_table();
const KnobSpec* find_knob(std::string_view name);
// "RAM_GB" -> "--ram-gb"
std::string knob_flag(std::string_view name);

// Effective knob values: defaults < environment < CLI flags. Immutable after construction.
class Knobs {
 public:
  // Reads the environment (once) and applies the CLI overrides (knob name -> value). Bad values
  // throw strata::Error naming the knob, the value and the allowed range.
  static Knobs load(const std::map<std::string, std::string>& cli = {});
  // Only the given values (tests; no environment).
  static Knobs from_values(const std::map<std::string, std::string>& values);

  bool is_set(std::string_view name) const;  // given by env or flag (not a default)
  std::optional<std::string> raw(std::string_view name) const;
  int64_t get_int(std::string_view name) const;  // asserts the knob exists and has a value
  double get_float(std::string_view name) const;
  bool get_bool(std::string_view name) const;
  std::string get_string(std::string_view name) const;
  std::optional<int64_t> int_opt(std::string_view name) const;   // nullopt when auto
  std::optional<double> float_opt(std::string_view name) const;  // nullopt when auto

  // Warnings collected while loading (unknown STRATA_* variables ...), printed once by the CLI.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // "RAM_GB=auto THREADS=2 ..." for logs and the PROF header.
  std::string describe() const;

 private:
  std::map<std::string, std::string, std::less<>> values_;  // only knobs with a value
  std::map<std::string, bool, std::less<>> explicit_;
  std::vector<std::string> warnings_;
};

// Where strata keeps generated models and machine profiles: CACHE_DIR, else
// $XDG_CACHE_HOME/strata, else $HOME/.cache/strata, else ./.strata-cache.
std::string cache_dir(const Knobs& knobs);

// Markdown table of every knob (docs/KNOBS.md is generated from it by `strata knobs --markdown`).
std::string knobs_markdown();

}  // namespace strata::engine
