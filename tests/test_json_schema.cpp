// JsonSchema / JsonMatcher (engine/json_schema.h): the schema subset and the errors that name what
// is refused; the byte grammar (objects, arrays, strings, numbers, integer bounds, literals,
// whitespace, depth); and three properties checked against a reference validator written here —
// random walks over the allowed bytes never dead-end and accept only valid documents, generated
// valid documents are accepted, mutated documents are accepted only when still valid.
#include <gtest/gtest.h>

#include <fmt/ranges.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine/json_schema.h"
#include "io/check.h"
#include "json_schema_probe.h"

using namespace strata;
using namespace strata::engine;
using json = nlohmann::json;

namespace {

using Schema = std::shared_ptr<const JsonSchema>;

Schema S(std::string_view text) {
  return JsonSchema::parse(text);
}

bool matches(const Schema& schema, std::string_view text) {
  JsonMatcher m(schema);
  return m.feed(text) && m.accepting();
}

// How many bytes of `text` a fresh matcher takes, one at a time, before it refuses one.
size_t taken(const Schema& schema, std::string_view text) {
  JsonMatcher m(schema);
  for (size_t i = 0; i < text.size(); ++i)
    if (!m.feed(static_cast<uint8_t>(text[i]))) return i;
  return text.size();
}

// Bytes as printable ASCII, the rest as \xHH (messages; the text may be invalid UTF-8).
std::string show(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

// The message of the strata::Error that parse throws (kind kBadValue), or "" when it throws none.
std::string parse_error(std::string_view text) {
  try {
    (void)JsonSchema::parse(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadValue) << text;
    return e.what();
  }
  return "";
}

// ---- The reference: nlohmann's parser and a validator for the supported subset ----

// nlohmann's parse, also refusing a key given twice in one object (nlohmann keeps one of them).
std::optional<json> parse_strict(const std::string& text, std::string* why) {
  std::vector<std::set<std::string>> keys;
  bool duplicate = false;
  json::parser_callback_t cb = [&](int, json::parse_event_t e, json& parsed) {
    if (e == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (e == json::parse_event_t::object_end) {
      keys.pop_back();
    } else if (e == json::parse_event_t::key && !keys.empty()) {
      if (!keys.back().insert(parsed.get<std::string>()).second) duplicate = true;
    }
    return true;
  };
  try {
    json j = json::parse(text, cb);
    if (duplicate) {
      *why = "a duplicate key";
      return std::nullopt;
    }
    return j;
  } catch (const json::exception& e) {
    *why = e.what();
    return std::nullopt;
  }
}

// The text's lexical limits: at most 32 whitespace bytes in a row, 40 characters a number and 2
// digits an exponent (outside strings).
std::string lexical_check(std::string_view text) {
  bool in_string = false, escape = false, in_exp = false;
  size_t ws = 0, num = 0, exp = 0;
  for (char c : text) {
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (++ws > JsonMatcher::kMaxWhitespace) return "over 32 whitespace bytes in a row";
    } else {
      ws = 0;
    }
    if ((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
      if (++num > JsonMatcher::kMaxNumberChars) return "a number over 40 characters";
      if (c == 'e' || c == 'E') {
        exp = 0;
        in_exp = true;
      } else if (in_exp && c >= '0' && c <= '9' && ++exp > 2) {
        return "an exponent over 2 digits";
      }
    } else {
      num = 0;
      in_exp = false;
    }
    if (c == '"') in_string = true;
  }
  return "";
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// -1, 0, 1 as the number v is below, at or above the integer b.
int compare(const json& v, int64_t b) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (b < 0 || u > static_cast<uint64_t>(b)) return 1;
    return u == static_cast<uint64_t>(b) ? 0 : -1;
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    return (i > b) - (i < b);
  }
  double d = v.get<double>();
  return (d > static_cast<double>(b)) - (d < static_cast<double>(b));
}

bool has_type(const std::string& t, const json& v) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "integer") {
    if (v.is_number_integer()) return true;
    if (!v.is_number_float()) return false;
    double d = v.get<double>();
    return std::isfinite(d) && std::floor(d) == d;
  }
  ADD_FAILURE() << "unknown type " << t;
  return false;
}

// JSON Schema for the subset json_schema.h supports, with its one deviation: an object schema that
// lists properties and says nothing of additionalProperties allows no other keys.
struct Reference {
  json root;

  const json& resolve(const std::string& ref) const {
    if (ref == "#") return root;
    return root.at(json::json_pointer(ref.substr(1)));
  }

  bool valid(const json& s, const json& v, int depth = 0) const {
    if (depth > 500) return false;
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref") && !valid(resolve(s["$ref"].get<std::string>()), v, depth + 1))
      return false;
    if (s.contains("allOf"))
      for (const json& sub : s["allOf"])
        if (!valid(sub, v, depth + 1)) return false;
    for (const char* any_of : {"anyOf", "oneOf"}) {
      if (!s.contains(any_of)) continue;
      bool any = false;
      for (const json& sub : s[any_of]) any = any || valid(sub, v, depth + 1);
      if (!any) return false;
    }
    if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end())
      return false;
    if (s.contains("const") && s["const"] != v) return false;
    if (s.contains("type")) {
      const json& t = s["type"];
      bool any = false;
      if (t.is_string()) {
        any = has_type(t.get<std::string>(), v);
      } else {
        for (const json& name : t) any = any || has_type(name.get<std::string>(), v);
      }
      if (!any) return false;
    }
    if (v.is_object()) {
      const json props = s.value("properties", json::object());
      for (const json& k : s.value("required", json::array()))
        if (!v.contains(k.get<std::string>())) return false;
      for (const auto& [k, x] : v.items()) {
        if (props.contains(k)) {
          if (!valid(props[k], x, depth + 1)) return false;
        } else if (s.contains("additionalProperties")) {
          if (!valid(s["additionalProperties"], x, depth + 1)) return false;
        } else if (s.contains("properties")) {
          return false;
        }
      }
    }
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
      if (s.contains("items"))
        for (const json& x : v)
          if (!valid(s["items"], x, depth + 1)) return false;
    }
    if (v.is_string()) {
      size_t n = code_points(v.get<std::string>());
      if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
      if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
    }
    if (v.is_number()) {
      if (s.contains("minimum") && compare(v, s["minimum"].get<int64_t>()) < 0) return false;
      if (s.contains("maximum") && compare(v, s["maximum"].get<int64_t>()) > 0) return false;
      if (s.contains("exclusiveMinimum") && compare(v, s["exclusiveMinimum"].get<int64_t>()) <= 0)
        return false;
      if (s.contains("exclusiveMaximum") && compare(v, s["exclusiveMaximum"].get<int64_t>()) >= 0)
        return false;
    }
    return true;
  }
};

// "" when `text` is a JSON document that the reference accepts and within the lexical limits.
std::string check_document(const Reference& ref, const std::string& text) {
  std::string why;
  std::optional<json> j = parse_strict(text, &why);
  if (!j) return "nlohmann refuses it: " + show(why);
  if (!ref.valid(ref.root, *j)) return "the reference validator refuses it";
  return lexical_check(text);
}

// ---- A generator of valid documents ----

// One code point of a string: its JSON text and its UTF-8 value.
struct Unit {
  std::string_view text, value;
};
constexpr Unit kUnits[] = {
    {"a", "a"},
    {"Z", "Z"},
    {"7", "7"},
    {" ", " "},
    {"~", "~"},
    {"{", "{"},
    {"]", "]"},
    {":", ":"},
    {",", ","},
    {"'", "'"},
    {"\\\"", "\""},
    {"\\\\", "\\"},
    {"\\/", "/"},
    {"\\b", "\b"},
    {"\\f", "\f"},
    {"\\n", "\n"},
    {"\\r", "\r"},
    {"\\t", "\t"},
    {"\\u00e9", "\xc3\xa9"},
    {"\\u20AC", "\xe2\x82\xac"},
    {"\\u0041", "A"},
    {"\\u001f", "\x1f"},
    {"\\uFFFF", "\xef\xbf\xbf"},
    {"\x7f", "\x7f"},
    {"\xc2\x80", "\xc2\x80"},
    {"\xc3\xa9", "\xc3\xa9"},
    {"\xdf\xbf", "\xdf\xbf"},
    {"\xe0\xa0\x80", "\xe0\xa0\x80"},
    {"\xe4\xb8\xad", "\xe4\xb8\xad"},
    {"\xed\x9f\xbf", "\xed\x9f\xbf"},
    {"\xee\x80\x80", "\xee\x80\x80"},
    {"\xef\xbf\xbf", "\xef\xbf\xbf"},
    {"\xf0\x90\x80\x80", "\xf0\x90\x80\x80"},
    {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},
    {"\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf"},
};

class Generator {
 public:
  Generator(const json& root, uint32_t seed) : ref_{root}, rng_(seed) {}

  std::string document() {
    std::string out;
    ws(out);
    value(ref_.root, 0, out);
    return out;
  }

  std::mt19937& rng() { return rng_; }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool coin(double p) { return std::bernoulli_distribution(p)(rng_); }

  // One gap between tokens: usually nothing, sometimes a few bytes, now and then the most allowed.
  void ws(std::string& out) {
    if (coin(0.6)) return;
    size_t n = coin(0.05) ? JsonMatcher::kMaxWhitespace : 1 + pick(4);
    for (size_t i = 0; i < n; ++i) out += " \t\n\r"[pick(4)];
  }

  // A string of `n` code points; `value` gets its UTF-8.
  std::string string_text(size_t n, std::string* value) {
    std::string text = "\"";
    for (size_t i = 0; i < n; ++i) {
      if (coin(0.5)) {
        char c = static_cast<char>('a' + pick(26));
        text += c;
        *value += c;
      } else {
        const Unit& u = kUnits[pick(std::size(kUnits))];
        text += u.text;
        *value += u.value;
      }
    }
    return text + "\"";
  }

