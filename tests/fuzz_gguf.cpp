// libFuzzer target for the GGUF parser (build with -DSTRATA_FUZZ=ON and clang; see
// scripts/fuzz.sh). Any input must either parse or throw strata::FileError: never crash, hang or
// read out of bounds. Crashes it finds go into tests/data/gguf_bad/ as unit tests.
#include <cstddef>
#include <cstdint>
#include <span>

#include "io/check.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = strata::io::GgufFile::parse("fuzz",
                                         std::span(reinterpret_cast<const std::byte*>(data), size));
    // Touch what a loader touches.
    for (const auto& kv : f.metadata()) (void)kv.value.to_display();
    for (const auto& t : f.tensors()) (void)t.shape_string();
  } catch (const strata::FileError&) {
  }
  return 0;
}
