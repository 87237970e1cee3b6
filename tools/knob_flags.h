// Adds one CLI flag per knob (engine/knobs.h) to a subcommand; the values are collected as
// overrides for engine::Knobs::load(). Used by every subcommand that runs a model.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>

#include "engine/knobs.h"

namespace strata::tools {

using KnobOverrides = std::map<std::string, std::string>;

inline void add_knob_flags(CLI::App* cmd, KnobOverrides& out) {
  for (const auto& k : engine::knob_table()) {
    std::string flag = engine::knob_flag(k.name);
    if (k.name == "THREADS") flag = "-t," + flag;
    const std::string name(k.name);
    cmd->add_option_function<std::string>(
           flag, [&out, name](const std::string& v) { out[name] = v; },
           std::string(k.doc) + " (env " + name + ")")
        ->group("Knobs (also env vars; see `strata knobs`)");
  }
}

// Loads the knobs and prints the load warnings once on stderr.
engine::Knobs load_knobs(const KnobOverrides& cli);

}  // namespace strata::tools
