// Global vs per-layer LRU for the RAM cache of SSD-streamed experts (the Tiers issue: "LRU;
// per-layer or global — measure and say which wins"). Replays recorded routing (MOER dumps from
// `strata replay --dump-routing DIR`) through the engine's own tiers::ExpertCache in decode order
// (token by token, layer by layer; a layer's top-k pinned while it computes, released after, as
// tiers::ExpertStore does) and prints the hit rate of each policy at several cache sizes:
//   global     one cache of S slots shared by every layer (what the engine ships);
//   per-layer  one cache of S / n_layer slots per layer (the remainder to the first layers).
// Every SSD read is one expert of the same size, so the miss count is the SSD bytes read.
//
// Usage: bench_cache_policy SLOTS[,SLOTS...] FILE.routing.bin [FILE...]
//   (the streams are replayed one after the other into the same caches, as a chat or a replay of
//   several streams would). Results: bench/RESULTS.md "Cache policy".
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "engine/logit_dump.h"
#include "tiers/expert_cache.h"
#include "tiers/ram_arena.h"

namespace {

using strata::engine::RoutingTrace;
using strata::tiers::ExpertCache;

constexpr uint64_t kSlotBytes = 4096;  // the simulation needs slots, not expert-sized ones

struct Tally {
  uint64_t hits = 0, misses = 0;
  double rate() const { return hits + misses ? double(hits) / double(hits + misses) : 0; }
};

std::unique_ptr<ExpertCache> make_cache(int slots, int64_t keys) {
  strata::tiers::RamArena mem(uint64_t(slots) * kSlotBytes, -1, strata::tiers::NumaMode::kOff);
  return std::make_unique<ExpertCache>(slots, kSlotBytes, keys, std::move(mem));
}

// One expert access: a hit pins the cached slot; a miss fills one (evicting the LRU unpinned
// slot). Returns the slot to release after the layer, or kNone when every slot is pinned.
int access(ExpertCache& c, int64_t key, Tally& t) {
  int slot = c.lookup(key);
  if (slot != ExpertCache::kNone) {
    ++t.hits;
    return slot;
  }
  ++t.misses;
  slot = c.begin_fill(key);
  if (slot != ExpertCache::kNone) c.complete(slot);
  return slot;
}

void replay(const std::vector<RoutingTrace>& traces, int slots, Tally& global, Tally& layered) {
  const RoutingTrace& t0 = traces.front();
  const int64_t keys = int64_t(t0.n_layer) * t0.n_expert;
  auto g = make_cache(slots, keys);
  std::vector<std::unique_ptr<ExpertCache>> per;
  for (uint32_t il = 0; il < t0.n_layer; ++il) {
    const int s = slots / int(t0.n_layer) + (int(il) < slots % int(t0.n_layer) ? 1 : 0);
    per.push_back(make_cache(std::max(s, int(t0.k)), keys));
  }
  std::vector<int> pinned_g, pinned_l;
  for (const RoutingTrace& tr : traces) {
    for (uint32_t pos = 0; pos < tr.n_pos; ++pos) {
      for (uint32_t il = 0; il < tr.n_layer; ++il) {
        const int32_t* topk = tr.topk_at(il, pos);
        if (topk[0] < 0) continue;  // a dense layer
        pinned_g.clear();
        pinned_l.clear();
        for (uint32_t j = 0; j < tr.k; ++j) {
          const int64_t key = int64_t(il) * tr.n_expert + topk[j];
          pinned_g.push_back(access(*g, key, global));
          pinned_l.push_back(access(*per[il], key, layered));
        }
        for (int s : pinned_g)
          if (s != ExpertCache::kNone) g->release(s);
        for (int s : pinned_l)
          if (s != ExpertCache::kNone) per[il]->release(s);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SLOTS[,SLOTS...] FILE.routing.bin [FILE...]\n", argv[0]);
    return 2;
  }
  try {
    std::vector<int> sizes;
    for (size_t at = 0; at <= std::string(argv[1]).size();) {
      const std::string list = argv[1];
      const size_t comma = std::min(list.find(',', at), list.size());
      sizes.push_back(std::stoi(list.substr(at, comma - at)));
      at = comma + 1;
    }
    std::vector<RoutingTrace> traces;
    uint64_t tokens = 0;
    for (int i = 2; i < argc; ++i) {
      traces.push_back(strata::engine::read_routing_dump(argv[i]));
      const RoutingTrace& t = traces.back();
      if (t.n_layer != traces.front().n_layer || t.n_expert != traces.front().n_expert ||
          t.k != traces.front().k) {
        std::fprintf(stderr, "bench_cache_policy: %s: another model's routing\n", argv[i]);
        return 1;
      }
      tokens += t.n_pos;
    }
    const RoutingTrace& t0 = traces.front();
    fmt::print("routing: {} streams, {} tokens, {} layers x {} experts, top-{}\n", traces.size(),
               tokens, t0.n_layer, t0.n_expert, t0.k);
    fmt::print("| cache slots | % of experts | global LRU hit rate | per-layer LRU hit rate |\n");
    fmt::print("|---:|---:|---:|---:|\n");
    for (int slots : sizes) {
      if (slots < int(2 * t0.k) || slots < int(t0.n_layer * t0.k)) {
        // Per-layer needs k slots per layer; the engine's minimum is two layers' top-k.
        fmt::print(stderr, "bench_cache_policy: {} slots is below n_layer x k = {}; skipped\n",
                   slots, t0.n_layer * t0.k);
        continue;
      }
      Tally g, l;
      replay(traces, slots, g, l);
      fmt::print("| {} | {:.1f} | {:.4f} | {:.4f} |\n", slots,
                 100.0 * slots / (double(t0.n_layer) * t0.n_expert), g.rate(), l.rate());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cache_policy: %s\n", e.what());
    return 1;
  }
  return 0;
}
