// FilePart lookups and PartFiles: pread over the parts of a split model.
#include "io/file_parts.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "io/check.h"
#include "io/fd.h"

namespace strata::io {

const FilePart* part_at(std::span<const FilePart> parts, uint64_t offset) {
  auto it = std::upper_bound(parts.begin(), parts.end(), offset,
                             [](uint64_t off, const FilePart& p) { return off < p.base; });
  if (it == parts.begin()) return nullptr;
  const FilePart& p = *(it - 1);
  return offset - p.base < p.size ? &p : nullptr;
}

uint64_t parts_bytes(std::span<const FilePart> parts) {
  uint64_t n = 0;
  for (const FilePart& p : parts) n += p.size;
  return n;
}

uint64_t parts_end(std::span<const FilePart> parts) {
  return parts.empty() ? 0 : parts.back().base + parts.back().size;
}

PartFiles::PartFiles(FileParts parts) : parts_(std::move(parts)) {
  for (const FilePart& p : parts_) {
    const int fd = ::open(p.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      for (int f : fds_) ::close(f);
      errno = err;
      fail_sys("open", p.path);
    }
    fds_.push_back(fd);
  }
}

PartFiles::~PartFiles() {
  for (int fd : fds_) ::close(fd);
}

void PartFiles::read_at(uint64_t offset, std::span<std::byte> out) const {
  const FilePart* p = part_at(parts_, offset);
  STRATA_ASSERT(p != nullptr && out.size() <= p->base + p->size - offset,
                "read of {} bytes at {} is not inside one part", out.size(), offset);
  const int fd = fds_[static_cast<size_t>(p - parts_.data())];
  pread_all(fd, p->path, offset - p->base, out);
}

void PartFiles::drop_cache() const {
  for (int fd : fds_) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

}  // namespace strata::io
