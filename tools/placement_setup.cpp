// PIN / USAGE_SAVE glue (see placement_setup.h).
#include "tools/placement_setup.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "io/check.h"

namespace strata::tools {

UsageRecorder::~UsageRecorder() {
  if (path_.empty()) return;
  try {
    save();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: USAGE_SAVE: %s\n", e.what());
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

std::unique_ptr<UsageRecorder> apply_placement_knobs(const engine::Model& model,
                                                     const engine::Knobs& knobs,
                                                     engine::TierOptions& opts,
                                                     bool record_always) {
  if (const std::string pin = knobs.get_string("PIN"); !pin.empty())
    opts.pin_counts = pin_counts(model, pin, knobs.get_bool("PIN_FORCE"));
  const std::string save = knobs.get_string("USAGE_SAVE");
  if (save.empty() && !record_always) return nullptr;
  auto r = std::make_unique<UsageRecorder>(empty_usage(model), save);
  opts.usage = &r->stats();
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

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_sigint_stop(int) {
  if (g_stop.exchange(true)) _exit(130);
  static const char kMsg[] = "\nstrata: interrupted; stopping (Ctrl-C again to quit at once)\n";
  [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
}

struct sigaction g_old_sigint = {};

}  // namespace

SigintStop::SigintStop() {
  g_stop.store(false);
  struct sigaction sa = {};
  sa.sa_handler = on_sigint_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  STRATA_CHECK_SYS(sigaction(SIGINT, &sa, &g_old_sigint), "sigaction", "SIGINT");
}

SigintStop::~SigintStop() {
  sigaction(SIGINT, &g_old_sigint, nullptr);
}

bool SigintStop::requested() const {
  return g_stop.load(std::memory_order_relaxed);
}

}  // namespace strata::tools
