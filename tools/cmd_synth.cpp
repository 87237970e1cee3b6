// placeholder: `strata synth` is being written.
#include "tools/cli.h"
namespace strata::tools {
void add_synth(CLI::App& app, CommandFn& run) {
  auto* cmd = app.add_subcommand("synth", "Write a synthetic MoE GGUF");
  cmd->callback([&run] { run = [] { return 0; }; });
}
}  // namespace strata::tools
