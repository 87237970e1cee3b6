// JSON Schema subset compiled for constrained decoding, and the byte matcher (see json_schema.h).
#include "engine/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "engine/unicode.h"
#include "io/check.h"

namespace strata::engine {

using json = nlohmann::json;
using Node = JsonSchema::Node;

JsonSchema::JsonSchema() = default;
JsonSchema::~JsonSchema() = default;
JsonSchema::JsonSchema(JsonSchema&&) noexcept = default;
JsonSchema& JsonSchema::operator=(JsonSchema&&) noexcept = default;

namespace {

constexpr size_t kMaxProperties = 64;  // an object's used keys are one uint64_t

// The patterns of the string formats strata enforces (RFC 3339 dates and times, UUIDs, e-mail
// addresses as HTML's input type=email takes them, RFC 1123 host names without their length
// limits, dotted-quad IPv4 without leading zeros); null for the rest, which stay annotations.
const char* format_pattern(std::string_view format) {
  constexpr const char* kDate = R"(\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01]))";
  constexpr const char* kTime =
      R"((?:[01]\d|2[0-3]):[0-5]\d:(?:[0-5]\d|60)(?:\.\d+)?(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d))";
  static const std::string date = std::string("^") + kDate + "$";
  static const std::string time = std::string("^") + kTime + "$";
  static const std::string date_time = std::string("^") + kDate + "[Tt]" + kTime + "$";
  if (format == "date") return date.c_str();
  if (format == "time") return time.c_str();
  if (format == "date-time") return date_time.c_str();
  if (format == "uuid")
    return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
  // A DNS label: letters, digits and inner hyphens.
  constexpr const char* kLabel = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?";
  static const std::string host = std::string("^") + kLabel + R"((?:\.)" + kLabel + ")*$";
  static const std::string email =
      std::string("^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@") + kLabel + R"((?:\.)" + kLabel + ")*$";
  constexpr const char* kOctet = R"((?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  static const std::string ipv4 = std::string("^(?:") + kOctet + R"(\.){3})" + kOctet + "$";
  if (format == "hostname") return host.c_str();
  if (format == "email") return email.c_str();
  if (format == "ipv4") return ipv4.c_str();
  return nullptr;
}

// Keywords that only annotate: ignored.
const std::set<std::string, std::less<>> kAnnotations = {
    "title",    "description", "format", "examples",        "example",
    "default",  "$schema",     "$id",    "$comment",        "deprecated",
    "readOnly", "writeOnly",   "$defs",  "definitions",     "$anchor",
    "nullable", "strict",      "name",   "contentEncoding", "contentMediaType",
};
// Keywords that constrain in a way this matcher does not follow: refused by name.
const std::set<std::string, std::less<>> kRefused = {
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "prefixItems",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "multipleOf",
    "$dynamicRef",
    "$recursiveRef",
};
// The keywords compile() reads (the rest of a schema object must be an annotation or unknown).
const std::set<std::string, std::less<>> kKnown = {
    "type",
    "pattern",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
};

}  // namespace

class SchemaCompiler {
 public:
  SchemaCompiler(JsonSchema& s, const json& doc) : s_(s), doc_(doc) {}

  void build() {
    // The `any` value: five kinds, each open.
    s_.any_ = add({});
    Node obj;
    obj.kind = Node::kObject;
    obj.additional = s_.any_;
    Node arr;
    arr.kind = Node::kArray;
    arr.items = s_.any_;
    Node str;
    str.kind = Node::kString;
    Node num;
    num.kind = Node::kNumber;
    Node kw;
    kw.kind = Node::kLiterals;
    kw.literals = {"false", "null", "true"};
    const uint32_t o = add(std::move(obj)), a = add(std::move(arr)), st = add(std::move(str)),
                   n = add(std::move(num)), k = add(std::move(kw));
    s_.nodes_[s_.any_].alts = {o, a, st, n, k};
    any_object_ = o;
  }
  uint32_t any_object() const { return any_object_; }

  uint32_t compile(const json& x, const std::string& path) {
    // The document's own nesting is bounded (from_json); $refs can still chain definitions one
    // inside the next, each compiled within the last: bounded here.
    constexpr int kMaxCompileDepth = 512;
    if (depth_ >= kMaxCompileDepth)
      fail(ErrorKind::kBadValue, "schema {}: nested (through $refs) deeper than {} levels", path,
           kMaxCompileDepth);
    ++depth_;
    const uint32_t node = compile_one(x, path);
    --depth_;
    return node;
  }

 private:
  uint32_t compile_one(const json& x, const std::string& path) {
    if (x.is_boolean()) {
      if (!x.get<bool>()) fail(ErrorKind::kBadValue, "schema {}: false (nothing is allowed)", path);
      return s_.any_;
    }
    if (!x.is_object()) fail(ErrorKind::kBadValue, "schema {}: not an object or a boolean", path);
    for (const auto& [key, value] : x.items()) {
      if (kRefused.count(key))
        fail(ErrorKind::kBadValue, "schema {}: '{}' is not supported", path, key);
    }
    const auto has = [&](const char* k) { return x.contains(k); };
    // Keywords that constrain besides `except` (for $ref, allOf, anyOf: refused in combination).
    const auto others = [&](std::initializer_list<const char*> except) {
      for (const auto& item : x.items()) {
        const std::string& key = item.key();
        if (!kKnown.count(key)) continue;
        if (std::find_if(except.begin(), except.end(), [&](const char* e) { return key == e; }) ==
            except.end())
          return key;
      }
      return std::string();
    };
    if (has("$ref")) {
      if (const std::string k = others({"$ref"}); !k.empty())
        fail(ErrorKind::kBadValue, "schema {}: '$ref' with '{}' beside it is not supported", path,
             k);
      if (!x["$ref"].is_string())
        fail(ErrorKind::kBadValue, "schema {}: '$ref' must be a string", path);
      return ref(x["$ref"].get<std::string>(), path);
    }
    if (has("allOf")) {
      const json& all = x["allOf"];
      if (!all.is_array() || all.size() != 1)
        fail(ErrorKind::kBadValue, "schema {}: 'allOf' is supported with exactly one schema", path);
      if (const std::string k = others({"allOf"}); !k.empty())
        fail(ErrorKind::kBadValue, "schema {}: 'allOf' with '{}' beside it is not supported", path,
             k);
      return compile(all[0], path + "/allOf/0");
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (!has(kw)) continue;
      const json& list = x[kw];
      if (!list.is_array() || list.empty())
        fail(ErrorKind::kBadValue, "schema {}: '{}' must be a non-empty array", path, kw);
      if (const std::string k = others({kw}); !k.empty())
        fail(ErrorKind::kBadValue, "schema {}: '{}' with '{}' beside it is not supported", path, kw,
             k);
      Node u;
      for (size_t i = 0; i < list.size(); ++i)
        u.alts.push_back(compile(list[i], fmt::format("{}/{}/{}", path, kw, i)));
      return add(std::move(u));
    }
    if (has("const") || has("enum")) return literals(x, path);
    std::vector<std::string> types;
    if (has("type")) {
      const json& t = x["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& e : t) {
          if (!e.is_string())
            fail(ErrorKind::kBadValue, "schema {}: 'type' must hold type names", path);
          types.push_back(e.get<std::string>());
        }
      } else {
        fail(ErrorKind::kBadValue, "schema {}: 'type' must be a name or a list of names", path);
      }
    } else if (has("properties") || has("required") || has("additionalProperties")) {
      types.push_back("object");
    } else if (has("items") || has("minItems") || has("maxItems")) {
      types.push_back("array");
    } else if (has("minLength") || has("maxLength") || has("pattern")) {
      types.push_back("string");
    } else if (has("minimum") || has("maximum") || has("exclusiveMinimum") ||
               has("exclusiveMaximum")) {
      types.push_back("number");
    } else {
      return s_.any_;
    }
    std::vector<uint32_t> alts;
    for (const std::string& t : types) alts.push_back(typed(x, t, path));
    if (alts.size() == 1) return alts[0];
    Node u;
    u.alts = std::move(alts);
    return add(std::move(u));
  }

