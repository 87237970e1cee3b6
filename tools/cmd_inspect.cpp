// `strata inspect MODEL.gguf [--json]`: architecture, hyperparameters, tokenizer, tensor types and
// the routed-expert layout of a GGUF file (engine/model_info.h does the work; header only).
// Tested by tests/test_inspect.cpp (runs the binary on bad files).
#include <cstdio>
#include <memory>

#include "engine/model_info.h"
#include "tools/cli.h"

namespace strata::tools {

void add_inspect(CLI::App& app, CommandFn& run) {
  struct Options {
    std::string path;
    bool json = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("inspect",
                                 "Describe a GGUF model: hyperparameters, tokenizer, "
                                 "tensor types, experts per layer and their bytes");
  cmd->add_option("model", opt->path, "GGUF file")->required();
  cmd->add_flag("--json", opt->json, "Print the same as JSON");
  cmd->callback([&run, opt] {
    run = [opt] {
      const engine::ModelInfo info = engine::inspect_model(opt->path);
      if (opt->json)
        std::printf("%s\n", engine::model_info_json(info)
                                .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                                .c_str());
      else
        std::fputs(engine::format_model_info(info).c_str(), stdout);
      return 0;
    };
  });
}

}  // namespace strata::tools
