// Tier tests for tiers::IoReader on a real file on disk: io_uring and the pread pool, O_DIRECT and
// buffered, batches larger than the queue, injected EIO / short / truncated reads, a forced
// io_uring setup failure, O_DIRECT refused, and the model file changing under the reader.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "io/check.h"
#include "test_tiers_util.h"
#include "tiers/io_reader.h"

namespace strata::tiers {
namespace {

using testing::pread_range;
using testing::TempFile;

constexpr uint64_t kFileBytes = (3ull << 20) + 1234;  // the tail block is partial

struct Notices {
  std::vector<std::string> lines;
  NoticeFn fn() {
    return [this](const std::string& l) { lines.push_back(l); };
  }
};

// Every outstanding read, polled first (never blocks), then waited for.
std::vector<ReadCompletion> drain_all(IoReader& r) {
  std::vector<ReadCompletion> all;
  std::vector<ReadCompletion> buf(16);
  while (r.outstanding() > 0) {
    size_t n = r.poll(buf);
    if (n == 0) n = r.wait(buf);
    all.insert(all.end(), buf.begin(), buf.begin() + n);
  }
  return all;
}

struct Mode {
  bool uring;
  bool direct;
};

class IoModes : public ::testing::TestWithParam<Mode> {};

TEST_P(IoModes, ReadsMatchPread) {
  const Mode m = GetParam();
  TempFile file("io_modes.bin", kFileBytes, 7);
  Notices notices;
  IoConfig cfg;
  cfg.uring = m.uring;
  cfg.direct = m.direct;
  cfg.queue_depth = 8;
  cfg.threads = 3;
  cfg.notice = notices.fn();
  IoReader reader(file.path(), cfg);
  EXPECT_EQ(reader.uring(), m.uring);
  EXPECT_EQ(reader.direct(), m.direct);
  EXPECT_TRUE(notices.lines.empty()) << notices.lines[0];
  EXPECT_EQ(reader.file_size(), kFileBytes);

  // Random slices, each read as its 4 KiB superset into its own aligned destination; the last
  // one reaches the end of the file.
  std::mt19937_64 rng(3);
  struct Want {
    AlignedRange r;
    uint64_t offset, bytes, dst;
  };
  std::vector<Want> wants;
  uint64_t dst_at = 0;
  for (int i = 0; i < 120; ++i) {
    const uint64_t bytes = 1 + rng() % 70000;
    const uint64_t offset = i == 119 ? kFileBytes - bytes : rng() % (kFileBytes - bytes);
    const AlignedRange r = aligned_superset(offset, bytes);
    wants.push_back({r, offset, bytes, dst_at});
    dst_at += r.bytes;
  }
  RamArena dst(dst_at, RamArena::kAnyNode, NumaMode::kOff, nullptr, nullptr);
  if (m.uring) {
    std::vector<std::span<std::byte>> regions{dst.span()};
    EXPECT_TRUE(reader.register_buffers(regions));
    EXPECT_TRUE(reader.registered());
  }
  std::vector<ReadRequest> batch;
  for (size_t i = 0; i < wants.size(); ++i)
    batch.push_back({wants[i].r.offset, wants[i].r.bytes, dst.data() + wants[i].dst, i});
  // Two batches, both larger than the queue depth.
  reader.submit(std::span(batch).first(50));
  reader.submit(std::span(batch).subspan(50));
  EXPECT_EQ(reader.outstanding(), batch.size());
  const auto done = drain_all(reader);
  ASSERT_EQ(done.size(), wants.size());
  std::vector<int> seen(wants.size(), 0);
  for (const ReadCompletion& c : done) {
    ++seen[c.tag];
    EXPECT_GE(c.service_seconds, 0.0);
  }
  for (size_t i = 0; i < wants.size(); ++i) {
    EXPECT_EQ(seen[i], 1);
    const auto ref = pread_range(file.path(), wants[i].offset, wants[i].bytes);
    ASSERT_EQ(std::memcmp(dst.data() + wants[i].dst + wants[i].r.lead, ref.data(), ref.size()), 0)
        << "slice " << i << " at offset " << wants[i].offset;
  }
  // The final superset runs past the end of the file: the completion says what was there.
  const Want& last = wants.back();
  for (const ReadCompletion& c : done) {
    if (c.tag == wants.size() - 1) {
      EXPECT_EQ(c.bytes, kFileBytes - last.r.offset);
    }
  }
  EXPECT_EQ(reader.poll(std::span<ReadCompletion>()), 0u);
}

INSTANTIATE_TEST_SUITE_P(All, IoModes,
                         ::testing::Values(Mode{true, true}, Mode{true, false}, Mode{false, true},
                                           Mode{false, false}),
                         [](const auto& info) {
                           return std::string(info.param.uring ? "uring" : "pread") +
                                  (info.param.direct ? "_direct" : "_buffered");
                         });

// A split model's shards as one range (io/file_parts.h): each read lands in its own file at its
// offset - base, a read reaching a part's end is clipped there, the gaps between parts and the
// range's end are outside it, and a part that changes under the reader is named.
TEST_P(IoModes, PartsReadAsOneRange) {
  const Mode m = GetParam();
  const TempFile a("parts_a.bin", (1ull << 20) + 333, 1);
  const TempFile b("parts_b.bin", 5000, 2);
  const TempFile c("parts_c.bin", (2ull << 20) + 77, 3);
  const TempFile* files[] = {&a, &b, &c};
  io::FileParts parts;
  uint64_t end = 0;
  for (const TempFile* f : files) {
    // Gaps wider than GgufFile leaves (under 4 KiB), so that aligned reads can fall in them.
    const uint64_t base = (end + kDirectAlign - 1) / kDirectAlign * kDirectAlign + (end ? 8192 : 0);
    parts.push_back({f->path(), base, 0, 0});
    end = base + f->size();
  }
  IoConfig cfg;
  cfg.uring = m.uring;
  cfg.direct = m.direct;
  cfg.queue_depth = 8;
  cfg.threads = 3;
  IoReader reader(parts, cfg);
  EXPECT_EQ(reader.direct(), m.direct);
  EXPECT_EQ(reader.file_size(), end);
  EXPECT_EQ(reader.path(), a.path());
  ASSERT_EQ(reader.parts().size(), 3u);
  EXPECT_EQ(reader.parts()[1].size, 5000u);

  std::mt19937_64 rng(9);
  struct Want {
    int part;
    AlignedRange r;
    uint64_t offset, bytes, dst;  // offset in the part's file
  };
  std::vector<Want> wants;
  uint64_t dst_at = 0;
  for (int i = 0; i < 90; ++i) {
    const int p = i % 3;
    const uint64_t size = files[p]->size();
    const uint64_t bytes = 1 + rng() % std::min<uint64_t>(70000, size - 1);
    const uint64_t offset = i >= 87 ? size - bytes : rng() % (size - bytes);
    const AlignedRange r = aligned_superset(parts[p].base + offset, bytes);
    wants.push_back({p, r, offset, bytes, dst_at});
    dst_at += r.bytes;
  }
  RamArena dst(dst_at, RamArena::kAnyNode, NumaMode::kOff, nullptr, nullptr);
  std::vector<ReadRequest> batch;
  for (size_t i = 0; i < wants.size(); ++i)
    batch.push_back({wants[i].r.offset, wants[i].r.bytes, dst.data() + wants[i].dst, i});
  reader.submit(batch);
  const auto done = drain_all(reader);
  ASSERT_EQ(done.size(), wants.size());
  for (const ReadCompletion& d : done) {
    const Want& w = wants[d.tag];
    const auto ref = pread_range(files[w.part]->path(), w.offset, w.bytes);
    ASSERT_EQ(std::memcmp(dst.data() + w.dst + w.r.lead, ref.data(), ref.size()), 0)
        << "part " << w.part << " offset " << w.offset;
    // Clipped at the part's end, never reading the next part's bytes.
    const uint64_t part_end = parts[w.part].base + files[w.part]->size();
    EXPECT_EQ(d.bytes, std::min(w.r.bytes, part_end - w.r.offset)) << "tag " << d.tag;
  }

  // A gap between parts and the range's end are outside it.
  std::vector<std::byte> one(2 * kDirectAlign);
  std::byte* aligned_dst = reinterpret_cast<std::byte*>(
      (reinterpret_cast<uintptr_t>(one.data()) + kDirectAlign - 1) / kDirectAlign * kDirectAlign);
  for (const uint64_t off : {parts[1].base - kDirectAlign, parts[2].base - 2 * kDirectAlign,
                             (end + kDirectAlign - 1) / kDirectAlign * kDirectAlign}) {
    ASSERT_EQ(io::part_at(reader.parts(), off), nullptr) << off;
    const ReadRequest r{off, kDirectAlign, aligned_dst, 0};
    const std::string msg = error_of([&] { reader.submit(std::span(&r, 1)); });
    EXPECT_NE(msg.find("is outside its 3 parts"), std::string::npos) << off << ": " << msg;
  }

  // A part that changes is named.
  {
    std::ofstream grow(b.path(), std::ios::app | std::ios::binary);
    grow << "x";
  }
  const ReadRequest r{parts[2].base, kDirectAlign, aligned_dst, 0};
  const std::string msg = error_of([&] { reader.submit(std::span(&r, 1)); });
  EXPECT_NE(msg.find(b.path() + ": model file changed while running (its size changed"),
            std::string::npos)
      << msg;
}

// Eight 64 KiB reads at known offsets into one buffer.
struct EightReads {
  RamArena dst{8 * 65536, RamArena::kAnyNode, NumaMode::kOff, nullptr, nullptr};
  std::vector<ReadRequest> batch;
  EightReads() {
    for (uint64_t i = 0; i < 8; ++i)
      batch.push_back({i * 131072, 65536, dst.data() + i * 65536, i});
  }
  void check(const TempFile& file) const {
    for (uint64_t i = 0; i < 8; ++i)
      ASSERT_EQ(std::memcmp(dst.data() + i * 65536, file.bytes().data() + i * 131072, 65536), 0)
          << "read " << i;
  }
};

class IoBackground : public ::testing::TestWithParam<bool> {};

// Reads beyond the queue depth reach the kernel as earlier ones land, without the caller polling:
// the completion thread (or the pool threads) pump the queue, so the disk never waits for the
// compute thread. Busy seconds count only time with reads in flight.
TEST_P(IoBackground, QueuedReadsFlowWithoutPolling) {
  TempFile file("io_background.bin", kFileBytes, 5);
  IoConfig cfg;
  cfg.uring = GetParam();
  cfg.queue_depth = 2;
  cfg.threads = 2;
  IoReader reader(file.path(), cfg);
  EightReads r;
  EXPECT_EQ(reader.busy_seconds(), 0.0);
  const auto t0 = std::chrono::steady_clock::now();
  reader.submit(r.batch);
  EXPECT_LE(reader.in_kernel(), 2);
  // No poll/wait: only the reader's own threads can move the last six reads to the kernel.
  for (int i = 0; i < 3000 && reader.in_kernel() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(reader.in_kernel(), 0) << "reads stuck in the queue";
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double busy = reader.busy_seconds();
  EXPECT_GT(busy, 0.0);
  EXPECT_LE(busy, wall);
  // All eight are ready: one non-blocking poll returns them.
  std::vector<ReadCompletion> out(16);
  EXPECT_EQ(reader.poll(out), 8u);
  EXPECT_EQ(reader.outstanding(), 0u);
  r.check(file);
  EXPECT_EQ(reader.busy_seconds(), busy);  // idle since
}

INSTANTIATE_TEST_SUITE_P(All, IoBackground, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "uring" : "pread"; });

class IoFaultModes : public ::testing::TestWithParam<bool> {};

TEST_P(IoFaultModes, EioNamesFileAndOffset) {
  TempFile file("io_eio.bin", kFileBytes);
  IoConfig cfg;
  cfg.uring = GetParam();
  cfg.queue_depth = 4;
  cfg.faults.fail_read = 3;
  IoReader reader(file.path(), cfg);
  EightReads r;
  reader.submit(r.batch);
  const std::string msg = error_of([&] { drain_all(reader); });
  EXPECT_NE(msg.find(file.path()), std::string::npos) << msg;
  EXPECT_NE(msg.find("at offset 393216 failed: Input/output error"), std::string::npos) << msg;
  // The reader stays usable after the error, and its destructor waits for the rest.
}

TEST_P(IoFaultModes, ShortReadIsRetried) {
  TempFile file("io_short.bin", kFileBytes);
  for (bool direct : {true, false}) {
    IoConfig cfg;
    cfg.uring = GetParam();
    cfg.direct = direct;
    cfg.faults.short_read = 5;
    IoReader reader(file.path(), cfg);
    EightReads r;
    reader.submit(r.batch);
    EXPECT_EQ(drain_all(reader).size(), 8u);
    r.check(file);
  }
}

TEST_P(IoFaultModes, TruncatedReadIsAnError) {
  TempFile file("io_trunc.bin", kFileBytes);
  IoConfig cfg;
  cfg.uring = GetParam();
  cfg.faults.truncated_read = 2;
  IoReader reader(file.path(), cfg);
  EightReads r;
  reader.submit(r.batch);
  const std::string msg = error_of([&] { drain_all(reader); });
  EXPECT_NE(msg.find(file.path() + ": short read at offset 262144: got 0 of 65536 bytes"),
            std::string::npos)
      << msg;
}

TEST(IoReader, UringSetupFailureFallsBackToPreadOnce) {
  TempFile file("io_nouring.bin", kFileBytes);
  Notices notices;
  IoConfig cfg;
  cfg.faults.fail_uring_setup = true;
  cfg.notice = notices.fn();
  IoReader reader(file.path(), cfg);
  EXPECT_FALSE(reader.uring());
  ASSERT_EQ(notices.lines.size(), 1u);
  EXPECT_NE(notices.lines[0].find("io_uring unavailable (io_uring_queue_init: Operation not "
                                  "permitted): reading " +
                                  file.path() + " with 4 pread threads"),
            std::string::npos)
      << notices.lines[0];
  for (int round = 0; round < 3; ++round) {
    EightReads r;
    reader.submit(r.batch);
    EXPECT_EQ(drain_all(reader).size(), 8u);
    r.check(file);
  }
  EXPECT_EQ(notices.lines.size(), 1u);
  // Asked for by URING=0: no notice.
  Notices quiet;
  IoConfig off;
  off.uring = false;
  off.notice = quiet.fn();
  IoReader pool(file.path(), off);
  EXPECT_TRUE(quiet.lines.empty());
}

TEST(IoReader, DirectRefusedFallsBackToBuffered) {
  TempFile file("io_nodirect.bin", kFileBytes);
  Notices notices;
  IoConfig cfg;
  cfg.faults.refuse_direct = true;
  cfg.notice = notices.fn();
  IoReader reader(file.path(), cfg);
  EXPECT_FALSE(reader.direct());
  ASSERT_EQ(notices.lines.size(), 1u);
  EXPECT_NE(notices.lines[0].find("O_DIRECT refused for " + file.path() +
                                  " (Invalid argument): using buffered reads"),
            std::string::npos)
      << notices.lines[0];
  EightReads r;
  reader.submit(r.batch);
  drain_all(reader);
  r.check(file);
}

TEST(IoReader, TmpfsWorksWithOrWithoutDirect) {
  const std::filesystem::path shm = "/dev/shm";
  if (!std::filesystem::is_directory(shm)) GTEST_SKIP() << "no /dev/shm";
  const std::string path = (shm / ("strata-io-" + std::to_string(getpid()))).string();
  std::vector<std::byte> bytes(1 << 20);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 31 + 7);
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  Notices notices;
  IoConfig cfg;
  cfg.notice = notices.fn();
  {
    IoReader reader(path, cfg);
    // Either the kernel's tmpfs takes O_DIRECT, or the reader said it fell back.
    EXPECT_EQ(reader.direct(), notices.lines.empty());
    RamArena dst(1 << 20, RamArena::kAnyNode, NumaMode::kOff, nullptr, nullptr);
    const ReadRequest req{0, 1 << 20, dst.data(), 0};
    reader.submit(std::span(&req, 1));
    drain_all(reader);
    EXPECT_EQ(std::memcmp(dst.data(), bytes.data(), bytes.size()), 0);
  }
  std::filesystem::remove(path);
}

TEST(IoReader, RequestsOutsideTheFileAreErrors) {
  TempFile file("io_outside.bin", kFileBytes);
  IoReader reader(file.path());
  RamArena dst(65536, RamArena::kAnyNode, NumaMode::kOff, nullptr, nullptr);
  const ReadRequest req{kFileBytes / 4096 * 4096 + 4096, 4096, dst.data(), 0};
  EXPECT_NE(error_of([&] { reader.submit(std::span(&req, 1)); }).find("is outside the file"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              IoReader r("/nonexistent/strata/model.gguf");
            }).find("/nonexistent/strata/model.gguf: open failed"),
            std::string::npos);
}