 public:
  // Node::depth for every node, by relaxation (recursive schemas converge: depths only fall);
  // a root no finite document satisfies, or one nested past the matcher's limit, is refused.
  void compute_depths(uint32_t root) {
    constexpr uint32_t kInf = UINT32_MAX / 4;
    auto& nodes = s_.nodes_;
    for (Node& n : nodes)
      n.depth =
          n.kind == Node::kUnion || n.kind == Node::kObject || n.kind == Node::kArray ? kInf : 1;
    for (bool changed = true; changed;) {
      changed = false;
      for (Node& n : nodes) {
        uint32_t d = n.depth;
        if (n.kind == Node::kUnion) {
          d = kInf;
          for (uint32_t a : n.alts) d = std::min(d, nodes[a].depth);
        } else if (n.kind == Node::kObject) {
          uint32_t inner = 0;
          for (size_t i = 0; i < n.names.size(); ++i)
            if (n.required & (uint64_t(1) << i)) inner = std::max(inner, nodes[n.props[i]].depth);
          d = std::min(kInf, 1 + inner);
        } else if (n.kind == Node::kArray) {
          d = std::min(kInf, 1 + (n.min > 0 ? nodes[n.items].depth : 0));
        }
        if (d < n.depth) {
          n.depth = d;
          changed = true;
        }
      }
    }
    if (nodes[root].depth >= kInf)
      fail(ErrorKind::kBadValue,
           "schema: no finite document satisfies it (required values "
           "nest without end)");
    if (nodes[root].depth > JsonMatcher::kMaxDepth)
      fail(ErrorKind::kBadValue, "schema: its documents nest deeper than {} levels",
           JsonMatcher::kMaxDepth);
  }

  // Pure alias cycles ($ref to $ref … back) would fork forever: refused.
  void check_alias_cycles() const {
    const size_t n = s_.nodes_.size();
    std::vector<uint8_t> state(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> stack;
    for (uint32_t start = 0; start < n; ++start) {
      if (state[start]) continue;
      stack.push_back({start, 0});
      state[start] = 1;
      while (!stack.empty()) {
        auto& [v, i] = stack.back();
        const Node& node = s_.nodes_[v];
        if (node.kind == Node::kUnion && i < node.alts.size()) {
          const uint32_t w = node.alts[i++];
          if (state[w] == 1)
            fail(ErrorKind::kBadValue,
                 "schema: a $ref cycle with no object or array between (it names no value)");
          if (state[w] == 0) {
            state[w] = 1;
            stack.push_back({w, 0});
          }
        } else {
          state[v] = 2;
          stack.pop_back();
        }
      }
    }
  }

 private:
  // enum / const: the values' compact JSON texts, filtered by a `type` beside them; any other
  // constraining keyword beside them is refused (it would not be checked).
  uint32_t literals(const json& x, const std::string& path) {
    for (const auto& [key, value] : x.items())
      if (kKnown.count(key) && key != "enum" && key != "const" && key != "type")
        fail(ErrorKind::kBadValue,
             "schema {}: 'enum' / 'const' with '{}' beside it is not supported", path, key);
    std::vector<json> values;
    if (x.contains("enum")) {
      if (!x["enum"].is_array() || x["enum"].empty())
        fail(ErrorKind::kBadValue, "schema {}: 'enum' must be a non-empty array", path);
      values.assign(x["enum"].begin(), x["enum"].end());
    }
    if (x.contains("const")) {
      const json& c = x["const"];
      if (x.contains("enum") && std::find(values.begin(), values.end(), c) == values.end())
        fail(ErrorKind::kBadValue, "schema {}: 'const' is not among the 'enum' values", path);
      values = {c};
    }
    if (x.contains("type")) {
      const json& t = x["type"];
      std::vector<std::string> types;
      if (t.is_string()) types.push_back(t.get<std::string>());
      if (t.is_array())
        for (const json& e : t)
          if (e.is_string()) types.push_back(e.get<std::string>());
      const auto of_type = [&](const json& v) {
        for (const std::string& ty : types) {
          if ((ty == "string" && v.is_string()) || (ty == "number" && v.is_number()) ||
              (ty == "integer" && v.is_number_integer()) || (ty == "boolean" && v.is_boolean()) ||
              (ty == "null" && v.is_null()) || (ty == "object" && v.is_object()) ||
              (ty == "array" && v.is_array()))
            return true;
        }
        return false;
      };
      std::erase_if(values, [&](const json& v) { return !of_type(v); });
      if (values.empty())
        fail(ErrorKind::kBadValue, "schema {}: no 'enum' / 'const' value is of its 'type'", path);
    }
    Node lit;
    lit.kind = Node::kLiterals;
    for (const json& v : values) lit.literals.push_back(v.dump());
    std::sort(lit.literals.begin(), lit.literals.end());
    lit.literals.erase(std::unique(lit.literals.begin(), lit.literals.end()), lit.literals.end());
    return add(std::move(lit));
  }

  uint32_t add(Node n) {
    s_.nodes_.push_back(std::move(n));
    return uint32_t(s_.nodes_.size() - 1);
  }

  uint32_t ref(const std::string& r, const std::string& path) {
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    const json* target = nullptr;
    if (r == "#") {
      target = &doc_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string_view p(prefix);
        if (r.compare(0, p.size(), p) != 0) continue;
        const std::string name = r.substr(p.size());
        const std::string section(p.substr(2, p.size() - 3));  // $defs, definitions
        if (!doc_.is_object() || !doc_.contains(section)) continue;
        const json& defs = doc_[section];
        if (defs.is_object() && defs.contains(name)) target = &defs[name];
      }
    }
    if (!target)
      fail(ErrorKind::kBadValue,
           "schema {}: '$ref' \"{}\" names no definition (supported: \"#\", \"#/$defs/NAME\", "
           "\"#/definitions/NAME\")",
           path, r);
    // A one-alternative union stands for the target while it compiles (recursion).
    const uint32_t alias = add({});
    refs_[r] = alias;
    const uint32_t t = compile(*target, r);
    s_.nodes_[alias].alts = {t};
    return alias;
  }

