// The placement knobs of the commands that run a model (replay, run, chat, serve, stats): PIN plans
// with the planner from a usage stats file; USAGE_SAVE records every routed selection and saves the
// stats file when the run ends; USAGE_AUTO learns a usage profile per model (run, chat and serve
// add their counts to it at exit and plan from it when PIN is unset); ROUTE_TRACE writes every
// routing decision to a route trace. StopSignals lets replay and run stop on Ctrl-C, SIGTERM or
// SIGHUP and still save them at exit. Exercised by tests/test_pin_heldout.cpp,
// tests/test_usage_auto.cpp and tests/test_route_trace.cpp.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/expert_source.h"
#include "engine/knobs.h"
#include "engine/model.h"
#include "placement/route_trace.h"
#include "placement/usage_stats.h"

namespace strata::tools {

// Owns the online counts of a run; when destroyed (errors are printed, never thrown) saves them to
// path unless it is empty, and adds them to the learned profile at learn_path (learn_usage) unless
// that is empty.
class UsageRecorder {
 public:
  UsageRecorder(placement::UsageStats stats, std::string path, std::string learn_path = {})
      : stats_(std::move(stats)),
        path_(std::move(path)),
        learn_path_(std::move(learn_path)),
        learned_upto_(stats_),
        last_learn_(std::chrono::steady_clock::now()) {}
  ~UsageRecorder();
  UsageRecorder(const UsageRecorder&) = delete;
  UsageRecorder& operator=(const UsageRecorder&) = delete;
  placement::UsageStats& stats() { return stats_; }
  const std::string& path() const { return path_; }
  void save() const { save(path_); }         // throws like UsageStats::save
  void save(const std::string& path) const;  // also to another file (chat's /save-usage FILE)
  // The learned profile this run's plan came from: its tokens (0: none) and path.
  uint64_t learned_tokens() const { return learned_tokens_; }
  const std::string& learned_from() const { return learned_from_; }
  void set_learned(uint64_t tokens, std::string path) {
    learned_tokens_ = tokens;
    learned_from_ = std::move(path);
  }
  // Adds what was counted since the last call (or since the start) to the learned profile now,
  // when there is one and `every` has passed since the last time (serve, between replies, so a
  // long-running server's usage is not lost to a kill). Errors are printed, never thrown. Not
  // while a forward pass may be counting.
  void learn_if_due(std::chrono::seconds every);

 private:
  void learn_now();  // throws like learn_usage

  placement::UsageStats stats_;
  std::string path_;
  std::string learn_path_;
  placement::UsageStats learned_upto_;  // the counts already added to the learned profile
  std::chrono::steady_clock::time_point last_learn_;
  uint64_t learned_tokens_ = 0;
  std::string learned_from_;
};

// Empty usage stats for this model (its identity and per-layer routed expert counts).
placement::UsageStats empty_usage(const engine::Model& model);

// The PIN file's counts checked against the model (shape always; identity unless force).
std::vector<uint64_t> pin_counts(const engine::Model& model, const std::string& stats_path,
                                 bool force);

// USAGE_AUTO's learned usage profile of this model: CACHE_DIR/usage/NAME-FINGERPRINT.stats (NAME:
// general.name or the file's base name, reduced to [A-Za-z0-9._-]; FINGERPRINT: the identity's 16
// hex digits).
std::string learned_profile_path(const engine::Model& model, const engine::Knobs& knobs);

// Adds a run's counts to the learned profile at path (created with its directory when missing),
// under an exclusive flock on path + ".lock" so concurrent runs add up; once the sum passes
// kLearnedHalveTokens tokens every count is halved (older use fades). A profile that cannot be
// read or belongs to another model (a name collision) is replaced with a one-line notice. Throws
// strata::Error when the directory or file cannot be written.
inline constexpr uint64_t kLearnedHalveTokens = uint64_t{1} << 20;
void learn_usage(const placement::UsageStats& run, const std::string& path);

// The learned profile when USAGE_AUTO > 0, PIN is unset and the profile holds at least USAGE_AUTO
// tokens; else nullopt. A profile that cannot be read or is another model's is ignored with a
// one-line notice on stderr.
std::optional<placement::UsageStats> learned_profile(const engine::Model& model,
                                                     const engine::Knobs& knobs);

// The PIN file: the knob's value, or for PIN=learned the learned profile's path (a one-line error
// when the model has none yet). "" when PIN is unset.
std::string pin_path(const engine::Model& model, const engine::Knobs& knobs);

// PIN -> opts.pin_counts; USAGE_SAVE (or record_always) -> a recorder wired to opts.usage.
// learn (run, chat, serve) with USAGE_AUTO > 0: the recorder also adds the run's counts to the
// learned profile at exit, and learned_profile()'s counts, if any, become opts.pin_counts
// (recorder->learned_tokens() says so).
std::unique_ptr<UsageRecorder> apply_placement_knobs(const engine::Model& model,
                                                     const engine::Knobs& knobs,
                                                     engine::TierOptions& opts,
                                                     bool record_always = false,
                                                     bool learn = false);

// ROUTE_TRACE: a trace writer for this model (header from its identity and shape), or null when the
// knob is unset. Finished (renamed to the final name) when destroyed.
std::unique_ptr<placement::RouteTraceWriter> make_route_trace(const engine::Model& model,
                                                              const engine::Knobs& knobs);

// SIGINT (Ctrl-C), SIGTERM (kill, timeout, a service manager) and SIGHUP (the terminal closed) for
// the batch commands (replay, run) while the object lives: the first one raises a flag that their
// loops check between chunks / tokens, so they stop and the normal exit path saves USAGE_SAVE,
// ROUTE_TRACE and USAGE_AUTO's profile, then exit with exit_status(); a second one exits at once
// (128 + the first signal, nothing saved). The handler only sets the flag. The previous handlers
// come back with the destructor.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  bool requested() const;
  int exit_status() const;  // 128 + the signal (130 for SIGINT, 143 SIGTERM, 129 SIGHUP)
};

}  // namespace strata::tools
