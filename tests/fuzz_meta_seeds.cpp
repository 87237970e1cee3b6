// Seeds for fuzz_model_meta: each GGUF given, rewritten with its metadata only (no tensors), so
// the fuzzer mutates keys, the vocabulary and the chat template rather than tensor bytes. An
// argument synth:PRESET is that `strata synth` preset's metadata (architectures with no fixture).
//   fuzz_meta_seeds OUT_DIR (MODEL.gguf | synth:PRESET)...
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/synth.h"
#include "io/check.h"
#include "io/gguf.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fuzz_meta_seeds OUT_DIR MODEL.gguf...\n");
    return 2;
  }
  try {
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      std::vector<strata::io::GgufKv> kvs;
      std::string stem;
      if (arg.rfind("synth:", 0) == 0) {
        stem = arg.substr(6);
        const strata::engine::SynthPreset* preset = strata::engine::find_synth_preset(stem);
        if (!preset) throw std::runtime_error("no synth preset " + stem);
        strata::engine::SynthOptions o;
        o.preset = *preset;
        const std::vector<std::byte> model = strata::engine::SynthModel(o).to_bytes();
        kvs = strata::io::GgufFile::parse(stem, model).metadata();
      } else {
        kvs = strata::io::GgufFile::open(arg).metadata();
        stem = std::filesystem::path(arg).stem().string();
      }
      strata::io::GgufWriter w;
      for (const auto& kv : kvs) w.set(kv.key, kv.value);
      const std::vector<std::byte> bytes = w.to_bytes([](size_t, std::span<std::byte>) {});
      const std::filesystem::path out = std::filesystem::path(argv[1]) / (stem + ".bin");
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