  // An integer bound from a JSON number: integers exactly, others rounded inward (up for a
  // lower bound). Bounds past the 64-bit integers are refused.
  static int64_t bound(const json& v, const std::string& path, const char* kw, bool up) {
    if (!v.is_number()) fail(ErrorKind::kBadValue, "schema {}: '{}' must be a number", path, kw);
    const auto beyond = [&] {
      fail(ErrorKind::kBadValue, "schema {}: '{}' {} is beyond the 64-bit integers", path, kw,
           v.dump());
    };
    if (v.is_number_unsigned()) {
      const auto u = v.get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) beyond();
      return int64_t(u);
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    const double d = up ? std::ceil(v.get<double>()) : std::floor(v.get<double>());
    if (!(d < 9.2233720368547758e18 && d >= -9.2233720368547758e18)) beyond();
    return int64_t(d);
  }

  static uint32_t count(const json& x, const char* kw, const std::string& path, uint32_t dflt) {
    if (!x.contains(kw)) return dflt;
    const json& v = x[kw];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      fail(ErrorKind::kBadValue, "schema {}: '{}' must be a non-negative integer", path, kw);
    return uint32_t(std::min<int64_t>(v.get<int64_t>(), UINT32_MAX));
  }

  uint32_t typed(const json& x, const std::string& t, const std::string& path) {
    Node n;
    if (t == "object") {
      n.kind = Node::kObject;
      std::vector<std::pair<std::string, uint32_t>> props;
      if (x.contains("properties")) {
        const json& p = x["properties"];
        if (!p.is_object())
          fail(ErrorKind::kBadValue, "schema {}: 'properties' must be an object", path);
        if (p.size() > kMaxProperties)
          fail(ErrorKind::kBadValue, "schema {}: {} properties; at most {} an object", path,
               p.size(), kMaxProperties);
        for (const auto& [key, value] : p.items()) {
          std::string name = json(key).dump();
          name = name.substr(1, name.size() - 2);
          props.push_back({name, compile(value, path + "/properties/" + key)});
        }
      }
      if (!x.contains("additionalProperties")) {
        n.additional = x.contains("properties") ? -1 : int64_t(s_.any_);
      } else {
        const json& a = x["additionalProperties"];
        if (a.is_boolean())
          n.additional = a.get<bool>() ? int64_t(s_.any_) : -1;
        else
          n.additional = compile(a, path + "/additionalProperties");
      }
      std::vector<std::string> required;
      if (x.contains("required")) {
        const json& r = x["required"];
        if (!r.is_array())
          fail(ErrorKind::kBadValue, "schema {}: 'required' must be an array", path);
        for (const json& k : r) {
          if (!k.is_string())
            fail(ErrorKind::kBadValue, "schema {}: 'required' must hold strings", path);
          std::string name = json(k.get<std::string>()).dump();
          name = name.substr(1, name.size() - 2);
          if (std::none_of(props.begin(), props.end(),
                           [&](const auto& p) { return p.first == name; })) {
            // Not listed: an additional property that must be there, listed with their schema.
            if (n.additional < 0)
              fail(ErrorKind::kBadValue,
                   "schema {}: required key \"{}\" is not among the properties", path,
                   k.get<std::string>());
            props.push_back({name, uint32_t(n.additional)});
          }
          required.push_back(name);
        }
      }
      if (props.size() > kMaxProperties)
        fail(ErrorKind::kBadValue, "schema {}: {} properties; at most {} an object", path,
             props.size(), kMaxProperties);
      std::sort(props.begin(), props.end());
      for (auto& [name, node] : props) {
        n.names.push_back(name);
        n.props.push_back(node);
      }
      for (const std::string& name : required)
        n.required |=
            uint64_t(1) << (std::find(n.names.begin(), n.names.end(), name) - n.names.begin());
    } else if (t == "array") {
      n.kind = Node::kArray;
      if (x.contains("items")) {
        if (x["items"].is_array())
          fail(ErrorKind::kBadValue, "schema {}: 'items' as an array (tuples) is not supported",
               path);
        n.items = compile(x["items"], path + "/items");
      } else {
        n.items = s_.any_;
      }
      n.min = count(x, "minItems", path, 0);
      n.max = count(x, "maxItems", path, UINT32_MAX);
      if (n.min > n.max)
        fail(ErrorKind::kBadValue, "schema {}: minItems {} > maxItems {}", path, n.min, n.max);
    } else if (t == "string") {
      n.kind = Node::kString;
      n.min = count(x, "minLength", path, 0);
      n.max = count(x, "maxLength", path, UINT32_MAX);
      if (x.contains("pattern")) {
        if (!x["pattern"].is_string())
          fail(ErrorKind::kBadValue, "schema {}: 'pattern' must be a string", path);
        // Lengths and a pattern together could leave no string both allow mid-way.
        if (x.contains("minLength") || x.contains("maxLength"))
          fail(ErrorKind::kBadValue,
               "schema {}: 'pattern' with 'minLength' / 'maxLength' is not supported (put the "
               "length in the pattern: {{n,m}})",
               path);
        try {
          n.pattern = std::make_shared<const JsonPattern>(
              JsonPattern::compile(x["pattern"].get<std::string>()));
        } catch (const Error& e) {
          fail(ErrorKind::kBadValue, "schema {}: {}", path, e.what());
        }
      }
      if (n.min > n.max)
        fail(ErrorKind::kBadValue, "schema {}: minLength {} > maxLength {}", path, n.min, n.max);
      // A `format` OpenAI's structured outputs enforce becomes its pattern, where the string has
      // no pattern or lengths of its own (then, and for other formats, it stays an annotation).
      if (x.contains("format") && x["format"].is_string() && !n.pattern &&
          !x.contains("minLength") && !x.contains("maxLength")) {
        if (const char* re = format_pattern(x["format"].get<std::string>()))
          n.pattern = std::make_shared<const JsonPattern>(JsonPattern::compile(re));
      }
    } else if (t == "integer") {
      n.kind = Node::kInteger;
      if (x.contains("minimum")) {
        n.has_lo = true;
        n.lo = bound(x["minimum"], path, "minimum", true);
      }
      if (x.contains("maximum")) {
        n.has_hi = true;
        n.hi = bound(x["maximum"], path, "maximum", false);
      }
      // Draft 4's boolean form (minimum exclusive) and the numeric one (2019+).
      if (x.contains("exclusiveMinimum")) {
        const json& e = x["exclusiveMinimum"];
        if (e.is_boolean()) {
          if (e.get<bool>() && n.has_lo && double(n.lo) == x["minimum"].get<double>()) ++n.lo;
        } else {
          const int64_t e0 = bound(e, path, "exclusiveMinimum", false);
          const int64_t b = e0 == INT64_MAX ? e0 : e0 + 1;
          n.lo = n.has_lo ? std::max(n.lo, b) : b;
          n.has_lo = true;
        }
      }
      if (x.contains("exclusiveMaximum")) {
        const json& e = x["exclusiveMaximum"];
        if (e.is_boolean()) {
          if (e.get<bool>() && n.has_hi && double(n.hi) == x["maximum"].get<double>()) --n.hi;
        } else {
          const int64_t e0 = bound(e, path, "exclusiveMaximum", true);
          const int64_t b = e0 == INT64_MIN ? e0 : e0 - 1;
          n.hi = n.has_hi ? std::min(n.hi, b) : b;
          n.has_hi = true;
        }
      }
      if (n.has_lo && n.has_hi && n.lo > n.hi)
        fail(ErrorKind::kBadValue, "schema {}: no integer lies within its bounds", path);
    } else if (t == "number") {
      n.kind = Node::kNumber;
      // Bounds as doubles (what a JSON parser makes of them), within a window a 40-character
      // number without an exponent can meet.
      const auto fbound = [&](const json& v, const char* kw) {
        if (!v.is_number())
          fail(ErrorKind::kBadValue, "schema {}: '{}' must be a number", path, kw);
        const double d = v.get<double>();
        const double a = std::fabs(d);
        if (!(a == 0 ||
              (a >= 1 / JsonSchema::kNumberBoundLimit && a <= JsonSchema::kNumberBoundLimit)))
          fail(ErrorKind::kBadValue,
               "schema {}: '{}' {} is beyond what a bounded number is checked for (0, or 1e-15 "
               "to 1e15 in magnitude)",
               path, kw, v.dump());
        return d;
      };
      if (x.contains("minimum")) {
        n.has_lo = true;
        n.flo = fbound(x["minimum"], "minimum");
      }
      if (x.contains("maximum")) {
        n.has_hi = true;
        n.fhi = fbound(x["maximum"], "maximum");
      }
      if (x.contains("exclusiveMinimum")) {
        const json& e = x["exclusiveMinimum"];
        if (e.is_boolean()) {
          n.lo_excl = e.get<bool>() && n.has_lo;  // draft 4: minimum is exclusive
        } else {
          const double v = fbound(e, "exclusiveMinimum");
          if (!n.has_lo || v >= n.flo) {
            n.flo = v;
            n.lo_excl = true;
          }
          n.has_lo = true;
        }
      }
      if (x.contains("exclusiveMaximum")) {
        const json& e = x["exclusiveMaximum"];
        if (e.is_boolean()) {
          n.hi_excl = e.get<bool>() && n.has_hi;
        } else {
          const double v = fbound(e, "exclusiveMaximum");
          if (!n.has_hi || v <= n.fhi) {
            n.fhi = v;
            n.hi_excl = true;
          }
          n.has_hi = true;
        }
      }
      // Some double must lie within (the matcher's ranges are then at least an ulp wide).
      if (n.has_lo && n.has_hi &&
          (n.lo_excl ? std::nextafter(n.flo, INFINITY) : n.flo) >
              (n.hi_excl ? std::nextafter(n.fhi, -INFINITY) : n.fhi))
        fail(ErrorKind::kBadValue, "schema {}: no number lies within its bounds", path);
    } else if (t == "boolean") {
      n.kind = Node::kLiterals;
      n.literals = {"false", "true"};
    } else if (t == "null") {
      n.kind = Node::kLiterals;
      n.literals = {"null"};
    } else {
      fail(ErrorKind::kBadValue,
           "schema {}: unknown type \"{}\" (object, array, string, number, integer, boolean, "
           "null)",
           path, t);
    }
    return add(std::move(n));
  }

