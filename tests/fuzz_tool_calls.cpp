// libFuzzer target for function calling's parsers and matchers and serve's Anthropic request
// translation: tests/tool_calls_probe.h's check on each input, aborting on what it reports. Run
// by scripts/fuzz.sh tools; seeds in tests/data/tool_seeds/ (copied in by the script; fixed
// findings go there too, and test_tool_calls replays them).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tool_calls_probe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string what =
      strata::test::probe_tool_calls(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!what.empty()) {
    std::fprintf(stderr, "fuzz_tool_calls: %s\n", what.c_str());
    std::abort();
  }
  return 0;
}
