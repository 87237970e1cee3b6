// PlacementPlan validation, printing, and the usage-free default policy.
// Tested by tests/test_plan.cpp.
#include "placement/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "io/check.h"

namespace strata::placement {

std::string format_bytes(uint64_t bytes) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, kUnits[u]);
}

std::string home_name(Home h) {
  switch (h.kind) {
    case HomeKind::kVram:
      return fmt::format("VRAM@{}", h.index);
    case HomeKind::kRam:
      return h.index == Home::kInterleaved ? std::string("RAM")
                                           : fmt::format("RAM@node{}", h.index);
    case HomeKind::kSsd:
      return "SSD";
  }
  return "?";
}

int64_t ExpertSizes::total_experts() const {
  return std::accumulate(n_expert.begin(), n_expert.end(), int64_t{0});
}

uint64_t ExpertSizes::total_bytes() const {
  uint64_t total = 0;
  for (int l = 0; l < n_layer(); ++l) total += static_cast<uint64_t>(n_expert[l]) * expert_bytes[l];
  return total;
}

int min_cache_slots(const ExpertSizes& sizes) {
  return 2 * sizes.n_expert_used;
}

uint64_t min_ram_bytes(const ExpertSizes& sizes) {
  return arena_round(static_cast<uint64_t>(min_cache_slots(sizes)) * sizes.slot_bytes);
}

namespace {

void check_sizes(const ExpertSizes& s) {
  if (s.expert_bytes.size() != s.n_expert.size())
    fail(ErrorKind::kBadValue, "expert sizes: {} layers of expert counts but {} of expert bytes",
         s.n_expert.size(), s.expert_bytes.size());
  if (s.n_expert_used < 0) fail(ErrorKind::kBadValue, "expert sizes: n_expert_used < 0");
  uint64_t largest = 0;
  for (int l = 0; l < s.n_layer(); ++l) {
    if (s.n_expert[l] < 0)
      fail(ErrorKind::kBadValue, "expert sizes: layer {} has {} experts", l, s.n_expert[l]);
    if (s.n_expert[l] > 0) {
      if (s.n_expert_used > s.n_expert[l])
        fail(ErrorKind::kBadValue, "expert sizes: top-{} exceeds layer {}'s {} experts",
             s.n_expert_used, l, s.n_expert[l]);
      largest = std::max(largest, s.expert_bytes[l]);
    }
  }
  if (s.total_experts() > 0 && s.slot_bytes < largest)
    fail(ErrorKind::kBadValue,
         "expert sizes: cache slot of {} bytes is smaller than an expert ({})", s.slot_bytes,
         largest);
}

// RAM bytes per arena key: one arena per RAM node index (kInterleaved is its own arena).
std::map<int, uint64_t> ram_home_bytes(const ExpertSizes& s, std::span<const Home> homes) {
  std::map<int, uint64_t> per_node;
  size_t i = 0;
  for (int l = 0; l < s.n_layer(); ++l)
    for (int e = 0; e < s.n_expert[l]; ++e, ++i)
      if (homes[i].kind == HomeKind::kRam) per_node[homes[i].index] += s.expert_bytes[l];
  return per_node;
}

uint64_t ram_used(const ExpertSizes& s, std::span<const Home> homes, uint64_t cache_bytes) {
  uint64_t total = arena_round(cache_bytes);
  for (const auto& [node, bytes] : ram_home_bytes(s, homes)) total += arena_round(bytes);
  return total;
}

}  // namespace

