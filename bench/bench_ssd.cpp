// SSD read-throughput probe: O_DIRECT random reads through a raw io_uring loop (registered buffers,
// read sizes 512 KiB..4 MiB, queue depth 1..32) on a temp file, next to the same reads through
// tiers::IoReader — the ceiling the SSD tier is compared with in bench/RESULTS.md ("SSD").
// Run: bench_ssd [--file=PATH] [--size-gib=2] [--seconds=1.5] [--sizes=512,1024,2048,4096 (KiB)]
//                [--qds=1,2,4,8,16,32] [--no-reader] [--keep] [--existing] [--align-4k]
// --existing reads PATH as it is (e.g. the model file itself: a freshly written temp file may
// still sit in a virtual disk's host cache) and never writes or deletes it.
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tiers/io_reader.h"
#include "tiers/ram_arena.h"

namespace {

using Clock = std::chrono::steady_clock;
using strata::tiers::IoReader;
using strata::tiers::NumaMode;
using strata::tiers::RamArena;

// --align-4k: reads start at any 4 KiB boundary, as the SSD tier's slice supersets do (slices sit
// at unaligned offsets in the GGUF); default: at multiples of the read size.
bool g_align_4k = false;

struct Args {
  std::string file = "strata-bench-ssd.tmp";
  uint64_t size_gib = 2;
  double seconds = 1.5;  // per point
  std::vector<uint64_t> sizes_kib = {512, 1024, 2048, 4096};
  std::vector<int> qds = {1, 2, 4, 8, 16, 32};
  bool reader = true;
  bool keep = false;
  bool existing = false;  // read --file as it is; never write or delete it
};

std::vector<uint64_t> parse_list(const std::string& s) {
  std::vector<uint64_t> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = s.find(',', at);
    out.push_back(std::stoull(s.substr(at, comma - at)));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* key) -> const char* {
      const size_t n = std::strlen(key);
      return arg.compare(0, n, key) == 0 ? arg.c_str() + n : nullptr;
    };
    if (const char* v = value("--file="))
      a.file = v;
    else if (const char* v = value("--size-gib="))
      a.size_gib = std::stoull(v);
    else if (const char* v = value("--seconds="))
      a.seconds = std::stod(v);
    else if (const char* v = value("--sizes="))
      a.sizes_kib = parse_list(v);
    else if (const char* v = value("--qds=")) {
      a.qds.clear();
      for (uint64_t q : parse_list(v)) a.qds.push_back(static_cast<int>(q));
    } else if (arg == "--no-reader")
      a.reader = false;
    else if (arg == "--keep")
      a.keep = true;
    else if (arg == "--existing")
      a.existing = true;
    else if (arg == "--align-4k")
      g_align_4k = true;
    else {
      std::fprintf(stderr, "bench_ssd: unknown argument %s\n", arg.c_str());
      std::exit(2);
    }
  }
  return a;
}

[[noreturn]] void die(const char* what, int err) {
  std::fprintf(stderr, "bench_ssd: %s: %s\n", what, std::strerror(err));
  std::exit(1);
}

