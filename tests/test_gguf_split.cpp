// Split models (gguf-split shards) open as one: any shard names the model, every shard's tensors
// come back with the first shard's metadata, the tensor bytes are the source's and every
// file_offset points at them through parts(); the shard layouts llama-gguf-split writes (tensors
// in every file, none in the first) and the merged file it leaves (split.count 0); and every way a
// set of shards can be wrong is a one-line error naming the file: a missing shard, a name
// gguf-split would not give, split.no out of range, a shard of another split, a tensor in two
// shards, a tensor count that does not add up, a truncated shard, a split.count that is not an
// integer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "error_of.h"
#include "gguf_split_util.h"
#include "io/check.h"
#include "io/file_parts.h"
#include "io/gguf.h"

namespace fs = std::filesystem;

namespace strata::io {
namespace {

using testing::SplitOptions;
using testing::write_gguf_split;

// Seven tensors of several types and sizes (one larger than a page, so shards are not tiny).
GgufWriter source_writer() {
  GgufWriter w(64);
  w.set("general.architecture", "qwen3moe");
  w.set("general.name", "split test");
  w.set("qwen3moe.block_count", uint32_t{2});
  w.add_tensor("token_embd.weight", GgmlType::F32, {64, 40});
  w.add_tensor("blk.0.attn_q.weight", GgmlType::Q8_0, {64, 16});
  w.add_tensor("blk.0.ffn_gate_exps.weight", GgmlType::Q4_0, {64, 8, 4});
  w.add_tensor("blk.0.ffn_down_exps.weight", GgmlType::Q4_K, {256, 8, 4});
  w.add_tensor("blk.1.attn_q.weight", GgmlType::Q8_0, {64, 16});
  w.add_tensor("blk.1.ffn_gate_exps.weight", GgmlType::Q4_0, {64, 8, 4});
  w.add_tensor("output.weight", GgmlType::F32, {64, 33});
  return w;
}

class GgufSplit : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata_split_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    std::mt19937 rng(11);
    source_writer().write((dir_ / "whole.gguf").string(), [&](size_t, std::span<std::byte> out) {
      for (auto& b : out) b = std::byte(static_cast<uint8_t>(rng()));
    });
    whole_.emplace(GgufFile::open((dir_ / "whole.gguf").string()));
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> split(const SplitOptions& o = {}, const std::string& name = "m") {
    return write_gguf_split(*whole_, (dir_ / name).string(), o);
  }

  // f holds the whole model: metadata, tensors, bytes, and the offsets through its parts.
  void expect_whole(const GgufFile& f, const std::vector<std::string>& shards) {
    EXPECT_EQ(f.path(), shards[0]);
    EXPECT_EQ(f.split(), shards.size() > 1);
    EXPECT_EQ(f.get_string("general.name"), "split test");
    EXPECT_EQ(f.get_uint("qwen3moe.block_count"), 2u);
    EXPECT_EQ(f.alignment(), 64u);
    ASSERT_EQ(f.parts().size(), shards.size());
    uint64_t total = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      const FilePart& p = f.parts()[i];
      EXPECT_EQ(p.path, shards[i]);
      EXPECT_EQ(p.size, fs::file_size(shards[i]));
      EXPECT_EQ(p.base % kPartAlign, 0u);
      if (i > 0) {
        EXPECT_GE(p.base, f.parts()[i - 1].base + f.parts()[i - 1].size);
      }
      total += p.size;
    }
    EXPECT_EQ(f.file_size(), total);
    ASSERT_EQ(f.tensors().size(), whole_->tensors().size());
    const PartFiles files(f.parts());
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const GgufTensorInfo& t = f.tensors()[i];
      const GgufTensorInfo& w = whole_->tensors()[i];
      EXPECT_EQ(t.name, w.name);
      EXPECT_EQ(t.type, w.type);
      EXPECT_EQ(t.ne, w.ne);
      ASSERT_EQ(t.n_bytes, w.n_bytes);
      EXPECT_EQ(std::memcmp(f.tensor_data(t), whole_->tensor_data(w), t.n_bytes), 0) << t.name;
      // The numbering the tiers read by: the shard's own bytes at file_offset - base.
      const FilePart* part = part_at(f.parts(), t.file_offset);
      ASSERT_NE(part, nullptr) << t.name;
      EXPECT_LE(t.file_offset + t.n_bytes, part->base + part->size) << t.name;
      std::vector<std::byte> got(t.n_bytes);
      files.read_at(t.file_offset, got);
      EXPECT_EQ(std::memcmp(got.data(), whole_->tensor_data(w), t.n_bytes), 0) << t.name;
    }
  }

  fs::path dir_;
  std::optional<GgufFile> whole_;
};

TEST_F(GgufSplit, AnyShardOpensTheWholeModel) {
  const auto shards = split();
  ASSERT_EQ(shards.size(), 3u);
  EXPECT_EQ(fs::path(shards[1]).filename(), "m-00002-of-00003.gguf");
  for (const std::string& s : shards) {
    SCOPED_TRACE(s);
    expect_whole(GgufFile::open(s), shards);
  }
}

