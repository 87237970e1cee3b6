// Where routed experts' bytes are in the model file: per layer and expert, the absolute byte range
// of each of its three slices (gate, up, down). The engine fills the table from the bound weights;
// tiers/ reads by it. Exercised by tests/test_tiers_store.cpp and tests/test_tier_zstd.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace strata::tiers {

// One slice of a stacked expert tensor: absolute byte range in the model file.
struct SliceExtent {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};
enum Slice : int { kGate = 0, kUp = 1, kDown = 2 };
using ExpertExtents = std::array<SliceExtent, 3>;             // indexed by Slice
using ExtentTable = std::vector<std::vector<ExpertExtents>>;  // [n_layer][n_expert]

}  // namespace strata::tiers
