// Seeds for fuzz_model_meta: each GGUF given, rewritten with its metadata only (no tensors), so
// the fuzzer mutates keys, the vocabulary and the chat template rather than tensor bytes.
//   fuzz_meta_seeds OUT_DIR MODEL.gguf...
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/check.h"
#include "io/gguf.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fuzz_meta_seeds OUT_DIR MODEL.gguf...\n");
    return 2;
  }
  try {
    for (int i = 2; i < argc; ++i) {
      const auto f = strata::io::GgufFile::open(argv[i]);
      strata::io::GgufWriter w(f.alignment());
      for (const auto& kv : f.metadata()) w.set(kv.key, kv.value);
      const std::vector<std::byte> bytes = w.to_bytes([](size_t, std::span<std::byte>) {});
      const std::filesystem::path out = std::filesystem::path(argv[1]) /
                                        (std::filesystem::path(argv[i]).stem().string() + ".bin");
      std::ofstream(out, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
      std::printf("%s: %zu bytes\n", out.c_str(), bytes.size());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_meta_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
