// IoReader: reads byte ranges of one file (the GGUF; or a split model's shards as one range,
// io/file_parts.h) into RAM — O_DIRECT through io_uring with
// registered buffers and batched submits, or a pread thread pool when io_uring is unavailable.
// Completions are taken off the ring by the reader's own completion thread the moment they land:
// it timestamps them, frees their entries and hands queued reads to the kernel at once, so the
// disk never idles while the caller computes and the service times are exact.
// Tested by tests/test_tiers_io.cpp; raw throughput by bench/bench_ssd.cpp.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "io/file_parts.h"
#include "tiers/ram_arena.h"

struct io_uring;  // liburing's ring, kept out of this header

namespace strata::tiers {

// O_DIRECT needs file offset, length and buffer address on this boundary.
constexpr uint64_t kDirectAlign = 4096;

// A 4 KiB-aligned read covering [offset, offset + bytes): the superset the disk reads for one
// slice. The slice's bytes start `lead` bytes into it.
struct AlignedRange {
  uint64_t offset = 0;  // aligned down
  uint64_t bytes = 0;   // aligned up, covers the slice
  uint64_t lead = 0;    // slice offset - aligned offset
};
AlignedRange aligned_superset(uint64_t offset, uint64_t bytes);

// Test-only fault seam: reads are numbered from 0 in submission order; a fault replaces the
// result the kernel (or pread) gave for that read.
struct IoFaults {
  int64_t fail_read = -1;         // this read completes with EIO
  int64_t short_read = -1;        // this read completes with half its bytes; the rest is retried
  int64_t truncated_read = -1;    // this read and its retries return 0 bytes (file ends early)
  bool fail_uring_setup = false;  // io_uring_queue_init fails with EPERM (as under seccomp)
  bool refuse_direct = false;     // open(O_DIRECT) fails with EINVAL (as on tmpfs)
};

struct IoConfig {
  bool direct = true;    // O_DIRECT (the DIRECT knob); refused by the file system -> buffered
  bool uring = true;     // io_uring (the URING knob); false or setup failure -> pread pool
  int threads = 4;       // pread pool threads
  int queue_depth = 32;  // reads in flight at most (ring size)
  IoFaults faults;
  NoticeFn notice = notice_to_stderr;  // fallbacks are said once per reader
};

struct ReadRequest {
  uint64_t offset = 0;  // file offset (4 KiB-aligned when direct); in a split model's range
  uint64_t bytes = 0;   // multiple of 4 KiB when direct; may run past the end of the file (part)
  std::byte* dst = nullptr;  // 4 KiB-aligned when direct; bytes past the end of file untouched
  uint64_t tag = 0;          // handed back in the completion
};

struct ReadCompletion {
  uint64_t tag = 0;
  uint64_t bytes = 0;          // bytes read (the request, clipped at the end of the file or part)
  double service_seconds = 0;  // handed to the kernel (or a pool thread) -> landed
};

class IoReader {
 public:
  // Opens path and records its identity (device, inode, size, mtime). Throws Error naming the
  // path when it cannot be opened.
  IoReader(std::string path, IoConfig config = {});
  // The same for every part of a split model (a part's size 0: whatever the file holds); a read
  // lies in one part, at the part's base + its own offset.
  IoReader(io::FileParts parts, IoConfig config = {});
  ~IoReader();  // waits for every read in flight; never throws
  IoReader(const IoReader&) = delete;
  IoReader& operator=(const IoReader&) = delete;

  const std::string& path() const { return files_[0].path; }  // the first part's
  const io::FileParts& parts() const { return files_; }
  uint64_t file_size() const { return io::parts_end(files_); }  // the range's end
  bool direct() const { return direct_; }                       // effective, after fallbacks
  bool uring() const { return ring_ != nullptr; }
  bool registered() const { return !regions_.empty(); }

