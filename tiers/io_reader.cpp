// IoReader: O_DIRECT reads through io_uring (batched submits, fixed buffers, non-blocking reaping)
// with a pread thread-pool fallback, short-read retries, a file identity check and a fault seam.
// Tested by tests/test_tiers_io.cpp.
#include "tiers/io_reader.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "io/check.h"

namespace strata::tiers {

namespace {

using Clock = std::chrono::steady_clock;

// The kernel refuses a fixed buffer over 1 GiB and more than 16384 of them.
constexpr uint64_t kMaxFixedBuffer = 1ull << 30;
constexpr size_t kMaxFixedBuffers = 16384;

bool aligned(uint64_t v) {
  return v % kDirectAlign == 0;
}
bool aligned(const std::byte* p) {
  return aligned(reinterpret_cast<uintptr_t>(p));
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

AlignedRange aligned_superset(uint64_t offset, uint64_t bytes) {
  AlignedRange r;
  r.offset = offset / kDirectAlign * kDirectAlign;
  r.lead = offset - r.offset;
  const uint64_t end = offset + bytes;
  r.bytes = (end + kDirectAlign - 1) / kDirectAlign * kDirectAlign - r.offset;
  return r;
}

struct IoReader::Part {
  io::FilePart file;
  int fd_direct = -1;    // O_DIRECT descriptor (-1 when buffered)
  int fd_buffered = -1;  // always open: short-read remainders and DIRECT=0
  struct stat identity {};
  int fd(bool direct) const { return direct ? fd_direct : fd_buffered; }
};

struct IoReader::Entry {
  ReadRequest req;
  int part = 0;
  uint64_t want = 0;  // bytes the file holds for this request
  int64_t index = 0;  // read number, for IoFaults
  Clock::time_point start;
};

struct IoReader::Landed {
  Entry entry;
  int64_t res = 0;  // bytes or -errno, as the kernel (or pread) gave it
  double service_seconds = 0;
};

// pread fallback: worker threads take reads in FIFO order and hand each raw result to the reader
// (IoReader::land); faults, retries and errors are handled on the caller's thread exactly as for
// io_uring.
struct IoReader::Pool {
  struct Job {
    int entry;
    int fd;
    ReadRequest req;  // offset: in the part's file
  };

  IoReader& reader;
  std::mutex mu;
  std::condition_variable job_cv;
  std::deque<Job> jobs;
  bool stop = false;
  std::vector<std::thread> threads;

  Pool(IoReader& r, int n) : reader(r) {
    for (int i = 0; i < n; ++i) threads.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    job_cv.notify_all();
    for (auto& t : threads) t.join();
  }

  void work() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mu);
        job_cv.wait(lock, [&] { return stop || !jobs.empty(); });
        if (jobs.empty()) return;  // stop, and nothing left: readers wait for their results
        job = jobs.front();
        jobs.pop_front();
      }
      const auto t0 = Clock::now();
      ssize_t r;
      do {
        r = pread(job.fd, job.req.dst, job.req.bytes, static_cast<off_t>(job.req.offset));
      } while (r < 0 && errno == EINTR);
      const int64_t res = r < 0 ? -errno : r;
      const auto t1 = Clock::now();
      {
        std::lock_guard lock(reader.mu_);
        reader.land(job.entry, res, std::chrono::duration<double>(t1 - t0).count(), t1);
      }
      reader.landed_cv_.notify_all();
    }
  }
};

IoReader::IoReader(std::string path, IoConfig config)
    : IoReader(io::FileParts{io::FilePart{std::move(path), 0, 0, 0}}, std::move(config)) {}

