// ThreadPool: workers pinned one per physical core, woken by a generation counter they spin on
// briefly and then sleep on with a futex; completion is an atomic countdown. run() allocates
// nothing and takes no lock. Tested by tests/test_threadpool.cpp, timed by
// bench/bench_threadpool.cpp.
#include "kernels/threadpool.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "io/check.h"

namespace strata::kernels {
namespace {

// Prefetches [data, data + bytes) into L2 one 4 KiB step at a time, returning early (the rest
// unread) as soon as stop() is true; returns the bytes left.
template <typename Stop>
size_t idle_read(const char*& data, size_t bytes, Stop stop) {
  constexpr size_t kStep = 4096;
  while (bytes > 0 && !stop()) {
    const size_t n = bytes < kStep ? bytes : kStep;
    for (size_t off = 0; off < n; off += 64) _mm_prefetch(data + off, _MM_HINT_T1);
    data += n;
    bytes -= n;
  }
  return bytes;
}

// How long an idle thread spins (pause loop) before it sleeps: long enough to catch the next
// fork of a decode step without a syscall, short enough not to steal a core from the host.
constexpr int64_t kSpinNs = 100'000;
constexpr int kMaxPoolThreads = 1024;

// The futex word is the atomic itself: one lock-free 32-bit integer, no padding.
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
static_assert(std::atomic<uint32_t>::is_always_lock_free);

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  // Returns at once (EAGAIN) if *word != expected; spurious returns are handled by the callers.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

// Spins with _mm_pause until done() or spin_ns elapsed; returns done()'s last value. The clock is
// read once per 64 pauses (a pause is 10-140 cycles depending on the core).
template <typename Done>
bool spin_until(Done done, int64_t spin_ns) {
  if (done()) return true;
  if (spin_ns <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns);
  for (;;) {
    for (int k = 0; k < 64; ++k) {
      _mm_pause();
      if (done()) return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

// This process's affinity mask, grown until the kernel accepts its size.
struct AffinityMask {
  cpu_set_t* set = nullptr;
  size_t bytes = 0;
  int n_cpus = 0;  // bits the mask can hold
  AffinityMask() {
    for (int n = 1024; n <= (1 << 20); n *= 2) {
      cpu_set_t* s = CPU_ALLOC(n);
      if (s == nullptr) return;
      const size_t b = CPU_ALLOC_SIZE(n);
      CPU_ZERO_S(b, s);
      if (sched_getaffinity(0, b, s) == 0) {
        set = s;
        bytes = b;
        n_cpus = n;
        return;
      }
      CPU_FREE(s);
      if (errno != EINVAL) return;
    }
  }
  ~AffinityMask() {
    if (set != nullptr) CPU_FREE(set);
  }
  AffinityMask(const AffinityMask&) = delete;
  AffinityMask& operator=(const AffinityMask&) = delete;
  bool has(int cpu) const { return set != nullptr && cpu < n_cpus && CPU_ISSET_S(cpu, bytes, set); }
  int count() const { return set == nullptr ? 0 : CPU_COUNT_S(bytes, set); }
};

// Reads one integer from a sysfs file; fallback if missing or malformed.
int read_sysfs_int(const std::string& path, int fallback) {
  std::ifstream f(path);
  int v = 0;
  return (f >> v) ? v : fallback;
}

// Parses a sysfs CPU list ("0-3,8,10-11") into the CPUs it names; false if unreadable.
bool read_cpu_list(const std::string& path, std::vector<int>* cpus) {
  std::ifstream f(path);
  std::string text;
  if (!(f >> text)) return false;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const size_t dash = item.find('-');
    try {
      const int lo = std::stoi(item.substr(0, dash));
      const int hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1));
      for (int c = lo; c <= hi; ++c) cpus->push_back(c);
    } catch (const std::exception&) {
      return false;
    }
    pos = comma + 1;
  }
  return true;
}

}  // namespace

std::vector<int> physical_core_cpus() {
  const AffinityMask allowed;
  if (allowed.set == nullptr) return {};
  struct Cpu {
    int package;
    int core;  // core_id, -1 if unknown
    int cpu;
    std::vector<int> siblings;  // empty if thread_siblings_list is unreadable
  };
  std::vector<Cpu> cpus;
  for (int c = 0; c < allowed.n_cpus; ++c) {
    if (!allowed.has(c)) continue;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    Cpu info{
        read_sysfs_int(dir + "physical_package_id", 0), read_sysfs_int(dir + "core_id", -1), c, {}};
    if (!read_cpu_list(dir + "thread_siblings_list", &info.siblings)) info.siblings.clear();
    cpus.push_back(std::move(info));
  }
  // Keep a CPU unless a lower-numbered allowed CPU shares its core: by thread_siblings_list when
  // sysfs has it, else by (physical_package_id, core_id).
  std::vector<std::pair<int, int>> kept;  // (package, cpu)
  for (const Cpu& a : cpus) {
    bool shadowed = false;
    for (const Cpu& b : cpus) {
      if (b.cpu >= a.cpu) break;
      const bool sibling =
          a.siblings.empty()
              ? (a.core >= 0 && a.package == b.package && a.core == b.core)
              : std::find(a.siblings.begin(), a.siblings.end(), b.cpu) != a.siblings.end();
      if (sibling) {
        shadowed = true;
        break;
      }
    }
    if (!shadowed) kept.emplace_back(a.package, a.cpu);
  }
  std::sort(kept.begin(), kept.end());
  std::vector<int> out;
  out.reserve(kept.size());
  for (const auto& k : kept) out.push_back(k.second);
  return out;
}

void split_by_cost(int64_t n_items, std::span<const uint64_t> cost, int n_threads,
                   int64_t* bounds) {
  STRATA_ASSERT(n_threads >= 1, "n_threads={}", n_threads);
  STRATA_ASSERT(n_items >= 0, "n_items={}", n_items);
  STRATA_ASSERT(cost.empty() || static_cast<int64_t>(cost.size()) == n_items,
                "cost has {} entries for {} items", cost.size(), n_items);
  using u128 = unsigned __int128;
  u128 total = 0;
  for (uint64_t c : cost) total += c;
  bounds[0] = 0;
  bounds[n_threads] = n_items;
  if (total == 0) {
    // Equal weights (no costs given, or all zero): equal item counts.
    for (int t = 1; t < n_threads; ++t)
      bounds[t] = static_cast<int64_t>(static_cast<u128>(n_items) * t / n_threads);
    return;
  }
  // Boundary t goes to the item edge whose prefix cost is nearest total·t/n (ties: fewer items
  // before it). Compared as prefix·n vs total·t in 128 bits, so no rounding and no overflow.
  int64_t i = 0;
  u128 prefix = 0;  // cost of items [0, i)
  for (int t = 1; t < n_threads; ++t) {
    const u128 target = total * static_cast<u128>(t);
    while (i < n_items && (prefix + cost[i]) * n_threads <= target) prefix += cost[i++];
    // prefix·n can already exceed the target when one item straddles several targets.
    if (i < n_items && prefix * n_threads < target) {
      const u128 below = target - prefix * n_threads;
      const u128 above = (prefix + cost[i]) * n_threads - target;
      if (above < below) prefix += cost[i++];
    }
    bounds[t] = i;
  }
}

struct ThreadPool::Impl {
  int n_threads = 1;
  bool pinned = false;
  int64_t spin_ns = kSpinNs;
  std::vector<std::thread> workers;  // [n_threads - 1]; worker w has thread index w + 1

