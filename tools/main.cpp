// `strata`: one binary, subcommands registered from cmd_*.cpp. Errors from anywhere below are
// caught here and printed as one line; the exit code is non-zero.
#include <cstdio>
#include <exception>

#include "io/check.h"
#include "tools/cli.h"

int main(int argc, char** argv) {
  CLI::App app{"strata: Mixture-of-Experts inference over VRAM / RAM / SSD tiers"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "strata 0.1.0");
  strata::tools::CommandFn run;
  strata::tools::add_inspect(app, run);
  strata::tools::add_synth(app, run);
  strata::tools::add_knobs(app, run);
  strata::tools::add_replay(app, run);
  strata::tools::add_run(app, run);
  strata::tools::add_chat(app, run);
  strata::tools::add_serve(app, run);
  strata::tools::add_bench(app, run);
  strata::tools::add_stats(app, run);
  strata::tools::add_plan(app, run);
  strata::tools::add_probe(app, run);
  strata::tools::add_ab(app, run);
  strata::tools::add_sweep(app, run);
  strata::tools::add_pack(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run ? run() : 0;
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "strata: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return 1;
  }
}
