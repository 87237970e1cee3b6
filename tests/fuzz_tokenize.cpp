// libFuzzer target for text through the tokenizer (tests/tokenizer_probe.h) of every fixture
// vocabulary: byte-level BPE (qwen2, gpt-4o, deepseek, glm, olmo pre-tokenizers) and SentencePiece.
// Run by scripts/fuzz.sh text; a finding aborts with the vocabulary and what went wrong.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer.h"
#include "io/gguf.h"
#include "tokenizer_probe.h"

namespace {

struct Vocab {
  std::string name;
  strata::engine::Tokenizer tok;
};

std::vector<Vocab>& vocabs() {
  static std::vector<Vocab> v = [] {
    namespace fs = std::filesystem;
    std::vector<Vocab> out;
    const char* env = std::getenv("STRATA_FIXTURES");
    const fs::path root = env ? fs::path(env) : fs::path(STRATA_FIXTURES_DIR);
    for (const auto& dir : fs::directory_iterator(root)) {
      if (!dir.is_directory()) continue;
      for (const auto& f : fs::directory_iterator(dir.path()))
        if (f.path().extension() == ".gguf") {
          const auto file = strata::io::GgufFile::open(f.path().string());
          out.push_back({f.path().filename().string(), strata::engine::Tokenizer::from_gguf(file)});
          break;
        }
    }
    if (out.empty()) {
      std::fprintf(stderr, "fuzz_tokenize: no fixture GGUF under %s\n", root.c_str());
      std::abort();
    }
    return out;
  }();
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const Vocab& v : vocabs()) {
    const std::string what = strata::testing::check_text(v.tok, text);
    if (!what.empty()) {
      std::fprintf(stderr, "fuzz_tokenize: %s: %s\n", v.name.c_str(), what.c_str());
      std::abort();
    }
  }
  return 0;
}
