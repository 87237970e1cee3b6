// `--json` and `--json-schema` (run, chat): structured output, the reply a JSON document.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "engine/json_schema.h"

namespace strata::tools {

struct JsonFlags {
  bool json = false;   // any JSON object
  std::string schema;  // a file holding a JSON Schema, or the schema's text
};

inline void add_json_flags(CLI::App* cmd, JsonFlags& j) {
  cmd->add_flag("--json", j.json, "Reply with one JSON object (structured output)");
  cmd->add_option("--json-schema", j.schema,
                  "Reply with JSON this JSON Schema accepts: a file, or the schema's text "
                  "(README: Structured output)");
}

// The schema the flags ask for; null when neither is given. A bad schema or an unreadable file
// throws strata::Error (one line).
std::shared_ptr<const engine::JsonSchema> json_schema_of(const JsonFlags& j);

}  // namespace strata::tools