  // A key whose value is none of `taken` (which it joins).
  std::string fresh_key(std::set<std::string>& taken) {
    for (;;) {
      std::string value;
      std::string text = string_text(1 + pick(5), &value);
      if (taken.insert(value).second) return text;
    }
  }

  std::string number_text() {
    std::string t;
    if (coin(0.3)) t += '-';
    if (coin(0.2)) {
      t += '0';
    } else {
      t += static_cast<char>('1' + pick(9));
      for (size_t n = pick(8); n > 0; --n) t += static_cast<char>('0' + pick(10));
    }
    if (coin(0.4)) {
      t += '.';
      for (size_t n = 1 + pick(6); n > 0; --n) t += static_cast<char>('0' + pick(10));
    }
    if (coin(0.3)) {
      t += coin(0.5) ? 'e' : 'E';
      if (coin(0.5)) t += coin(0.5) ? '+' : '-';
      for (size_t n = 1 + pick(2); n > 0; --n) t += static_cast<char>('0' + pick(10));
    }
    return t;
  }

  std::string integer_text(const json& s) {
    bool has_lo = false, has_hi = false;
    int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
    if (s.contains("minimum")) has_lo = true, lo = std::max(lo, s["minimum"].get<int64_t>());
    if (s.contains("exclusiveMinimum"))
      has_lo = true, lo = std::max(lo, s["exclusiveMinimum"].get<int64_t>() + 1);
    if (s.contains("maximum")) has_hi = true, hi = std::min(hi, s["maximum"].get<int64_t>());
    if (s.contains("exclusiveMaximum"))
      has_hi = true, hi = std::min(hi, s["exclusiveMaximum"].get<int64_t>() - 1);
    if (lo <= 0 && hi >= 0 && coin(0.03)) return "-0";
    if (!has_lo && !has_hi) {
      switch (pick(4)) {
        case 0:
          return std::to_string(static_cast<int64_t>(pick(201)) - 100);
        case 1:
          return std::to_string(std::uniform_int_distribution<int64_t>(lo, hi)(rng_));
        case 2: {  // beyond int64, within the 40 characters of a number
          std::string t = coin(0.5) ? "-" : "";
          t += static_cast<char>('1' + pick(9));
          while (t.size() < 20 + pick(21)) t += static_cast<char>('0' + pick(10));
          return t;
        }
        default:
          return std::to_string(static_cast<int64_t>(pick(10)));
      }
    }
    if (has_lo != has_hi && coin(0.1)) {  // far out on the open side, past int64 at times
      std::string t = has_hi ? "-" : "";
      t += static_cast<char>('1' + pick(9));
      while (t.size() < 18 + pick(22)) t += static_cast<char>('0' + pick(10));
      return t;
    }
    int64_t a = has_lo ? lo : hi - 100000, b = has_hi ? hi : lo + 100000;
    switch (pick(4)) {
      case 0:
        return std::to_string(a);
      case 1:
        return std::to_string(b);
      default:
        return std::to_string(std::uniform_int_distribution<int64_t>(a, b)(rng_));
    }
  }

  void any(int depth, std::string& out, bool object_only) {
    size_t kind = object_only ? 0 : pick(depth >= 4 ? 6 : 8);
    switch (kind) {
      case 0:
        object(json::object(), depth, out);
        return;
      case 1: {
        std::string v;
        out += string_text(pick(6), &v);
        return;
      }
      case 2:
        out += number_text();
        return;
      case 3:
        out += "true";
        return;
      case 4:
        out += coin(0.5) ? "false" : "null";
        return;
      case 5:
        out += integer_text(json::object());
        return;
      default:
        if (kind == 6) {
          object(json::object(), depth, out);
        } else {
          array(json::object(), depth, out);
        }
        return;
    }
  }

  void object(const json& s, int depth, std::string& out) {
    const json props = s.value("properties", json::object());
    std::set<std::string> required;
    for (const json& k : s.value("required", json::array())) required.insert(k.get<std::string>());
    json additional = s.contains("additionalProperties") ? s["additionalProperties"]
                                                         : json(!s.contains("properties"));
    struct Entry {
      std::string key;
      const json* schema;
    };
    std::vector<Entry> entries;
    std::set<std::string> taken;
    for (const auto& [k, v] : props.items()) {
      taken.insert(k);
      if (required.count(k) || (depth < 6 && coin(0.6))) entries.push_back({json(k).dump(), &v});
    }
    for (const std::string& k : required) {
      if (props.contains(k)) continue;
      taken.insert(k);
      entries.push_back({json(k).dump(), &additional});
    }
    if (additional != json(false) && depth < 5)
      for (size_t n = pick(3); n > 0; --n) entries.push_back({fresh_key(taken), &additional});
    std::shuffle(entries.begin(), entries.end(), rng_);
    out += '{';
    ws(out);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) {
        out += ',';
        ws(out);
      }
      out += entries[i].key;
      ws(out);
      out += ':';
      ws(out);
      value(*entries[i].schema, depth + 1, out);
      ws(out);
    }
    out += '}';
  }

  void array(const json& s, int depth, std::string& out) {
    size_t lo = s.value("minItems", size_t{0});
    size_t hi = s.value("maxItems", lo + 4);
    size_t n = depth >= 5 ? lo : lo + pick(std::min<size_t>(hi - lo, 4) + 1);
    const json items = s.value("items", json(true));
    out += '[';
    ws(out);
    for (size_t i = 0; i < n; ++i) {
      if (i > 0) {
        out += ',';
        ws(out);
      }
      value(items, depth + 1, out);
      ws(out);
    }
    out += ']';
  }

  void value(const json& s, int depth, std::string& out) {
    if (s.is_boolean()) return any(depth, out, false);
    if (s.contains("$ref")) return value(ref_.resolve(s["$ref"].get<std::string>()), depth, out);
    if (s.contains("allOf")) return value(s["allOf"][0], depth, out);
    if (s.contains("enum")) {
      out += s["enum"][pick(s["enum"].size())].dump();
      return;
    }
    if (s.contains("const")) {
      out += s["const"].dump();
      return;
    }
    for (const char* any_of : {"anyOf", "oneOf"})
      if (s.contains(any_of)) return value(s[any_of][pick(s[any_of].size())], depth, out);
    std::string type;
    if (!s.contains("type")) return any(depth, out, false);
    if (s["type"].is_string()) {
      type = s["type"].get<std::string>();
    } else {
      type = s["type"][pick(s["type"].size())].get<std::string>();
    }
    if (type == "object") return object(s, depth, out);
    if (type == "array") return array(s, depth, out);
    if (type == "string") {
      size_t lo = s.value("minLength", size_t{0});
      size_t hi = s.value("maxLength", lo + 8);
      std::string v;
      out += string_text(lo + pick(std::min<size_t>(hi - lo, 8) + 1), &v);
      return;
    }
    if (type == "integer") {
      out += integer_text(s);
    } else if (type == "number") {
      out += number_text();
    } else if (type == "boolean") {
      out += coin(0.5) ? "true" : "false";
    } else if (type == "null") {
      out += "null";
    } else {
      ADD_FAILURE() << "unknown type " << type;
    }
  }

  Reference ref_;
  std::mt19937 rng_;
};

// ---- The schemas the properties run over ----

// A realistic response schema: bounded integers, an enum with mixed values, optional fields, a type
// list, anyOf objects sharing a key, a recursive $ref tree, free-form maps.
constexpr const char* kRealistic = R"({
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "record",
  "$defs": {
    "node": {
      "type": "object",
      "properties": {
        "name": {"type": "string", "maxLength": 8},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}
      },
      "required": ["name"]
    }
  },
  "type": "object",
  "properties": {
    "id": {"type": "integer", "minimum": 1, "maximum": 1000},
    "name": {"type": "string", "minLength": 1, "maxLength": 20, "description": "who"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 1,
             "maxItems": 4},
    "status": {"enum": ["active", "inactive", null, 3]},
    "score": {"type": "number"},
    "temp": {"type": "integer", "exclusiveMinimum": -40, "exclusiveMaximum": 60},
    "flag": {"type": "boolean"},
    "nick": {"type": ["string", "null"]},
    "contact": {"anyOf": [
      {"type": "object", "properties": {"email": {"type": "string", "format": "email"}},
       "required": ["email"]},
      {"type": "object", "properties": {"email": {"type": "string"}, "phone": {"type": "string"}},
       "required": ["phone"]}]},
    "tree": {"$ref": "#/$defs/node"},
    "meta": {"type": "object", "additionalProperties": {"type": "integer"}},
    "extra": {"type": "object", "properties": {"x": {"const": "y"}}, "additionalProperties": true}
  },
  "required": ["id", "name", "status"],
  "additionalProperties": false
})";

constexpr const char* kTree = R"({
  "definitions": {"node": {"type": "object",
    "properties": {"v": {"type": "integer"},
                   "kids": {"type": "array", "items": {"$ref": "#/definitions/node"}}},
    "required": ["v", "kids"]}},
  "allOf": [{"$ref": "#/definitions/node"}]
})";

constexpr const char* kLiterals = R"({"type": "array", "maxItems": 5, "items": {"oneOf": [
  {"enum": [1, 12, "a", null, true, {"k": 1}, [1, 2], "\u00e9\n", {"b": 1, "a": [false]}]},
  {"const": 120}]}})";

constexpr const char* kIntegers = R"({"type": "array", "maxItems": 6, "items": {"anyOf": [
  {"type": "integer", "minimum": -20, "maximum": -10},
  {"type": "integer", "exclusiveMinimum": 100, "exclusiveMaximum": 1000},
  {"type": "integer", "minimum": 5000},
  {"type": "integer", "maximum": -3000},
  {"type": "integer", "minimum": 0, "maximum": 0}]}})";

