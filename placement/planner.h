// Planner: from usage stats, budgets, expert byte sizes and the machine profile, the
// PlacementPlan that minimizes the predicted time per token — each tier's expected bytes per token
// over its bandwidth, tiers working in parallel (the max), not the hit rate alone — and that
// prediction per tier for `strata plan`. Tested by tests/test_planner.cpp and
// tests/test_pin_heldout.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "placement/machine_profile.h"
#include "placement/plan.h"

namespace strata::placement {

// Expected cost of a plan per decoded token.
struct TierPrediction {
  int64_t experts = 0;         // experts whose home is this tier
  uint64_t bytes = 0;          // their bytes at home
  double hit_share = 0;        // expected share of selections served from this tier
  double bytes_per_token = 0;  // expected bytes this tier reads per token
  double ms_per_token = 0;     // bytes_per_token / bandwidth
};
struct Prediction {
  std::array<TierPrediction, 3> tier;  // indexed by HomeKind
  double ms_per_token = 0;             // max over tiers (they work in parallel)
  std::string table() const;           // the `strata plan` table
};

// p: [total experts] layer-major probability that a token selects the expert (counts / tokens);
// empty = uniform top-k (k / n_expert). SSD-homed experts are predicted as read on every selection
// (the cache is the minimum; its hits are a bonus the prediction ignores).
Prediction predict(const PlacementPlan& plan, std::span<const double> p,
                   const MachineProfile& machine);

// counts -> per-token selection probabilities; tokens = 0 treats counts as relative weights.
std::vector<double> selection_probabilities(const ExpertSizes& sizes,
                                            std::span<const uint64_t> counts, uint64_t tokens);

// The plan minimizing predicted ms/token. With one RAM tier and SSD (no VRAM budget) the optimum
// of the cost model is the knapsack whose ratio is bytes saved per byte of RAM = p: hottest
// experts (by selection probability) into RAM until the budget, the rest on SSD; the minimum
// cache. counts empty = the usage-free default_plan. Throws as default_plan does.
PlacementPlan plan_placement(const ExpertSizes& sizes, const Budgets& budgets,
                             const DefaultPolicy& policy, std::span<const uint64_t> counts);

}  // namespace strata::placement
