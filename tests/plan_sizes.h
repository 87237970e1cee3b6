// The placement tests' small model: 4 layers x 16 experts of 1 MiB each, top-4, 1 MiB + 12 KiB
// cache slots. Shared by tests/test_plan.cpp and tests/test_plan_vram.cpp.
#pragma once

#include <cstdint>

#include "placement/plan.h"

namespace strata::placement {

inline constexpr uint64_t kMiB = 1ull << 20;

inline ExpertSizes sizes_4x16() {
  ExpertSizes s;
  s.n_expert = {16, 16, 16, 16};
  s.expert_bytes = {kMiB, kMiB, kMiB, kMiB};
  s.n_expert_used = 4;
  s.slot_bytes = kMiB + 12 * 4096;
  return s;
}

}  // namespace strata::placement
