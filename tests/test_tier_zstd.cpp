// The compressed SSD tier: `strata pack` writes the zstd expert sidecar; with it the engine streams
// SSD experts from compressed frames (decompressed by I/O-side workers) and the logits stay
// byte-identical; a sidecar from another model is ignored (ZSTD=auto, one notice) or an error
// (ZSTD=1); a corrupt frame or index is an error naming the sidecar and the offset; ZSTD=auto
// follows the disk-vs-decompression arithmetic; Gaussian-coded weights compress, uniform ones not.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/expert_source.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "io/check.h"
#include "placement/plan.h"
#include "tier_test_util.h"
#include "tiers/sidecar.h"

namespace strata::tier_test {
namespace {

using engine::ExpertSource;
using engine::Forward;
using engine::Model;
using engine::TierOptions;

const fs::path kQwen = kFixtures / "tiny-qwen3moe" / "tiny-qwen3moe-Q8_0.gguf";

void flip_byte(const fs::path& p, uint64_t offset) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

class TierZstd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kQwen)) GTEST_SKIP() << "fixtures not found at " << kQwen;
    if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
    model_ = dir_ / "model.gguf";
    fs::copy_file(kQwen, model_);
    const Result r = run_strata(dir_.path(), fmt::format("pack -m '{}'", model_.string()));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("ratio"), std::string::npos) << r.err;
    sidecar_ = model_.string() + tiers::kSidecarSuffix;
    ASSERT_TRUE(fs::exists(sidecar_));
  }

  // Every expert on SSD (the minimum budget with the sidecar's bigger slots), ZSTD forced.
  TierOptions options(const Model& m, const char* zstd = "1") {
    TierOptions o;
    o.zstd = zstd;
    o.notice = [this](const std::string& line) { notices_.push_back(line); };
    const tiers::ExtentTable ext = engine::expert_extents(m);
    const tiers::Sidecar sc = tiers::read_sidecar(sidecar_, ext);
    o.ram_bytes = placement::min_ram_bytes(
        tiers::expert_sizes(ext, static_cast<int>(m.config().n_expert_used), &sc));
    return o;
  }

  static engine::ForwardOptions forward_options(ExpertSource* experts) {
    engine::ForwardOptions fo;
    fo.n_ctx = 128;
    fo.n_ubatch = 8;
    fo.n_threads = 2;
    fo.experts = experts;
    return fo;
  }

  static std::vector<float> logits(const Model& m, ExpertSource* experts,
                                   const std::vector<int32_t>& ids) {
    Forward fwd(m, forward_options(experts));
    std::vector<float> out(ids.size() * m.config().n_vocab);
    fwd.prefill(ids, out.data());
    std::vector<float> decoded;
    for (int32_t id : tokens(m.config().n_vocab, 6, 9)) {
      const auto row = fwd.decode(id);
      decoded.insert(decoded.end(), row.begin(), row.end());
    }
    out.insert(out.end(), decoded.begin(), decoded.end());
    return out;
  }

  ScratchDir dir_{"tier_zstd"};
  fs::path model_;
  std::string sidecar_;
  std::vector<std::string> notices_;
};