constexpr const char* kScalars = R"({"type": "object", "properties": {
  "n": {"type": "number"}, "i": {"type": "integer"}, "b": {"type": "boolean"},
  "z": {"type": "null"}, "s": {"type": ["string", "null", "integer"]},
  "strs": {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 5},
           "minItems": 1, "maxItems": 4}},
  "required": ["n", "i"]})";

constexpr const char* kKeys = R"({"type": "object", "properties": {
  "a\"b": {"type": "integer"}, "\u00e9": {"type": "string"}, "a": {"type": "null"},
  "ab": {"type": "boolean"}, "tab\t": {"const": 1}, "abc": {"type": "array"}},
  "required": ["\u00e9"]})";

constexpr const char* kAdditional = R"({"type": "object",
  "properties": {"a": {"type": "integer"}, "ab": {"type": "string"}},
  "additionalProperties": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}})";

struct Case {
  std::string name;
  Schema schema;
  json reference;
};

std::vector<Case> property_cases() {
  std::vector<Case> cases;
  const std::pair<const char*, const char*> texts[] = {
      {"realistic", kRealistic},   {"tree", kTree},       {"literals", kLiterals},
      {"integers", kIntegers},     {"scalars", kScalars}, {"keys", kKeys},
      {"additional", kAdditional},
  };
  for (const auto& [name, text] : texts) cases.push_back({name, S(text), json::parse(text)});
  cases.push_back({"any_object", JsonSchema::any_object(), json{{"type", "object"}}});
  cases.push_back({"any_value", JsonSchema::any_value(), json(true)});
  return cases;
}

}  // namespace

// ---- Compiling schemas ----

TEST(JsonSchema, RefusesUnsupportedKeywordsByName) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"string","pattern":"a+"})", "pattern"},
      {R"({"type":"number","multipleOf":2})", "multipleOf"},
      {R"({"type":"array","uniqueItems":true})", "uniqueItems"},
      {R"({"not":{"type":"string"}})", "not"},
      {R"({"if":{"type":"string"},"then":{"maxLength":2}})", "if"},
      {R"({"type":"array","prefixItems":[{"type":"string"}]})", "prefixItems"},
      {R"({"type":"number","minimum":0})", "minimum"},
      {R"({"type":"number","exclusiveMaximum":3})", "exclusiveMaximum"},
      {R"({"allOf":[{"type":"string"},{"maxLength":3}]})", "allOf"},
      {R"({"type":"object","properties":{"a":{"type":"string","pattern":"x"}}})", "pattern"},
      {R"({"type":"array","items":{"type":"integer","multipleOf":3}})", "multipleOf"},
  };
  for (const auto& [schema, keyword] : cases) {
    std::string e = parse_error(schema);
    EXPECT_NE(e, "") << schema;
    EXPECT_NE(e.find(keyword), std::string::npos) << schema << " -> " << e;
  }
  // Integer bounds are supported.
  EXPECT_EQ(parse_error(R"({"type":"integer","minimum":0,"exclusiveMaximum":9})"), "");
}

TEST(JsonSchema, RefusesBadSchemas) {
  std::string props;
  for (int i = 0; i < 65; ++i) props += fmt::format("{}\"p{}\":{{}}", i ? "," : "", i);
  const char* cases[] = {
      R"({"type":)",
      "not json",
      "false",
      R"({"enum":[]})",
      R"({"$ref":"#/$defs/missing"})",
      R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})",
      R"({"$ref":"#"})",
      R"({"type":"object","properties":{"a":{}},"required":["b"]})",
      R"({"type":"object","properties":{"a":{}},"required":["b"],"additionalProperties":false})",
      R"({"type":"array","minItems":3,"maxItems":2})",
  };
  for (const char* schema : cases) EXPECT_NE(parse_error(schema), "") << schema;
  EXPECT_NE(parse_error(fmt::format(R"({{"type":"object","properties":{{{}}}}})", props)), "");

  // The limits themselves compile.
  std::string props64 = props.substr(0, props.rfind(",\"p64\""));
  EXPECT_EQ(parse_error(fmt::format(R"({{"type":"object","properties":{{{}}}}})", props64)), "");
  EXPECT_EQ(parse_error(R"({"type":"array","minItems":2,"maxItems":2})"), "");
}

TEST(JsonSchema, IgnoresAnnotations) {
  Schema s = S(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"urn:x",
    "title":"t","description":"d","$comment":"c","type":"string","format":"date-time",
    "examples":["2020"],"default":"x"})");
  EXPECT_TRUE(matches(s, R"("not a date")"));
  EXPECT_FALSE(matches(s, "1"));
}

TEST(JsonSchema, RequiredKeyOutsidePropertiesWithAdditionalProperties) {
  Schema s = S(R"({"type": "object", "properties": {"a": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}})");
  EXPECT_TRUE(matches(s, R"({"a":1,"b":[2]})"));
  EXPECT_TRUE(matches(s, R"({"b":[],"a":1,"c":[1,2,3]})"));
  EXPECT_FALSE(matches(s, R"({"a":1})"));
  EXPECT_EQ(taken(s, R"({"a":1})"), 6u);  // '}' with "b" missing
  EXPECT_FALSE(matches(s, R"({"a":1,"b":["x"]})"));
  EXPECT_FALSE(matches(s, R"({"a":1,"b":[1,2,3,4]})"));
}

// ---- Objects ----

TEST(JsonMatcher, AnyObjectAndAnyValue) {
  Schema o = JsonSchema::any_object();
  EXPECT_TRUE(matches(o, "{}"));
  EXPECT_TRUE(matches(o, R"({"a":[1,{"b":null}],"c":"d","":-0.5e3})"));
  EXPECT_FALSE(matches(o, "[]"));
  EXPECT_FALSE(matches(o, "1"));
  EXPECT_EQ(taken(o, "[]"), 0u);
  EXPECT_EQ(taken(o, "\"x\""), 0u);
  EXPECT_FALSE(matches(o, R"({"a":1,"a":2})"));  // a key at most once, whatever the schema

  Schema v = JsonSchema::any_value();
  for (const char* doc : {"{}", "[]", "1", "-0.5e3", "\"s\"", "true", "false", "null",
                          R"([{"a":[[],{}]},"\u00e9",0])"})
    EXPECT_TRUE(matches(v, doc)) << doc;
  for (const char* doc : {"", "tru", "nul", "[", "{\"a\"", "{\"a\":}", "[1,]", "{,}", "'s'"})
    EXPECT_FALSE(matches(v, doc)) << doc;
}

TEST(JsonMatcher, ObjectKeysListedOnceInAnyOrder) {
  Schema s = S(R"({"type":"object","properties":{
    "a":{"type":"integer"},"ab":{"type":"string"},"b":{"type":"boolean"}},"required":["b"]})");
  EXPECT_TRUE(matches(s, R"({"b":true})"));
  EXPECT_TRUE(matches(s, R"({"ab":"x","b":false,"a":3})"));
  EXPECT_TRUE(matches(s, R"({"a":3,"b":false,"ab":"x"})"));
  // Required before '}'.
  EXPECT_FALSE(matches(s, R"({"a":1})"));
  EXPECT_EQ(taken(s, R"({"a":1})"), 6u);
  EXPECT_EQ(taken(s, "{}"), 1u);
  // No other keys: refused at the first byte that no unused listed key starts with.
  EXPECT_EQ(taken(s, R"({"c":1})"), 2u);
  EXPECT_EQ(taken(s, R"({"abc":1})"), 4u);
  EXPECT_EQ(taken(s, R"({"b":true,"b)"), 11u);
  EXPECT_EQ(taken(s, R"({"a":1,"ac":2})"), 9u);
  // "a" used, "ab" still open: a duplicate "a" is refused at its closing quote.
  EXPECT_EQ(taken(s, R"({"a":1,"a":2,"b":true})"), 9u);
  EXPECT_EQ(taken(s, R"({"a":1,"ab":"","a":2})"), 16u);
  // The values follow their schemas.
  EXPECT_FALSE(matches(s, R"({"b":1})"));
  EXPECT_FALSE(matches(s, R"({"b":true,"a":"1"})"));
  // ',' only where another key may follow.
  EXPECT_EQ(taken(s, R"({"a":1,"ab":"","b":true,)"), 23u);
  Schema one = S(R"({"type":"object","properties":{"k":{"type":"null"}}})");
  EXPECT_TRUE(matches(one, "{}"));
  EXPECT_TRUE(matches(one, R"({"k":null})"));
  EXPECT_EQ(taken(one, R"({"k":null,)"), 9u);
  // Whitespace and structure around keys.
  EXPECT_TRUE(matches(s, "{ \"b\" : true , \"a\"\t:\n-4\r}"));
  EXPECT_EQ(taken(s, R"({"b" true})"), 5u);
  EXPECT_EQ(taken(s, R"({"b":true "a":1})"), 10u);
  EXPECT_EQ(taken(s, R"({'b':true})"), 1u);
}