  // The job, written by the caller before it publishes a new generation (release) and read by
  // workers after they observe it (acquire).
  void* ctx = nullptr;
  void (*fn)(void*, int, int) = nullptr;
  bool stop = false;

  // Each on its own cache line: the caller writes generation, workers write pending.
  alignas(64) std::atomic<uint32_t> generation{0};  // bumped once per run (and once to stop)
  alignas(64) std::atomic<uint32_t> sleepers{0};    // workers in (or entering) futex_wait
  alignas(64) std::atomic<uint32_t> pending{0};     // workers not done with this generation
  std::atomic<uint32_t> caller_waiting{0};          // caller in (or entering) futex_wait
  // set_idle_reads for the next run, one per thread; a worker copies its own before it counts
  // down, so the caller may overwrite them once the join is done.
  std::unique_ptr<IdleRead[]> idle;
  alignas(64) std::atomic<bool> in_run{false};  // catches a reentrant or concurrent run()
  // claimed[w]: the last generation whose part w someone (worker w, or the caller stealing it)
  // took. A part is taken by exactly one thread per generation: whoever moves claimed[w] forward
  // to it. Only forward: a worker that read generation g and stalled must not claim g once the
  // caller has taken part w of g + 1 (wrap-safe comparison).
  std::unique_ptr<std::atomic<uint32_t>[]> claimed;

