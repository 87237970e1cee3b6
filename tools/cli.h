// Shared pieces of the `strata` CLI: each subcommand registers itself on the app.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace strata::tools {

// A subcommand's body; runs after parsing. Returns the process exit code.
using CommandFn = std::function<int()>;

// Each cmd_<name>.cpp defines one of these; main.cpp calls them all.
void add_inspect(CLI::App& app, CommandFn& run);
void add_synth(CLI::App& app, CommandFn& run);
void add_knobs(CLI::App& app, CommandFn& run);
void add_replay(CLI::App& app, CommandFn& run);
void add_run(CLI::App& app, CommandFn& run);
void add_chat(CLI::App& app, CommandFn& run);
void add_stats(CLI::App& app, CommandFn& run);
void add_plan(CLI::App& app, CommandFn& run);
void add_probe(CLI::App& app, CommandFn& run);
void add_ab(CLI::App& app, CommandFn& run);
void add_sweep(CLI::App& app, CommandFn& run);
void add_pack(CLI::App& app, CommandFn& run);
void add_serve(CLI::App& app, CommandFn& run);
void add_bench(CLI::App& app, CommandFn& run);

}  // namespace strata::tools