  JsonSchema& s_;
  const json& doc_;
  std::map<std::string, uint32_t> refs_;
  int depth_ = 0;  // compile()'s recursion
  uint32_t any_object_ = 0;
};

std::shared_ptr<const JsonSchema> JsonSchema::any_value() {
  auto s = std::make_shared<JsonSchema>();
  const json empty;
  SchemaCompiler c(*s, empty);
  c.build();
  s->root_ = s->any_;
  c.compute_depths(s->root_);
  return s;
}

std::shared_ptr<const JsonSchema> JsonSchema::any_object() {
  auto s = std::make_shared<JsonSchema>();
  const json empty;
  SchemaCompiler c(*s, empty);
  c.build();
  s->root_ = c.any_object();
  c.compute_depths(s->root_);
  return s;
}

std::shared_ptr<const JsonSchema> JsonSchema::parse(std::string_view schema_json) {
  json doc;
  try {
    doc = json::parse(schema_json);
  } catch (const json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 9: …": from "parse error".
    const std::string what = e.what();
    const size_t at = what.find("parse error");
    fail(ErrorKind::kBadValue, "schema: not valid JSON ({})",
         at == std::string::npos ? what : what.substr(at));
  }
  return from_json(doc);
}

namespace {

// Whether `doc` nests deeper than `limit` levels (iteratively: nothing recurses into it first).
bool nests_deeper(const json& doc, size_t limit) {
  std::vector<std::pair<const json*, size_t>> todo = {{&doc, 1}};
  while (!todo.empty()) {
    const auto [v, depth] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    if (depth > limit) return true;
    for (const json& child : *v) todo.push_back({&child, depth + 1});
  }
  return false;
}

}  // namespace

std::shared_ptr<const JsonSchema> JsonSchema::from_json(const json& doc) {
  if (nests_deeper(doc, kMaxSchemaDepth))
    fail(ErrorKind::kBadValue, "schema: nested deeper than {} levels", kMaxSchemaDepth);
  auto s = std::make_shared<JsonSchema>();
  SchemaCompiler c(*s, doc);
  c.build();
  s->root_ = c.compile(doc, "#");
  c.check_alias_cycles();
  c.compute_depths(s->root_);
  return s;
}

// ---- the matcher ----

namespace {

enum FrameType : uint8_t { kValue, kObject, kArray, kString, kNumber, kLiteral };
// Phases. Object: before '{', after '{', in a key, before ':', after a value, after ','.
enum : uint8_t { kObjFirst, kObjOpen, kObjKey, kObjColon, kObjAfter, kObjComma };
enum : uint8_t { kArrFirst, kArrOpen, kArrAfter, kArrComma };
enum : uint8_t { kStrFirst, kStrIn };
enum : uint8_t {
  kNumFirst,
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumE,
  kNumESign,
  kNumEDigits
};

constexpr uint32_t kMaxExponentDigits = 2;  // 1e99 at most: no double overflows

bool is_ws(uint8_t b) {
  return b == ' ' || b == '\n' || b == '\t' || b == '\r';
}
bool is_digit(uint8_t b) {
  return b >= '0' && b <= '9';
}
// The values a \u escape with f.esc - 1 hex digits still to come can end at, [lo, hi].
std::pair<uint32_t, uint32_t> escape_range(const JsonMatcher::Frame& f) {
  const int shift = 4 * (f.esc - 1);
  const uint32_t lo = uint32_t(f.hex) << shift;
  return {lo, lo + (1u << shift) - 1};
}

// One byte of a JSON string's body (not its closing quote): escapes (\u surrogates in pairs),
// well-formed UTF-8, no control bytes. A character starting counts against `max` (code points:
// an escape is one, a surrogate pair one).
bool lex_string(JsonMatcher::Frame& f, uint8_t b, uint32_t max) {
  if (f.esc == 1) {
    if (b == 'u') {
      f.esc = 5;
      f.hex = 0;
      return true;
    }
    if (f.surr == 2) return false;  // a high surrogate's partner must be a \u escape
    if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' ||
        b == 't') {
      f.esc = 0;
      return true;
    }
    return false;
  }
  if (f.esc >= 2) {
    const int d = hex_digit(b);
    if (d < 0) return false;
    f.hex = uint16_t(f.hex * 16 + d);
    if (f.esc > 2) {
      --f.esc;
      // The values the escape can still end at: a low surrogate's partner must land in
      // DC00-DFFF, any other escape outside it (a low surrogate alone is not text).
      const auto [lo, hi] = escape_range(f);
      if (f.surr == 2) return hi >= 0xDC00 && lo <= 0xDFFF;
      return lo < 0xDC00 || hi > 0xDFFF;
    }
    f.esc = 0;
    const bool high = f.hex >= 0xD800 && f.hex <= 0xDBFF, low = f.hex >= 0xDC00 && f.hex <= 0xDFFF;
    if (f.surr == 2) {
      f.surr = 0;
      return low;
    }
    if (low) return false;  // a low surrogate alone
    if (high) f.surr = 1;
    return true;
  }
  if (f.surr == 1) {  // after a high surrogate only its low partner's "\u" may come
    if (b != '\\') return false;
    f.esc = 1;
    f.surr = 2;
    return true;
  }
  if (f.utf8 > 0) {
    // The first continuation byte (f.lead still set) as strict UTF-8 narrows it.
    const ByteRange r = f.lead ? utf8_second_byte(f.lead) : ByteRange{0x80, 0xBF};
    if (b < r.lo || b > r.hi) return false;
    f.lead = 0;
    --f.utf8;
    return true;
  }
  if (b < 0x20 || (b >= 0x80 && b < 0xC2) || b > 0xF4) return false;
  if (f.count >= max) return false;
  ++f.count;
  if (b == '\\')
    f.esc = 1;
  else if (b >= 0xF0)
    f.utf8 = 3;
  else if (b >= 0xE0)
    f.utf8 = 2;
  else if (b >= 0xC2)
    f.utf8 = 1;
  if (b >= 0xC2) f.lead = b;
  return true;
}