  bool claim(int w, uint32_t gen) {
    uint32_t cur = claimed[w].load(std::memory_order_acquire);
    while (static_cast<int32_t>(gen - cur) > 0)
      if (claimed[w].compare_exchange_weak(cur, gen, std::memory_order_acq_rel)) return true;
    return false;
  }

  void worker_main(int index);
  void wait_for_workers();
  void finish_run();  // the join, then the run's idle reads dropped and in_run cleared
  void stop_and_join();
};

// Lost-wakeup argument (both sides): the sleeper announces itself (sleepers / caller_waiting,
// seq_cst) before re-reading the word it waits on; the waker changes that word (seq_cst) before
// reading the announcement. In the single total order one of them sees the other, and the futex
// re-checks the word atomically, so a sleeper is always either not asleep or woken.
void ThreadPool::Impl::worker_main(int index) {
  uint32_t seen = 0;
  const char* ahead = nullptr;  // this thread's idle read of the last run, what is left of it
  size_t ahead_bytes = 0;
  for (;;) {
    const auto new_work = [&] { return generation.load(std::memory_order_acquire) != seen; };
    if (ahead_bytes > 0) ahead_bytes = idle_read(ahead, ahead_bytes, new_work);
    const bool spun = spin_until(new_work, spin_ns);
    if (!spun) {
      sleepers.fetch_add(1, std::memory_order_seq_cst);
      while (generation.load(std::memory_order_seq_cst) == seen) futex_wait(&generation, seen);
      sleepers.fetch_sub(1, std::memory_order_release);
    }
    // Without stealing the caller cannot bump twice without this worker's countdown, so this is
    // seen + 1. With it, a generation whose part the caller took may have passed: claim() fails
    // for it (the caller took it first), and ctx / fn are only read after a claim succeeds, while
    // the generation claimed cannot end before this worker counts down.
    seen = generation.load(std::memory_order_acquire);
    if (stop) return;
    if (!claim(index, seen)) continue;
    fn(ctx, index, n_threads);
    ahead = static_cast<const char*>(idle[index].data);
    ahead_bytes = idle[index].bytes;
    if (pending.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_waiting.load(std::memory_order_seq_cst) != 0)
      futex_wake_all(&pending);
  }
}

void ThreadPool::Impl::wait_for_workers() {
  const auto done = [&] { return pending.load(std::memory_order_acquire) == 0; };
  if (idle[0].bytes > 0) {
    const char* p = static_cast<const char*>(idle[0].data);
    idle_read(p, idle[0].bytes, done);
  }
  if (spin_until(done, spin_ns)) return;
  caller_waiting.store(1, std::memory_order_seq_cst);
  for (;;) {
    const uint32_t left = pending.load(std::memory_order_seq_cst);
    if (left == 0) break;
    futex_wait(&pending, left);
  }
  caller_waiting.store(0, std::memory_order_relaxed);
}

ThreadPool::ThreadPool(int n_threads, bool pin) : impl_(new Impl) {
  STRATA_ASSERT(n_threads >= 1 && n_threads <= kMaxPoolThreads, "n_threads={}", n_threads);
  Impl& p = *impl_;
  p.n_threads = n_threads;
  if (n_threads == 1) return;

  const AffinityMask allowed;
  // Oversubscribed (more threads than CPUs we may run on): spinning only delays the thread that
  // holds the work, so sleep at once.
  if (allowed.set != nullptr && n_threads > allowed.count()) p.spin_ns = 0;
  std::vector<int> cores;
  if (pin) cores = physical_core_cpus();
  // Worker w+1 goes to physical core w+1; core 0 is left to the caller, whose affinity we keep.
  const bool do_pin = pin && static_cast<int>(cores.size()) >= n_threads;

  p.idle.reset(new IdleRead[n_threads]);
  p.claimed.reset(new std::atomic<uint32_t>[n_threads]);
  for (int w = 0; w < n_threads; ++w) p.claimed[w].store(0, std::memory_order_relaxed);
  p.workers.reserve(n_threads - 1);
  bool all_pinned = do_pin;
  try {
    for (int w = 1; w < n_threads; ++w) {
      p.workers.emplace_back([&p, w] { p.worker_main(w); });
      if (do_pin) {
        cpu_set_t one;
        CPU_ZERO(&one);
        if (cores[w] < CPU_SETSIZE) CPU_SET(cores[w], &one);
        const bool ok =
            cores[w] < CPU_SETSIZE &&
            pthread_setaffinity_np(p.workers.back().native_handle(), sizeof(one), &one) == 0;
        all_pinned = all_pinned && ok;
      }
    }
  } catch (const std::system_error& e) {
    const int started = static_cast<int>(p.workers.size()) + 1;
    p.stop_and_join();
    delete impl_;
    impl_ = nullptr;
    fail(ErrorKind::kIo, "thread pool: could not start thread {} of {}: {}", started, n_threads,
         e.what());
  }
  p.pinned = all_pinned;
}

void ThreadPool::Impl::stop_and_join() {
  if (workers.empty()) return;
  stop = true;
  generation.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&generation);
  for (std::thread& t : workers) t.join();
  workers.clear();
}

