// A file descriptor that closes itself, and the pread/pwrite loops every file format here uses:
// they retry EINTR and short transfers, and a failure throws FileError naming the file and the
// byte offset. Tested through tests/test_tier_zstd.cpp (sidecar), test_prompt_cache.cpp and
// test_gguf_split.cpp (PartFiles).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace strata::io {

// Reads exactly out.size() bytes at `offset`; FileError when the read fails or the file ends.
void pread_all(int fd, const std::string& path, uint64_t offset, std::span<std::byte> out);
// Writes all of `in` at `offset`; FileError when the write fails.
void pwrite_all(int fd, const std::string& path, uint64_t offset, std::span<const std::byte> in);

class Fd {
 public:
  // open(2) with O_CLOEXEC; Error(kIo) "PATH: open failed: …" when it cannot be opened.
  Fd(const std::string& path, int flags, mode_t mode = 0644);
  // The same, but a failed open leaves !valid() and errno set.
  static Fd try_open(const std::string& path, int flags, mode_t mode = 0644);
  ~Fd();
  Fd(Fd&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_) { o.fd_ = -1; }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&&) = delete;

  bool valid() const { return fd_ >= 0; }
  int get() const { return fd_; }
  const std::string& path() const { return path_; }
  void read_at(uint64_t offset, std::span<std::byte> out) const {
    pread_all(fd_, path_, offset, out);
  }
  void write_at(uint64_t offset, std::span<const std::byte> in) const {
    pwrite_all(fd_, path_, offset, in);
  }

 private:
  struct Adopt {};
  Fd(Adopt, std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

}  // namespace strata::io
