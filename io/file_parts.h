// A model stored as several files — gguf-split's shards, "NAME-00001-of-00003.gguf" … — read as
// one byte range: byte k of part i is byte `base + k` of the range, and every tensor's
// file_offset is in that numbering (io::GgufFile::parts()). A plain file is one part at base 0,
// so the numbering is the file's own. Parts start on 4 KiB boundaries (O_DIRECT keeps its
// alignment) with a gap of at most 4 KiB - 1 unmapped bytes after each.
// Tested by tests/test_gguf_split.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata::io {

constexpr uint64_t kPartAlign = 4096;

struct FilePart {
  std::string path;
  uint64_t base = 0;          // where its byte 0 sits in the range (kPartAlign-aligned)
  uint64_t size = 0;          // bytes of the file
  uint64_t header_bytes = 0;  // bytes before its tensor data (GGUF header, metadata, tensor table)
};
using FileParts = std::vector<FilePart>;

// The part holding byte `offset` of the range; nullptr in a gap or past the last part.
const FilePart* part_at(std::span<const FilePart> parts, uint64_t offset);
// Bytes the parts hold (gaps not counted).
uint64_t parts_bytes(std::span<const FilePart> parts);
// One past the last byte of the range.
uint64_t parts_end(std::span<const FilePart> parts);

// The parts opened read-only, for pread-style reads in the range's numbering.
class PartFiles {
 public:
  explicit PartFiles(FileParts parts);  // Error(kIo) naming the path that cannot be opened
  ~PartFiles();
  PartFiles(const PartFiles&) = delete;
  PartFiles& operator=(const PartFiles&) = delete;

  const FileParts& parts() const { return parts_; }
  // Reads exactly out.size() bytes at `offset`; they must lie in one part. FileError naming the
  // part's file and its own byte offset when the read fails or the file ends early.
  void read_at(uint64_t offset, std::span<std::byte> out) const;
  // posix_fadvise(DONTNEED) on every part: their pages in the page cache are not needed.
  void drop_cache() const;

 private:
  FileParts parts_;
  std::vector<int> fds_;
};

}  // namespace strata::io
