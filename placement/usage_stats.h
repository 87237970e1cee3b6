// UsageStats: how often each routed expert was selected, per (layer, expert), decode and prefill
// counted apart, with the model identity they were measured on; the versioned text stats file
// (docs/FORMATS.md "Usage stats"), merge, and the refusal of another model's file.
// Tested by tests/test_usage_stats.cpp and tests/test_pin_heldout.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::io {
class GgufFile;
}

namespace strata::placement {

// Which model a stats file belongs to. fingerprint: FNV-1a 64 over general.architecture, every
// metadata key name, and the tensor table (name, type, shape of every tensor, in file order) — so a
// requantized or differently shaped model gets another fingerprint.
struct ModelIdentity {
  std::string name;  // general.name, else the file's base name
  uint64_t fingerprint = 0;
};
ModelIdentity model_identity(const io::GgufFile& file);

// FNV-1a 64, the fingerprint's hash.
struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(const void* data, size_t n);
  void add(std::string_view s) { add(s.data(), s.size()), add_u64(s.size()); }
  void add_u64(uint64_t v) { add(&v, sizeof v); }
};

class UsageStats {
 public:
  UsageStats() = default;
  // n_expert: [n_layer] routed experts per layer (0 for a dense FFN layer).
  UsageStats(ModelIdentity id, std::vector<int> n_expert);

  // The hot path: one call per selected (layer, expert) group; n = tokens that selected it.
  void record(int layer, int expert, uint64_t n, bool decode) {
    Cell& c = cells_[static_cast<size_t>(layer_begin_[layer] + expert)];
    (decode ? c.decode : c.prefill) += n;
  }
  void add_tokens(uint64_t n, bool decode) { (decode ? decode_tokens_ : prefill_tokens_) += n; }
  int first_moe_layer() const;  // the layer whose calls count tokens; -1 when none

  const ModelIdentity& identity() const { return id_; }
  const std::vector<int>& n_expert() const { return n_expert_; }
  int n_layer() const { return static_cast<int>(n_expert_.size()); }
  uint64_t decode_count(int layer, int expert) const;
  uint64_t prefill_count(int layer, int expert) const;
  uint64_t decode_tokens() const { return decode_tokens_; }
  uint64_t prefill_tokens() const { return prefill_tokens_; }
  uint64_t tokens() const { return decode_tokens_ + prefill_tokens_; }
  // [total experts] layer-major decode + prefill counts (the planner's and default_plan's input).
  std::vector<uint64_t> counts() const;

  // Throws Error(kBadValue) when the shape (n_layer, n_expert per layer) differs, or — unless
  // force — the fingerprint differs; the message names both models. what: the other's origin.
  void check_compatible(const ModelIdentity& id, const std::vector<int>& n_expert, bool force,
                        std::string_view what) const;
  // Adds other's counts and tokens (after check_compatible(other ..., force)).
  void merge(const UsageStats& other, bool force = false);
  // Every count and both token totals halved (rounded down): older use weighs half (the learned
  // profile's decay, tools/placement_setup.h).
  void halve();
  // Takes away an earlier snapshot of these same counts (each count and total no larger than
  // this one's): what was counted since.
  void subtract(const UsageStats& earlier);

  std::string to_text() const;
  // Written to path + ".tmp" then renamed; an I/O failure is Error(kIo) naming the path.
  void save(const std::string& path) const;
  // Every malformed line is Error(kBadFile) "file:line: why".
  static UsageStats parse(std::string_view text, const std::string& file);
  static UsageStats load(const std::string& path);

 private:
  struct Cell {
    uint64_t decode = 0;
    uint64_t prefill = 0;
  };
  ModelIdentity id_;
  std::vector<int> n_expert_;         // [n_layer]
  std::vector<int64_t> layer_begin_;  // [n_layer + 1]
  std::vector<Cell> cells_;           // [total experts], layer-major
  uint64_t decode_tokens_ = 0;
  uint64_t prefill_tokens_ = 0;
};

}  // namespace strata::placement
