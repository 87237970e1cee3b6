// The check fuzz_json_schema runs on each input, shared with test_json_schema (which replays
// tests/data/schema_seeds/, the fuzzer's seeds and its fixed findings): the input is a schema's
// text, a NUL byte, then steering bytes. If the schema compiles, a walk takes, for each steering
// byte c, the first byte from c upwards (mod 256) the matcher allows. Returns "" when the walk
// keeps the invariants, else what broke: a dead end (no byte allowed where the document may not
// end) or an accepted text that is not strict JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "engine/json_schema.h"
#include "io/check.h"

namespace strata::test {

inline std::string probe_json_schema(std::string_view in) {
  const size_t nul = in.find('\0');
  const std::string_view schema_text = in.substr(0, nul);
  const std::string_view steer = nul == std::string_view::npos ? "" : in.substr(nul + 1);
  std::shared_ptr<const engine::JsonSchema> schema;
  try {
    schema = engine::JsonSchema::parse(schema_text);
  } catch (const Error&) {
    return "";  // refused with a message: fine
  }
  engine::JsonMatcher m(schema), probe(schema);
  std::string text;
  for (const char c : steer) {
    int taken = -1;
    for (int k = 0; k < 256 && taken < 0; ++k) {
      const auto b = uint8_t(uint8_t(c) + k);
      probe = m;
      if (probe.feed(b)) taken = b;
    }
    if (taken < 0) {
      if (m.accepting()) break;  // the end of the reply is what may come
      return "dead end after '" + text + "'";
    }
    if (!m.feed(uint8_t(taken))) return "a byte the probe took was refused";
    text += char(taken);
    if (m.accepting() && nlohmann::json::parse(text, nullptr, false).is_discarded())
      return "accepted text is not JSON: '" + text + "'";
  }
  return "";
}

}  // namespace strata::test