IoReader::IoReader(io::FileParts parts, IoConfig config) : config_(std::move(config)) {
  STRATA_ASSERT(config_.queue_depth >= 1 && config_.threads >= 1, "queue_depth {} threads {}",
                config_.queue_depth, config_.threads);
  STRATA_ASSERT(!parts.empty(), "no file to read");
  parts_.resize(parts.size());
  direct_ = config_.direct;
  try {
    for (size_t i = 0; i < parts.size(); ++i) {
      Part& p = parts_[i];
      p.file = std::move(parts[i]);
      STRATA_ASSERT(
          p.file.base % kDirectAlign == 0 && (i == 0 || p.file.base >= io::parts_end(files_)),
          "part {} at {}", i, p.file.base);
      open_part(p, config_.direct);
      files_.push_back(p.file);
    }
  } catch (...) {
    for (Part& p : parts_) {
      if (p.fd_direct >= 0) close(p.fd_direct);
      if (p.fd_buffered >= 0) close(p.fd_buffered);
    }
    throw;
  }
  if (direct_) {
    for (const Part& p : parts_) direct_ = direct_ && p.fd_direct >= 0;
  }

  if (config_.uring) {
    auto* ring = new io_uring;
    const int rc = config_.faults.fail_uring_setup
                       ? -EPERM
                       : io_uring_queue_init(static_cast<unsigned>(config_.queue_depth), ring, 0);
    if (rc == 0) {
      ring_ = ring;
    } else {
      delete ring;
      if (config_.notice)
        config_.notice(fmt::format(
            "io_uring unavailable (io_uring_queue_init: {}): reading {} with {} pread threads",
            std::strerror(-rc), path(), config_.threads));
    }
  }
  if (!ring_) pool_ = std::make_unique<Pool>(*this, config_.threads);

  entries_.resize(config_.queue_depth);
  landed_.reserve(static_cast<size_t>(config_.queue_depth) * 2);
  for (int i = config_.queue_depth - 1; i >= 0; --i) free_entries_.push_back(i);
}

void IoReader::open_part(Part& part, bool want_direct) {
  const std::string& path = part.file.path;
  part.fd_buffered = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  STRATA_CHECK_SYS(part.fd_buffered, "open", path);
  if (fstat(part.fd_buffered, &part.identity) != 0) fail_sys("fstat", path);
  const auto size = static_cast<uint64_t>(part.identity.st_size);
  if (part.file.size != 0 && part.file.size != size)
    fail(ErrorKind::kIo, "{}: model file changed since it was opened (it had {} bytes, now {})",
         path, part.file.size, size);
  part.file.size = size;
  if (!want_direct) return;

  int err = 0;
  if (config_.faults.refuse_direct) {
    err = EINVAL;
  } else {
    part.fd_direct = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (part.fd_direct < 0) err = errno;
  }
  // Some file systems accept the flag and refuse the read: probe one block.
  if (part.fd_direct >= 0 && size > 0) {
    void* probe = nullptr;
    if (posix_memalign(&probe, kDirectAlign, kDirectAlign) == 0) {
      if (pread(part.fd_direct, probe, kDirectAlign, 0) < 0) err = errno;
      std::free(probe);
    }
    if (err != 0) {
      close(part.fd_direct);
      part.fd_direct = -1;
    }
  }
  if (err != 0 && config_.notice)
    config_.notice(fmt::format("O_DIRECT refused for {} ({}): using buffered reads", path,
                               std::strerror(err)));
}

const IoReader::Part& IoReader::part_of(const Entry& e) const {
  return parts_[static_cast<size_t>(e.part)];
}

IoReader::~IoReader() {
  // Reads in flight write into the caller's buffers: wait for them before anything is freed.
  {
    std::unique_lock lock(mu_);
    queued_.clear();
    queued_index_.clear();
    queued_head_ = 0;
    if (ring_ && !reaper_.joinable() && in_kernel_ > 0) {
      lock.unlock();
      start_reaper();
      lock.lock();
    }
    landed_cv_.wait(lock, [&] { return in_kernel_ == 0 || thread_errno_ != 0; });
  }
  pool_.reset();  // joins after the queued reads finish
  if (ring_) {
    stop_reaper();
    io_uring_queue_exit(ring_);
    delete ring_;
  }
  for (Part& p : parts_) {
    if (p.fd_direct >= 0) close(p.fd_direct);
    if (p.fd_buffered >= 0) close(p.fd_buffered);
  }
}