TEST(JsonMatcher, AdditionalProperties) {
  Schema closed = S(R"({"type":"object","properties":{"a":{}},"additionalProperties":false})");
  EXPECT_TRUE(matches(closed, R"({"a":[1,"x",{"q":null}]})"));
  EXPECT_EQ(taken(closed, R"({"b":1})"), 2u);

  Schema open = S(R"({"type":"object","properties":{"a":{"type":"integer"}},
    "additionalProperties":true})");
  EXPECT_TRUE(matches(open, R"({"zz":[1,{"q":null}],"a":2,"":"e"})"));
  EXPECT_FALSE(matches(open, R"({"a":"x"})"));
  EXPECT_FALSE(matches(open, R"({"zz":1,"zz":2})"));
  EXPECT_TRUE(matches(open, R"({"a":1,"ab":"s"})"));  // an extension of a listed key is another key
  // ',' after every listed key: another key may still come.
  EXPECT_TRUE(matches(open, R"({"a":1,"b":2})"));

  Schema typed = S(R"({"type":"object","properties":{"a":{"type":"string"}},
    "additionalProperties":{"type":"integer","minimum":0}})");
  EXPECT_TRUE(matches(typed, R"({"x":1,"a":"s","y":0})"));
  EXPECT_FALSE(matches(typed, R"({"x":"s"})"));
  EXPECT_FALSE(matches(typed, R"({"x":-1})"));
  EXPECT_FALSE(matches(typed, R"({"a":1})"));

  Schema free = S(R"({"type":"object"})");
  EXPECT_TRUE(matches(free, R"({"x":1,"y":[{}],"z":{"w":"v"}})"));
  EXPECT_FALSE(matches(free, "[]"));

  Schema map = S(R"({"type":"object","additionalProperties":{"type":"boolean"}})");
  EXPECT_TRUE(matches(map, R"({"x":true,"y":false})"));
  EXPECT_FALSE(matches(map, R"({"x":1})"));
}

TEST(JsonMatcher, EscapedAndMultiByteKeys) {
  Schema s = S(kKeys);
  EXPECT_TRUE(matches(s, "{\"\xc3\xa9\":\"v\"}"));
  EXPECT_TRUE(matches(s, R"({"a\"b":1,"é":"","tab\t":1})"));
  EXPECT_FALSE(matches(s, R"({"a":null})"));  // "é" required
}

// ---- Arrays ----

TEST(JsonMatcher, ArrayItemsAndCounts) {
  Schema s = S(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})");
  EXPECT_TRUE(matches(s, "[1,2]"));
  EXPECT_TRUE(matches(s, "[ 1 , 2 , 3 ]"));
  EXPECT_FALSE(matches(s, "[1]"));
  EXPECT_EQ(taken(s, "[1]"), 2u);
  EXPECT_EQ(taken(s, "[]"), 1u);
  EXPECT_EQ(taken(s, "[1,2,3,4]"), 6u);
  EXPECT_EQ(taken(s, "[1,\"x\"]"), 3u);
  EXPECT_EQ(taken(s, "[1,,2]"), 3u);
  EXPECT_EQ(taken(s, "[1,2,]"), 5u);

  Schema any = S(R"({"type":"array"})");
  EXPECT_TRUE(matches(any, R"([1,"a",[],{},null])"));
  EXPECT_TRUE(matches(any, "[]"));
  EXPECT_FALSE(matches(any, "{}"));

  Schema empty = S(R"({"type":"array","maxItems":0})");
  EXPECT_TRUE(matches(empty, "[ ]"));
  EXPECT_EQ(taken(empty, "[1]"), 1u);
}

// ---- Strings ----

