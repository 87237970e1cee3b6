// PIN / USAGE_SAVE glue (see placement_setup.h).
#include "tools/placement_setup.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "io/check.h"

namespace strata::tools {

UsageRecorder::~UsageRecorder() {
  if (!path_.empty()) {
    try {
      save();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata: USAGE_SAVE: %s\n", e.what());
    }
  }
  learn_if_due(std::chrono::seconds(0));
}

void UsageRecorder::learn_now() {
  if (learn_path_.empty()) return;
  placement::UsageStats since = stats_;
  since.subtract(learned_upto_);
  if (since.tokens() == 0) return;
  learned_upto_ = stats_;  // even if the write fails: never added twice
  learn_usage(since, learn_path_);
}

void UsageRecorder::learn_if_due(std::chrono::seconds every) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_learn_ < every) return;
  last_learn_ = now;
  try {
    learn_now();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: USAGE_AUTO: %s\n", e.what());
  }
}

void UsageRecorder::save(const std::string& path) const {
  stats_.save(path);
  std::fprintf(stderr, "strata: usage stats of %llu tokens saved to %s\n",
               static_cast<unsigned long long>(stats_.tokens()), path.c_str());
}

placement::UsageStats empty_usage(const engine::Model& model) {
  return placement::UsageStats(placement::model_identity(model.file()),
                               engine::expert_sizes(model).n_expert);
}

std::vector<uint64_t> pin_counts(const engine::Model& model, const std::string& stats_path,
                                 bool force) {
  const placement::UsageStats pin = placement::UsageStats::load(stats_path);
  const placement::UsageStats here = empty_usage(model);
  here.check_compatible(pin.identity(), pin.n_expert(), force, "PIN file " + stats_path);
  return pin.counts();
}

std::string learned_profile_path(const engine::Model& model, const engine::Knobs& knobs) {
  const placement::ModelIdentity id = placement::model_identity(model.file());
  std::string name;
  for (char c : id.name.substr(0, 64))
    name +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ? c : '_';
  if (name.empty() || name[0] == '.') name = "model" + name;
  return (std::filesystem::path(engine::cache_dir(knobs)) / "usage" /
          fmt::format("{}-{:016x}.stats", name, id.fingerprint))
      .string();
}

namespace {

// An exclusive flock on path (created when missing) for the object's life.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail_sys("open", path);
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd_);
      errno = err;
      fail_sys("flock", path);
    }
  }
  ~FileLock() { ::close(fd_); }  // closing releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// The learned profile at path, or nullopt (with the reason) when it is missing, unreadable or
// another model's.
std::optional<placement::UsageStats> read_learned(const std::string& path,
                                                  const placement::UsageStats& like,
                                                  std::string* why) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  try {
    placement::UsageStats s = placement::UsageStats::load(path);
    s.check_compatible(like.identity(), like.n_expert(), false, "learned profile " + path);
    return s;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return std::nullopt;
  }
}

}  // namespace

void learn_usage(const placement::UsageStats& run, const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    fail(ErrorKind::kIo, "cannot create the usage profile directory {}: {}", dir.string(),
         ec.message());
  const FileLock lock(path + ".lock");
  std::string why;
  std::optional<placement::UsageStats> sum = read_learned(path, run, &why);
  if (!why.empty())
    std::fprintf(stderr, "strata: USAGE_AUTO: replacing the learned profile (%s)\n", why.c_str());
  if (!sum) sum = placement::UsageStats(run.identity(), run.n_expert());
  sum->merge(run);
  while (sum->tokens() > kLearnedHalveTokens) sum->halve();
  sum->save(path);
}

std::optional<placement::UsageStats> learned_profile(const engine::Model& model,
                                                     const engine::Knobs& knobs) {
  const int64_t min_tokens = knobs.get_int("USAGE_AUTO");
  if (min_tokens <= 0 || !knobs.get_string("PIN").empty()) return std::nullopt;
  const std::string path = learned_profile_path(model, knobs);
  std::string why;
  std::optional<placement::UsageStats> learned = read_learned(path, empty_usage(model), &why);
  if (!why.empty())
    std::fprintf(stderr, "strata: USAGE_AUTO: the learned profile is not used (%s)\n", why.c_str());
  if (learned && learned->tokens() < static_cast<uint64_t>(min_tokens)) learned.reset();
  return learned;
}

std::string pin_path(const engine::Model& model, const engine::Knobs& knobs) {
  const std::string pin = knobs.get_string("PIN");
  if (pin != "learned") return pin;
  const std::string path = learned_profile_path(model, knobs);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    fail(ErrorKind::kNotFound,
         "PIN=learned: this model has no learned usage profile yet ({}); run, chat or serve it "
         "with USAGE_AUTO on first",
         path);
  return path;
}

std::unique_ptr<UsageRecorder> apply_placement_knobs(const engine::Model& model,
                                                     const engine::Knobs& knobs,
                                                     engine::TierOptions& opts, bool record_always,
                                                     bool learn) {
  if (const std::string pin = pin_path(model, knobs); !pin.empty())
    opts.pin_counts = pin_counts(model, pin, knobs.get_bool("PIN_FORCE"));
  const std::string learn_path =
      learn && knobs.get_int("USAGE_AUTO") > 0 ? learned_profile_path(model, knobs) : "";
  const std::string save = knobs.get_string("USAGE_SAVE");
  if (save.empty() && learn_path.empty() && !record_always) return nullptr;
  auto r = std::make_unique<UsageRecorder>(empty_usage(model), save, learn_path);
  opts.usage = &r->stats();
  if (learn)
    if (const std::optional<placement::UsageStats> learned = learned_profile(model, knobs)) {
      opts.pin_counts = learned->counts();
      r->set_learned(learned->tokens(), learn_path);
    }
  return r;
}

std::unique_ptr<placement::RouteTraceWriter> make_route_trace(const engine::Model& model,
                                                              const engine::Knobs& knobs) {
  const std::string path = knobs.get_string("ROUTE_TRACE");
  if (path.empty()) return nullptr;
  const engine::ModelConfig& cfg = model.config();
  std::vector<uint32_t> k(cfg.n_layer);
  for (uint32_t l = 0; l < cfg.n_layer; ++l) k[l] = cfg.layer_n_expert_used(l);
  return std::make_unique<placement::RouteTraceWriter>(
      path, placement::route_trace_header(placement::model_identity(model.file()),
                                          engine::expert_sizes(model).n_expert, k));
}

namespace {

std::atomic<int> g_stop_signal{0};  // the first stop signal received; 0 = none
static_assert(std::atomic<int>::is_always_lock_free);
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void on_stop_signal(int sig) {
  int none = 0;
  if (!g_stop_signal.compare_exchange_strong(none, sig)) _exit(128 + none);
  static const char kMsg[] = "\nstrata: stopping (the same signal again quits at once)\n";
  [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
}

struct sigaction g_old[3] = {};

}  // namespace

StopSignals::StopSignals() {
  g_stop_signal.store(0);
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kStopSignals); ++i)
    STRATA_CHECK_SYS(sigaction(kStopSignals[i], &sa, &g_old[i]), "sigaction",
                     strsignal(kStopSignals[i]));
}

StopSignals::~StopSignals() {
  for (size_t i = 0; i < std::size(kStopSignals); ++i)
    sigaction(kStopSignals[i], &g_old[i], nullptr);
}

bool StopSignals::requested() const {
  return g_stop_signal.load(std::memory_order_relaxed) != 0;
}

int StopSignals::exit_status() const {
  return 128 + g_stop_signal.load(std::memory_order_relaxed);
}

}  // namespace strata::tools
