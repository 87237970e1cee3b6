// DENSE_ARENA (engine/dense_arena.h): every dense tensor a decode token reads moves into one
// 2 MiB-aligned arena, in reading order, interleaved on the way with REPACK, and the logits stay
// byte-identical with the untiered model's, on every fixture architecture (GQA, MLA with shared
// experts and a dense lead layer, biases and sinks, tied heads).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "engine/dense_arena.h"
#include "engine/expert_source.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "placement/plan.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using engine::Model;

const fs::path kFixtures = fs::path(STRATA_FIXTURES_DIR);

std::vector<int32_t> stream(uint32_t n_vocab, int n) {
  std::mt19937 rng(11);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % n_vocab);
  return ids;
}

// Prefill in chunks of 3, then 4 decode steps: every position's logits.
std::vector<float> logits(const Model& model, engine::ExpertSource* experts,
                          const std::vector<int32_t>& ids) {
  engine::ForwardOptions fo;
  fo.n_ctx = 64;
  fo.n_ubatch = 3;
  fo.n_threads = 2;
  fo.experts = experts;
  engine::Forward fwd(model, fo);
  const uint32_t n_vocab = model.config().n_vocab;
  const size_t n_prefill = ids.size() - 4;
  std::vector<float> out(ids.size() * n_vocab);
  fwd.prefill({ids.data(), n_prefill}, out.data());
  for (size_t i = n_prefill; i < ids.size(); ++i) {
    const std::span<const float> l = fwd.decode(ids[i]);
    std::memcpy(out.data() + i * n_vocab, l.data(), sizeof(float) * n_vocab);
  }
  return out;
}

bool inside(const std::byte* p, uint64_t n, const std::byte* base, uint64_t size) {
  return p >= base && p + n <= base + size;
}

class DenseArena : public ::testing::TestWithParam<const char*> {};

