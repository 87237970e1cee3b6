// `strata plan -m MODEL [--pin STATS] [--ram-gb X] [--vram-gb Y] [--profile FILE]`: the placement
// a run would use, as a table per tier (experts, bytes, predicted hit share, predicted ms/token
// from the machine profile), without reading any expert weights. Tested by tests/test_planner.cpp
// (the planner) and by hand (docs/FORMATS.md "Usage stats").
#include <cstdio>
#include <filesystem>
#include <string>

#include "engine/expert_source.h"
#include "engine/model.h"
#include "engine/sysmem.h"
#include "io/check.h"
#include "placement/machine_profile.h"
#include "placement/planner.h"
#include "tools/cli.h"
#include "tools/knob_flags.h"
#include "tools/placement_setup.h"

namespace strata::tools {
namespace {

struct PlanOptions {
  std::string model;
  std::string profile;
  KnobOverrides knobs;
};

int run_plan(const PlanOptions& o) {
  const engine::Knobs knobs = load_knobs(o.knobs);
  const engine::Model model = engine::Model::load(o.model);
  const placement::ExpertSizes sizes = engine::expert_sizes(model);
  if (sizes.total_experts() == 0) {
    std::printf("plan: %s has no routed experts (dense model)\n", o.model.c_str());
    return 0;
  }
  placement::Budgets budgets;
  const engine::TierOptions topts = engine::tier_options(knobs);
  if (topts.ram_bytes) {
    budgets.ram_bytes = *topts.ram_bytes;
  } else {
    engine::RamBudgetInputs in;
    in.available = engine::memory_info().available();
    budgets.ram_bytes = engine::auto_ram_budget(in, sizes);
    std::printf("RAM_GB auto: %s of %s available\n",
                placement::format_bytes(budgets.ram_bytes).c_str(),
                placement::format_bytes(in.available).c_str());
  }
  std::vector<uint64_t> counts;
  uint64_t tokens = 0;
  std::string usage_from = pin_path(model, knobs);
  if (!usage_from.empty()) {
    counts = pin_counts(model, usage_from, knobs.get_bool("PIN_FORCE"));
    tokens = placement::UsageStats::load(usage_from).tokens();
  } else if (const auto learned = learned_profile(model, knobs)) {  // USAGE_AUTO, as run would
    counts = learned->counts();
    tokens = learned->tokens();
    usage_from = "the learned profile " + learned_profile_path(model, knobs);
  }
  const std::string profile_path =
      o.profile.empty()
          ? (std::filesystem::path(engine::cache_dir(knobs)) / "machine.json").string()
          : o.profile;
  const placement::MachineProfile machine = placement::machine_profile_or_defaults(profile_path);

  placement::DefaultPolicy policy;
  engine::add_vram_budgets(model, topts, sizes, budgets, policy);  // VRAM_GB, per GPU
  const placement::PlacementPlan plan = placement::plan_placement(sizes, budgets, policy, counts);
  const std::vector<double> p = placement::selection_probabilities(sizes, counts, tokens);
  std::printf("%s\n%s\n", plan.describe().c_str(), machine.describe().c_str());
  std::printf("usage: %s\n", counts.empty()
                                 ? "none (uniform top-k assumed; pass --pin STATS)"
                                 : fmt::format("{} tokens from {}", tokens, usage_from).c_str());
  std::printf("%s\n", placement::predict(plan, p, machine).table().c_str());
  return 0;
}

}  // namespace

void add_plan(CLI::App& app, CommandFn& run) {
  auto* cmd = app.add_subcommand(
      "plan", "Print the expert placement (per tier: experts, GB, hit share, ms/token)");
  auto o = std::make_shared<PlanOptions>();
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("--profile", o->profile,
                  "Machine profile JSON (default <cache dir>/machine.json, from `strata probe`)");
  add_knob_flags(cmd, o->knobs);
  cmd->callback([&run, o] { run = [o] { return run_plan(*o); }; });
}

}  // namespace strata::tools
