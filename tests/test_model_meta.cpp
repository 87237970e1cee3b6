// Bad model metadata gets a strata::Error, never a crash or another exception: every fixture's
// metadata (no tensors) loaded as tests/model_meta_probe.h does (config, summary, vocabulary,
// tokenizer, chat template), then again with each key edited in turn — numbers to 0, 1, -1 and
// their type's largest value, strings emptied or garbled, arrays emptied, halved or given a wrong
// element type, the key removed. Plus the files the fuzzer (tests/fuzz_model_meta.cpp) found, in
// tests/data/meta_bad/. And whole models: each fixture written again with one hyperparameter
// edited (its tensors as they were) must fail Model::load with a strata::Error or load and run a
// prefill and a decode step. The synthetic tiny-qwen2moe, tiny-granitemoe, tiny-deepseek,
// tiny-dbrx, tiny-phimoe, tiny-arctic and tiny-grok join the fixtures (architectures they lack).
// Runs under ASan/UBSan with the unit tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "fixture_models.h"
#include "io/check.h"
#include "io/gguf.h"
#include "model_meta_probe.h"
#include "tier_test_util.h"

namespace fs = std::filesystem;
using namespace strata;
using io::GgufArray;
using io::GgufKv;
using io::GgufType;
using io::GgufValue;

namespace {

// One GGUF per fixture model, plus the synthetic tiny-qwen2moe, tiny-granitemoe, tiny-deepseek,
// tiny-dbrx, tiny-phimoe, tiny-arctic and tiny-grok (architectures the fixtures lack; written once
// per process into a scratch directory removed at exit).
std::vector<fs::path> models() {
  static const tier_test::ScratchDir dir("meta_synth");
  static const std::vector<fs::path> synth = [] {
    std::vector<fs::path> paths;
    for (const char* preset : {"tiny-qwen2moe", "tiny-granitemoe", "tiny-deepseek", "tiny-dbrx",
                               "tiny-phimoe", "tiny-arctic", "tiny-grok", "tiny-grok2"}) {
      paths.push_back(dir / fmt::format("{}.gguf", preset));
      engine::SynthOptions o;
      o.preset = *engine::find_synth_preset(preset);
      o.n_threads = 1;
      engine::SynthModel(o).write(paths.back().string());
    }
    return paths;
  }();
  std::vector<fs::path> out = strata::testing::one_gguf_per_fixture();
  out.insert(out.end(), synth.begin(), synth.end());
  return out;
}

std::vector<std::byte> metadata_bytes(const std::vector<GgufKv>& kvs) {
  io::GgufWriter w;
  for (const GgufKv& kv : kvs) w.set(kv.key, kv.value);
  return w.to_bytes([](size_t, std::span<std::byte>) {});
}

// "" when the load ended well (loaded, or a strata::Error); else what escaped.
std::string load_outcome(const std::vector<std::byte>& bytes) {
  try {
    strata::testing::load_model_metadata(bytes);
  } catch (const Error&) {
  } catch (const std::exception& e) {
    return std::string("escaped: ") + e.what();
  }
  return "";
}

// The variants of one value that a broken converter or a hostile file would write.
std::vector<GgufValue> edits_of(const GgufValue& v) {
  std::vector<GgufValue> out;
  switch (v.type()) {
    case GgufType::kU32:
      for (uint32_t x : {0u, 1u, 3u, 0x7FFFFFFFu, std::numeric_limits<uint32_t>::max()})
        out.emplace_back(x);
      out.emplace_back(int32_t{-1});  // a signed type where unsigned is expected
      out.emplace_back(1.5f);         // a float where an integer is expected
      break;
    case GgufType::kI32:
      for (int32_t x :
           {0, 1, -1, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()})
        out.emplace_back(x);
      break;
    case GgufType::kU64:
      for (uint64_t x : {uint64_t{0}, uint64_t{1}, std::numeric_limits<uint64_t>::max()})
        out.emplace_back(x);
      break;
    case GgufType::kF32:
      for (float x : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN(), 1e30f})
        out.emplace_back(x);
      break;
    case GgufType::kBool:
      out.emplace_back(!*v.as_bool());
      out.emplace_back(uint32_t{2});
      break;
    case GgufType::kString:
      out.emplace_back(std::string());
      out.emplace_back(std::string("\xff\xfe{% for %}\x00x", 14));
      out.emplace_back(uint32_t{7});
      break;
    case GgufType::kArray: {
      const GgufArray& a = *v.as_array();
      out.emplace_back(GgufArray{a.elem_type, {}});
      GgufArray half{a.elem_type,
                     std::vector<GgufValue>(a.items.begin(),
                                            a.items.begin() + std::ptrdiff_t(a.items.size() / 2))};
      out.emplace_back(half);
      if (!a.items.empty()) {
        GgufArray longer = a;
        longer.items.push_back(a.items.back());
        out.emplace_back(longer);
      }
      out.emplace_back(io::gguf_i32_array({-1, 0, 1 << 30}));
      out.emplace_back(io::gguf_string_array({"", "\xc3", "a b"}));
      break;
    }
    default:
      out.emplace_back(uint32_t{0});
      break;
  }
  return out;
}

