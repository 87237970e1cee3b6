// Errors and assertions shared by every module.
// Bugs abort through STRATA_ASSERT; environment failures throw a typed strata::Error that the CLI
// prints as one line (tests/test_gguf.cpp exercises both).
#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace strata {

// What went wrong, coarsely; the message says exactly where.
enum class ErrorKind {
  kBadFile,   // malformed input file (GGUF, stats, tokens ...)
  kIo,        // a syscall failed
  kBadValue,  // a knob or CLI value out of range
  kNotFound,  // missing key / tensor / file
  kUnsupported,
  kOutOfMemory,
  kCuda,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string msg) : std::runtime_error(std::move(msg)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// A malformed file: the message always names the file and the byte offset.
class FileError : public Error {
 public:
  FileError(std::string path, uint64_t offset, const std::string& what)
      : Error(ErrorKind::kBadFile, fmt::format("{}: at byte {}: {}", path, offset, what)),
        path_(std::move(path)),
        offset_(offset) {}
  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_; }

 private:
  std::string path_;
  uint64_t offset_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

// A failed syscall: names the call and errno.
[[noreturn]] inline void fail_sys(const char* call, const std::string& what) {
  int e = errno;
  throw Error(ErrorKind::kIo, fmt::format("{}: {} failed: {}", what, call, std::strerror(e)));
}

[[noreturn]] inline void assert_fail(const char* file, int line, const char* cond,
                                     const std::string& msg) {
  std::fprintf(stderr, "strata: assertion failed at %s:%d: %s %s\n", file, line, cond, msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace strata

// Always on, also in Release: a bug, never an input problem.
#define STRATA_ASSERT(cond, ...)                                                       \
  do {                                                                                 \
    if (__builtin_expect(!(cond), 0))                                                  \
      ::strata::assert_fail(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
  } while (0)

// Wraps a syscall returning -1 on failure: STRATA_CHECK_SYS(fd = open(...), "open", path).
#define STRATA_CHECK_SYS(expr, call, what)          \
  do {                                              \
    if ((expr) < 0) ::strata::fail_sys(call, what); \
  } while (0)
