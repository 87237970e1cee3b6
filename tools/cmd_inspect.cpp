// placeholder: `strata inspect` is being written.
#include "tools/cli.h"
namespace strata::tools {
void add_inspect(CLI::App& app, CommandFn& run) {
  auto* cmd = app.add_subcommand("inspect", "Describe a GGUF model");
  cmd->callback([&run] { run = [] { return 0; }; });
}
}  // namespace strata::tools