ThreadPool::~ThreadPool() {
  impl_->stop_and_join();
  delete impl_;
}

int ThreadPool::size() const {
  return impl_->n_threads;
}

bool ThreadPool::pinned() const {
  return impl_->pinned;
}

void ThreadPool::run_impl(void* ctx, void (*fn)(void*, int, int), bool steal) {
  Impl& p = *impl_;
  if (p.n_threads == 1) {
    fn(ctx, 0, 1);
    return;
  }
  const bool busy = p.in_run.exchange(true, std::memory_order_acquire);
  STRATA_ASSERT(!busy, "ThreadPool::run called while a run is in progress (nested or concurrent)");
  p.ctx = ctx;
  p.fn = fn;
  p.pending.store(static_cast<uint32_t>(p.n_threads - 1), std::memory_order_relaxed);
  p.generation.fetch_add(1, std::memory_order_seq_cst);
  if (p.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&p.generation);
  const uint32_t gen = p.generation.load(std::memory_order_relaxed);
  try {
    fn(ctx, 0, p.n_threads);
    // Parts whose workers have not started yet (descheduled, or still waking from sleep) run
    // here rather than holding the join; each part still runs once with its own index.
    for (int w = 1; steal && w < p.n_threads; ++w) {
      if (!p.claim(w, gen)) continue;
      struct CountDown {
        std::atomic<uint32_t>& pending;
        ~CountDown() { pending.fetch_sub(1, std::memory_order_seq_cst); }
      } done{p.pending};
      fn(ctx, w, p.n_threads);
    }
  } catch (...) {
    // Workers still read ctx (the caller's frame): let them finish before unwinding it.
    p.finish_run();
    throw;
  }
  p.finish_run();
}

void ThreadPool::Impl::finish_run() {
  wait_for_workers();
  // The idle reads were for this run (every worker that ran a part copied its own before counting
  // down).
  for (int t = 0; t < n_threads; ++t) idle[t] = {};
  in_run.store(false, std::memory_order_release);
}

void ThreadPool::set_idle_reads(std::span<const IdleRead> per_thread) {
  Impl& p = *impl_;
  if (p.n_threads == 1) return;
  const size_t n = std::min(per_thread.size(), static_cast<size_t>(p.n_threads));
  for (size_t t = 0; t < n; ++t)
    p.idle[t] = {per_thread[t].data, std::min(per_thread[t].bytes, kIdleReadMax)};
}

}  // namespace strata::kernels
