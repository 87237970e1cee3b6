// libFuzzer target for what a model load reads from a GGUF's metadata (tests/model_meta_probe.h:
// config, summary, vocabulary, tokenizer, chat template); build with -DSTRATA_FUZZ=ON and clang,
// run by scripts/fuzz.sh meta. Any input must load or throw strata::Error: anything else (a crash,
// another exception, a hang, an out-of-bounds read) is a finding. Findings go into
// tests/data/meta_bad/ once fixed, where test_model_config replays them.
#include <cstddef>
#include <cstdint>
#include <span>

#include "io/check.h"
#include "tests/model_meta_probe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    strata::testing::load_model_metadata(std::span(reinterpret_cast<const std::byte*>(data), size));
  } catch (const strata::Error&) {
  }
  return 0;
}