// A byte of a string with a pattern: lex_string's checks, then the code point it completes steps
// the pattern's positions (Frame::used). While a character is still being written (UTF-8 bytes,
// a \u escape, a surrogate pair) the code points it can still become must include one the
// pattern can take. Frame::hi gathers UTF-8 bits, Frame::lo holds a high surrogate.
bool lex_pattern_string(JsonMatcher::Frame& f, uint8_t b, const JsonPattern& p) {
  const JsonMatcher::Frame before = f;
  if (!lex_string(f, b, UINT32_MAX)) return false;
  int64_t cp = -1;
  if (before.esc == 1) {  // b names the escape
    switch (b) {
      case 'b':
        cp = '\b';
        break;
      case 'f':
        cp = '\f';
        break;
      case 'n':
        cp = '\n';
        break;
      case 'r':
        cp = '\r';
        break;
      case 't':
        cp = '\t';
        break;
      case 'u':
        break;
      default:
        cp = b;  // " \ /
    }
  } else if (before.esc >= 2) {
    if (f.esc == 0) {  // the fourth hex digit
      if (before.surr == 2)
        cp = 0x10000 + ((int64_t(f.lo) - 0xD800) << 10) + (int64_t(f.hex) - 0xDC00);
      else if (f.surr == 1)
        f.lo = f.hex;  // a high surrogate: its partner follows
      else
        cp = f.hex;
    }
  } else if (before.utf8 > 0) {
    f.hi = f.hi << 6 | (b & 0x3F);
    if (f.utf8 == 0) cp = f.hi;
  } else if (before.surr != 1 && b != '\\') {
    if (b < 0x80)
      cp = b;
    else
      f.hi = b & (b >= 0xF0 ? 0x07 : b >= 0xE0 ? 0x0F : 0x1F);
  }
  if (cp >= 0) {
    f.used = p.step(f.used, uint32_t(cp));
    return f.used != 0;
  }
  // A character under way: the code points it can still end as.
  const auto supplementary = [](uint32_t high_lo, uint32_t high_hi) {
    return std::pair<uint32_t, uint32_t>{0x10000 + ((high_lo - 0xD800) << 10),
                                         0x10000 + ((high_hi - 0xD800) << 10) + 0x3FF};
  };
  if (f.utf8 > 0) {
    const int bits = 6 * f.utf8;
    uint32_t lo = f.hi << bits, hi = std::min((f.hi << bits) | ((1u << bits) - 1), 0x10FFFFu);
    // Right after the lead byte its bits alone allow overlong values; the sequence's length
    // sets the least code point (the continuations then keep to it).
    if (f.lead) lo = std::max(lo, f.utf8 == 1 ? 0x80u : f.utf8 == 2 ? 0x800u : 0x10000u);
    if (f.lead == 0xED) hi = std::min(hi, 0xD7FFu);  // not the UTF-16 surrogates
    return lo <= hi && p.can_step(f.used, lo, hi);
  }
  if (f.surr == 1) {  // a high surrogate written: its pair's range
    const auto [lo, hi] = supplementary(f.lo, f.lo);
    return p.can_step(f.used, lo, hi);
  }
  if (f.esc == 1) {
    if (f.surr == 2) {
      const auto [lo, hi] = supplementary(f.lo, f.lo);
      return p.can_step(f.used, lo, hi);
    }
    // \u can write any code point but a lone surrogate.
    return p.can_step(f.used, 0, 0xD7FF) || p.can_step(f.used, 0xE000, 0x10FFFF);
  }
  if (f.esc >= 2) {  // hex digits so far: the escape's range of values
    const auto [lo, hi] = escape_range(f);
    if (f.surr == 2) {  // the low partner: the pair's code points
      const uint32_t a = std::max(lo, 0xDC00u), z = std::min(hi, 0xDFFFu);
      const uint32_t base = 0x10000 + ((f.lo - 0xD800) << 10);
      return a <= z && p.can_step(f.used, base + (a - 0xDC00), base + (z - 0xDC00));
    }
    bool ok = false;
    if (lo <= 0xD7FF) ok = ok || p.can_step(f.used, lo, std::min(hi, 0xD7FFu));
    if (hi >= 0xE000) ok = ok || p.can_step(f.used, std::max(lo, 0xE000u), hi);
    if (lo <= 0xDBFF && hi >= 0xD800) {
      const auto [a, z] = supplementary(std::max(lo, 0xD800u), std::min(hi, 0xDBFFu));
      ok = ok || p.can_step(f.used, a, z);
    }
    return ok;
  }
  return true;
}

bool string_open(const JsonMatcher::Frame& f) {
  return f.esc || f.utf8 || f.surr;
}

constexpr uint64_t kBig = 10'000'000'000'000'000'000u;       // 1e19: past every int64 bound
constexpr uint64_t kSignificant = 100'000'000'000'000'000u;  // 1e17: a bounded number's digits

// Some integer m·10^k + r (r < 10^k, k >= 0; k = 0 only when `closed` or m = 0) with the sign
// lies in [lo, hi]. m >= kBig stands for "at least kBig", beyond every bound.
bool integer_feasible(const Node& n, bool negative, uint64_t m, bool closed) {
  if (!n.has_lo && !n.has_hi) return true;
  if (m >= kBig) return negative ? !n.has_lo : !n.has_hi;
  const __int128 lo = n.has_lo ? __int128(n.lo) : -(__int128(1) << 100);
  const __int128 hi = n.has_hi ? __int128(n.hi) : (__int128(1) << 100);
  __int128 scale = 1;
  for (int k = 0; k <= 20; ++k) {
    const __int128 a = __int128(m) * scale, b = a + scale - 1;
    const __int128 vlo = negative ? -b : a, vhi = negative ? -a : b;
    if (vlo <= hi && vhi >= lo) return true;
    if (closed || m == 0) break;             // "0" takes no more digits
    if (negative ? -a < lo : a > hi) break;  // further digits only go further away
    scale *= 10;
  }
  return false;
}