// A path whose reads really fail in the kernel (no injection): a directory opens, then every
// read returns EISDIR.
TEST_P(IoFaultModes, RealKernelErrorNamesFileAndOffset) {
  const std::string dir = std::string(STRATA_BINARY_DIR) + "/tiers-test-tmp";
  std::filesystem::create_directories(dir);
  IoConfig cfg;
  cfg.uring = GetParam();
  cfg.direct = false;
  cfg.notice = nullptr;
  IoReader reader(dir, cfg);
  if (reader.file_size() == 0) GTEST_SKIP() << "directory size 0 on this file system";
  RamArena dst(4096, RamArena::kAnyNode, NumaMode::kOff, nullptr, nullptr);
  const ReadRequest req{0, 4096, dst.data(), 0};
  reader.submit(std::span(&req, 1));
  const std::string msg = error_of([&] { drain_all(reader); });
  EXPECT_NE(msg.find(dir + ": read of 4096 bytes at offset 0 failed: Is a directory"),
            std::string::npos)
      << msg;
}

INSTANTIATE_TEST_SUITE_P(All, IoFaultModes, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "uring" : "pread"; });

class IoIdentity : public ::testing::TestWithParam<bool> {};

TEST_P(IoIdentity, TruncatedFileIsCaughtBeforeReading) {
  TempFile file("io_identity_trunc.bin", kFileBytes);
  IoConfig cfg;
  cfg.uring = GetParam();
  IoReader reader(file.path(), cfg);
  EightReads r;
  reader.submit(r.batch);
  drain_all(reader);
  ASSERT_EQ(truncate(file.path().c_str(), 65536), 0);
  const std::string msg = error_of([&] { reader.submit(r.batch); });
  EXPECT_NE(msg.find(file.path() + ": model file changed while running (its size changed"),
            std::string::npos)
      << msg;
}