TEST(JsonMatcher, StringLengthsCountCodePoints) {
  Schema s = S(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_TRUE(matches(s, R"("ab")"));
  EXPECT_TRUE(matches(s, R"("abc")"));
  EXPECT_FALSE(matches(s, R"("a")"));
  EXPECT_EQ(taken(s, R"("a")"), 2u);
  EXPECT_EQ(taken(s, R"("abcd")"), 4u);
  EXPECT_TRUE(matches(s, R"("\n\u00e9")"));
  EXPECT_TRUE(matches(s, R"("\\\"\/")"));
  EXPECT_TRUE(matches(s, "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\""));  // é 中 😀
  EXPECT_EQ(taken(s, "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80x\""), 10u);
  // An escape over the limit is refused at its backslash or at its end.
  size_t at = taken(s, "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\\n\"");
  EXPECT_TRUE(at == 10 || at == 11) << at;
  at = taken(s, R"("\u00e9\u00e9\u00e9\u00e9")");
  EXPECT_TRUE(at >= 19 && at <= 24) << at;
  EXPECT_FALSE(matches(s, R"("\u00e9")"));

  Schema empty = S(R"({"type":"string","maxLength":0})");
  EXPECT_TRUE(matches(empty, R"("")"));
  EXPECT_EQ(taken(empty, R"("a")"), 1u);
  at = taken(empty, R"("\n")");
  EXPECT_TRUE(at == 1 || at == 2) << at;
}

TEST(JsonMatcher, StringBytes) {
  Schema s = S(R"({"type":"string"})");
  // Raw control characters are refused; DEL is not a control character in JSON.
  for (int c = 0; c < 0x20; ++c) {
    std::string doc = "\"a";
    doc += static_cast<char>(c);
    EXPECT_EQ(taken(s, doc), 2u) << c;
  }
  EXPECT_TRUE(matches(s, "\"\x7f\""));
  // Invalid UTF-8 is refused at the first byte that cannot continue it.
  const std::pair<std::string, size_t> bad[] = {
      {"\"\x80\"", 1},                  // a stray continuation byte
      {"\"\xbf\"", 1},                  // another
      {"\"\xc0\x80\"", 1},              // overlong lead
      {"\"\xc1\xbf\"", 1},              // overlong lead
      {"\"\xf5\x80\x80\x80\"", 1},      // past U+10FFFF
      {"\"\xff\"", 1},                  // never in UTF-8
      {"\"\xc3\"", 2},                  // a lead byte without its continuation
      {"\"\xc3\x41\"", 2},              // a lead byte followed by ASCII
      {"\"\xe4\xb8\"", 3},              // two of three bytes
      {"\"\xe0\x80\x80\"", 2},          // overlong 3-byte form
      {"\"\xe0\x9f\xbf\"", 2},          // overlong 3-byte form
      {"\"\xed\xa0\x80\"", 2},          // a UTF-16 surrogate encoded in UTF-8
      {"\"\xf0\x80\x80\x80\"", 2},      // overlong 4-byte form
      {"\"\xf4\x90\x80\x80\"", 2},      // past U+10FFFF
      {"\"\xf0\x9f\x98\x80\x80\"", 5},  // one continuation too many
  };
  for (const auto& [doc, at] : bad) EXPECT_EQ(taken(s, doc), at) << show(doc);
  // The edges of valid UTF-8.
  for (const char* ok :
       {"\"\xc2\x80\"", "\"\xdf\xbf\"", "\"\xe0\xa0\x80\"", "\"\xed\x9f\xbf\"", "\"\xee\x80\x80\"",
        "\"\xef\xbf\xbf\"", "\"\xf0\x90\x80\x80\"", "\"\xf4\x8f\xbf\xbf\""})
    EXPECT_TRUE(matches(s, ok)) << show(ok);
  // Escapes.
  EXPECT_TRUE(matches(s, R"("\" \\ \/ \b \f \n \r \t \u00e9 \u00E9 \uABCD \u0000")"));
  EXPECT_EQ(taken(s, R"("\x")"), 2u);
  EXPECT_EQ(taken(s, R"("\a")"), 2u);
  EXPECT_EQ(taken(s, R"("\U0041")"), 2u);
  EXPECT_EQ(taken(s, R"("\u12G4")"), 5u);
  EXPECT_EQ(taken(s, R"("\u12")"), 5u);
  EXPECT_EQ(taken(s, "\"\\\xc3\xa9\""), 2u);
  EXPECT_FALSE(matches(s, R"("abc)"));
  EXPECT_FALSE(matches(s, R"("\")"));
}

// ---- Numbers ----

TEST(JsonMatcher, NumberGrammar) {
  Schema s = S(R"({"type":"number"})");
  for (const char* ok : {"0", "-0", "1", "-1", "10", "3.14", "-0.5E-3", "1e+5", "1E5", "0e0", "0.0",
                         "123456789", "2.5e-10", "-9.000"})
    EXPECT_TRUE(matches(s, ok)) << ok;
  // Viable prefixes that are not numbers yet.
  for (const char* prefix : {"-", "1.", "1e", "1e+", "-0.", "1E-"}) {
    JsonMatcher m(s);
    EXPECT_TRUE(m.feed(prefix)) << prefix;
    EXPECT_FALSE(m.accepting()) << prefix;
  }
  const std::pair<const char*, size_t> bad[] = {
      {"01", 1},  {"-01", 2},   {"00", 1},       {"+1", 0},  {".5", 0},    {"1.e5", 2},
      {"--1", 1}, {"1e5.0", 3}, {"1..2", 2},     {"1ee", 2}, {"1e+-1", 3}, {"-.5", 1},
      {"0x1", 1}, {"1.5.", 3},  {"Infinity", 0}, {"NaN", 0}, {"1e5e", 3},
  };
  for (const auto& [doc, at] : bad) EXPECT_EQ(taken(s, doc), at) << doc;
  // Inside a container the number ends where its text does.
  Schema arr = S(R"({"type":"array","items":{"type":"number"}})");
  EXPECT_TRUE(matches(arr, "[0,-0.5,1e2,3]"));
  EXPECT_EQ(taken(arr, "[1.]"), 3u);
  EXPECT_EQ(taken(arr, "[-]"), 2u);
  EXPECT_EQ(taken(arr, "[1e]"), 3u);
  EXPECT_EQ(taken(arr, "[01]"), 2u);
}

TEST(JsonMatcher, NumberAtMost40Characters) {
  for (const Schema& s : {S(R"({"type":"number"})"), S(R"({"type":"integer"})")}) {
    std::string forty(40, '7');
    EXPECT_TRUE(matches(s, forty));
    EXPECT_EQ(taken(s, forty + "7"), 40u);
    EXPECT_TRUE(matches(s, "-" + std::string(39, '1')));
    EXPECT_EQ(taken(s, "-" + std::string(40, '1')), 40u);
    Schema arr = S(R"({"type":"array"})");
    EXPECT_TRUE(matches(arr, "[" + forty + "]"));
    EXPECT_EQ(taken(arr, "[" + forty + "1]"), 41u);
  }
  Schema n = S(R"({"type":"number"})");
  std::string frac = "1." + std::string(36, '5') + "e1";  // 40 characters
  EXPECT_TRUE(matches(n, frac));
  EXPECT_EQ(taken(n, frac + "2"), 40u);
}

TEST(JsonMatcher, IntegerRefusesFractionAndExponent) {
  Schema s = S(R"({"type":"integer"})");
  EXPECT_TRUE(matches(s, "-5"));
  EXPECT_TRUE(matches(s, "0"));
  EXPECT_TRUE(matches(s, "123456789012345678901234567890"));
  EXPECT_EQ(taken(s, "1.0"), 1u);
  EXPECT_EQ(taken(s, "1e5"), 1u);
  EXPECT_EQ(taken(s, "1E5"), 1u);
  EXPECT_EQ(taken(s, "01"), 1u);
  EXPECT_FALSE(matches(s, "-"));
}

// An integer past 1e18 is still in range of a one-sided bound, and may be ended; a 40-character one
// must be ended (no digit may follow) and so must not be a dead end.
TEST(JsonMatcher, LongIntegerWithOneBound) {
  for (const char* item :
       {R"({"type":"integer","minimum":100})", R"({"type":"integer","exclusiveMaximum":-100})"}) {
    Schema s = S(fmt::format(R"({{"type":"array","items":{}}})", item));
    const std::string sign = std::string_view(item).find("Maximum") != std::string::npos ? "-" : "";
    for (size_t digits : {size_t{18}, size_t{19}, size_t{25}, 40 - sign.size()}) {
      const std::string number = sign + "1" + std::string(digits - 1, '0');
      EXPECT_TRUE(matches(s, "[" + number + "]")) << item << " " << number;
    }
    JsonMatcher m(s);
    const std::string full = "[" + sign + std::string(40 - sign.size(), '9');
    ASSERT_TRUE(m.feed(full));
    bool any = false;
    for (int b = 0; b < 256; ++b) {
      JsonMatcher c = m;
      any = any || c.feed(static_cast<uint8_t>(b));
    }
    EXPECT_TRUE(any) << item << ": a dead end after " << full;
  }
}

// Bounds at and past the int64 range, and values of 19 digits and more within them.
TEST(JsonMatcher, IntegerBoundsNearInt64Limits) {
  const std::tuple<const char*, const char*, bool> cases[] = {
      {R"({"type":"integer","minimum":1e18})", "1000000000000000000", true},
      {R"({"type":"integer","minimum":1e18})", "999999999999999999", false},
      {R"({"type":"integer","minimum":1e17})", "100000000000000000", true},
      {R"({"type":"integer","minimum":0,"maximum":1e19})", "9999999999999999999", true},
      {R"({"type":"integer","minimum":0,"maximum":9223372036854775807})", "9223372036854775807",
       true},
      {R"({"type":"integer","maximum":-9223372036854775808})", "-9223372036854775808", true},
      {R"({"type":"integer","maximum":-9223372036854775808})", "-9223372036854775807", false},
      {R"({"type":"integer","minimum":9223372036854775807})", "9223372036854775807", true},
      {R"({"type":"integer","minimum":9223372036854775807})", "9223372036854775806", false},
      {R"({"type":"integer","minimum":1e30})", "5", false},
      {R"({"type":"integer","minimum":1e30})", "1000000000000000000000000000000", true},
      {R"({"type":"integer","maximum":-1e30})", "-5", false},
      {R"({"type":"integer","maximum":1e30})", "123456789012345678901234567890", false},
      {R"({"type":"integer","maximum":1e30})", "5", true},
      {R"({"type":"integer","minimum":18446744073709551615})", "5", false},
      // Past 2^53 a double no longer holds every integer.
      {R"({"type":"integer","minimum":9007199254740993})", "9007199254740992", false},
      {R"({"type":"integer","maximum":9007199254740993})", "9007199254740993", true},
  };
  for (const auto& [schema, doc, want] : cases) {
    const std::string e = parse_error(schema);
    // A bound past int64 is refused; a schema that compiles must keep to its bounds.
    if (e.find("beyond the 64-bit integers") != std::string::npos) continue;
    ASSERT_EQ(e, "") << schema;
    EXPECT_EQ(matches(S(schema), doc), want) << schema << " " << doc;
  }
}

TEST(JsonMatcher, IntegerBoundsExamples) {
  Schema s = S(R"({"type":"integer","minimum":0,"maximum":150})");
  // '-' is taken only because "-0" is 0.
  EXPECT_EQ(taken(s, "-1"), 1u);
  EXPECT_TRUE(matches(s, "-0"));
  EXPECT_EQ(taken(s, "-00"), 2u);
  EXPECT_EQ(taken(s, "200"), 2u);
  EXPECT_EQ(taken(s, "151"), 2u);
  EXPECT_EQ(taken(s, "1500"), 3u);
  EXPECT_EQ(taken(s, "00"), 1u);
  for (const char* ok : {"0", "9", "15", "150", "99"}) {
    JsonMatcher m(s);
    EXPECT_TRUE(m.feed(ok)) << ok;
    EXPECT_TRUE(m.accepting()) << ok;
  }
  JsonMatcher m(s);
  ASSERT_TRUE(m.feed("15"));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.finished());  // "150" may follow

  Schema neg = S(R"({"type":"integer","minimum":-20,"maximum":-10})");
  EXPECT_TRUE(matches(neg, "-15"));
  EXPECT_TRUE(matches(neg, "-20"));
  EXPECT_FALSE(matches(neg, "-1"));  // a prefix of -10..-19, not in range itself
  EXPECT_EQ(taken(neg, "-1"), 2u);
  EXPECT_EQ(taken(neg, "-5"), 1u);
  EXPECT_EQ(taken(neg, "-21"), 2u);
  EXPECT_EQ(taken(neg, "0"), 0u);
  EXPECT_EQ(taken(neg, "-0"), 1u);
  EXPECT_EQ(taken(neg, "5"), 0u);

  Schema ex = S(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})");
  EXPECT_EQ(taken(ex, "0"), 0u);
  EXPECT_EQ(taken(ex, "10"), 1u);
  EXPECT_EQ(taken(ex, "-"), 0u);
  EXPECT_TRUE(matches(ex, "1"));
  EXPECT_TRUE(matches(ex, "9"));

  Schema big = S(R"({"type":"integer","minimum":100})");
  EXPECT_FALSE(matches(big, "5"));
  EXPECT_EQ(taken(big, "50"), 2u);
  EXPECT_TRUE(matches(big, "500"));
  EXPECT_EQ(taken(big, "0"), 0u);
  EXPECT_EQ(taken(big, "-"), 0u);
  EXPECT_TRUE(matches(big, "99999999999999999999999999"));

  Schema below = S(R"({"type":"integer","maximum":-5})");
  EXPECT_EQ(taken(below, "0"), 0u);
  EXPECT_EQ(taken(below, "5"), 0u);
  EXPECT_FALSE(matches(below, "-4"));
  EXPECT_EQ(taken(below, "-4"), 2u);  // -40 may follow
  EXPECT_TRUE(matches(below, "-5"));
  EXPECT_TRUE(matches(below, "-99999999999999999999999999"));
}

namespace {
// Whether `p` (an optional '-' and digits) can still become the decimal text of an integer in
// [lo, hi], and whether it is one already.
struct Prefix {
  bool viable, complete;
};
Prefix integer_prefix(const std::string& p, __int128 lo, __int128 hi) {
  if (p.empty()) return {true, false};
  bool neg = p[0] == '-';
  std::string d = p.substr(neg ? 1 : 0);
  for (char c : d)
    if (c < '0' || c > '9') return {false, false};
  if (d.empty()) return {lo <= 0, false};  // "-0" is 0
  if (d.size() > 1 && d[0] == '0') return {false, false};
  __int128 v = 0;
  for (char c : d) v = v * 10 + (c - '0');
  auto in = [&](__int128 x) { return lo <= x && x <= hi; };
  bool complete = in(neg ? -v : v);
  if (v == 0) return {complete, complete};
  bool viable = false;
  __int128 a = v, b = v;  // magnitudes with j more digits: [v·10^j, v·10^j + 10^j − 1]
  for (int j = 0; j < 20 && !viable; ++j) {
    __int128 x = neg ? -b : a, y = neg ? -a : b;
    viable = x <= hi && y >= lo;
    a *= 10;
    b = b * 10 + 9;
  }
  return {viable, complete};
}
}  // namespace

// Every prefix over "-0123456789.e+" up to a few characters: a byte is taken exactly when some
// completion lands in range, the text is accepting exactly when it is in range, and finished
// when it is in range and no digit may follow.
TEST(JsonMatcher, IntegerBoundsExhaustive) {
  constexpr __int128 kInf = static_cast<__int128>(1) << 100;
  struct Bounds {
    const char* schema;
    __int128 lo, hi;
  };
  const Bounds cases[] = {
      {R"({"type":"integer","minimum":0,"maximum":150})", 0, 150},
      {R"({"type":"integer","minimum":-20,"maximum":-10})", -20, -10},
      {R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})", 1, 9},
      {R"({"type":"integer","minimum":100})", 100, kInf},
      {R"({"type":"integer","maximum":-5})", -kInf, -5},
      {R"({"type":"integer","minimum":-5,"maximum":5})", -5, 5},
      {R"({"type":"integer","minimum":7,"maximum":7})", 7, 7},
      {R"({"type":"integer","exclusiveMinimum":-1000,"maximum":99999})", -999, 99999},
      {R"({"type":"integer","minimum":37,"maximum":4210})", 37, 4210},
      {R"({"type":"integer","minimum":-4210,"exclusiveMaximum":-37})", -4210, -38},
      {R"({"type":"integer","minimum":-3,"exclusiveMaximum":1000})", -3, 999},
      {R"({"type":"integer","minimum":0,"maximum":0})", 0, 0},
      {R"({"type":"integer"})", -kInf, kInf},
  };
  const std::string alphabet = "-0123456789.e+";
  for (const Bounds& c : cases) {
    Schema s = S(c.schema);
    const size_t max_len = c.hi - c.lo <= 100000 ? 6 : 4;
    std::vector<std::string> wrong, unfinished;  // what the matcher got wrong
    // Depth-first over the prefixes the matcher and the expectation both take.
    std::vector<std::pair<std::string, JsonMatcher>> todo;
    todo.emplace_back("", JsonMatcher(s));
    JsonMatcher next(s);
    while (!todo.empty()) {
      auto [p, m] = std::move(todo.back());
      todo.pop_back();
      const Prefix here = integer_prefix(p, c.lo, c.hi);
      if (m.accepting() != here.complete)
        wrong.push_back(fmt::format("'{}' accepting {}", p, m.accepting()));
      bool digit_viable = false;
      for (char d = '0'; d <= '9'; ++d) digit_viable |= integer_prefix(p + d, c.lo, c.hi).viable;
      if (here.complete && !digit_viable && !m.finished()) unfinished.push_back(p);
      if (p.size() >= max_len) continue;
      for (char ch : alphabet) {
        const std::string q = p + ch;
        next = m;
        const bool got = next.feed(static_cast<uint8_t>(ch));
        const bool want = integer_prefix(q, c.lo, c.hi).viable;
        if (got != want) wrong.push_back(fmt::format("'{}' taken {}", q, got));
        if (got && want) todo.emplace_back(q, next);
      }
    }
    wrong.resize(std::min<size_t>(wrong.size(), 12));
    EXPECT_TRUE(wrong.empty()) << c.schema << ": " << fmt::format("{}", fmt::join(wrong, ", "));
    // Complete, and no byte may follow: finished (json_schema.h's definition).
    size_t n_unfinished = unfinished.size();
    unfinished.resize(std::min<size_t>(unfinished.size(), 8));
    EXPECT_EQ(n_unfinished, 0u) << c.schema << ": not finished after "
                                << fmt::format("{}", fmt::join(unfinished, ", "));
  }
}

// ---- Literals ----

TEST(JsonMatcher, EnumAndConst) {
  Schema s = S(R"({"enum":[1, 12, "a", null, true, {"k": 1}]})");
  for (const char* ok : {"1", "12", "\"a\"", "null", "true", "{\"k\":1}", "  12"})
    EXPECT_TRUE(matches(s, ok)) << ok;
  for (const char* no : {"2", "\"b\"", "false", "{\"k\":2}", "123", "1.0", "\"a", "nul"})
    EXPECT_FALSE(matches(s, no)) << no;
  EXPECT_EQ(taken(s, "123"), 2u);
  EXPECT_EQ(taken(s, "false"), 0u);
  EXPECT_EQ(taken(s, "{\"k\":2}"), 5u);
  EXPECT_EQ(taken(s, "\"ab\""), 2u);
  JsonMatcher m(s);
  ASSERT_TRUE(m.feed("1"));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.finished());
  ASSERT_TRUE(m.feed("2"));
  EXPECT_TRUE(m.accepting());
  EXPECT_TRUE(m.finished());
  EXPECT_FALSE(m.feed(" "));

  // Compact text as nlohmann dumps it (keys in its order).
  const json obj = json::parse(R"({"b":1,"a":[false, null]})");
  Schema o = S(fmt::format(R"({{"const":{}}})", obj.dump()));
  EXPECT_TRUE(matches(o, obj.dump()));
  EXPECT_TRUE(matches(o, " " + obj.dump()));
  EXPECT_FALSE(matches(o, R"({"b":1,"a":[false,true]})"));

  Schema c = S(R"({"type":"object","properties":{"x":{"const":"y"},"n":{"const":-3}}})");
  EXPECT_TRUE(matches(c, R"({"x":"y","n":-3})"));
  EXPECT_TRUE(matches(c, R"({ "x" : "y" , "n" : -3 })"));
  EXPECT_FALSE(matches(c, R"({"x":"z"})"));
  EXPECT_FALSE(matches(c, R"({"n":-30})"));

  Schema u = S(R"({"enum":["\u00e9\n", "a\"b"]})");
  EXPECT_TRUE(matches(u, "\"\xc3\xa9\\n\""));
  EXPECT_TRUE(matches(u, R"("a\"b")"));
}