// A bounded number's digits so far, value · 10^e10 (a division for the fraction: exact powers
// of ten up to 10^27 in long double, so x is correctly rounded).
long double magnitude(const JsonMatcher::Frame& f) {
  const auto m = static_cast<long double>(f.value);
  return f.e10 >= 0 ? m * std::pow(10.0L, f.e10) : m / std::pow(10.0L, -f.e10);
}

uint64_t fnv(uint64_t h, uint8_t b) {
  return (h ^ b) * 0x100000001b3ull;
}
constexpr uint64_t kFnvStart = 0xcbf29ce484222325ull;

}  // namespace

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonSchema> schema) : schema_(std::move(schema)) {
  alive_.resize(1);
  alive_[0].frames.push_back(Frame{.node = schema_->root(), .type = kValue});
  n_alive_ = 1;
}

JsonMatcher& JsonMatcher::operator=(const JsonMatcher& o) {
  if (this == &o) return *this;
  if (schema_ != o.schema_) schema_ = o.schema_;
  if (alive_.size() < o.n_alive_) alive_.resize(o.n_alive_);
  for (size_t i = 0; i < o.n_alive_; ++i) alive_[i] = o.alive_[i];
  n_alive_ = o.n_alive_;
  return *this;
}

// A value of `node` opened above `depth` frames fits under kMaxDepth (node < 0: none).
bool JsonMatcher::fits(int64_t node, size_t depth) const {
  return node >= 0 && depth + schema_->node(uint32_t(node)).depth <= kMaxDepth;
}

// Another key may come: an additional one, or a listed one not given yet, whose value fits.
bool JsonMatcher::key_possible(const Frame& f, size_t depth) const {
  const Node& n = schema_->node(f.node);
  if (fits(n.additional, depth)) return true;
  for (size_t i = 0; i < n.names.size(); ++i)
    if (!(f.used & (uint64_t(1) << i)) && fits(n.props[i], depth)) return true;
  return false;
}

bool JsonMatcher::can_close(const Frame& f) const {
  const Node& n = schema_->node(f.node);
  return (f.used & n.required) == n.required;
}

bool JsonMatcher::can_end(const Frame& f) const {
  const Node& n = schema_->node(f.node);
  if (f.type == kNumber) {
    if (f.phase != kNumZero && f.phase != kNumInt && f.phase != kNumFrac && f.phase != kNumEDigits)
      return false;
    if (n.kind == Node::kInteger) return integer_feasible(n, f.esc != 0, f.value, true);
    if (!n.has_lo && !n.has_hi) return true;
    const long double x = f.esc ? -magnitude(f) : magnitude(f);
    return meets(n, x, false, x, false);
  }
  if (f.type == kLiteral) return f.count > 0 && n.literals[f.lo].size() == f.count;
  return false;
}

// Whether a number frame can take another byte (tried on a copy).
bool JsonMatcher::number_can_go_on(const Frame& f) const {
  const Node& n = schema_->node(f.node);
  for (const uint8_t b : std::string_view("0123456789.eE+-")) {
    Frame g = f;
    if (take_number(g, n, b) == NumberStep::kTaken) return true;
  }
  return false;
}

// A literal frame that has matched one literal whole, with no longer one left, ends now (its
// last byte closed it), as does a number no byte may continue (an integer at its bound, 40
// characters). The top-level value ended: the stack is done.
void JsonMatcher::settle(Stack& s) const {
  if (!s.frames.empty()) {
    const Frame& f = s.frames.back();
    if (f.type == kLiteral && f.hi == f.lo + 1 && can_end(f))
      s.frames.pop_back();
    else if (f.type == kNumber && can_end(f) && !number_can_go_on(f))
      s.frames.pop_back();
  }
  s.done = s.frames.empty();
}

void JsonMatcher::emit(const Stack& s) {
  for (size_t i = 0; i < n_next_; ++i)
    if (next_[i] == s) return;
  if (n_next_ < next_.size())
    next_[n_next_] = s;
  else
    next_.push_back(s);
  ++n_next_;
}

// The value of `node` starts with byte b (not whitespace) on top of s: a union forks into one
// stack per alternative whose first byte b can be (each emitted); a concrete node pushes its
// frame and takes b. Returns whether s itself is to be emitted.
bool JsonMatcher::open_value(Stack& s, uint32_t node, uint8_t b) {
  const Node& n = schema_->node(node);
  if (n.kind == Node::kUnion) {
    for (uint32_t alt : n.alts) {
      Stack c = s;
      if (open_value(c, alt, b)) {
        c.ws = 0;
        settle(c);
        emit(c);
      }
    }
    return false;
  }
  if (s.frames.size() + n.depth > kMaxDepth) return false;
  Frame f{.node = node};
  switch (n.kind) {
    case Node::kObject:
      f.type = kObject;
      break;
    case Node::kArray:
      f.type = kArray;
      break;
    case Node::kString:
      f.type = kString;
      break;
    case Node::kNumber:
    case Node::kInteger:
      f.type = kNumber;
      break;
    case Node::kLiterals:
      f.type = kLiteral;
      f.hi = uint32_t(n.literals.size());
      break;
    case Node::kUnion:
      break;
  }
  s.frames.push_back(f);
  return consume(s, b);
}