PlacementPlan::PlacementPlan(ExpertSizes sizes, std::vector<Home> homes, uint64_t cache_bytes,
                             Budgets budgets)
    : sizes_(std::move(sizes)),
      homes_(std::move(homes)),
      cache_bytes_(cache_bytes),
      budgets_(std::move(budgets)) {
  check_sizes(sizes_);
  const int64_t total = sizes_.total_experts();
  if (static_cast<int64_t>(homes_.size()) != total)
    fail(ErrorKind::kBadValue, "placement plan: {} homes for {} routed experts", homes_.size(),
         total);
  layer_begin_.assign(n_layer() + 1, 0);
  for (int l = 0; l < n_layer(); ++l) layer_begin_[l + 1] = layer_begin_[l] + sizes_.n_expert[l];

  std::vector<uint64_t> vram_used(budgets_.vram_bytes.size(), 0);
  int64_t n_ssd = 0;
  for (int l = 0; l < n_layer(); ++l) {
    for (int e = 0; e < sizes_.n_expert[l]; ++e) {
      const Home h = homes_[layer_begin_[l] + e];
      switch (h.kind) {
        case HomeKind::kVram:
          if (h.index < 0 || static_cast<size_t>(h.index) >= vram_used.size())
            fail(ErrorKind::kBadValue,
                 "placement plan: layer {} expert {} is homed on GPU {} but only {} GPU budget(s) "
                 "were given",
                 l, e, h.index, vram_used.size());
          vram_used[h.index] += sizes_.expert_bytes[l];
          break;
        case HomeKind::kRam:
          if (h.index < Home::kInterleaved)
            fail(ErrorKind::kBadValue, "placement plan: layer {} expert {} has RAM node {}", l, e,
                 h.index);
          break;
        case HomeKind::kSsd:
          ++n_ssd;
          break;
      }
    }
  }
  for (size_t d = 0; d < vram_used.size(); ++d)
    if (vram_used[d] > budgets_.vram_bytes[d])
      fail(ErrorKind::kBadValue,
           "placement plan: VRAM homes on GPU {} need {} but its VRAM budget is {}", d,
           format_bytes(vram_used[d]), format_bytes(budgets_.vram_bytes[d]));

  const int min_slots = min_cache_slots(sizes_);
  if (n_ssd > 0 && cache_slots() < min_slots)
    fail(ErrorKind::kBadValue,
         "placement plan: {} experts live on SSD but the RAM cache holds {} slot(s); the minimum "
         "is {} slots ({}: two layers' top-{})",
         n_ssd, cache_slots(), min_slots,
         format_bytes(static_cast<uint64_t>(min_slots) * sizes_.slot_bytes), sizes_.n_expert_used);

  const uint64_t used = ram_used(sizes_, homes_, cache_bytes_);
  if (used > budgets_.ram_bytes)
    fail(ErrorKind::kBadValue,
         "placement plan needs {} of RAM ({} in RAM homes + {} cache) but the RAM budget is {}; "
         "the minimum RAM budget for this model is {} (every expert on SSD)",
         format_bytes(used), format_bytes(bytes(HomeKind::kRam)), format_bytes(cache_bytes_),
         format_bytes(budgets_.ram_bytes), format_bytes(min_ram_bytes(sizes_)));
}

int PlacementPlan::cache_slots() const {
  if (sizes_.slot_bytes == 0) return 0;
  return static_cast<int>(cache_bytes_ / sizes_.slot_bytes);
}

uint64_t PlacementPlan::ram_bytes_used() const {
  return ram_used(sizes_, homes_, cache_bytes_);
}

int64_t PlacementPlan::count(HomeKind kind) const {
  return std::count_if(homes_.begin(), homes_.end(), [&](Home h) { return h.kind == kind; });
}

uint64_t PlacementPlan::bytes(HomeKind kind) const {
  uint64_t total = 0;
  for (int l = 0; l < n_layer(); ++l)
    for (Home h : layer_homes(l))
      if (h.kind == kind) total += sizes_.expert_bytes[l];
  return total;
}

