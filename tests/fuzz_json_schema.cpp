// libFuzzer target for structured output's schema compiler and matcher (engine/json_schema.h):
// tests/json_schema_probe.h's walk on each input, aborting on what it reports. Run by
// scripts/fuzz.sh schema; seeds in tests/data/schema_seeds/ (copied in by the script; fixed
// findings go there too, and test_json_schema replays them).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "json_schema_probe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string what =
      strata::test::probe_json_schema(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!what.empty()) {
    std::fprintf(stderr, "fuzz_json_schema: %s\n", what.c_str());
    std::abort();
  }
  return 0;
}