// One byte of a number: taken (the frame moves on), refused (a number byte, but no completion
// could then be valid), or not a number byte at all (the number may end before it).
JsonMatcher::NumberStep JsonMatcher::take_number(Frame& f, const Node& n, uint8_t b) const {
  const bool integer = n.kind == Node::kInteger;
  const bool bounded = n.has_lo || n.has_hi;
  uint8_t next = 0xFF;  // the phase b leads to; 0xFF: b is not part of the number
  const bool exponent_ok = !integer && !bounded;  // a bounded number is written without one
  switch (f.phase) {
    case kNumFirst:
      next = b == '-' ? kNumMinus : b == '0' ? kNumZero : is_digit(b) ? kNumInt : 0xFF;
      break;
    case kNumMinus:
      next = b == '0' ? kNumZero : is_digit(b) ? kNumInt : 0xFF;
      break;
    case kNumZero:
    case kNumInt:
      if (is_digit(b) && f.phase == kNumInt)
        next = kNumInt;
      else if (b == '.' && !integer)
        next = kNumDot;
      else if ((b == 'e' || b == 'E') && exponent_ok)
        next = kNumE;
      break;
    case kNumDot:
      if (is_digit(b)) next = kNumFrac;
      break;
    case kNumFrac:
      if (is_digit(b))
        next = kNumFrac;
      else if ((b == 'e' || b == 'E') && exponent_ok)
        next = kNumE;
      break;
    case kNumE:
      if (b == '+' || b == '-')
        next = kNumESign;
      else if (is_digit(b))
        next = kNumEDigits;
      break;
    case kNumESign:
      if (is_digit(b)) next = kNumEDigits;
      break;
    case kNumEDigits:
      if (is_digit(b) && f.hex < kMaxExponentDigits) next = kNumEDigits;
      break;
  }
  if (next == 0xFF) return NumberStep::kNotNumber;
  if (f.count >= kMaxNumberChars) return NumberStep::kRefused;
  // A byte after which the number cannot end yet ('-', '.', 'e', the exponent's sign) needs room
  // for one more.
  const bool unfinished =
      next == kNumMinus || next == kNumDot || next == kNumE || next == kNumESign;
  if (unfinished && f.count + 1 >= kMaxNumberChars) return NumberStep::kRefused;
  ++f.count;
  if (next == kNumEDigits) ++f.hex;  // exponent digits
  if (next == kNumMinus) f.esc = 1;  // negative
  if (integer) {
    if (next == kNumMinus && n.has_lo && n.lo > 0) return NumberStep::kRefused;
    if (next == kNumInt || next == kNumZero) {
      f.value = f.value >= kBig / 10 ? kBig : f.value * 10 + uint64_t(b - '0');
      if (!integer_feasible(n, f.esc != 0, f.value, next == kNumZero)) return NumberStep::kRefused;
    }
  } else if (bounded) {
    // The digits as m · 10^e10, exactly: a bounded number has at most 17 significant digits (a
    // double's precision; zeros after them are fine), so m < 10^17 and its value is decided
    // without rounding doubts.
    if (is_digit(b)) {
      if (f.value >= kSignificant / 10) {
        // 17 digits already: only a zero may follow — in the fraction it changes nothing, in the
        // integer part it scales the value.
        if (b != '0') return NumberStep::kRefused;
        if (next != kNumFrac) ++f.e10;
      } else {
        f.value = f.value * 10 + uint64_t(b - '0');
        if (next == kNumFrac) --f.e10;
      }
    }
    f.phase = next;
    if (!number_feasible(f, n)) return NumberStep::kRefused;
  }
  f.phase = next;
  return NumberStep::kTaken;
}

// Whether some signed value in the interval from a to b (each end open or closed) reads, as a
// double, within the node's bounds. The bounds are widened by half a double's ulp (what a JSON
// parser rounds onto them), so a value written as the bound's decimal text is within.
bool JsonMatcher::meets(const Node& n, long double a, bool a_open, long double b,
                        bool b_open) const {
  long double lo = -INFINITY, hi = INFINITY;
  bool lo_open = true, hi_open = true;
  if (n.has_lo) {
    const double v = n.flo;
    const double side = n.lo_excl ? std::nextafter(v, INFINITY) : std::nextafter(v, -INFINITY);
    lo = (static_cast<long double>(v) + side) / 2;
    lo_open = n.lo_excl;
  }
  if (n.has_hi) {
    const double v = n.fhi;
    const double side = n.hi_excl ? std::nextafter(v, -INFINITY) : std::nextafter(v, INFINITY);
    hi = (static_cast<long double>(v) + side) / 2;
    hi_open = n.hi_excl;
  }
  // The larger lower end and the smaller upper end; equal ends meet only if both are closed.
  long double low = a;
  bool low_open = a_open;
  if (lo > low || (lo == low && lo_open)) {
    low = lo;
    low_open = lo_open;
  }
  long double high = b;
  bool high_open = b_open;
  if (hi < high || (hi == high && hi_open)) {
    high = hi;
    high_open = hi_open;
  }
  return low < high || (low == high && !low_open && !high_open);
}

// A bounded number's prefix: whether some completion within the character cap and the 17
// significant digits is in bounds. (Within 17 digits the values a completion can reach are finer
// than a double's ulp near any bound of the allowed window, so the reachable intervals may be
// taken whole.)
bool JsonMatcher::number_feasible(const Frame& f, const Node& n) const {
  const bool neg = f.esc != 0;
  int digits = 17;  // significant digits still allowed
  for (uint64_t m = f.value; m > 0; m /= 10) --digits;
  const int chars = int(kMaxNumberChars) - int(f.count);  // characters still allowed
  // Magnitudes [a, b) (b open) as signed values: integer digits still to come.
  const auto span = [&](long double a, long double b) {
    return neg ? meets(n, -b, true, -a, false) : meets(n, a, false, b, true);
  };
  // The magnitudes x + i·g for 0 <= i < step / g (fraction digits still to come, g the last
  // one's unit): their range is closed at both ends, and the allowed range is at least a
  // double's ulp wide while g is finer (17 significant digits), so meeting it means a reachable
  // value lies in it.
  const auto grid = [&](long double x, long double step, long double g) {
    const long double top = x + step - g;
    return neg ? meets(n, -top, false, -x, false) : meets(n, x, false, top, false);
  };
  const long double x = magnitude(f);
  // Fraction digits that may still come after the digits so far (leading zeros are free).
  const auto frac_digits = [&](int chars_left) {
    return f.value == 0 ? chars_left : std::min(chars_left, digits);
  };
  switch (f.phase) {
    case kNumMinus:
      return chars >= 1 && span(0, INFINITY);
    case kNumZero: {  // "0", or "0." and digits
      const int d = frac_digits(chars - 1);
      return grid(0, 1, d >= 1 ? std::pow(10.0L, -d) : 1);
    }
    case kNumInt: {
      const int d = frac_digits(chars - 1);
      if (grid(x, 1, d >= 1 ? std::pow(10.0L, -d) : 1)) return true;
      long double scale = 1;
      for (int j = 1; j <= chars; ++j) {  // more integer digits
        scale *= 10;
        if (span(x * scale, (x + 1) * scale)) return true;
      }
      return false;
    }
    case kNumDot: {  // a digit must follow
      const int d = frac_digits(chars);
      return d >= 1 ? grid(x, 1, std::pow(10.0L, -d)) : (chars >= 1 && grid(x, 0, 0));
    }
    case kNumFrac: {
      const int d = frac_digits(chars);
      const long double unit = std::pow(10.0L, f.e10);  // the last digit's
      return grid(x, unit, d >= 1 ? unit * std::pow(10.0L, -d) : unit);
    }
  }
  return false;
}