std::string PlacementPlan::describe() const {
  std::string out = fmt::format(
      "plan: {} experts: {} VRAM ({}), {} RAM ({}), {} SSD ({}); RAM cache {} ({} slots of {}); "
      "RAM used {} of {}\n",
      sizes_.total_experts(), count(HomeKind::kVram), format_bytes(bytes(HomeKind::kVram)),
      count(HomeKind::kRam), format_bytes(bytes(HomeKind::kRam)), count(HomeKind::kSsd),
      format_bytes(bytes(HomeKind::kSsd)), format_bytes(cache_bytes_), cache_slots(),
      format_bytes(sizes_.slot_bytes), format_bytes(ram_bytes_used()),
      format_bytes(budgets_.ram_bytes));

  // One line per run of consecutive layers whose per-home counts and expert bytes are equal.
  auto layer_summary = [&](int l) {
    std::map<std::pair<int, int>, int64_t> counts;  // (kind, index) -> experts
    for (Home h : layer_homes(l)) ++counts[{static_cast<int>(h.kind), h.index}];
    return std::make_pair(counts, sizes_.expert_bytes[l]);
  };
  int l = 0;
  while (l < n_layer()) {
    const auto summary = layer_summary(l);
    int end = l + 1;
    while (end < n_layer() && layer_summary(end) == summary) ++end;
    const int n_run = end - l;
    std::string line =
        n_run == 1 ? fmt::format("layer {}:", l) : fmt::format("layer {}-{}:", l, end - 1);
    if (summary.first.empty()) line += " no routed experts";
    bool first = true;
    for (const auto& [key, n] : summary.first) {
      const Home h{static_cast<HomeKind>(key.first), static_cast<int16_t>(key.second)};
      const int64_t experts = n * n_run;
      line += fmt::format("{} {} {} ({})", first ? "" : ",", experts, home_name(h),
                          format_bytes(static_cast<uint64_t>(experts) * summary.second));
      first = false;
    }
    out += line + "\n";
    l = end;
  }
  return out;
}

uint64_t all_ram_bytes(const ExpertSizes& sizes, const DefaultPolicy& policy) {
  std::map<int, uint64_t> per_arena;
  for (int l = 0; l < sizes.n_layer(); ++l) {
    const int arena = policy.ram == RamPlacement::kLocal ? l % std::max(1, policy.n_nodes) : -1;
    per_arena[arena] += static_cast<uint64_t>(sizes.n_expert[l]) * sizes.expert_bytes[l];
  }
  uint64_t total = 0;
  for (const auto& [arena, bytes] : per_arena) total += arena_round(bytes);
  return total;
}

