// Adds one CLI flag per knob (engine/knobs.h) to a subcommand; the values are collected as
// overrides for engine::Knobs::load(). Used by every subcommand that runs a model.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>

#include "engine/knobs.h"
#include "engine/sampler.h"

namespace strata::tools {

using KnobOverrides = std::map<std::string, std::string>;

// threads_flag false: no flag for THREADS (`bench` takes -t/--threads as a list itself).
inline void add_knob_flags(CLI::App* cmd, KnobOverrides& out, bool threads_flag = true) {
  for (const auto& k : engine::knob_table()) {
    std::string flag = engine::knob_flag(k.name);
    if (k.name == "THREADS") {
      if (!threads_flag) continue;
      flag = "-t," + flag;
    }
    const std::string name(k.name);
    cmd->add_option_function<std::string>(
           flag, [&out, name](const std::string& v) { out[name] = v; },
           std::string(k.doc) + " (env " + name + ")")
        ->group("Knobs (also env vars; see `strata knobs`)");
  }
}

// --temp, --top-k, --top-p, --min-p, --repeat-penalty into p (run, chat; serve's defaults).
inline void add_sampling_flags(CLI::App* cmd, engine::SamplerParams& p) {
  cmd->add_option("--temp", p.temperature, "Temperature; <= 0 is greedy (default 0.8)");
  cmd->add_option("--top-k", p.top_k, "Top-k; <= 0 is off (default 40)");
  cmd->add_option("--top-p", p.top_p, "Top-p; >= 1 is off (default 0.95)");
  cmd->add_option("--min-p", p.min_p, "Min-p; <= 0 is off (default 0.05)");
  cmd->add_option("--repeat-penalty", p.repeat_penalty,
                  "Repetition penalty over the last 64 tokens; 1 is off (default 1)");
}

// Loads the knobs and prints the load warnings once on stderr.
engine::Knobs load_knobs(const KnobOverrides& cli);

}  // namespace strata::tools