// Keywords beside enum or const constrain the value too: a literal that breaks them is never
// accepted (or the schema is refused, naming the keyword).
TEST(JsonMatcher, EnumWithOtherKeywords) {
  const std::tuple<const char*, const char*, const char*> cases[] = {
      {R"({"type":"string","enum":["a",1]})", "1", "type"},
      {R"({"type":"integer","enum":[1,2],"minimum":2})", "1", "minimum"},
      {R"({"const":"abc","maxLength":1})", "\"abc\"", "maxLength"},
      {R"({"type":"object","enum":[{"a":1}],"properties":{"a":{"type":"string"}}})", R"({"a":1})",
       "properties"},
      {R"({"type":"array","const":[1,2,3],"maxItems":2})", "[1,2,3]", "maxItems"},
  };
  for (const auto& [schema, doc, keyword] : cases) {
    const std::string e = parse_error(schema);
    if (!e.empty()) {
      EXPECT_NE(e.find(keyword), std::string::npos) << schema << " -> " << e;
      continue;
    }
    EXPECT_FALSE(matches(S(schema), doc)) << schema << " " << doc;
  }
  // Consistent ones are the common case and compile.
  Schema s = S(R"({"type":"string","enum":["red","green"]})");
  EXPECT_TRUE(matches(s, R"("red")"));
  EXPECT_FALSE(matches(s, R"("blue")"));
}

// ---- Unions, references ----

TEST(JsonMatcher, TypeLists) {
  Schema s = S(R"({"type":["string","null"]})");
  EXPECT_TRUE(matches(s, R"("x")"));
  EXPECT_TRUE(matches(s, "null"));
  EXPECT_FALSE(matches(s, "1"));
  EXPECT_FALSE(matches(s, "nul"));
  EXPECT_EQ(taken(s, "1"), 0u);

  Schema all = S(R"({"type":["object","array","string","number","boolean","null"]})");
  for (const char* ok : {"{}", "[]", "\"s\"", "1.5", "false", "null"})
    EXPECT_TRUE(matches(all, ok)) << ok;

  Schema b = S(R"({"type":"boolean"})");
  EXPECT_TRUE(matches(b, "true"));
  EXPECT_TRUE(matches(b, "false"));
  EXPECT_FALSE(matches(b, "tru"));
  EXPECT_EQ(taken(b, "trux"), 3u);
  EXPECT_EQ(taken(b, "null"), 0u);

  Schema n = S(R"({"type":"null"})");
  EXPECT_TRUE(matches(n, "null"));
  EXPECT_EQ(taken(n, "nil"), 1u);
  EXPECT_EQ(taken(n, "0"), 0u);
}

TEST(JsonMatcher, AnyOfKeepsBranchesWhileAmbiguous) {
  for (const char* keyword : {"anyOf", "oneOf"}) {
    Schema s = S(fmt::format(R"({{"{}":[
      {{"type":"object","properties":{{"kind":{{"const":"a"}},"x":{{"type":"integer"}}}},
        "required":["kind","x"]}},
      {{"type":"object","properties":{{"kind":{{"const":"b"}},"y":{{"type":"string"}}}},
        "required":["kind","y"]}}]}})",
                             keyword));
    JsonMatcher m(s);
    ASSERT_TRUE(m.feed(R"({"kind":)"));
    EXPECT_EQ(m.alternatives(), 2u) << keyword;
    ASSERT_TRUE(m.feed(R"("a)"));
    EXPECT_EQ(m.alternatives(), 1u) << keyword;
    ASSERT_TRUE(m.feed(R"(","x":1})"));
    EXPECT_TRUE(m.accepting());
    EXPECT_TRUE(m.finished());
    EXPECT_TRUE(matches(s, R"({"y":"s","kind":"b"})"));
    EXPECT_FALSE(matches(s, R"({"kind":"a","y":"s"})"));
    EXPECT_FALSE(matches(s, R"({"kind":"b","x":1})"));
    EXPECT_EQ(taken(s, R"({"kind":"c")"), 9u);
  }
  Schema mixed = S(R"({"anyOf":[{"type":"integer","maximum":5},{"type":"string"},
    {"type":"array","items":{"type":"integer"}},{"type":"array","items":{"type":"string"}}]})");
  EXPECT_TRUE(matches(mixed, "5"));
  EXPECT_TRUE(matches(mixed, "\"s\""));
  EXPECT_TRUE(matches(mixed, "[1,2]"));
  EXPECT_TRUE(matches(mixed, "[\"a\"]"));
  EXPECT_TRUE(matches(mixed, "[]"));
  EXPECT_FALSE(matches(mixed, "[1,\"a\"]"));
  EXPECT_FALSE(matches(mixed, "6"));
}

TEST(JsonMatcher, References) {
  Schema defs =
      S(R"({"$defs":{"p":{"type":"integer"}},"type":"array","items":{"$ref":"#/$defs/p"}})");
  EXPECT_TRUE(matches(defs, "[1,2]"));
  EXPECT_FALSE(matches(defs, "[\"x\"]"));
  Schema old = S(R"({"definitions":{"p":{"type":"string"}},"$ref":"#/definitions/p"})");
  EXPECT_TRUE(matches(old, R"("x")"));
  EXPECT_FALSE(matches(old, "1"));
  Schema self = S(R"({"type":"object","properties":{"next":{"$ref":"#"},"v":{"type":"null"}}})");
  EXPECT_TRUE(matches(self, R"({"next":{"next":{"next":{},"v":null}}})"));
  EXPECT_FALSE(matches(self, R"({"next":{"next":1}})"));
  Schema chain =
      S(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"type":"boolean"}},"$ref":"#/$defs/a"})");
  EXPECT_TRUE(matches(chain, "true"));
  EXPECT_FALSE(matches(chain, "1"));
  Schema one = S(R"({"allOf":[{"type":"integer"}]})");
  EXPECT_TRUE(matches(one, "5"));
  EXPECT_FALSE(matches(one, "\"s\""));
}