namespace {
constexpr uint64_t kWakeTag = ~uint64_t{0};  // the NOP that stops the completion thread
}  // namespace

void IoReader::start_reaper() {
  if (!ring_ || reaper_.joinable()) return;
  reaper_stop_ = false;
  reaper_ = std::thread([this] { reaper_loop(); });
}

void IoReader::stop_reaper() {
  if (!reaper_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    reaper_stop_ = true;
    if (thread_errno_ == 0) {
      // A NOP wakes the thread. The SQ has room unless an earlier submit left entries in it
      // (EAGAIN/EBUSY): hand those over first.
      io_uring_sqe* sqe = io_uring_get_sqe(ring_);
      for (int tries = 0; !sqe && tries < 1000; ++tries) {
        io_uring_submit(ring_);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        sqe = io_uring_get_sqe(ring_);
      }
      STRATA_ASSERT(sqe != nullptr, "io_uring submission queue stays full");
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, kWakeTag);
      int rc;
      do {
        rc = io_uring_submit(ring_);
      } while (rc == -EINTR);
    }
  }
  reaper_.join();
}

void IoReader::reaper_loop() {
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(ring_, &cqe);
    if (rc == -EINTR || rc == -EAGAIN) continue;
    bool stop = false;
    {
      std::lock_guard lock(mu_);
      if (rc < 0) {
        thread_errno_ = -rc;
        stop = true;
      } else {
        const auto now = Clock::now();
        unsigned head;
        unsigned n = 0;
        io_uring_for_each_cqe(ring_, head, cqe) {
          ++n;
          const uint64_t tag = io_uring_cqe_get_data64(cqe);
          if (tag == kWakeTag) {
            stop = true;
            continue;
          }
          land(static_cast<int>(tag), cqe->res, -1, now);
        }
        io_uring_cq_advance(ring_, n);
        const int prc = pump();
        if (prc < 0) thread_errno_ = -prc;
      }
    }
    landed_cv_.notify_all();
    if (stop) return;
  }
}

void IoReader::land(int entry, int64_t res, double pool_seconds, Clock::time_point at) {
  const Entry& e = entries_[entry];
  landed_.push_back(
      {e, res,
       pool_seconds >= 0 ? pool_seconds : std::chrono::duration<double>(at - e.start).count()});
  free_entries_.push_back(entry);
  if (--in_kernel_ == 0) busy_total_ += std::chrono::duration<double>(at - busy_since_).count();
  if (pool_) pump();  // io_uring: the completion thread pumps once per batch of completions
}

int IoReader::in_kernel() const {
  std::lock_guard lock(mu_);
  return in_kernel_;
}

double IoReader::busy_seconds() const {
  std::lock_guard lock(mu_);
  double s = busy_total_;
  if (in_kernel_ > 0) s += seconds_since(busy_since_);
  return s;
}

bool IoReader::register_buffers(std::span<const std::span<std::byte>> regions) {
  stop_reaper();  // restarted by the next submit; registration wants a quiet ring on old kernels
  unregister_buffers();
  if (!ring_) return false;
  std::vector<std::span<std::byte>> chunks;
  for (auto r : regions)
    for (uint64_t off = 0; off < r.size(); off += kMaxFixedBuffer)
      chunks.push_back(r.subspan(off, std::min<uint64_t>(kMaxFixedBuffer, r.size() - off)));
  if (chunks.empty()) return false;
  if (chunks.size() > kMaxFixedBuffers) chunks.resize(kMaxFixedBuffers);
  std::sort(chunks.begin(), chunks.end(),
            [](const auto& a, const auto& b) { return a.data() < b.data(); });
  std::vector<iovec> iov;
  for (auto c : chunks) iov.push_back({c.data(), c.size()});
  const int rc = io_uring_register_buffers(ring_, iov.data(), static_cast<unsigned>(iov.size()));
  if (rc != 0) {
    if (config_.notice)
      config_.notice(fmt::format(
          "io_uring_register_buffers refused ({}; RLIMIT_MEMLOCK?): reading without fixed buffers",
          std::strerror(-rc)));
    return false;
  }
  regions_ = std::move(chunks);
  return true;
}

