#include "io/fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/check.h"

namespace strata::io {

void pread_all(int fd, const std::string& path, uint64_t offset, std::span<std::byte> out) {
  for (uint64_t got = 0; got < out.size();) {
    const ssize_t n = pread(fd, out.data() + got, out.size() - got, off_t(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw FileError(path, offset + got, fmt::format("read failed: {}", std::strerror(errno)));
    if (n == 0) throw FileError(path, offset + got, "file ends early (truncated?)");
    got += uint64_t(n);
  }
}

void pwrite_all(int fd, const std::string& path, uint64_t offset, std::span<const std::byte> in) {
  for (uint64_t put = 0; put < in.size();) {
    const ssize_t n = pwrite(fd, in.data() + put, in.size() - put, off_t(offset + put));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw FileError(
          path, offset + put,
          fmt::format("write failed: {}", n < 0 ? std::strerror(errno) : "no progress"));
    put += uint64_t(n);
  }
}

Fd::Fd(const std::string& path, int flags, mode_t mode) : path_(path) {
  fd_ = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd_ < 0) fail_sys("open", path);
}

Fd Fd::try_open(const std::string& path, int flags, mode_t mode) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  const int err = errno;
  Fd f(Adopt{}, path, fd);
  errno = err;  // for the caller's message
  return f;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace strata::io
