// Helpers for the tier tests: a temp file of random bytes on the real disk (O_DIRECT does not work
// on tmpfs), invented GGUF-like expert extents, a file of such experts with the byte-for-byte check
// of what the store hands out, and pread-based reference reads. Used by tests/test_tiers_io.cpp,
// tests/test_tiers_store.cpp and tests/test_prefetch.cpp.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "error_of.h"
#include "io/check.h"
#include "tiers/expert_store.h"

namespace strata::tiers::testing {

// A file of random bytes under the build directory, deleted with the object.
class TempFile {
 public:
  TempFile(const std::string& name, uint64_t bytes, uint32_t seed = 1) {
    const std::filesystem::path dir =
        std::filesystem::path(STRATA_BINARY_DIR) / "tiers-test-tmp" / std::to_string(getpid());
    std::filesystem::create_directories(dir);
    path_ = (dir / name).string();
    std::mt19937_64 rng(seed);
    bytes_.resize(bytes);
    for (uint64_t i = 0; i < bytes; i += 8) {
      const uint64_t r = rng();
      std::memcpy(bytes_.data() + i, &r, std::min<uint64_t>(8, bytes - i));
    }
    write(bytes_);
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
    std::filesystem::remove(std::filesystem::path(path_).parent_path(), ec);  // when empty
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const std::vector<std::byte>& data) const {
    FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f) throw std::runtime_error("cannot write " + path_);
    std::fwrite(data.data(), 1, data.size(), f);
    std::fclose(f);
  }

  const std::string& path() const { return path_; }
  const std::vector<std::byte>& bytes() const { return bytes_; }
  uint64_t size() const { return bytes_.size(); }

 private:
  std::string path_;
  std::vector<std::byte> bytes_;
};

// The file's bytes read back with plain pread, the reference every tier must match.
inline std::vector<std::byte> pread_range(const std::string& path, uint64_t offset,
                                          uint64_t bytes) {
  std::vector<std::byte> out(bytes);
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("cannot open " + path);
  uint64_t got = 0;
  while (got < bytes) {
    const ssize_t r = pread(fd, out.data() + got, bytes - got, static_cast<off_t>(offset + got));
    if (r <= 0) break;
    got += static_cast<uint64_t>(r);
  }
  close(fd);
  out.resize(got);
  return out;
}

// Extents laid out like a GGUF: per layer three stacked tensors (gate, up, down), each
// [n_expert] slices back to back, tensor starts aligned to 32 bytes, so slices start at
// unaligned offsets. slice_bytes varies per layer and tensor. Returns the bytes used.
inline uint64_t make_extents(ExtentTable& table, int n_layer, int n_expert, uint64_t data_start,
                             uint64_t base_slice_bytes) {
  table.assign(n_layer, std::vector<ExpertExtents>(n_expert));
  uint64_t at = data_start;
  for (int l = 0; l < n_layer; ++l) {
    for (int i = 0; i < 3; ++i) {
      const uint64_t slice = base_slice_bytes + 96 * static_cast<uint64_t>(l) + 1000 * i + 18;
      at = (at + 31) / 32 * 32;
      for (int e = 0; e < n_expert; ++e) {
        table[l][e][i] = {at, slice};
        at += slice;
      }
    }
  }
  return at;
}

// A GGUF-like file: 1 MiB of "header and dense weights", then n_layer x n_expert stacked experts
// (make_extents) and a tail of random bytes; its extents and the sizes placement needs.
struct ExpertFile {
  ExtentTable extents;
  std::unique_ptr<TempFile> file;
  placement::ExpertSizes sizes;

  ExpertFile(const std::string& name, int n_layer, int n_expert, int top_k, uint64_t slice_bytes,
             uint64_t tail, uint32_t seed) {
    const uint64_t end = make_extents(extents, n_layer, n_expert, 1 << 20, slice_bytes);
    file = std::make_unique<TempFile>(name, end + tail, seed);
    sizes = expert_sizes(extents, top_k);
  }

  // The ground truth: pread of every slice.
  void expect_identical(const ExpertView& v, int l, int e) const {
    for (int i = 0; i < 3; ++i) {
      const SliceExtent& s = extents[l][e][i];
      ASSERT_EQ(v.bytes[i], s.bytes);
      const auto ref = pread_range(file->path(), s.offset, s.bytes);
      ASSERT_EQ(std::memcmp(v.slice[i], ref.data(), s.bytes), 0)
          << "layer " << l << " expert " << e << " slice " << i << " home "
          << placement::home_name(v.home);
    }
  }
};

}  // namespace strata::tiers::testing