void IoReader::unregister_buffers() {
  stop_reaper();
  if (ring_ && !regions_.empty()) io_uring_unregister_buffers(ring_);
  regions_.clear();
}

void IoReader::check_identity() const {
  for (const Part& p : parts_) {
    struct stat now {};
    const char* why = nullptr;
    if (stat(p.file.path.c_str(), &now) != 0)
      why = "it no longer exists";
    else if (now.st_dev != p.identity.st_dev || now.st_ino != p.identity.st_ino)
      why = "it was replaced by another file";
    else if (fstat(p.fd_buffered, &now) != 0 || now.st_size != p.identity.st_size)
      why = "its size changed";
    else if (now.st_mtim.tv_sec != p.identity.st_mtim.tv_sec ||
             now.st_mtim.tv_nsec != p.identity.st_mtim.tv_nsec)
      why = "it was modified";
    if (why)
      fail(ErrorKind::kIo, "{}: model file changed while running ({}; opened with {} bytes)",
           p.file.path, why, static_cast<uint64_t>(p.identity.st_size));
  }
}

void IoReader::submit(std::span<const ReadRequest> requests) {
  if (requests.empty()) return;
  check_identity();
  for (const ReadRequest& r : requests) {
    if (r.bytes == 0 || !io::part_at(files_, r.offset)) {
      if (parts_.size() == 1)
        fail(ErrorKind::kIo, "{}: read of {} bytes at offset {} is outside the file ({} bytes)",
             path(), r.bytes, r.offset, file_size());
      fail(ErrorKind::kIo, "{}: read of {} bytes at offset {} is outside its {} parts", path(),
           r.bytes, r.offset, parts_.size());
    }
    if (direct_)
      STRATA_ASSERT(aligned(r.offset) && aligned(r.bytes) && aligned(r.dst),
                    "O_DIRECT read not 4 KiB-aligned: offset {} bytes {} dst {}", r.offset, r.bytes,
                    static_cast<void*>(r.dst));
  }
  start_reaper();
  int rc;
  {
    std::lock_guard lock(mu_);
    for (const ReadRequest& r : requests) {
      queued_.push_back(r);
      queued_index_.push_back(next_index_++);
    }
    rc = pump();
  }
  outstanding_ += requests.size();
  if (rc < 0) {
    errno = -rc;
    fail_sys("io_uring_submit", path());
  }
}

int IoReader::pump() {
  int prepared = 0;
  while (queued_head_ < queued_.size() && !free_entries_.empty()) {
    const int slot = free_entries_.back();
    free_entries_.pop_back();
    Entry& e = entries_[slot];
    e.req = queued_[queued_head_];
    e.index = queued_index_[queued_head_];
    ++queued_head_;
    const io::FilePart* file = io::part_at(files_, e.req.offset);  // checked by submit
    e.part = static_cast<int>(file - files_.data());
    e.want = std::min(e.req.bytes, file->base + file->size - e.req.offset);
    e.start = Clock::now();
    if (in_kernel_++ == 0) busy_since_ = e.start;
    const int fd = part_of(e).fd(direct_);
    const uint64_t at = e.req.offset - file->base;
    if (ring_) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring_);
      STRATA_ASSERT(sqe != nullptr, "io_uring submission queue full with a free entry");
      // A registered region holding the whole destination makes this a fixed-buffer read.
      auto it = std::upper_bound(regions_.begin(), regions_.end(), e.req.dst,
                                 [](std::byte* p, const auto& r) { return p < r.data(); });
      const bool fixed =
          it != regions_.begin() && e.req.dst + e.req.bytes <= (it - 1)->data() + (it - 1)->size();
      if (fixed)
        io_uring_prep_read_fixed(sqe, fd, e.req.dst, static_cast<unsigned>(e.req.bytes), at,
                                 static_cast<int>(it - 1 - regions_.begin()));
      else
        io_uring_prep_read(sqe, fd, e.req.dst, static_cast<unsigned>(e.req.bytes), at);
      io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
      ++prepared;
    } else {
      {
        std::lock_guard lock(pool_->mu);
        ReadRequest local = e.req;
        local.offset = at;
        pool_->jobs.push_back({slot, fd, local});
      }
      pool_->job_cv.notify_one();
    }
  }
  if (queued_head_ == queued_.size()) {
    queued_.clear();
    queued_index_.clear();
    queued_head_ = 0;
  }
  // Also hands over entries an earlier submit left in the ring (EAGAIN/EBUSY).
  if (ring_ && (prepared > 0 || io_uring_sq_ready(ring_) > 0)) {
    int rc;
    do {
      rc = io_uring_submit(ring_);
    } while (rc == -EINTR);
    // EAGAIN/EBUSY leave the entries in the ring; the next pump hands them over.
    if (rc < 0 && rc != -EAGAIN && rc != -EBUSY) return rc;
  }
  return 0;
}