TEST_P(DenseArena, MovesEveryDecodeTensorAndKeepsTheLogits) {
  const fs::path path = kFixtures / GetParam();
  if (!fs::exists(path)) GTEST_SKIP() << "no fixture " << path;
  const Model ref_model = Model::load(path.string());
  const std::vector<int32_t> ids = stream(ref_model.config().n_vocab, 11);
  const std::vector<float> ref = logits(ref_model, nullptr, ids);

  for (const bool repack : {false, true}) {
    SCOPED_TRACE(repack ? "REPACK=1" : "REPACK=0");
    Model model = Model::load(path.string());
    engine::TierOptions o;
    o.notice = nullptr;
    o.n_ctx = 64;
    o.repack = repack;
    o.ram_bytes = placement::all_ram_bytes(engine::expert_sizes(model));
    engine::ExpertSource src(model, o);
    ASSERT_GT(src.resident_dense_bytes(), 0u);

    // What the roofline counts as a token's dense bytes, but for the embedding row (or a tied
    // head: the embedding itself), is exactly what moves.
    const engine::ModelWeights& w = model.weights();
    const uint64_t per_token = engine::dense_bytes_per_token(w);
    const uint64_t not_moved = w.output_tied ? w.output.n_bytes : w.token_embd.row_bytes;
    const std::byte* embd = w.token_embd.data;

    const engine::DenseArrangement a = model.arrange_dense(repack, tiers::NumaMode::kInterleave);
    EXPECT_EQ(a.moved_bytes, per_token - not_moved);
    EXPECT_GT(a.freed_bytes, 0u);
    EXPECT_LE(a.huge_bytes, a.moved_bytes + (2u << 20));
    if (!repack) {
      EXPECT_EQ(a.repacked_bytes, 0u);
    } else if (kernels::interleave_pays(w.layers[0].wq.type) && w.layers[0].wq.present()) {
      EXPECT_GT(a.repacked_bytes, 0u);
    }

    // Every moved view points into one arena, in reading order, none overlapping.
    engine::ModelWeights& mw = const_cast<engine::ModelWeights&>(model.weights());
    const std::vector<engine::WeightView*> views = engine::decode_dense_views(mw);
    ASSERT_FALSE(views.empty());
    const std::byte* base = views.front()->data;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % (2u << 20), 0u) << "arena not 2 MiB-aligned";
    const uint64_t span = static_cast<uint64_t>(views.back()->data + views.back()->n_bytes - base);
    const std::byte* prev_end = base;
    for (const engine::WeightView* v : views) {
      EXPECT_TRUE(inside(v->data, v->n_bytes, base, span)) << v->name;
      EXPECT_GE(v->data, prev_end) << v->name << " out of reading order or overlapping";
      prev_end = v->data + v->n_bytes;
    }
    EXPECT_EQ(w.token_embd.data, embd) << "the token embedding stays where it was";
    EXPECT_FALSE(inside(w.token_embd.data, 1, base, span));

    const std::vector<float> got = logits(model, &src, ids);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0)
        << "DENSE_ARENA changed the logits";

    // A second arrangement moves them again out of the first arena (nothing left to repack).
    const engine::DenseArrangement again = model.arrange_dense(repack, tiers::NumaMode::kOff);
    EXPECT_EQ(again.moved_bytes, a.moved_bytes);
    EXPECT_EQ(again.repacked_bytes, 0u);
    const std::vector<float> got2 = logits(model, &src, ids);
    EXPECT_EQ(std::memcmp(got2.data(), ref.data(), ref.size() * sizeof(float)), 0)
        << "a second DENSE_ARENA changed the logits";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DenseArena,
                         ::testing::Values("tiny-qwen3moe/tiny-qwen3moe-Q4_0.gguf",
                                           "tiny-deepseek2/tiny-deepseek2-Q4_0.gguf",
                                           "tiny-glm4moe/tiny-glm4moe-Q4_0.gguf",
                                           "tiny-gpt-oss/tiny-gpt-oss-MXFP4.gguf",
                                           "tiny-mixtral/tiny-mixtral-Q4_0.gguf"),
                         [](const auto& info) {
                           std::string n = fs::path(info.param).stem().string();
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// huge_page_bytes reads smaps: never more than the range, nothing for memory that is not a
// transparent huge page (a stack variable).
TEST(DenseArenaSmaps, HugePageBytesIsClippedAndZeroOffThp) {
  int on_stack = 0;
  EXPECT_EQ(engine::huge_page_bytes(&on_stack, sizeof on_stack), 0u);
  tiers::RamArena arena(4u << 20, tiers::RamArena::kAnyNode, tiers::NumaMode::kOff, nullptr,
                        nullptr);
  EXPECT_LE(engine::huge_page_bytes(arena.data(), arena.size()), arena.size());
  EXPECT_LE(engine::huge_page_bytes(arena.data(), 4096), 4096u);
}

// The notice for an arena that missed huge pages: said for big arenas mostly off THP, naming the
// mode and the fix; silent for small models and for arenas that got them.
TEST(DenseArenaSmaps, HugePageNoticeOnlyWhenABigArenaMissedThem) {
  constexpr uint64_t kMiB = 1ull << 20;
  engine::DenseArrangement a;
  a.moved_bytes = 778 * kMiB;
  a.huge_bytes = 0;
  const std::string n = engine::dense_huge_page_notice(a, "never");
  EXPECT_NE(n.find("0 of 778 MiB"), std::string::npos) << n;
  EXPECT_NE(n.find("never"), std::string::npos) << n;
  EXPECT_NE(n.find("echo madvise"), std::string::npos) << n;
  a.huge_bytes = 400 * kMiB;  // more than half: fine
  EXPECT_EQ(engine::dense_huge_page_notice(a, "madvise"), "");
  a.moved_bytes = 33 * kMiB;  // a small model: not worth a line
  a.huge_bytes = 0;
  EXPECT_EQ(engine::dense_huge_page_notice(a, "never"), "");
  const std::string mode = engine::thp_mode();
  EXPECT_TRUE(mode == "always" || mode == "madvise" || mode == "never" || mode == "unknown")
      << mode;
}

}  // namespace
}  // namespace strata