TEST(JsonMatcher, RecursiveTree) {
  Schema s = S(R"({"$defs":{"node":{"type":"object","properties":{
      "name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["name"]}},"$ref":"#/$defs/node"})");
  std::string doc = R"({"name":"leaf"})";
  for (int level = 0; level < 5; ++level)
    doc =
        fmt::format(R"({{"name":"n{}","children":[{},{{"name":"x","children":[]}}]}})", level, doc);
  EXPECT_TRUE(matches(s, doc)) << doc;
  JsonMatcher m(s);
  ASSERT_TRUE(m.feed(doc));
  EXPECT_TRUE(m.finished());
  EXPECT_FALSE(matches(s, R"({"name":"a","children":[{"children":[]}]})"));
  EXPECT_FALSE(matches(s, R"({"name":"a","children":[{"name":1}]})"));
  EXPECT_TRUE(matches(S(kTree), R"({"v":1,"kids":[{"v":2,"kids":[]},{"kids":[],"v":-3}]})"));
}

// ---- Whitespace, the end, depth, state ----

TEST(JsonMatcher, Whitespace) {
  Schema s =
      S(R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}})");
  EXPECT_TRUE(matches(s, " \t\n\r{ \"a\" \t: \n[ 1 ,\r2\t] }"));
  const std::string w32(32, ' ');
  EXPECT_TRUE(matches(s, w32 + "{" + w32 + "\"a\"" + w32 + ":" + w32 + "[" + w32 + "1" + w32 + "," +
                             w32 + "2" + w32 + "]" + w32 + "}"));
  EXPECT_EQ(taken(s, "{" + w32 + " }"), 33u);
  EXPECT_EQ(taken(s, w32 + " {}"), 32u);
  EXPECT_EQ(taken(s, "{\"a\":[1," + std::string(20, '\n') + std::string(13, '\t') + "2]}"), 40u);
  // Only the four JSON whitespace bytes.
  for (const char* other : {"\v", "\f", "\xc2\xa0"})
    EXPECT_EQ(taken(s, std::string(other) + "{}"), 0u);
  // Nothing after the top-level value, not even whitespace.
  JsonMatcher m(s);
  ASSERT_TRUE(m.feed("{}"));
  EXPECT_TRUE(m.accepting());
  EXPECT_TRUE(m.finished());
  JsonMatcher after = m;
  EXPECT_FALSE(after.feed(" "));
  after = m;
  EXPECT_FALSE(after.feed("{"));
  after = m;
  EXPECT_FALSE(after.feed("\n"));
  EXPECT_FALSE(matches(JsonSchema::any_value(), "\"s\" "));
  EXPECT_FALSE(matches(JsonSchema::any_value(), "[] "));
}

TEST(JsonMatcher, Depth) {
  Schema v = JsonSchema::any_value();
  const size_t at = taken(v, std::string(70, '['));
  EXPECT_LT(at, 70u);
  EXPECT_LE(at, JsonMatcher::kMaxDepth);
  EXPECT_GE(at, JsonMatcher::kMaxDepth - 2);
  EXPECT_TRUE(matches(v, std::string(40, '[') + std::string(40, ']')));
  std::string objs;
  for (int i = 0; i < 40; ++i) objs += "{\"k\":";
  objs += "1" + std::string(40, '}');
  EXPECT_TRUE(matches(v, objs));
  std::string deep;
  for (int i = 0; i < 70; ++i) deep += "{\"k\":";
  EXPECT_FALSE(JsonMatcher(v).feed(deep));
}

TEST(JsonMatcher, DeadAfterRefusal) {
  JsonMatcher m(JsonSchema::any_object());
  EXPECT_FALSE(m.dead());
  EXPECT_EQ(m.alternatives(), 1u);
  EXPECT_FALSE(m.feed("x"));
  EXPECT_TRUE(m.dead());
  EXPECT_EQ(m.alternatives(), 0u);
  EXPECT_FALSE(m.feed("{}"));
  EXPECT_FALSE(m.feed(static_cast<uint8_t>('{')));
  EXPECT_FALSE(m.accepting());
  EXPECT_FALSE(m.finished());
  // A refusal in the middle of a chunk kills it too.
  JsonMatcher n(JsonSchema::any_object());
  EXPECT_FALSE(n.feed("{}}"));
  EXPECT_TRUE(n.dead());
  // An empty chunk changes nothing.
  JsonMatcher e(JsonSchema::any_object());
  EXPECT_TRUE(e.feed(""));
  EXPECT_FALSE(e.accepting());
}

TEST(JsonMatcher, CopiesAreIndependent) {
  Schema s = S(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}}})");
  JsonMatcher m(s);
  ASSERT_TRUE(m.feed(R"({"a":)"));
  JsonMatcher c(JsonSchema::any_value());
  ASSERT_TRUE(c.feed("[1,[2,"));  // the target's own state and storage are replaced
  c = m;
  ASSERT_TRUE(c.feed("1}"));
  EXPECT_TRUE(c.finished());
  EXPECT_FALSE(m.accepting());
  ASSERT_TRUE(m.feed("22,\"b\":\"x\"}"));
  EXPECT_TRUE(m.finished());
  EXPECT_TRUE(c.finished());
  JsonMatcher d = m;
  EXPECT_FALSE(d.feed("x"));
  EXPECT_TRUE(d.dead());
  EXPECT_FALSE(m.dead());
  // A dead copy assigned from a live one lives again.
  d = c;
  EXPECT_FALSE(d.dead());
  EXPECT_TRUE(d.finished());
}

// ---- Properties ----
// Each stops a schema at its first failure and goes on with the next, so one bug shows once per
// schema.

namespace {
struct WalkStats {
  int walks = 0, accepting = 0, finished = 0;
  size_t longest = 0;
};

// A walk over the bytes the matcher allows, leaning (with probability `lean`) toward bytes that
// close or end something so that it ends: every prefix has a next byte unless finished, and every
// accepting prefix is a valid document. "" or what went wrong.
std::string random_walk(const Case& c, uint32_t seed, double lean, int max_steps,
                        WalkStats& stats) {
  constexpr std::string_view kPreferred = "}]\",0123456789";
  std::mt19937 rng(seed);
  const Reference ref{c.reference};
  JsonMatcher m(c.schema), scratch(c.schema);
  std::string text;
  std::vector<uint8_t> allowed, preferred;
  bool reached = false;
  ++stats.walks;
  for (int step = 0; step < max_steps; ++step) {
    allowed.clear();
    preferred.clear();
    for (int b = 0; b < 256; ++b) {
      scratch = m;
      if (!scratch.feed(static_cast<uint8_t>(b))) continue;
      allowed.push_back(static_cast<uint8_t>(b));
      if (kPreferred.find(static_cast<char>(b)) != std::string_view::npos)
        preferred.push_back(static_cast<uint8_t>(b));
    }
    if (m.finished()) {
      if (!allowed.empty()) return "finished but takes more after " + show(text);
      ++stats.finished;
      break;
    }
    if (allowed.empty())
      return fmt::format("a dead end (accepting {}) after {}", m.accepting(), show(text));
    const std::vector<uint8_t>& from =
        !preferred.empty() && std::bernoulli_distribution(lean)(rng) ? preferred : allowed;
    const uint8_t b = from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
    if (!m.feed(b)) return "a copy took a byte the matcher refuses after " + show(text);
    text += static_cast<char>(b);
    if (m.alternatives() < 1) return "no alternatives after " + show(text);
    if (m.accepting()) {
      reached = true;
      const std::string why = check_document(ref, text);
      if (!why.empty()) return "accepted " + show(text) + ": " + why;
    } else if (m.finished()) {
      return "finished but not accepting " + show(text);
    }
  }
  stats.accepting += reached;
  stats.longest = std::max(stats.longest, text.size());
  return "";
}
}  // namespace

TEST(JsonMatcherProperty, RandomWalksNeverDeadEnd) {
  for (const Case& c : property_cases()) {
    WalkStats stats;
    const int walks = c.name == "realistic" ? 100 : 30;
    bool failed = false;
    for (int i = 0; i < walks && !failed; ++i) {
      const double lean = 0.3 + 0.2 * (i % 3);
      const std::string why = random_walk(c, 1000 + i, lean, 3000, stats);
      failed = !why.empty();
      EXPECT_EQ(why, "") << c.name << " walk " << i;
    }
    // Most walks complete a document (the rest hit the step limit).
    if (!failed) {
      EXPECT_GE(stats.accepting * 4, stats.walks * 3) << c.name;
    }
    std::printf("%s: %d of %d walks accepting, %d finished, longest %zu bytes\n", c.name.c_str(),
                stats.accepting, stats.walks, stats.finished, stats.longest);
  }
}

namespace {
// "" when the matcher takes `doc` whole, byte by byte and in chunks, and accepts it.
std::string accepts_generated(const Case& c, const std::string& doc, std::mt19937& rng) {
  const size_t at = taken(c.schema, doc);
  if (at != doc.size()) return fmt::format("refused at byte {} of {}", at, show(doc));
  JsonMatcher m(c.schema);
  m.feed(doc);
  if (!m.accepting()) return "not accepting " + show(doc);
  const char last = doc.back();
  if ((last == '}' || last == ']' || last == '"') && !m.finished())
    return "not finished " + show(doc);
  // Chunks of any size give the same state.
  JsonMatcher chunks(c.schema);
  for (size_t pos = 0; pos < doc.size();) {
    const size_t n = std::uniform_int_distribution<size_t>(0, 9)(rng);
    if (!chunks.feed(std::string_view(doc).substr(pos, n))) return "refused in chunks " + show(doc);
    pos += n;
  }
  if (!chunks.accepting() || chunks.finished() != m.finished())
    return "chunks end elsewhere " + show(doc);
  return "";
}
}  // namespace

