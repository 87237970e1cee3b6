// PlacementPlan: the home (VRAM device, RAM node, or SSD) of every routed expert plus the RAM cache
// size — a value, validated on construction against counts and budgets, printable with byte totals.
// default_plan() is the usage-free fill policy. Tested by tests/test_plan.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata::placement {

enum class HomeKind : uint8_t { kVram, kRam, kSsd };

// Where one expert's bytes live. index: GPU device for kVram; NUMA node for kRam, where
// kInterleaved means "spread page by page over every node"; unused (0) for kSsd.
struct Home {
  static constexpr int kInterleaved = -1;

  HomeKind kind = HomeKind::kSsd;
  int16_t index = 0;

  static Home vram(int device) { return {HomeKind::kVram, static_cast<int16_t>(device)}; }
  static Home ram(int node = kInterleaved) { return {HomeKind::kRam, static_cast<int16_t>(node)}; }
  static Home ssd() { return {HomeKind::kSsd, 0}; }
  bool operator==(const Home&) const = default;
};

// "RAM", "RAM@node1", "VRAM@0", "SSD".
std::string home_name(Home h);

// What placement needs to know about the experts, nothing more (placement never sees tensor
// names or file offsets). tiers::expert_sizes() derives it from the file's extents.
struct ExpertSizes {
  std::vector<int> n_expert;  // [n_layer] routed experts in layer l (0 = no routed experts)
  std::vector<uint64_t> expert_bytes;  // [n_layer] RAM bytes one expert of layer l occupies at home
  int n_expert_used = 0;               // experts selected per token per layer (top-k)
  uint64_t slot_bytes = 0;  // bytes of one RAM cache slot (the largest expert as read from disk)

  int n_layer() const { return static_cast<int>(n_expert.size()); }
  int64_t total_experts() const;
  uint64_t total_bytes() const;  // every routed expert's bytes
};

struct Budgets {
  uint64_t ram_bytes = 0;            // RAM for expert homes + the cache (RAM_GB)
  std::vector<uint64_t> vram_bytes;  // [n_device] VRAM for expert homes; empty = no GPU
};

// RAM bytes a given set of arenas really occupies: each arena (one per RAM node used, plus the
// cache) is a whole number of 2 MiB huge pages; an arena below one huge page is a whole number of
// 4 KiB pages instead (a huge page would mostly be waste, and tiny models could not mix homes).
constexpr uint64_t kArenaAlign = 2ull << 20;
constexpr uint64_t kSmallArenaAlign = 4096;
constexpr uint64_t arena_round(uint64_t bytes) {
  const uint64_t a = bytes < kArenaAlign ? kSmallArenaAlign : kArenaAlign;
  return (bytes + a - 1) / a * a;
}

// Cache slots the tiers need at least when any expert lives on SSD: one layer's top-k being
// computed while the next layer's top-k is in flight.
int min_cache_slots(const ExpertSizes& sizes);
// The smallest RAM budget any plan can have: the minimum cache, every expert on SSD.
uint64_t min_ram_bytes(const ExpertSizes& sizes);

class PlacementPlan {
 public:
  // homes: [sum over layers of n_expert], layer-major (layer 0's experts, then layer 1's ...).
  // Throws strata::Error (kBadValue) when the counts do not match the sizes, a home names a
  // device without a VRAM budget, the cache cannot hold min_cache_slots() while experts live on
  // SSD, or a budget is exceeded — the message names the minimum.
  PlacementPlan(ExpertSizes sizes, std::vector<Home> homes, uint64_t cache_bytes, Budgets budgets);

  const ExpertSizes& sizes() const { return sizes_; }
  const Budgets& budgets() const { return budgets_; }
  int n_layer() const { return sizes_.n_layer(); }
  int n_expert(int layer) const { return sizes_.n_expert[layer]; }
  Home home(int layer, int expert) const { return homes_[layer_begin_[layer] + expert]; }
  std::span<const Home> layer_homes(int layer) const {
    return {homes_.data() + layer_begin_[layer], static_cast<size_t>(sizes_.n_expert[layer])};
  }

  uint64_t cache_bytes() const { return cache_bytes_; }
  int cache_slots() const;  // cache_bytes / slot_bytes
  // RAM the plan occupies: arena_round() of each RAM node's home bytes + arena_round(cache).
  uint64_t ram_bytes_used() const;
  int64_t count(HomeKind kind) const;
  uint64_t bytes(HomeKind kind) const;  // sum of expert_bytes over experts with that home kind

  // Multi-line: a totals line, then per run of layers with identical homes, e.g.
  //   "layer 0-47: 3072 RAM (12.1 GiB), 3072 SSD (12.1 GiB)".
  std::string describe() const;

 private:
  ExpertSizes sizes_;
  std::vector<Home> homes_;           // [total experts], layer-major
  std::vector<int64_t> layer_begin_;  // [n_layer + 1] index of layer l's first expert in homes_
  uint64_t cache_bytes_ = 0;
  Budgets budgets_;
};

enum class RamPlacement {
  kInterleave,  // one arena interleaved over every node (Home::ram(kInterleaved))
  kLocal,       // layers alternate over n_nodes node-local arenas
};

struct DefaultPolicy {
  RamPlacement ram = RamPlacement::kInterleave;
  int n_nodes = 1;           // NUMA nodes for kLocal
  uint64_t cache_bytes = 0;  // RAM cache to keep when experts stream; below the minimum
                             // (min_cache_slots()) = the minimum
  // [n_layer] whether a GPU can compute layer l's experts (the grouped kernel's types); empty =
  // every layer. Layers marked 0 never get VRAM homes.
  std::vector<uint8_t> vram_layers;
};

// RAM an all-RAM plan of this policy needs: each arena's expert bytes, arena_round()ed (an all-RAM
// plan has no cache).
uint64_t all_ram_bytes(const ExpertSizes& sizes, const DefaultPolicy& policy = {});

// The usage-free default: VRAM first (each device up to its budget), then keep the cache, fill
// RAM up to the budget, the rest on SSD. counts, when not empty, is [total experts] layer-major
// usage (hottest experts go to VRAM, then RAM, first; ties broken by the spread order); otherwise
// a fixed spread order — round-robin over layers, expert ids ascending — so every layer gets an
// equal share. With several devices each expert in that order goes to the device with the fewest
// expected routed rows (its experts' counts, or k / n_expert each without counts) in the expert's
// layer so far, then overall, among those with room: balanced by rows, not bytes. VRAM homes take
// no RAM: when the other experts all fit in RAM there is no cache (as in an all-RAM plan), else
// the cache is kept for the SSD homes. Throws when the budget is below min_ram_bytes() and
// experts must stream, naming the minimum.
PlacementPlan default_plan(const ExpertSizes& sizes, const Budgets& budgets,
                           const DefaultPolicy& policy = {}, std::span<const uint64_t> counts = {});

// "12.1 GiB", "512.0 MiB", "4.0 KiB", "17 B".
std::string format_bytes(uint64_t bytes);

}  // namespace strata::placement