// Writes the file with O_DIRECT (so it does not sit in the page cache), each 4 MiB chunk distinct.
void create_file(const Args& a) {
  struct stat st {};
  const uint64_t bytes = a.size_gib << 30;
  if (stat(a.file.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == bytes) return;
  const int fd = open(a.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0) die(("open " + a.file).c_str(), errno);
  constexpr uint64_t kChunk = 4u << 20;
  RamArena buf(kChunk, RamArena::kAnyNode, NumaMode::kOff, nullptr, nullptr);
  std::mt19937_64 rng(42);
  auto* words = reinterpret_cast<uint64_t*>(buf.data());
  for (uint64_t i = 0; i < kChunk / 8; ++i) words[i] = rng();
  const auto t0 = Clock::now();
  for (uint64_t off = 0; off < bytes; off += kChunk) {
    words[0] = off;
    if (pwrite(fd, buf.data(), kChunk, static_cast<off_t>(off)) != static_cast<ssize_t>(kChunk))
      die("pwrite", errno);
  }
  fsync(fd);
  close(fd);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::fprintf(stderr, "bench_ssd: wrote %s (%llu GiB) in %.1f s (%.2f GB/s)\n", a.file.c_str(),
               static_cast<unsigned long long>(a.size_gib), s, bytes / s / 1e9);
}

// Random read offsets, aligned to the read size, over the whole file.
struct Offsets {
  std::mt19937_64 rng{7};
  uint64_t n_blocks, block, n_pages;
  Offsets(uint64_t file_bytes, uint64_t block_bytes)
      : n_blocks(file_bytes / block_bytes),
        block(block_bytes),
        n_pages((file_bytes - block_bytes) / 4096 + 1) {}
  uint64_t next() { return g_align_4k ? (rng() % n_pages) * 4096 : (rng() % n_blocks) * block; }
};

// Raw io_uring: QD reads always in flight, each completion immediately replaced.
double raw_uring(int fd, uint64_t file_bytes, uint64_t block, int qd, double seconds) {
  io_uring ring;
  if (int rc = io_uring_queue_init(static_cast<unsigned>(qd), &ring, 0); rc < 0)
    die("io_uring_queue_init", -rc);
  RamArena buf(block * qd, RamArena::kAnyNode, NumaMode::kOff, nullptr, nullptr);
  std::vector<iovec> iov(qd);
  for (int i = 0; i < qd; ++i) iov[i] = {buf.data() + i * block, block};
  const bool fixed = io_uring_register_buffers(&ring, iov.data(), qd) == 0;
  Offsets offsets(file_bytes, block);
  auto queue = [&](int i) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (fixed)
      io_uring_prep_read_fixed(sqe, fd, iov[i].iov_base, static_cast<unsigned>(block),
                               offsets.next(), i);
    else
      io_uring_prep_read(sqe, fd, iov[i].iov_base, static_cast<unsigned>(block), offsets.next());
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(i));
  };
  const auto t0 = Clock::now();
  for (int i = 0; i < qd; ++i) queue(i);
  io_uring_submit(&ring);
  uint64_t bytes = 0;
  int in_flight = qd;
  bool stop = false;
  while (in_flight > 0) {
    io_uring_cqe* cqe = nullptr;
    if (int rc = io_uring_wait_cqe(&ring, &cqe); rc < 0) die("io_uring_wait_cqe", -rc);
    if (cqe->res < 0) die("read", -cqe->res);
    bytes += static_cast<uint64_t>(cqe->res);
    const int i = static_cast<int>(io_uring_cqe_get_data64(cqe));
    io_uring_cqe_seen(&ring, cqe);
    --in_flight;
    if (!stop) stop = std::chrono::duration<double>(Clock::now() - t0).count() >= seconds;
    if (!stop) {
      queue(i);
      io_uring_submit(&ring);
      ++in_flight;
    }
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  io_uring_queue_exit(&ring);
  return bytes / s / 1e9;
}

// The same pattern through tiers::IoReader (batch of QD, then one completion -> one new read).
double via_reader(const std::string& path, uint64_t file_bytes, uint64_t block, int qd,
                  double seconds) {
  strata::tiers::IoConfig cfg;
  cfg.queue_depth = qd;
  IoReader reader(path, cfg);
  RamArena buf(block * qd, RamArena::kAnyNode, NumaMode::kOff, nullptr, nullptr);
  std::vector<std::span<std::byte>> regions;
  for (int i = 0; i < qd; ++i) regions.push_back({buf.data() + i * block, block});
  reader.register_buffers(regions);
  Offsets offsets(file_bytes, block);
  std::vector<strata::tiers::ReadRequest> batch;
  for (int i = 0; i < qd; ++i)
    batch.push_back({offsets.next(), block, buf.data() + i * block, static_cast<uint64_t>(i)});
  const auto t0 = Clock::now();
  reader.submit(batch);
  std::vector<strata::tiers::ReadCompletion> done(qd);
  uint64_t bytes = 0;
  bool stop = false;
  while (reader.outstanding() > 0) {
    const size_t n = reader.wait(done);
    batch.clear();
    for (size_t c = 0; c < n; ++c) {
      bytes += done[c].bytes;
      if (!stop) stop = std::chrono::duration<double>(Clock::now() - t0).count() >= seconds;
      if (!stop)
        batch.push_back({offsets.next(), block, buf.data() + done[c].tag * block, done[c].tag});
    }
    reader.submit(batch);
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return bytes / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  uint64_t file_bytes = a.size_gib << 30;
  if (a.existing) {
    struct stat st {};
    if (stat(a.file.c_str(), &st) != 0) die(("stat " + a.file).c_str(), errno);
    file_bytes = static_cast<uint64_t>(st.st_size) / 4096 * 4096;
  } else {
    create_file(a);
  }
  const int fd = open(a.file.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) die(("open O_DIRECT " + a.file).c_str(), errno);

  std::printf("| read size | QD | raw io_uring GB/s | IoReader GB/s | IoReader / raw |\n");
  std::printf("|---|---|---|---|---|\n");
  for (uint64_t kib : a.sizes_kib) {
    const uint64_t block = kib << 10;
    for (int qd : a.qds) {
      const double raw = raw_uring(fd, file_bytes, block, qd, a.seconds);
      if (a.reader) {
        const double rd = via_reader(a.file, file_bytes, block, qd, a.seconds);
        std::printf("| %llu KiB | %d | %.3f | %.3f | %.0f%% |\n",
                    static_cast<unsigned long long>(kib), qd, raw, rd, 100.0 * rd / raw);
      } else {
        std::printf("| %llu KiB | %d | %.3f | - | - |\n", static_cast<unsigned long long>(kib), qd,
                    raw);
      }
      std::fflush(stdout);
    }
  }
  close(fd);
  if (!a.keep && !a.existing) unlink(a.file.c_str());
  return 0;
}