int64_t IoReader::faulted(int64_t index, int64_t res, uint64_t want) const {
  const IoFaults& f = config_.faults;
  if (index == f.fail_read) return -EIO;
  if (index == f.truncated_read) return 0;
  if (index == f.short_read && res > 0)
    return static_cast<int64_t>(want / 2 / kDirectAlign * kDirectAlign);
  return res;
}

uint64_t IoReader::complete_short(const Entry& e, uint64_t got) const {
  // The remainder is read synchronously: short reads are rare (end of a file being truncated,
  // signals), so keeping the ring simple is worth more than overlapping them.
  const Part& part = part_of(e);
  const uint64_t start = e.req.offset - part.file.base;  // in the part's file
  while (got < e.want) {
    const uint64_t offset = start + got;
    std::byte* dst = e.req.dst + got;
    const bool use_direct = direct_ && aligned(offset) && aligned(dst);
    const uint64_t len = use_direct ? e.req.bytes - got : e.want - got;
    ssize_t r = pread(part.fd(use_direct), dst, len, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (e.index == config_.faults.truncated_read) r = 0;
    if (r < 0)
      fail(ErrorKind::kIo, "{}: read of {} bytes at offset {} failed: {}", part.file.path, len,
           offset, std::strerror(errno));
    if (r == 0) {
      check_identity();
      fail(ErrorKind::kIo,
           "{}: short read at offset {}: got {} of {} bytes (the file ends at byte {})",
           part.file.path, start, got, e.want, offset);
    }
    got += static_cast<uint64_t>(r);
  }
  return got;
}

size_t IoReader::reap(std::span<ReadCompletion> out, bool block) {
  size_t n = 0;
  if (outstanding_ > 0) start_reaper();  // after a re-registration of buffers
  std::unique_lock lock(mu_);
  if (block && outstanding_ > 0)
    landed_cv_.wait(lock, [&] { return landed_head_ < landed_.size() || thread_errno_ != 0; });
  while (n < out.size() && landed_head_ < landed_.size()) {
    const Landed done = landed_[landed_head_++];
    if (landed_head_ == landed_.size()) {
      landed_.clear();
      landed_head_ = 0;
    }
    --outstanding_;
    const Entry& e = done.entry;
    const int64_t res = faulted(e.index, done.res, e.want);
    if (res < 0)
      fail(ErrorKind::kIo, "{}: read of {} bytes at offset {} failed: {}", part_of(e).file.path,
           e.req.bytes, e.req.offset - part_of(e).file.base, std::strerror(static_cast<int>(-res)));
    uint64_t got = static_cast<uint64_t>(res);
    if (got < e.want) got = complete_short(e, got);
    out[n++] = {e.req.tag, e.want, done.service_seconds};
  }
  if (n == 0 && thread_errno_ != 0) {
    errno = thread_errno_;
    fail_sys("io_uring completion thread", path());
  }
  return n;
}

size_t IoReader::poll(std::span<ReadCompletion> out) {
  return reap(out, false);
}

size_t IoReader::wait(std::span<ReadCompletion> out) {
  return reap(out, true);
}

}  // namespace strata::tiers