TEST_F(TierZstd, CompressedExpertsGiveByteIdenticalLogits) {
  const Model m = Model::load(model_.string());
  const auto ids = tokens(m.config().n_vocab, 30, 1);
  const std::vector<float> want = logits(m, nullptr, ids);  // experts from the mapping
  for (int threads : {1, 3}) {
    TierOptions o = options(m);
    o.decompress_threads = threads;
    ExpertSource src(m, o);
    ASSERT_NE(src.sidecar(), nullptr);
    EXPECT_TRUE(src.store()->compressed());
    EXPECT_EQ(src.plan()->count(placement::HomeKind::kRam), 0);
    const std::vector<float> got = logits(m, &src, ids);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << threads << " decompression threads";
    const tiers::StoreCounters& c = src.store()->counters();
    EXPECT_GT(c.frames, 0u);
    EXPECT_EQ(c.frames, c.ssd.loads);
    EXPECT_GT(c.frame_raw_bytes, 0u);
  }
  // A mixed plan: RAM homes from the model file, SSD homes from the sidecar.
  TierOptions o = options(m);
  o.ram_bytes = *o.ram_bytes + (2ull << 20);
  ExpertSource mixed(m, o);
  EXPECT_GT(mixed.plan()->count(placement::HomeKind::kRam), 0);
  EXPECT_GT(mixed.plan()->count(placement::HomeKind::kSsd), 0);
  const std::vector<float> got = logits(m, &mixed, ids);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

TEST_F(TierZstd, ReplayWithAndWithoutTheSidecarIsByteIdentical) {
  const Model m = Model::load(model_.string());
  write_streams(dir_ / "s.txt", m.config().n_vocab, {33, 17});
  const std::string gb = ram_gb(*options(m).ram_bytes);
  for (const char* z : {"0", "1"}) {
    const Result r = run_strata(
        dir_.path(), fmt::format("replay -m '{}' --tokens '{}' --ubatch 8 --ram-gb {} --zstd {} "
                                 "--dump-logits '{}' --prof-json '{}'",
                                 model_.string(), (dir_ / "s.txt").string(), gb, z,
                                 (dir_ / (std::string("z") + z)).string(),
                                 (dir_ / (std::string("z") + z + ".json")).string()));
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto j = nlohmann::json::parse(slurp(dir_ / (std::string("z") + z + ".json")));
    EXPECT_EQ(j["io"]["zstd"].get<bool>(), z[0] == '1');
    if (z[0] == '1') {
      EXPECT_GT(j["io"]["zstd_frames"].get<uint64_t>(), 0u);
      EXPECT_NE(r.err.find("used (ZSTD=1)"), std::string::npos) << r.err;
    }
  }
  for (int s = 0; s < 2; ++s) {
    const std::string name = fmt::format("stream{}.logits.bin", s);
    EXPECT_EQ(slurp(dir_ / "z0" / name), slurp(dir_ / "z1" / name)) << name;
  }
}

TEST_F(TierZstd, AutoFollowsTheDiskVersusDecompressionArithmetic) {
  const Model m = Model::load(model_.string());
  TierOptions o = options(m, "auto");
  o.ssd_gbps = 1000.0;  // a disk no decompressor keeps up with: read the model file
  {
    ExpertSource src(m, o);
    EXPECT_EQ(src.sidecar(), nullptr);
    ASSERT_FALSE(notices_.empty());
    EXPECT_NE(notices_.back().find("not used (ZSTD=1 forces it)"), std::string::npos)
        << notices_.back();
  }
  o.ssd_gbps = 0.001;  // a very slow disk: any ratio above 1.05 pays
  const double ratio = tiers::read_sidecar(sidecar_, engine::expert_extents(m)).ratio();
  ExpertSource src(m, o);
  EXPECT_EQ(src.sidecar() != nullptr, ratio > 1.05) << notices_.back();
  o.zstd = "0";
  ExpertSource off(m, o);
  EXPECT_EQ(off.sidecar(), nullptr);
}

TEST_F(TierZstd, ForeignSidecarIsIgnoredOrRefused) {
  // The same model with one token string changed: another file, another fingerprint.
  const fs::path other = dir_ / "other.gguf";
  fs::copy_file(model_, other);
  const std::string bytes = slurp(other);
  const size_t key = bytes.find("tokenizer.ggml.tokens");
  ASSERT_NE(key, std::string::npos);
  size_t at = key + 200;
  while (!std::isalpha(static_cast<unsigned char>(bytes[at]))) ++at;
  {
    std::fstream f(other, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(bytes[at] == 'a' ? 'b' : 'a');
  }
  fs::copy_file(sidecar_, other.string() + tiers::kSidecarSuffix);
  const Model m = Model::load(other.string());
  TierOptions o = options(m, "auto");
  o.ssd_gbps = 0.001;
  ExpertSource src(m, o);
  EXPECT_EQ(src.sidecar(), nullptr);
  ASSERT_FALSE(notices_.empty());
  EXPECT_NE(notices_.back().find("fingerprint differs"), std::string::npos) << notices_.back();
  o.zstd = "1";
  const std::string msg = error_of([&] { ExpertSource forced(m, o); });
  EXPECT_NE(msg.find("packed from another model"), std::string::npos) << msg;

  // ZSTD=1 without any sidecar names the command that writes one.
  fs::remove(other.string() + tiers::kSidecarSuffix);
  EXPECT_NE(error_of([&] { ExpertSource none(m, o); }).find("strata pack -m"), std::string::npos);
}

TEST_F(TierZstd, CorruptFramesAndIndexesNameTheSidecarAndOffset) {
  const Model m = Model::load(model_.string());
  const tiers::ExtentTable ext = engine::expert_extents(m);
  const tiers::Sidecar sc = tiers::read_sidecar(sidecar_, ext);
  // Damage every frame's middle but the first 8 (the start-up decompression probe reads those):
  // whichever damaged expert streams first fails its checksum on a decompression worker.
  int n = 0;
  for (const auto& layer : sc.entries)
    for (const tiers::SidecarEntry& e : layer)
      if (n++ >= 8) flip_byte(sidecar_, e.offset + e.bytes / 2);
  {
    ExpertSource src(m, options(m));
    Forward fwd(m, forward_options(&src));
    const std::string msg = error_of([&] { fwd.prefill(tokens(m.config().n_vocab, 8, 2)); });
    EXPECT_NE(msg.find(sidecar_ + ": at byte "), std::string::npos) << msg;
    EXPECT_NE(msg.find("corrupt expert frame"), std::string::npos) << msg;
  }
  // The first frame too: the probe fails at start-up; ZSTD=1 stops there, auto goes on without.
  const tiers::SidecarEntry& first = sc.entries[0][0];
  flip_byte(sidecar_, first.offset + first.bytes / 2);
  std::string msg = error_of([&] { ExpertSource src(m, options(m)); });
  EXPECT_NE(msg.find(fmt::format("{}: at byte {}: corrupt zstd frame", sidecar_, first.offset)),
            std::string::npos)
      << msg;
  TierOptions o = options(m, "auto");
  o.ssd_gbps = 0.001;
  ExpertSource fallback(m, o);
  EXPECT_EQ(fallback.sidecar(), nullptr);
  EXPECT_NE(notices_.back().find("zstd sidecar ignored"), std::string::npos) << notices_.back();
  // A damaged index entry (layer 0 expert 0's raw size) and a truncated file.
  flip_byte(sidecar_, 4096 + 8 * ((4 * ext.size() + 7) / 8) + 16);
  msg = error_of([&] { tiers::read_sidecar(sidecar_, ext); });
  EXPECT_NE(msg.find(sidecar_ + ": at byte "), std::string::npos) << msg;
  EXPECT_NE(msg.find("raw bytes in the sidecar"), std::string::npos) << msg;
  fs::resize_file(sidecar_, 100);
  msg = error_of([&] { tiers::read_sidecar(sidecar_, ext); });
  EXPECT_NE(msg.find("shorter than its header"), std::string::npos) << msg;
}

TEST(TierZstdSynth, GaussianCodesCompressUniformOnesDoNot) {
  if (!fs::exists(kStrata)) GTEST_SKIP() << "strata binary not built at " << kStrata;
  ScratchDir dir("tier_zstd_synth");
  double ratio[2] = {0, 0};
  const char* dists[2] = {"uniform", "gaussian"};
  for (int i = 0; i < 2; ++i) {
    const fs::path model = dir / fmt::format("synth-{}.gguf", dists[i]);
    Result r = run_strata(dir.path(), fmt::format("synth --preset tiny --dist {} --out '{}'",
                                                  dists[i], model.string()));
    ASSERT_EQ(r.rc, 0) << r.err;
    r = run_strata(dir.path(), fmt::format("pack -m '{}'", model.string()));
    ASSERT_EQ(r.rc, 0) << r.err;
    const Model m = Model::load(model.string());
    ratio[i] =
        tiers::read_sidecar(model.string() + tiers::kSidecarSuffix, engine::expert_extents(m))
            .ratio();
  }
  std::fprintf(stderr, "sidecar ratio: uniform %.3f, gaussian %.3f\n", ratio[0], ratio[1]);
  EXPECT_LT(ratio[0], 1.1);
  EXPECT_GT(ratio[1], 1.15);
}

}  // namespace
}  // namespace strata::tier_test
