// One GGUF per fixture model (the first file found in each ../shared/fixtures/<model>/), for the
// tests that run every architecture's metadata or vocabulary (test_model_meta,
// test_tokenizer_text). Empty when the fixtures are absent (those tests skip).
#pragma once

#include <filesystem>
#include <vector>

namespace strata::testing {

inline std::vector<std::filesystem::path> one_gguf_per_fixture() {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  const fs::path root(STRATA_FIXTURES_DIR);
  if (!fs::exists(root)) return out;
  for (const auto& dir : fs::directory_iterator(root)) {
    if (!dir.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(dir.path()))
      if (f.path().extension() == ".gguf") {
        out.push_back(f.path());
        break;
      }
  }
  return out;
}

}  // namespace strata::testing