PlacementPlan default_plan(const ExpertSizes& sizes, const Budgets& budgets,
                           const DefaultPolicy& policy, std::span<const uint64_t> counts) {
  check_sizes(sizes);
  const int64_t total = sizes.total_experts();
  if (!counts.empty() && static_cast<int64_t>(counts.size()) != total)
    fail(ErrorKind::kBadValue, "default plan: {} usage counts for {} routed experts", counts.size(),
         total);
  if (policy.ram == RamPlacement::kLocal && policy.n_nodes < 1)
    fail(ErrorKind::kBadValue, "default plan: node-local RAM needs n_nodes >= 1, got {}",
         policy.n_nodes);

  std::vector<int64_t> layer_begin(sizes.n_layer() + 1, 0);
  for (int l = 0; l < sizes.n_layer(); ++l) layer_begin[l + 1] = layer_begin[l] + sizes.n_expert[l];

  // Spread order: round r takes expert r of every layer that has one.
  struct Candidate {
    int layer;
    int expert;
  };
  std::vector<Candidate> order;
  order.reserve(total);
  const int max_experts =
      sizes.n_layer() ? *std::max_element(sizes.n_expert.begin(), sizes.n_expert.end()) : 0;
  for (int r = 0; r < max_experts; ++r)
    for (int l = 0; l < sizes.n_layer(); ++l)
      if (r < sizes.n_expert[l]) order.push_back({l, r});
  if (!counts.empty())
    std::stable_sort(order.begin(), order.end(), [&](const Candidate& a, const Candidate& b) {
      return counts[layer_begin[a.layer] + a.expert] > counts[layer_begin[b.layer] + b.expert];
    });

  auto home_for = [&](int layer) {
    return policy.ram == RamPlacement::kLocal ? Home::ram(layer % policy.n_nodes) : Home::ram();
  };

  std::vector<Home> homes(total, Home::ssd());
  if (!policy.vram_layers.empty() && policy.vram_layers.size() != sizes.n_expert.size())
    fail(ErrorKind::kBadValue, "default plan: VRAM layer mask of {} entries for {} layers",
         policy.vram_layers.size(), sizes.n_expert.size());

  // VRAM first: the hottest experts (in order) to the device with the fewest expected routed rows
  // in that layer (then overall) that has room for them.
  const size_t n_dev = budgets.vram_bytes.size();
  bool any_vram = false;
  if (n_dev > 0) {
    std::vector<uint64_t> vram_left = budgets.vram_bytes;
    std::vector<double> dev_rows(n_dev, 0.0);
    std::vector<double> layer_rows(n_dev * static_cast<size_t>(sizes.n_layer()), 0.0);
    for (const Candidate& c : order) {
      if (!policy.vram_layers.empty() && !policy.vram_layers[c.layer]) continue;
      const uint64_t bytes = sizes.expert_bytes[c.layer];
      const double rows = counts.empty()
                              ? static_cast<double>(sizes.n_expert_used) /
                                    static_cast<double>(sizes.n_expert[c.layer])
                              : static_cast<double>(counts[layer_begin[c.layer] + c.expert]);
      int best = -1;
      for (size_t d = 0; d < n_dev; ++d) {
        if (vram_left[d] < bytes) continue;
        if (best < 0) {
          best = static_cast<int>(d);
          continue;
        }
        const double lr = layer_rows[c.layer * n_dev + d];
        const double lb = layer_rows[c.layer * n_dev + best];
        if (lr < lb || (lr == lb && dev_rows[d] < dev_rows[best])) best = static_cast<int>(d);
      }
      if (best < 0) continue;
      vram_left[best] -= bytes;
      dev_rows[best] += rows;
      layer_rows[c.layer * n_dev + best] += rows;
      homes[layer_begin[c.layer] + c.expert] = Home::vram(best);
      any_vram = true;
    }
  }
  if (any_vram) {
    const std::vector<Candidate> rest = [&] {
      std::vector<Candidate> r;
      for (const Candidate& c : order)
        if (homes[layer_begin[c.layer] + c.expert].kind != HomeKind::kVram) r.push_back(c);
      return r;
    }();
    order = rest;
  }

  // Everything fits: all experts (but the VRAM ones) in RAM, no cache (nothing streams, whatever
  // the policy's cache; VRAM homes are never read into RAM).
  {
    std::vector<Home> all = homes;
    for (const Candidate& c : order) all[layer_begin[c.layer] + c.expert] = home_for(c.layer);
    if (ram_used(sizes, all, 0) <= budgets.ram_bytes)
      return PlacementPlan(sizes, std::move(all), 0, budgets);
  }

  const uint64_t min_cache = static_cast<uint64_t>(min_cache_slots(sizes)) * sizes.slot_bytes;
  const uint64_t cache = std::max(min_cache, policy.cache_bytes);
  if (arena_round(cache) > budgets.ram_bytes)
    fail(ErrorKind::kBadValue,
         "RAM budget {} is below the minimum {} (a cache of {} slots of {}: two layers' top-{} "
         "experts, everything else on SSD)",
         format_bytes(budgets.ram_bytes), format_bytes(min_ram_bytes(sizes)),
         min_cache_slots(sizes), format_bytes(sizes.slot_bytes), sizes.n_expert_used);

  // Greedy fill in order; an expert that does not fit is skipped, later (smaller) ones may fit.
  // Each arena is charged in whole 2 MiB pages, so track bytes per arena.
  std::map<int, uint64_t> arena_bytes;
  uint64_t used = arena_round(cache);
  for (const Candidate& c : order) {
    const Home h = home_for(c.layer);
    const uint64_t before = arena_round(arena_bytes[h.index]);
    const uint64_t after = arena_round(arena_bytes[h.index] + sizes.expert_bytes[c.layer]);
    if (used - before + after > budgets.ram_bytes) continue;
    used = used - before + after;
    arena_bytes[h.index] += sizes.expert_bytes[c.layer];
    homes[layer_begin[c.layer] + c.expert] = h;
  }
  return PlacementPlan(sizes, std::move(homes), cache, budgets);
}

}  // namespace strata::placement
