// The placement knobs of the commands that run a model (replay, run, chat, stats): PIN plans with
// the planner from a usage stats file; USAGE_SAVE records every routed selection and saves the
// stats file when the run ends; ROUTE_TRACE writes every routing decision to a route trace.
// SigintStop lets replay and run stop on Ctrl-C and still save both at exit. Exercised by
// tests/test_pin_heldout.cpp and tests/test_route_trace.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/expert_source.h"
#include "engine/knobs.h"
#include "engine/model.h"
#include "placement/route_trace.h"
#include "placement/usage_stats.h"

namespace strata::tools {

// Owns the online counts of a run; saves them to path when destroyed (errors are printed, never
// thrown) unless path is empty.
class UsageRecorder {
 public:
  UsageRecorder(placement::UsageStats stats, std::string path)
      : stats_(std::move(stats)), path_(std::move(path)) {}
  ~UsageRecorder();
  UsageRecorder(const UsageRecorder&) = delete;
  UsageRecorder& operator=(const UsageRecorder&) = delete;
  placement::UsageStats& stats() { return stats_; }
  const std::string& path() const { return path_; }
  void save() const { save(path_); }         // throws like UsageStats::save
  void save(const std::string& path) const;  // also to another file (chat's /save-usage FILE)

 private:
  placement::UsageStats stats_;
  std::string path_;
};

// Empty usage stats for this model (its identity and per-layer routed expert counts).
placement::UsageStats empty_usage(const engine::Model& model);

// The PIN file's counts checked against the model (shape always; identity unless force).
std::vector<uint64_t> pin_counts(const engine::Model& model, const std::string& stats_path,
                                 bool force);

// PIN -> opts.pin_counts; USAGE_SAVE (or record_always) -> a recorder wired to opts.usage.
std::unique_ptr<UsageRecorder> apply_placement_knobs(const engine::Model& model,
                                                     const engine::Knobs& knobs,
                                                     engine::TierOptions& opts,
                                                     bool record_always = false);

// ROUTE_TRACE: a trace writer for this model (header from its identity and shape), or null when the
// knob is unset. Finished (renamed to the final name) when destroyed.
std::unique_ptr<placement::RouteTraceWriter> make_route_trace(const engine::Model& model,
                                                              const engine::Knobs& knobs);

// SIGINT for the batch commands (replay, run) while the object lives: the first Ctrl-C raises a
// flag that their loops check between chunks / tokens, so they stop and the normal exit path
// saves USAGE_SAVE and ROUTE_TRACE; a second Ctrl-C exits at once (status 130, nothing saved).
// The handler only sets the flag. The previous handler comes back with the destructor.
class SigintStop {
 public:
  SigintStop();
  ~SigintStop();
  SigintStop(const SigintStop&) = delete;
  SigintStop& operator=(const SigintStop&) = delete;
  bool requested() const;
};

}  // namespace strata::tools