TEST_P(IoIdentity, TruncatedWhileReadsAreInFlight) {
  TempFile file("io_identity_race.bin", kFileBytes);
  IoConfig cfg;
  cfg.uring = GetParam();
  cfg.queue_depth = 2;  // most reads still queued when the file shrinks
  IoReader reader(file.path(), cfg);
  EightReads r;
  reader.submit(r.batch);
  ASSERT_EQ(truncate(file.path().c_str(), 4096), 0);
  // Either every read beat the truncation, or the reader reports it; it never hangs.
  const std::string msg = error_of([&] { drain_all(reader); });
  if (!msg.empty()) {
    EXPECT_NE(msg.find("model file changed while running"), std::string::npos) << msg;
  }
  EXPECT_NE(error_of([&] { reader.submit(r.batch); }).find("model file changed while running"),
            std::string::npos);
}

TEST_P(IoIdentity, ReplacedFileIsCaught) {
  TempFile file("io_identity_replace.bin", kFileBytes);
  IoConfig cfg;
  cfg.uring = GetParam();
  IoReader reader(file.path(), cfg);
  // Same size, new inode: what `cp new.gguf model.gguf.tmp && mv` does.
  const std::string tmp = file.path() + ".new";
  {
    FILE* f = std::fopen(tmp.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(file.bytes().data(), 1, file.bytes().size(), f);
    std::fclose(f);
  }
  std::filesystem::rename(tmp, file.path());
  EightReads r;
  const std::string msg = error_of([&] { reader.submit(r.batch); });
  EXPECT_NE(msg.find("model file changed while running (it was replaced by another file"),
            std::string::npos)
      << msg;
}

TEST_P(IoIdentity, ModifiedInPlaceIsCaught) {
  TempFile file("io_identity_mtime.bin", kFileBytes);
  IoConfig cfg;
  cfg.uring = GetParam();
  IoReader reader(file.path(), cfg);
  struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, file.path().c_str(), times, 0), 0);
  EightReads r;
  EXPECT_NE(error_of([&] { reader.submit(r.batch); }).find("(it was modified"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(All, IoIdentity, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "uring" : "pread"; });

}  // namespace
}  // namespace strata::tiers