TEST_F(GgufSplit, FirstShardWithoutTensorsAndOneShard) {
  SplitOptions o;
  o.first_empty = true;
  const auto shards = split(o);
  const GgufFile f = GgufFile::open(shards[2]);
  EXPECT_EQ(f.parts()[0].size, f.parts()[0].header_bytes);  // metadata only
  expect_whole(f, shards);

  SplitOptions one;
  one.n_files = 1;
  const auto single = split(one, "one");
  EXPECT_EQ(fs::path(single[0]).filename(), "one-00001-of-00001.gguf");
  expect_whole(GgufFile::open(single[0]), single);
}

// llama-gguf-split --merge leaves split.count 0 in the merged file: a plain file, any name.
TEST_F(GgufSplit, MergedFileIsOneFile) {
  GgufWriter w = source_writer();
  w.set(kGgufSplitCount, uint16_t{0});
  const fs::path p = dir_ / "merged.gguf";
  w.write(p.string(), [&](size_t i, std::span<std::byte> out) {
    std::memcpy(out.data(), whole_->tensor_data(whole_->tensors()[i]), out.size());
  });
  const GgufFile f = GgufFile::open(p.string());
  EXPECT_FALSE(f.split());
  expect_whole(f, {p.string()});
}

TEST_F(GgufSplit, MissingShardIsNamed) {
  const auto shards = split();
  fs::remove(shards[2]);
  std::string msg;
  try {
    GgufFile::open(shards[0]);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    msg = e.what();
  }
  EXPECT_NE(msg.find("shard 3 of the 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find(shards[2]), std::string::npos) << msg;
}

TEST_F(GgufSplit, NameGgufSplitWouldNotGiveIsAnError) {
  const auto shards = split();
  fs::copy_file(shards[0], dir_ / "model.gguf");
  const std::string msg = error_of([&] { GgufFile::open((dir_ / "model.gguf").string()); });
  EXPECT_NE(msg.find("-00001-of-00003.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama-gguf-split --merge"), std::string::npos) << msg;
}

TEST_F(GgufSplit, InconsistentShardsAreErrors) {
  struct Case {
    const char* what;
    std::function<void(GgufWriter&, int)> edit;
    int open;  // the shard named
    const char* expect;
    int names;  // the shard the message must name (-1: none in particular)
  };
  const Case cases[] = {
      {"split.no out of range",
       [](GgufWriter& w, int i) {
         if (i == 0) w.set(kGgufSplitNo, uint16_t{5});
       },
       0, "split.count is 3 but split.no is 5", 0},
      {"a shard of another split",
       [](GgufWriter& w, int i) {
         if (i == 1) w.set(kGgufSplitCount, uint16_t{4});
       },
       0, "expected shard 2 of 3", 1},
      {"a tensor in two shards",
       [](GgufWriter& w, int i) {
         if (i == 2) w.add_tensor("token_embd.weight", GgmlType::F32, {64, 40});
       },
       1, "tensor 'token_embd.weight' is in two of its 3 shards", -1},
      {"tensor count",
       [](GgufWriter& w, int i) {
         if (i == 0) w.set(kGgufSplitTensors, int32_t{99});
       },
       2, "split.tensors.count says 99 tensors but the 3 shards hold 7", 0},
      {"split.count not an integer",
       [](GgufWriter& w, int i) {
         if (i == 0) w.set(kGgufSplitCount, "three");
       },
       0, "key 'split.count' must be an integer", 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    SplitOptions o;
    o.edit = c.edit;
    const auto shards = split(o, "bad");
    const std::string msg = error_of([&] { GgufFile::open(shards[c.open]); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    if (c.names >= 0) {
      EXPECT_NE(msg.find(shards[c.names]), std::string::npos) << msg;
    }
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST_F(GgufSplit, TruncatedShardIsAFileError) {
  const auto shards = split();
  fs::resize_file(shards[1], fs::file_size(shards[1]) - 100);
  try {
    GgufFile::open(shards[0]);
    ADD_FAILURE() << "no error";
  } catch (const FileError& e) {
    EXPECT_EQ(e.path(), shards[1]);
    EXPECT_NE(std::string(e.what()).find("truncated?"), std::string::npos) << e.what();
  }
}

TEST(FileParts, PartAtAndEnds) {
  const FileParts parts = {{"a", 0, 5000, 0}, {"b", 8192, 100, 0}, {"c", 12288, 1, 0}};
  EXPECT_EQ(part_at(parts, 0), &parts[0]);
  EXPECT_EQ(part_at(parts, 4999), &parts[0]);
  EXPECT_EQ(part_at(parts, 5000), nullptr);  // the gap
  EXPECT_EQ(part_at(parts, 8191), nullptr);
  EXPECT_EQ(part_at(parts, 8192), &parts[1]);
  EXPECT_EQ(part_at(parts, 8291), &parts[1]);
  EXPECT_EQ(part_at(parts, 8292), nullptr);
  EXPECT_EQ(part_at(parts, 12288), &parts[2]);
  EXPECT_EQ(part_at(parts, 12289), nullptr);
  EXPECT_EQ(parts_bytes(parts), 5101u);
  EXPECT_EQ(parts_end(parts), 12289u);
  EXPECT_EQ(part_at(FileParts{}, 0), nullptr);
}

}  // namespace
}  // namespace strata::io