TEST(ModelMeta, FixtureMetadataLoads) {
  const auto files = models();
  for (const fs::path& p : files) {
    SCOPED_TRACE(p.string());
    const io::GgufFile f = io::GgufFile::open(p.string());
    EXPECT_NO_THROW(strata::testing::load_model_metadata(metadata_bytes(f.metadata())));
  }
}

TEST(ModelMeta, EveryKeyEditedIsAnErrorOrLoads) {
  const auto files = models();
  size_t cases = 0;
  for (const fs::path& p : files) {
    const io::GgufFile f = io::GgufFile::open(p.string());
    const std::vector<GgufKv>& kvs = f.metadata();
    for (size_t k = 0; k < kvs.size(); ++k) {
      std::vector<GgufValue> edits = edits_of(kvs[k].value);
      for (size_t e = 0; e <= edits.size(); ++e) {
        std::vector<GgufKv> edited = kvs;
        if (e == edits.size())
          edited.erase(edited.begin() + std::ptrdiff_t(k));  // the key removed
        else
          edited[k].value = edits[e];
        const std::string what = load_outcome(metadata_bytes(edited));
        EXPECT_EQ(what, "") << p.filename().string() << ": " << kvs[k].key << " edit " << e;
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 500u);
}

// "" when Model::load refused the file with a strata::Error or the model ran two positions as a
// prefill and one as a decode (counted in *ran); else what went wrong.
std::string run_outcome(const std::string& path, size_t* ran) {
  try {
    const engine::Model m = engine::Model::load(path);
    engine::ForwardOptions o;
    o.n_ctx = 8;
    o.n_threads = 2;
    engine::Forward f(m, o);
    (void)f.prefill(std::vector<int32_t>{1, 2});
    (void)f.decode(3);
    ++*ran;
  } catch (const Error&) {
  } catch (const std::exception& e) {
    return std::string("escaped: ") + e.what();
  }
  return "";
}

// The hyperparameters (numbers, per-layer arrays of them) of a model's architecture.
bool is_hparam(const GgufKv& kv, const std::string& arch) {
  if (kv.key.rfind(arch + ".", 0) != 0) return false;
  const GgufType t = kv.value.type();
  return t != GgufType::kString &&
         (t != GgufType::kArray || kv.value.as_array()->elem_type != GgufType::kString);
}

TEST(ModelMeta, WholeModelsWithAnEditedHyperparameterLoadOrFail) {
  const auto files = models();
  const fs::path dir = fs::temp_directory_path() / ("strata_meta_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  size_t cases = 0, ran = 0;
  for (const fs::path& p : files) {
    const io::GgufFile f = io::GgufFile::open(p.string());
    std::string arch;
    for (const GgufKv& kv : f.metadata())
      if (kv.key == "general.architecture") arch = *kv.value.as_string();
    const std::vector<GgufKv>& kvs = f.metadata();
    for (size_t k = 0; k < kvs.size(); ++k) {
      if (!is_hparam(kvs[k], arch)) continue;
      std::vector<GgufValue> edits = edits_of(kvs[k].value);
      for (size_t e = 0; e <= edits.size(); ++e) {
        io::GgufWriter w(f.alignment());
        for (size_t j = 0; j < kvs.size(); ++j) {
          if (j != k)
            w.set(kvs[j].key, kvs[j].value);
          else if (e < edits.size())
            w.set(kvs[j].key, edits[e]);  // e == edits.size(): the key removed
        }
        for (const auto& t : f.tensors())
          w.add_tensor(t.name, t.type,
                       std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + std::max(t.n_dims, 1u)));
        const fs::path out = dir / "m.gguf";
        w.write(out.string(), [&](size_t i, std::span<std::byte> bytes) {
          std::memcpy(bytes.data(), f.tensor_data(f.tensors()[i]), bytes.size());
        });
        EXPECT_EQ(run_outcome(out.string(), &ran), "")
            << p.filename().string() << ": " << kvs[k].key << " edit " << e;
        ++cases;
      }
    }
  }
  fs::remove_all(dir);
  EXPECT_GT(cases, 200u);
  EXPECT_GT(ran, 20u);           // edits the model tolerates (rope, eps, counts it re-derives) ran
  EXPECT_GT(cases - ran, 100u);  // and the rest were refused
  std::printf("%zu edited models: %zu ran, %zu refused\n", cases, ran, cases - ran);
}

TEST(ModelMeta, FuzzerFindings) {
  const fs::path dir = fs::path(STRATA_TEST_DATA_DIR) / "meta_bad";
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".bin") continue;
    std::ifstream in(e.path(), std::ios::binary);
    const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> bytes(s.size());
    std::memcpy(bytes.data(), s.data(), s.size());
    EXPECT_EQ(load_outcome(bytes), "") << e.path().filename().string();
    ++n;
  }
  EXPECT_GT(n, 0);
}

}  // namespace
