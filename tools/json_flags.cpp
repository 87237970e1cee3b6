// `--json` and `--json-schema` (see json_flags.h).
#include "tools/json_flags.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/check.h"

namespace strata::tools {

std::shared_ptr<const engine::JsonSchema> json_schema_of(const JsonFlags& j) {
  if (j.json && !j.schema.empty()) fail(ErrorKind::kBadValue, "--json and --json-schema: pick one");
  if (j.json) return engine::JsonSchema::any_object();
  if (j.schema.empty()) return nullptr;
  // The schema's text starts with '{' (or is true); anything else names a file.
  const size_t first = j.schema.find_first_not_of(" \t\r\n");
  if (first != std::string::npos &&
      (j.schema[first] == '{' || j.schema.compare(first, 4, "true") == 0))
    return engine::JsonSchema::parse(j.schema);
  std::ifstream in(j.schema, std::ios::binary);
  if (!in || std::filesystem::is_directory(j.schema))
    fail(ErrorKind::kBadValue, "--json-schema {}: no such file (and not a schema's JSON text)",
         j.schema);
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return engine::JsonSchema::parse(text.str());
  } catch (const Error& e) {
    fail(ErrorKind::kBadValue, "--json-schema {}: {}", j.schema, e.what());
  }
}

}  // namespace strata::tools
