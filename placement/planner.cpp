// The planner and its cost model (see planner.h).
#include "placement/planner.h"

#include <fmt/format.h>

#include <algorithm>

#include "io/check.h"

namespace strata::placement {
namespace {

const char* tier_name(HomeKind k) {
  switch (k) {
    case HomeKind::kVram:
      return "VRAM";
    case HomeKind::kRam:
      return "RAM";
    case HomeKind::kSsd:
      return "SSD";
  }
  return "?";
}

}  // namespace

std::vector<double> selection_probabilities(const ExpertSizes& sizes,
                                            std::span<const uint64_t> counts, uint64_t tokens) {
  const auto total = static_cast<size_t>(sizes.total_experts());
  std::vector<double> p(total, 0.0);
  size_t i = 0;
  for (int l = 0; l < sizes.n_layer(); ++l) {
    const int n = sizes.n_expert[l];
    if (counts.empty()) {
      for (int e = 0; e < n; ++e) p[i + e] = static_cast<double>(sizes.n_expert_used) / n;
    } else {
      STRATA_ASSERT(counts.size() == total, "{} counts for {} experts", counts.size(), total);
      uint64_t layer_sum = 0;
      for (int e = 0; e < n; ++e) layer_sum += counts[i + e];
      // Without a token count, a layer's selections are k per token.
      const double denom = tokens ? static_cast<double>(tokens)
                                  : static_cast<double>(layer_sum) / sizes.n_expert_used;
      for (int e = 0; e < n; ++e)
        p[i + e] = denom > 0 ? static_cast<double>(counts[i + e]) / denom : 0.0;
    }
    i += static_cast<size_t>(n);
  }
  return p;
}

Prediction predict(const PlacementPlan& plan, std::span<const double> p,
                   const MachineProfile& machine) {
  const ExpertSizes& sizes = plan.sizes();
  std::vector<double> uniform;
  if (p.empty()) {
    uniform = selection_probabilities(sizes, {}, 0);
    p = uniform;
  }
  Prediction r;
  double selections = 0;
  size_t i = 0;
  for (int l = 0; l < plan.n_layer(); ++l)
    for (int e = 0; e < plan.n_expert(l); ++e, ++i) {
      const Home h = plan.home(l, e);
      TierPrediction& t = r.tier[static_cast<size_t>(h.kind)];
      ++t.experts;
      t.bytes += sizes.expert_bytes[l];
      t.hit_share += p[i];
      // An SSD expert is read as its slot (4 KiB-aligned slices), a home one as packed.
      const uint64_t read = h.kind == HomeKind::kSsd ? sizes.slot_bytes : sizes.expert_bytes[l];
      t.bytes_per_token += p[i] * static_cast<double>(read);
      selections += p[i];
    }
  // VRAM: the probed GPUs' device copy bandwidth, summed (each device reads its own experts; the
  // planner balances their rows); ~25x RAM (DESIGN.md) when `strata probe` measured no GPU.
  double vram_gbps = 0;
  for (const MachineProfile::Gpu& g : machine.gpus) vram_gbps += g.d2d_gbps;
  if (vram_gbps <= 0) vram_gbps = machine.ram_gbps() * 25;
  const double gbps[3] = {vram_gbps, machine.ram_gbps(), machine.ssd_gbps()};
  for (size_t k = 0; k < 3; ++k) {
    TierPrediction& t = r.tier[k];
    if (selections > 0) t.hit_share /= selections;
    t.ms_per_token = t.bytes_per_token / (gbps[k] * 1e9) * 1e3;
    r.ms_per_token = std::max(r.ms_per_token, t.ms_per_token);
  }
  return r;
}

std::string Prediction::table() const {
  std::string s = fmt::format("{:<5} {:>8} {:>12} {:>9} {:>14} {:>12}\n", "tier", "experts",
                              "bytes", "hit share", "MB/token", "ms/token");
  for (HomeKind k : {HomeKind::kVram, HomeKind::kRam, HomeKind::kSsd}) {
    const TierPrediction& t = tier[static_cast<size_t>(k)];
    if (t.experts == 0 && k == HomeKind::kVram) continue;
    s += fmt::format("{:<5} {:>8} {:>12} {:>8.1f}% {:>14.3f} {:>12.3f}\n", tier_name(k), t.experts,
                     format_bytes(t.bytes), 100 * t.hit_share, t.bytes_per_token / 1e6,
                     t.ms_per_token);
  }
  s += fmt::format("predicted expert time per token: {:.3f} ms (tiers in parallel: the max)",
                   ms_per_token);
  return s;
}

PlacementPlan plan_placement(const ExpertSizes& sizes, const Budgets& budgets,
                             const DefaultPolicy& policy, std::span<const uint64_t> counts) {
  // Ratio of bytes saved per byte of RAM is the selection probability, whatever the expert's
  // size, so ordering by counts (one token count for all) is the greedy knapsack order.
  return default_plan(sizes, budgets, policy, counts);
}

}  // namespace strata::placement