bool JsonMatcher::consume(Stack& s, uint8_t b) {
  for (;;) {
    if (s.frames.empty()) return false;  // nothing follows the top-level value
    Frame& f = s.frames.back();
    const Node& n = schema_->node(f.node);
    const auto take_ws = [&] {
      ws_consumed_ = true;
      return ++s.ws <= kMaxWhitespace;
    };
    const auto push_value = [&](uint32_t node) {
      if (s.frames.size() >= kMaxDepth) return false;
      s.frames.push_back(Frame{.node = node, .type = kValue});
      return true;
    };
    switch (f.type) {
      case kValue: {
        if (is_ws(b)) return take_ws();
        const uint32_t node = f.node;
        s.frames.pop_back();
        return open_value(s, node, b);  // false for a union: its branches emitted themselves
      }
      case kObject:
        switch (f.phase) {
          case kObjFirst:
            if (b != '{') return false;
            f.phase = kObjOpen;
            f.keys_at = uint32_t(s.keys.size());
            return true;
          case kObjOpen:
          case kObjComma:
            if (is_ws(b)) return take_ws();
            if (b == '"' && key_possible(f, s.frames.size())) {
              f.phase = kObjKey;
              f.lo = 0;
              f.hi = uint32_t(n.names.size());
              f.count = 0;
              f.esc = f.utf8 = f.lead = f.surr = 0;
              f.value = kFnvStart;
              return true;
            }
            if (b == '}' && f.phase == kObjOpen && can_close(f)) {
              s.keys.resize(f.keys_at);
              s.frames.pop_back();
              return true;
            }
            return false;
          case kObjKey: {
            if (b == '"' && !string_open(f)) {
              // The key ends: a listed property (once), else an additional one (once).
              for (uint32_t i = f.lo; i < f.hi; ++i) {
                if (n.names[i].size() != f.count) continue;
                if (f.used & (uint64_t(1) << i)) return false;  // given already
                if (!fits(n.props[i], s.frames.size())) return false;
                f.used |= uint64_t(1) << i;
                f.value = n.props[i];
                f.phase = kObjColon;
                return true;
              }
              if (!fits(n.additional, s.frames.size())) return false;
              for (size_t i = f.keys_at; i < s.keys.size(); ++i)
                if (s.keys[i] == f.value) return false;
              s.keys.push_back(f.value);
              f.value = uint64_t(n.additional);
              f.phase = kObjColon;
              return true;
            }
            const uint32_t at = f.count;
            const uint32_t chars = f.count;
            if (!lex_string(f, b, UINT32_MAX)) return false;
            f.count = chars + 1;  // here: bytes matched, not characters
            f.value = fnv(f.value, b);
            uint32_t lo = f.hi, hi = f.lo;
            for (uint32_t i = f.lo; i < f.hi; ++i) {
              const std::string& name = n.names[i];
              if (name.size() > at && uint8_t(name[at]) == b) {
                lo = std::min(lo, i);
                hi = i + 1;
              }
            }
            if (lo >= hi) lo = hi = 0;
            f.lo = lo;
            f.hi = hi;
            if (fits(n.additional, s.frames.size())) return true;
            for (uint32_t i = lo; i < hi; ++i)
              if (!(f.used & (uint64_t(1) << i)) && fits(n.props[i], s.frames.size())) return true;
            return false;
          }
          case kObjColon: {
            if (is_ws(b)) return take_ws();
            if (b != ':') return false;
            const auto node = uint32_t(f.value);
            f.phase = kObjAfter;
            return push_value(node);
          }
          case kObjAfter:
            if (is_ws(b)) return take_ws();
            if (b == ',' && key_possible(f, s.frames.size())) {
              f.phase = kObjComma;
              return true;
            }
            if (b == '}' && can_close(f)) {
              s.keys.resize(f.keys_at);
              s.frames.pop_back();
              return true;
            }
            return false;
        }
        return false;
      case kArray:
        switch (f.phase) {
          case kArrFirst:
            if (b != '[') return false;
            f.phase = kArrOpen;
            f.count = 0;
            return true;
          case kArrOpen:
          case kArrComma:
            if (is_ws(b)) return take_ws();
            if (b == ']' && f.phase == kArrOpen && n.min == 0) {
              s.frames.pop_back();
              return true;
            }
            if (f.count >= n.max || !fits(n.items, s.frames.size())) return false;
            ++f.count;
            f.phase = kArrAfter;
            if (!push_value(n.items)) return false;
            continue;  // the item takes b
          case kArrAfter:
            if (is_ws(b)) return take_ws();
            if (b == ',' && f.count < n.max && fits(n.items, s.frames.size())) {
              f.phase = kArrComma;
              return true;
            }
            if (b == ']' && f.count >= n.min) {
              s.frames.pop_back();
              return true;
            }
            return false;
        }
        return false;
      case kString:
        if (f.phase == kStrFirst) {
          if (b != '"') return false;
          f.phase = kStrIn;
          if (n.pattern) f.used = n.pattern->start();
          return true;
        }
        if (b == '"' && !string_open(f)) {
          if (f.count < n.min) return false;
          if (n.pattern && !n.pattern->accepts(f.used)) return false;
          s.frames.pop_back();
          return true;
        }
        if (!n.pattern) return lex_string(f, b, n.max);
        return lex_pattern_string(f, b, *n.pattern);
      case kNumber:
        switch (take_number(f, n, b)) {
          case NumberStep::kTaken:
            return true;
          case NumberStep::kRefused:
            return false;
          case NumberStep::kNotNumber:
            // The number ends here if it may, and b goes to the parent.
            if (f.phase == kNumFirst || !can_end(f)) return false;
            s.frames.pop_back();
            continue;
        }
        return false;
      case kLiteral: {
        const auto at = f.count;
        uint32_t lo = f.hi, hi = f.lo;
        for (uint32_t i = f.lo; i < f.hi; ++i) {
          const std::string& lit = n.literals[i];
          if (lit.size() > at && uint8_t(lit[at]) == b) {
            lo = std::min(lo, i);
            hi = i + 1;
          }
        }
        if (lo < hi) {
          f.lo = lo;
          f.hi = hi;
          ++f.count;
          return true;
        }
        if (!can_end(f)) return false;
        s.frames.pop_back();
        continue;  // a whole literal, and b goes to the parent
      }
    }
    return false;
  }
}

void JsonMatcher::step(Stack& s, uint8_t b) {
  ws_consumed_ = false;
  if (!consume(s, b)) return;  // rejected, or forked (the branches emitted themselves)
  if (!ws_consumed_) s.ws = 0;
  settle(s);
  emit(s);
}

bool JsonMatcher::feed(uint8_t b) {
  n_next_ = 0;
  if (n_alive_ == 1) {
    // One stack (no anyOf branch open, the usual case): stepped in place, no copies. A rejected
    // byte leaves it half-stepped, which is fine: the matcher is dead then.
    Stack& s = alive_[0];
    ws_consumed_ = false;
    if (consume(s, b)) {
      if (!ws_consumed_) s.ws = 0;
      settle(s);
      return true;
    }
    // Rejected, or forked into branches that emitted themselves.
    std::swap(alive_, next_);
    n_alive_ = n_next_;
    return n_alive_ > 0;
  }
  for (size_t i = 0; i < n_alive_; ++i) {
    work_ = alive_[i];
    step(work_, b);
  }
  std::swap(alive_, next_);
  n_alive_ = n_next_;
  return n_alive_ > 0;
}

bool JsonMatcher::feed(std::string_view bytes) {
  for (const char c : bytes)
    if (!feed(uint8_t(c))) return false;
  return n_alive_ > 0;
}

bool JsonMatcher::accepting() const {
  for (size_t i = 0; i < n_alive_; ++i) {
    const Stack& s = alive_[i];
    if (s.frames.empty() || (s.frames.size() == 1 && can_end(s.frames[0]))) return true;
  }
  return false;
}

uint32_t JsonMatcher::plain_string_room() const {
  if (n_alive_ != 1 || alive_[0].frames.empty()) return 0;
  const Frame& f = alive_[0].frames.back();
  if (f.type != kString || f.phase != kStrIn || string_open(f)) return 0;
  const Node& n = schema_->node(f.node);
  return n.pattern ? 0 : n.max - f.count;
}

bool JsonMatcher::finished() const {
  if (n_alive_ == 0) return false;
  for (size_t i = 0; i < n_alive_; ++i)
    if (!alive_[i].frames.empty()) return false;
  return true;
}

}  // namespace strata::engine
