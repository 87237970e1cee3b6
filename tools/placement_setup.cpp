// PIN / USAGE_SAVE glue (see placement_setup.h).
#include "tools/placement_setup.h"

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

void UsageRecorder::save() const {
  stats_.save(path_);
  std::fprintf(stderr, "strata: usage stats of %llu tokens saved to %s\n",
               static_cast<unsigned long long>(stats_.tokens()), path_.c_str());
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

}  // namespace strata::tools