TEST(JsonMatcherProperty, GeneratedDocumentsAreAccepted) {
  for (const Case& c : property_cases()) {
    Generator gen(c.reference, 7);
    const Reference ref{c.reference};
    std::mt19937 rng(11);
    for (int i = 0; i < 300; ++i) {
      const std::string doc = gen.document();
      // The generator's own check: the reference accepts what it makes.
      ASSERT_EQ(check_document(ref, doc), "") << c.name << ": generated " << show(doc);
      const std::string why = accepts_generated(c, doc, rng);
      if (!why.empty()) {
        ADD_FAILURE() << c.name << ": " << why;
        break;
      }
    }
  }
}

TEST(JsonMatcherProperty, MutatedDocumentsAcceptedOnlyWhenValid) {
  constexpr std::string_view kInteresting = "{}[]\",:0123456789-+.eE\\ \tntfu";
  for (const Case& c : property_cases()) {
    Generator gen(c.reference, 23);
    const Reference ref{c.reference};
    std::mt19937& rng = gen.rng();
    auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
    auto byte = [&] {
      return pick(10) < 6 ? kInteresting[pick(kInteresting.size())] : static_cast<char>(pick(256));
    };
    int accepted = 0, tried = 0;
    std::string failure;
    for (int i = 0; i < 200 && failure.empty(); ++i) {
      const std::string doc = gen.document();
      for (int k = 0; k < 20 && failure.empty(); ++k) {
        std::string t = doc;
        for (size_t edits = 1 + pick(2); edits > 0; --edits) {
          switch (pick(3)) {
            case 0:
              if (!t.empty()) t[pick(t.size())] = byte();
              break;
            case 1:
              t.insert(t.begin() + static_cast<std::ptrdiff_t>(pick(t.size() + 1)), byte());
              break;
            default:
              if (!t.empty()) t.erase(pick(t.size()), 1);
              break;
          }
        }
        ++tried;
        JsonMatcher m(c.schema);
        if (!m.feed(t) || !m.accepting()) continue;
        ++accepted;
        const std::string why = check_document(ref, t);
        if (!why.empty())
          failure = "accepted " + show(t) + " (mutated from " + show(doc) + "): " + why;
      }
    }
    EXPECT_EQ(failure, "") << c.name;
    std::printf("%s: %d of %d mutants accepted\n", c.name.c_str(), accepted, tried);
    EXPECT_GT(accepted, 0) << c.name;
  }
}

namespace {

// Bytes of `text` a fresh matcher takes before refusing one (text.size(): all of them).
size_t taken_of(const std::shared_ptr<const JsonSchema>& s, std::string_view text) {
  JsonMatcher m(s);
  for (size_t i = 0; i < text.size(); ++i)
    if (!m.feed(uint8_t(text[i]))) return i;
  return text.size();
}

}  // namespace

// A \u escape is refused at the first hex digit from which it can only end as a lone low
// surrogate, or (after a high surrogate) not as its low partner: no dead end inside an escape
// (found by scripts/fuzz.sh schema: `"a\udef` took every byte and then nothing).
TEST(JsonMatcher, SurrogateEscapesRefusedAtTheirFirstHopelessDigit) {
  const auto s = JsonSchema::parse(R"({"type": "string"})");
  EXPECT_EQ(taken_of(s, R"("\uDE)"), 4u);  // DE00-DEFF: all low surrogates
  EXPECT_EQ(taken_of(s, R"("\udc)"), 4u);
  EXPECT_EQ(taken_of(s, R"("\uDB)"), 5u);     // a high surrogate may follow
  EXPECT_EQ(taken_of(s, R"("\uD7FF")"), 8u);  // below the surrogates: fine
  EXPECT_EQ(taken_of(s, R"("\uD83D\uDE00")"), 14u);
  EXPECT_EQ(taken_of(s, R"("\uD83D\uD8)"), 10u);  // the partner must be DC00-DFFF
  EXPECT_EQ(taken_of(s, R"("\uD83D\uE)"), 9u);
  EXPECT_EQ(taken_of(s, R"("\uD83Dx)"), 7u);  // nothing but the partner's "\u"
  EXPECT_EQ(taken_of(s, R"("\uD83D")"), 7u);  // not even the closing quote
}

// Near the 40-character cap a number takes no byte it could not end after ('.', 'e', a sign):
// found by scripts/fuzz.sh schema (`-0.0999…9e+` at 40 characters took nothing more).
TEST(JsonMatcher, NumberCapLeavesRoomToEnd) {
  const auto any = JsonSchema::any_value();
  const std::string digits38 = "-0." + std::string(36, '9');  // 39 characters
  JsonMatcher m(any);
  ASSERT_TRUE(m.feed(digits38));
  JsonMatcher e = m;
  EXPECT_FALSE(e.feed("e"));  // 40th character, and no room for an exponent digit
  JsonMatcher d = m;
  EXPECT_TRUE(d.feed("9"));  // 40th character, a whole number
  EXPECT_TRUE(d.accepting());
  EXPECT_TRUE(d.finished());
  JsonMatcher dot(any);
  ASSERT_TRUE(dot.feed(std::string(39, '1')));
  EXPECT_FALSE(dot.feed("."));
  // A top-level zero with room left may still take '.' or 'e': not finished.
  JsonMatcher zero(any);
  ASSERT_TRUE(zero.feed("0"));
  EXPECT_FALSE(zero.finished());
}

// Nesting at the limit: a container opens only where a value it needs fits, and a key or item
// only where its value fits, so a walk never reaches a key that cannot take its value (found by
// scripts/fuzz.sh schema: an object at the 64th level took a key, then no ':' could follow).
TEST(JsonMatcher, NestingLimitNeverStrandsAKey) {
  const auto any = JsonSchema::any_value();
  JsonMatcher m(any);
  ASSERT_TRUE(m.feed(std::string(JsonMatcher::kMaxDepth - 1, '[')));
  ASSERT_TRUE(m.feed("{"));  // the 64th level: an empty object still fits
  JsonMatcher key = m;
  EXPECT_FALSE(key.feed("\""));  // but no key: its value would be the 65th
  EXPECT_TRUE(m.feed("}"));
  JsonMatcher item = m;
  EXPECT_TRUE(item.feed(",{}"));  // another (empty) object at the 64th level
  EXPECT_TRUE(item.feed(",["));   // an array there opens (it may stay empty) …
  JsonMatcher inner = item;
  EXPECT_FALSE(inner.feed("1"));  // … but takes no item: that would be the 65th level
  EXPECT_TRUE(item.feed("]"));
  // An object whose required value needs 3 levels is refused 2 levels from the limit.
  const auto deep = JsonSchema::parse(
      R"({"type":"array","items":{"type":"object","properties":{"a":{"type":"array",)"
      R"("items":{"type":"integer"},"minItems":1}},"required":["a"]}})");
  EXPECT_EQ(deep->node(deep->root()).depth, 1u);  // an empty array
  // Schemas no finite document satisfies, or nested past the limit, are refused.
  EXPECT_THROW(JsonSchema::parse(R"({"type":"array","items":{"$ref":"#"},"minItems":1})"),
               strata::Error);
  EXPECT_THROW(
      JsonSchema::parse(R"({"type":"object","properties":{"k":{"$ref":"#"}},"required":["k"]})"),
      strata::Error);
  std::string nested = R"({"type":"integer"})";
  for (uint32_t i = 0; i < JsonMatcher::kMaxDepth; ++i)
    nested = R"({"type":"array","minItems":1,"items":)" + nested + "}";
  EXPECT_THROW(JsonSchema::parse(nested), strata::Error);
}

// The fuzzer's seeds and fixed findings (tests/data/schema_seeds/) keep its invariants.
TEST(JsonMatcher, FuzzSeedsKeepTheWalkInvariants) {
  const std::filesystem::path dir = std::filesystem::path(STRATA_TEST_DATA_DIR) / "schema_seeds";
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(strata::test::probe_json_schema(bytes), "") << e.path();
    ++n;
  }
  EXPECT_GE(n, 7u);
}

// A schema cannot overflow the stack: a document nested past kMaxSchemaDepth is refused before
// anything recurses into it, and $refs chaining definitions one inside the next are bounded.
TEST(JsonSchema, DeepSchemasAreRefusedNotRecursedInto) {
  const size_t depth = 200000;
  std::string deep;
  for (size_t i = 0; i < depth; ++i) deep += R"({"items":)";
  deep += "{}";
  deep += std::string(depth, '}');
  EXPECT_NE(parse_error(deep).find("nested deeper than 128 levels"), std::string::npos);
  std::string defs;
  for (int i = 0; i < 5000; ++i)
    defs += fmt::format(R"("d{}":{{"type":"array","items":{{"$ref":"#/$defs/d{}"}}}},)", i, i + 1);
  const std::string chain =
      R"({"$defs":{)" + defs + R"("d5000":{"type":"integer"}},"$ref":"#/$defs/d0"})";
  EXPECT_NE(parse_error(chain).find("deeper than 512 levels"), std::string::npos);
  // Within the bounds it compiles.
  std::string ok = R"({"type":"integer"})";
  for (int i = 0; i < 60; ++i) ok = R"({"type":"array","items":)" + ok + "}";
  EXPECT_EQ(parse_error(ok), "");
}
