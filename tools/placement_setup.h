// The placement knobs of the commands that run a model (replay, run, stats): PIN plans with the
// planner from a usage stats file; USAGE_SAVE records every routed selection and saves the stats
// file when the run ends. Exercised by tests/test_pin_heldout.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/expert_source.h"
#include "engine/knobs.h"
#include "engine/model.h"
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
  void save() const;  // throws like UsageStats::save

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

}  // namespace strata::tools