  // Registers each region as one fixed buffer (io_uring_register_buffers); reads whose
  // destination lies inside one use read_fixed. Replaces an earlier registration. Returns false
  // (and says so once) when the kernel refuses, e.g. RLIMIT_MEMLOCK; plain reads still work.
  // Regions must stay mapped until unregister_buffers() or destruction. Call while no read is
  // outstanding.
  bool register_buffers(std::span<const std::span<std::byte>> regions);
  void unregister_buffers();

  // Throws Error(kIo) "<path>: model file changed while running (...)" when the path (of any
  // part) no longer names the file that was opened, or its size or mtime changed.
  void check_identity() const;

  // Checks identity, then queues the reads and hands as many as the queue depth allows to the
  // kernel in one submit; the rest go as earlier ones complete. Returns at once. Throws Error for
  // a request outside the file or misaligned for O_DIRECT.
  void submit(std::span<const ReadRequest> requests);
  // Completions that are ready, without blocking; returns how many were written to out.
  // A failed read throws Error naming the file and offset (after retrying short reads).
  size_t poll(std::span<ReadCompletion> out);
  // Like poll, but blocks until at least one completion when any read is outstanding.
  size_t wait(std::span<ReadCompletion> out);
  // Reads submitted and not yet returned by poll/wait.
  size_t outstanding() const { return outstanding_; }
  // Wall seconds so far during which at least one read was with the kernel (or a pool thread),
  // from the completion thread's timestamps: bytes read / busy_seconds is the rate the disk
  // delivered while it had work. Any thread.
  double busy_seconds() const;
  // Reads with the kernel (or a pool thread) right now; queued ones not counted. Any thread.
  int in_kernel() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry;   // one read in flight
  struct Landed;  // a completion not yet returned by poll/wait
  struct Pool;    // pread fallback
  struct Part;    // one file's descriptors and identity
  void open_part(Part& part, bool want_direct);
  const Part& part_of(const Entry& e) const;
  // Moves queued reads into free entries and submits them in one call; under mu_. Returns 0 or
  // a negative errno from io_uring_submit.
  int pump();
  // A read left the kernel (or a pool thread) at `at`: frees its entry, queues the completion,
  // pumps. Under mu_.
  void land(int entry, int64_t res, double pool_seconds, Clock::time_point at);
  void reaper_loop();  // the completion thread (io_uring)
  void start_reaper();
  void stop_reaper();
  uint64_t complete_short(const Entry& e, uint64_t got) const;
  int64_t faulted(int64_t index, int64_t res, uint64_t want) const;
  size_t reap(std::span<ReadCompletion> out, bool block);

  std::vector<Part> parts_;
  io::FileParts files_;  // parts_'s paths, bases and sizes
  IoConfig config_;
  bool direct_ = false;  // every part opened with O_DIRECT

  ::io_uring* ring_ = nullptr;  // null = pread pool
  std::unique_ptr<Pool> pool_;
  std::vector<std::span<std::byte>> regions_;  // registered, sorted by address

  // Shared with the completion thread (or the pool's threads): everything below up to
  // outstanding_ is guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable landed_cv_;
  std::vector<Entry> entries_;  // [queue_depth]
  std::vector<int> free_entries_;
  std::vector<ReadRequest> queued_;  // submitted by the caller, not yet in flight (FIFO)
  std::vector<int64_t> queued_index_;
  size_t queued_head_ = 0;
  std::vector<Landed> landed_;  // FIFO from landed_head_
  size_t landed_head_ = 0;
  int in_kernel_ = 0;  // entries in use
  Clock::time_point busy_since_;
  double busy_total_ = 0;
  int thread_errno_ = 0;  // the completion thread's fatal error, thrown by the next poll/wait
  std::thread reaper_;
  bool reaper_stop_ = false;

  size_t outstanding_ = 0;  // the caller's thread only
  int64_t next_index_ = 0;  // read numbering for IoFaults; under mu_
};

}  // namespace strata::tiers
