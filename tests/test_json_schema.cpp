// JsonSchema / JsonMatcher (engine/json_schema.h): the schema subset and the errors that name what
// is refused; the byte grammar (objects, arrays, strings, numbers, integer bounds, number bounds
// as a reader's doubles see them, literals, whitespace, depth); and three properties checked
// against a reference validator written here — random walks over the allowed bytes never dead-end
// and accept only valid documents, generated valid documents are accepted, mutated documents are
// accepted only when still valid.
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

// A JSON number as a long double (64-bit integers exactly).
long double as_ld(const json& v) {
  if (v.is_number_unsigned()) return static_cast<long double>(v.get<uint64_t>());
  if (v.is_number_integer()) return static_cast<long double>(v.get<int64_t>());
  return static_cast<long double>(v.get<double>());
}

// The values a schema's minimum, maximum, exclusiveMinimum and exclusiveMaximum allow (numbers,
// and draft 4's booleans that make minimum / maximum exclusive), compared as long doubles: the
// value is what nlohmann reads (a double past the 64-bit integers), as a reader of the reply would.
struct NumberRange {
  bool has_lo = false, has_hi = false, lo_open = false, hi_open = false;
  long double lo = 0, hi = 0;
  bool bounded() const { return has_lo || has_hi; }
  bool contains(long double x) const {
    if (has_lo && (lo_open ? x <= lo : x < lo)) return false;
    if (has_hi && (hi_open ? x >= hi : x > hi)) return false;
    return true;
  }
};

NumberRange number_range(const json& s) {
  NumberRange r;
  const auto flag = [&](const char* k) {
    return s.contains(k) && s[k].is_boolean() && s[k].get<bool>();
  };
  const auto lower = [&](const json& b, bool open) {
    const long double x = as_ld(b);
    if (!r.has_lo || x > r.lo || (x == r.lo && open)) r.lo = x, r.lo_open = open;
    r.has_lo = true;
  };
  const auto upper = [&](const json& b, bool open) {
    const long double x = as_ld(b);
    if (!r.has_hi || x < r.hi || (x == r.hi && open)) r.hi = x, r.hi_open = open;
    r.has_hi = true;
  };
  if (s.contains("minimum")) lower(s["minimum"], flag("exclusiveMinimum"));
  if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number())
    lower(s["exclusiveMinimum"], true);
  if (s.contains("maximum")) upper(s["maximum"], flag("exclusiveMaximum"));
  if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number())
    upper(s["exclusiveMaximum"], true);
  return r;
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
    if (v.is_number() && !number_range(s).contains(as_ld(v))) return false;
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

// A double's shortest round-trip text, without an exponent ("1e-15" -> "0.000000000000001").
std::string plain_decimal(double d) {
  const std::string t = fmt::format("{}", d);
  const size_t e = t.find_first_of("eE");
  if (e == std::string::npos) return t;
  const bool neg = t[0] == '-';
  std::string mantissa = t.substr(neg ? 1 : 0, e - (neg ? 1 : 0));
  const size_t dot = mantissa.find('.');
  long point = static_cast<long>(dot == std::string::npos ? mantissa.size() : dot);
  if (dot != std::string::npos) mantissa.erase(dot, 1);
  point += std::stol(t.substr(e + 1));
  std::string out = neg ? "-" : "";
  const auto n = static_cast<long>(mantissa.size());
  if (point <= 0) {
    out += "0." + std::string(static_cast<size_t>(-point), '0') + mantissa;
  } else if (point >= n) {
    out += mantissa + std::string(static_cast<size_t>(point - n), '0');
  } else {
    out += mantissa.substr(0, static_cast<size_t>(point)) + "." +
           mantissa.substr(static_cast<size_t>(point));
  }
  return out;
}

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
    // A bound as an integer, a fractional one rounded inward (up for a lower bound).
    const auto bound = [&](const char* k, bool up) {
      const json& b = s[k];
      if (b.is_number_integer()) return b.get<int64_t>();
      const double d = b.get<double>();
      return static_cast<int64_t>(up ? std::ceil(d) : std::floor(d));
    };
    if (s.contains("minimum")) has_lo = true, lo = std::max(lo, bound("minimum", true));
    if (s.contains("exclusiveMinimum"))
      has_lo = true, lo = std::max(lo, bound("exclusiveMinimum", false) + 1);
    if (s.contains("maximum")) has_hi = true, hi = std::min(hi, bound("maximum", false));
    if (s.contains("exclusiveMaximum"))
      has_hi = true, hi = std::min(hi, bound("exclusiveMaximum", true) - 1);
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

  // A number within s's bounds, without an exponent: now and then an inclusive bound itself (its
  // shortest text) or a zero written with a sign, else uniform in the range (100 to 10^6 wide past
  // an open side) with 1-8 decimals (more where the range is narrow) and maybe trailing zeros;
  // one that rounding took outside is drawn again.
  std::string bounded_number_text(const json& s) {
    const NumberRange r = number_range(s);
    if (r.has_lo && !r.lo_open && coin(0.12)) return plain_decimal(static_cast<double>(r.lo));
    if (r.has_hi && !r.hi_open && coin(0.12)) return plain_decimal(static_cast<double>(r.hi));
    if (r.contains(0) && coin(0.04)) {
      constexpr const char* kZeros[] = {"0", "-0", "0.0", "-0.000"};
      return kZeros[pick(std::size(kZeros))];
    }
    const double span = std::pow(10.0, static_cast<double>(2 + pick(5)));
    const double a = static_cast<double>(r.has_lo ? r.lo : r.hi - span);
    const double b = static_cast<double>(r.has_hi ? r.hi : r.lo + span);
    const int extra = std::max(0, static_cast<int>(-std::floor(std::log10(b - a))));
    for (int tries = 0; tries < 100; ++tries) {
      const double x = std::uniform_real_distribution<double>(a, b)(rng_);
      std::string t = fmt::format("{:.{}f}", x, 1 + pick(8) + static_cast<size_t>(extra));
      // At most 17 significant digits (the matcher's rule for bounded numbers), then zeros.
      size_t sig = 0;
      for (size_t i = 0; i < t.size(); ++i) {
        if (t[i] < '0' || t[i] > '9') continue;
        if (sig == 0 && t[i] == '0') continue;
        if (++sig > 17) t[i] = '0';
      }
      if (coin(0.1)) t += std::string(1 + pick(3), '0');
      if (r.contains(std::strtod(t.c_str(), nullptr))) return t;
    }
    ADD_FAILURE() << "no number drawn within " << s.dump();
    return "0";
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
      out += number_range(s).bounded() ? bounded_number_text(s) : number_text();
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
      {"type": "object", "properties": {"email": {"type": "string", "format": "uri"}},
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

// Bounded numbers: inclusive and exclusive bounds (draft 4's booleans too), negative, one-sided,
// narrow and tiny ranges, bounds that are not binary fractions, a type list, disjoint anyOf ranges.
constexpr const char* kBounded = R"({"type": "object", "properties": {
  "unit": {"type": "number", "minimum": 0, "maximum": 1},
  "open": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
  "neg": {"type": "number", "minimum": -5.5, "exclusiveMaximum": -2},
  "narrow": {"type": "number", "minimum": 0.1, "maximum": 0.1000001},
  "tiny": {"type": "number", "exclusiveMinimum": 0, "maximum": 1e-12},
  "big": {"type": "number", "minimum": -1e15, "maximum": 1e15},
  "low": {"type": "number", "minimum": 2.5},
  "high": {"type": "number", "exclusiveMaximum": -0.001},
  "draft4": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 0.5,
             "exclusiveMaximum": true},
  "maybe": {"type": ["number", "null"], "minimum": -1, "maximum": 1},
  "either": {"type": ["integer", "number"], "minimum": 0.5, "maximum": 2.5},
  "split": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1},
                      {"type": "number", "minimum": 10, "exclusiveMaximum": 20.5}]},
  "list": {"type": "array", "items": {"type": "number", "minimum": -0.75, "maximum": 0.75},
           "maxItems": 4},
  "free": {"type": "number"}},
  "required": ["unit", "narrow", "neg"]})";

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
      {"additional", kAdditional}, {"bounded", kBounded},
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
      {R"js({"type":"string","pattern":"(a)\\1"})js", "backreference"},
      {R"({"type":"string","pattern":"a","maxLength":3})", "'pattern' with 'minLength'"},
      {R"({"type":"number","multipleOf":2})", "multipleOf"},
      {R"({"type":"array","uniqueItems":true})", "uniqueItems"},
      {R"({"not":{"type":"string"}})", "not"},
      {R"({"if":{"type":"string"},"then":{"maxLength":2}})", "if"},
      {R"({"type":"array","prefixItems":[{"type":"string"}]})", "prefixItems"},
      {R"({"type":"number","minimum":0,"multipleOf":0.5})", "multipleOf"},
      {R"({"allOf":[{"type":"string"},{"maxLength":3}]})", "allOf"},
      {R"js({"type":"object","properties":{"a":{"type":"string","pattern":"x(?=y)"}}})js",
       "#/properties/a"},
      {R"({"type":"object","patternProperties":{"^a":{"type":"string"}}})", "patternProperties"},
      {R"({"type":"array","items":{"type":"integer","multipleOf":3}})", "multipleOf"},
  };
  for (const auto& [schema, keyword] : cases) {
    std::string e = parse_error(schema);
    EXPECT_NE(e, "") << schema;
    EXPECT_NE(e.find(keyword), std::string::npos) << schema << " -> " << e;
  }
  // Integer bounds are supported, and number bounds.
  EXPECT_EQ(parse_error(R"({"type":"integer","minimum":0,"exclusiveMaximum":9})"), "");
  EXPECT_EQ(parse_error(R"({"type":"number","minimum":0})"), "");
  EXPECT_EQ(parse_error(R"({"type":"number","exclusiveMaximum":3})"), "");
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
    "title":"t","description":"d","$comment":"c","type":"string","format":"uri",
    "examples":["2020"],"default":"x"})");
  EXPECT_TRUE(matches(s, R"("not an address")"));
  EXPECT_FALSE(matches(s, "1"));
}

// date, time, date-time, uuid, email, hostname and ipv4 (the formats OpenAI's structured outputs
// enforce that strata does) become patterns; beside a pattern or lengths a format stays an
// annotation.
TEST(JsonSchema, EnforcedFormats) {
  const auto ok = [](const char* format, const char* text) {
    return matches(S(fmt::format(R"({{"type":"string","format":"{}"}})", format)), text);
  };
  EXPECT_TRUE(ok("date", R"("2024-02-29")"));
  EXPECT_FALSE(ok("date", R"("2024-13-01")"));
  EXPECT_FALSE(ok("date", R"("2024-1-01")"));
  EXPECT_EQ(taken(S(R"({"type":"string","format":"date"})"), R"("2024-13")"), 7u);
  EXPECT_TRUE(ok("time", R"("23:59:60Z")"));
  EXPECT_TRUE(ok("time", R"("08:30:00.25+05:30")"));
  EXPECT_FALSE(ok("time", R"("08:30:00")"));  // RFC 3339 full-time: an offset is required
  EXPECT_FALSE(ok("time", R"("24:00:00Z")"));
  EXPECT_TRUE(ok("date-time", R"("2024-02-29T08:30:00Z")"));
  EXPECT_TRUE(ok("date-time", R"("2024-02-29t08:30:00.123-01:00")"));
  EXPECT_FALSE(ok("date-time", R"("2024-02-29 08:30:00Z")"));
  EXPECT_TRUE(ok("uuid", R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(ok("uuid", R"("123e4567e89b12d3a456426614174000")"));
  EXPECT_TRUE(ok("email", R"("jane.doe+tag@mail.example.co.uk")"));
  EXPECT_TRUE(ok("email", R"("o'neil!#$%&*/=?^_`{|}~-@localhost")"));
  EXPECT_FALSE(ok("email", R"("jane doe@example.com")"));
  EXPECT_FALSE(ok("email", R"("jane@@example.com")"));
  EXPECT_FALSE(ok("email", R"("jane@-example.com")"));
  EXPECT_FALSE(ok("email", R"("jane@example.com.")"));
  EXPECT_FALSE(ok("email", R"("@example.com")"));
  EXPECT_EQ(taken(S(R"({"type":"string","format":"email"})"), R"("a@b c")"), 4u);
  EXPECT_TRUE(ok("hostname", R"("strata-1.example.org")"));
  EXPECT_TRUE(ok("hostname", R"("localhost")"));
  EXPECT_FALSE(ok("hostname", R"("-bad.example")"));
  EXPECT_FALSE(ok("hostname", R"("bad-.example")"));
  EXPECT_FALSE(ok("hostname", R"("a..b")"));
  EXPECT_FALSE(ok("hostname", R"("under_score.org")"));
  EXPECT_TRUE(ok("ipv4", R"("192.168.0.1")"));
  EXPECT_TRUE(ok("ipv4", R"("255.255.255.255")"));
  EXPECT_TRUE(ok("ipv4", R"("0.0.0.0")"));
  EXPECT_FALSE(ok("ipv4", R"("256.1.1.1")"));
  EXPECT_FALSE(ok("ipv4", R"("01.2.3.4")"));
  EXPECT_FALSE(ok("ipv4", R"("1.2.3")"));
  EXPECT_FALSE(ok("ipv4", R"("1.2.3.4.5")"));
  EXPECT_EQ(taken(S(R"({"type":"string","format":"ipv4"})"), R"("10.300")"), 6u);
  EXPECT_TRUE(ok("ipv6", R"("not checked")"));  // still an annotation
  EXPECT_TRUE(matches(S(R"({"type":"string","format":"date","maxLength":3})"), R"("abc")"));
  EXPECT_TRUE(matches(S(R"({"type":"string","format":"date","pattern":"^x"})"), R"("xyz")"));
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

// ---- Bounded numbers ----

// A bound past 1e15 in magnitude, or a non-zero one under 1e-15, is refused, naming it.
TEST(JsonSchema, NumberBoundsOutsideTheWindowAreRefused) {
  const std::pair<const char*, const char*> refused[] = {
      {R"({"type":"number","minimum":1e20})", "minimum"},
      {R"({"type":"number","maximum":-1e16})", "maximum"},
      {R"({"type":"number","maximum":1000000000000001})", "maximum"},
      {R"({"type":"number","minimum":-1.0000001e15})", "minimum"},
      {R"({"type":"number","exclusiveMinimum":1e-16})", "exclusiveMinimum"},
      {R"({"type":"number","exclusiveMaximum":-5e-16})", "exclusiveMaximum"},
      {R"({"type":"number","minimum":0,"maximum":9.99e-16})", "maximum"},
      {R"({"type":"number","maximum":18446744073709551615})", "maximum"},
      {R"({"type":"number","minimum":-9223372036854775808})", "minimum"},
      {R"({"type":"number","minimum":1e300,"exclusiveMinimum":true})", "minimum"},
      {R"({"type":"number","minimum":0,"exclusiveMaximum":1e-300})", "exclusiveMaximum"},
  };
  for (const auto& [schema, keyword] : refused) {
    const std::string e = parse_error(schema);
    EXPECT_NE(e.find("beyond"), std::string::npos) << schema << " -> " << e;
    EXPECT_NE(e.find(keyword), std::string::npos) << schema << " -> " << e;
  }
  // The path of the schema that says it.
  const std::string nested =
      parse_error(R"({"type":"object","properties":{"x":{"type":"number","maximum":1e16}}})");
  EXPECT_NE(nested.find("#/properties/x"), std::string::npos) << nested;
  // The window's edges, and zero, compile.
  for (const char* ok : {
           R"({"type":"number","minimum":-1e15,"maximum":1e15})",
           R"({"type":"number","minimum":-1000000000000000,"maximum":1000000000000000})",
           R"({"type":"number","exclusiveMinimum":1e-15,"exclusiveMaximum":1})",
           R"({"type":"number","minimum":-1e-15,"maximum":0})",
           R"({"type":"number","minimum":-0.0,"maximum":0.0})",
           R"({"type":"number","exclusiveMinimum":0})",
           R"({"type":"number","maximum":0.000000000000001})",
       })
    EXPECT_EQ(parse_error(ok), "") << ok;
  // A bound must be a number.
  EXPECT_NE(parse_error(R"({"type":"number","minimum":"1"})"), "");
  EXPECT_NE(parse_error(R"({"type":"number","maximum":null})"), "");
}

TEST(JsonSchema, EmptyNumberRangesAreRefused) {
  for (const char* empty : {
           R"({"type":"number","minimum":1,"maximum":0.5})",
           R"({"type":"number","exclusiveMinimum":1,"maximum":1})",
           R"({"type":"number","minimum":1,"exclusiveMaximum":1})",
           R"({"type":"number","exclusiveMinimum":0.5,"exclusiveMaximum":0.5})",
           R"({"type":"number","minimum":-2,"exclusiveMaximum":-3})",
           R"({"type":"number","minimum":0,"exclusiveMaximum":0})",
           R"({"type":"number","minimum":1,"maximum":1,"exclusiveMaximum":true})",
           R"({"type":"number","minimum":1,"exclusiveMinimum":true,"maximum":1})",
           R"({"type":"number","minimum":0.25,"exclusiveMinimum":1,"maximum":1})",
       }) {
    const std::string e = parse_error(empty);
    EXPECT_NE(e.find("no number lies within its bounds"), std::string::npos)
        << empty << " -> " << e;
  }
  // A single point is a range.
  for (const char* point : {
           R"({"type":"number","minimum":1.5,"maximum":1.5})",
           R"({"type":"number","minimum":0,"maximum":0})",
           R"({"type":"number","minimum":1,"maximum":1,"exclusiveMaximum":false})",
           R"({"type":"number","minimum":-2,"exclusiveMinimum":-3,"maximum":-2})",
       })
    EXPECT_EQ(parse_error(point), "") << point;
}

// A number with a bound takes no exponent ('e' is refused where it would come); one without keeps
// them.
TEST(JsonMatcher, BoundedNumbersRefuseExponents) {
  for (const char* schema : {
           R"({"type":"number","minimum":0,"maximum":1})",
           R"({"type":"number","minimum":0})",
           R"({"type":"number","exclusiveMaximum":1e15})",
           R"({"type":"number","minimum":0,"exclusiveMinimum":false})",
       }) {
    Schema s = S(schema);
    EXPECT_EQ(taken(s, "1e2"), 1u) << schema;
    EXPECT_EQ(taken(s, "1E0"), 1u) << schema;
    EXPECT_EQ(taken(s, "0e0"), 1u) << schema;
    EXPECT_EQ(taken(s, "0.5e1"), 3u) << schema;
    EXPECT_EQ(taken(s, "0.5E-1"), 3u) << schema;
    EXPECT_TRUE(matches(s, "0.5")) << schema;
  }
  Schema arr = S(R"({"type":"array","items":{"type":"number","maximum":100}})");
  EXPECT_EQ(taken(arr, "[1,2e1]"), 4u);
  EXPECT_TRUE(matches(arr, "[1,20,-3.5]"));
  // Unbounded: as before.
  for (const char* schema : {R"({"type":"number"})", R"({"type":["number","null"]})"}) {
    Schema s = S(schema);
    for (const char* doc : {"1e2", "1E0", "0e0", "0.5e1", "-0.5E-1", "1e99"})
      EXPECT_TRUE(matches(s, doc)) << schema << " " << doc;
  }
  // A bounded number beside an unbounded one in a union: the unbounded one still takes it.
  Schema either = S(R"({"anyOf":[{"type":"number","maximum":1},{"type":"number"}]})");
  EXPECT_TRUE(matches(either, "5e3"));
}

namespace {
struct NumberCase {
  const char* schema;
  const char* text;
  size_t taken;  // bytes taken; kAll: all of them
  bool accepting;
};
constexpr size_t kAll = SIZE_MAX;

// Each case: how many bytes a fresh matcher takes and, where it takes them all, whether the text
// is a whole document.
void expect_number_cases(const std::vector<NumberCase>& cases) {
  for (const NumberCase& c : cases) {
    Schema s = S(c.schema);
    const std::string_view text = c.text;
    const size_t want = c.taken == kAll ? text.size() : c.taken;
    EXPECT_EQ(taken(s, text), want) << c.schema << " '" << text << "'";
    if (want != text.size()) continue;
    JsonMatcher m(s);
    ASSERT_TRUE(m.feed(text));
    EXPECT_EQ(m.accepting(), c.accepting) << c.schema << " '" << text << "'";
  }
}
}  // namespace

TEST(JsonMatcher, NumberBoundsExamples) {
  constexpr const char* kUnit = R"({"type":"number","minimum":0,"maximum":1})";
  constexpr const char* kOpenZero = R"({"type":"number","exclusiveMinimum":0,"maximum":1})";
  constexpr const char* kQuarter = R"({"type":"number","minimum":0.25,"maximum":0.75})";
  constexpr const char* kNeg = R"({"type":"number","minimum":-5.5,"exclusiveMaximum":-2})";
  constexpr const char* kLow = R"({"type":"number","minimum":2.5})";
  constexpr const char* kHigh = R"({"type":"number","exclusiveMaximum":-0.125})";
  constexpr const char* kDraft4 =
      R"({"type":"number","minimum":0,"exclusiveMinimum":true,"maximum":0.5,)"
      R"("exclusiveMaximum":true})";
  constexpr const char* kDraft4Off =
      R"({"type":"number","minimum":0,"exclusiveMinimum":false,"maximum":1,)"
      R"("exclusiveMaximum":false})";
  constexpr const char* kPoint = R"({"type":"number","minimum":1.5,"maximum":1.5})";
  constexpr const char* kZero = R"({"type":"number","minimum":0,"maximum":0})";
  constexpr const char* kBig = R"({"type":"number","minimum":1e15})";
  constexpr const char* kNegBig = R"({"type":"number","maximum":-1e15})";
  expect_number_cases({
      {kUnit, "0", kAll, true},
      {kUnit, "1", kAll, true},
      {kUnit, "0.5", kAll, true},
      {kUnit, "1.0", kAll, true},
      {kUnit, "1.000", kAll, true},
      {kUnit, "0.999999", kAll, true},
      {kUnit, "0.0000001", kAll, true},
      {kUnit, "-0", kAll, true},  // -0 is 0
      {kUnit, "-0.0", kAll, true},
      {kUnit, "-", kAll, false},
      {kUnit, "1.", kAll, false},  // 1.0 follows
      {kUnit, "-0.", kAll, false},
      {kUnit, "-0.5", 3, false},
      {kUnit, "-1", 1, false},
      {kUnit, "2", 0, false},
      {kUnit, "1.5", 2, false},
      {kUnit, "10", 1, false},
      {kUnit, "1.0001", 5, false},
      {kUnit, "00", 1, false},
      {kUnit, "01", 1, false},
      {kUnit, ".5", 0, false},
      {kUnit, "+1", 0, false},

      {kOpenZero, "0", kAll, false},  // 0.5 may follow
      {kOpenZero, "0.0", kAll, false},
      {kOpenZero, "0.00", kAll, false},
      {kOpenZero, "0.0001", kAll, true},
      {kOpenZero, "1", kAll, true},
      {kOpenZero, "1.0", kAll, true},
      {kOpenZero, "1.01", 3, false},
      {kOpenZero, "-", 0, false},

      {kQuarter, "0", kAll, false},
      {kQuarter, "0.", kAll, false},
      {kQuarter, "0.2", kAll, false},  // 0.25 follows
      // A reader rounds 0.24999999999999999 (17 nines) onto 0.25: "0.24" lives on that far.
      {kQuarter, "0.24", kAll, false},
      {kQuarter, "0.2499", kAll, false},
      {kQuarter, "0.2499999999999999", kAll, false},  // 16 nines: 4 ulps below
      {kQuarter, "0.24999999999999999", kAll, true},
      {kQuarter, "0.248", 4, false},
      {kQuarter, "0.2498", 5, false},
      {kQuarter, "0.23", 3, false},
      {kQuarter, "0.25", kAll, true},
      {kQuarter, "0.250", kAll, true},
      {kQuarter, "0.3", kAll, true},
      {kQuarter, "0.75", kAll, true},
      {kQuarter, "0.7500", kAll, true},
      {kQuarter, "0.7501", 5, false},
      {kQuarter, "0.76", 3, false},
      {kQuarter, "0.8", 2, false},
      {kQuarter, "1", 0, false},
      {kQuarter, "-", 0, false},

      {kNeg, "-", kAll, false},
      {kNeg, "-3", kAll, true},
      {kNeg, "-2", kAll, false},  // -2 itself is excluded, -2.5 follows
      {kNeg, "-2.", kAll, false},
      {kNeg, "-2.0", kAll, false},
      {kNeg, "-2.00001", kAll, true},
      {kNeg, "-2.5", kAll, true},
      {kNeg, "-5", kAll, true},
      {kNeg, "-5.5", kAll, true},
      {kNeg, "-5.50", kAll, true},
      {kNeg, "-5.51", 4, false},
      {kNeg, "-5.6", 3, false},
      {kNeg, "-6", 1, false},
      {kNeg, "-1", 1, false},
      {kNeg, "-20", 2, false},
      {kNeg, "-0", 1, false},
      {kNeg, "0", 0, false},

      {kLow, "2", kAll, false},
      {kLow, "2.4", kAll, false},  // 2.4999999999999999 reads as 2.5
      {kLow, "2.4999999999999999", kAll, true},
      {kLow, "2.499999999999999", kAll, false},
      {kLow, "2.3", 2, false},
      {kLow, "2.5", kAll, true},
      {kLow, "3", kAll, true},
      {kLow, "1", kAll, false},  // 10 follows
      {kLow, "1.5", 1, false},
      {kLow, "10", kAll, true},
      {kLow, "0", 0, false},
      {kLow, "-", 0, false},
      // At most 17 significant digits (then zeros): refused at an 18th.
      {kLow, "123456789012345678901234567890", 17, false},
      {kLow, "12345678901234567000000000000000000000", kAll, true},

      {kHigh, "-", kAll, false},
      {kHigh, "-0", kAll, false},
      {kHigh, "-0.1", kAll, false},    // -0.13 follows
      {kHigh, "-0.12", kAll, false},   // -0.126 follows
      {kHigh, "-0.125", kAll, false},  // excluded, -0.1251 follows
      {kHigh, "-0.1251", kAll, true},
      {kHigh, "-0.124", 5, false},
      {kHigh, "-0.0", 3, false},
      {kHigh, "-0.2", kAll, true},
      {kHigh, "-1", kAll, true},
      {kHigh, "-123456789012345678901234567890", 18, false},
      {kHigh, "-12345678901234567000000000000", kAll, true},
      {kHigh, "0", 0, false},

      {kDraft4, "0", kAll, false},
      {kDraft4, "0.0", kAll, false},
      {kDraft4, "0.01", kAll, true},
      {kDraft4, "0.49", kAll, true},
      {kDraft4, "0.4999999", kAll, true},
      {kDraft4, "0.5", 2, false},
      {kDraft4, "-", 0, false},
      {kDraft4Off, "0", kAll, true},
      {kDraft4Off, "1", kAll, true},
      {kDraft4Off, "1.1", 2, false},

      {kPoint, "1.5", kAll, true},
      {kPoint, "1.50", kAll, true},
      {kPoint, "1.51", 3, false},
      {kPoint, "1.4", kAll, false},
      {kPoint, "1.3", 2, false},
      {kPoint, "1", kAll, false},
      {kPoint, "1.", kAll, false},
      {kPoint, "2", 0, false},
      {kPoint, "-", 0, false},

      {kZero, "0", kAll, true},
      {kZero, "-0", kAll, true},
      {kZero, "0.000", kAll, true},
      {kZero, "-0.0", kAll, true},
      {kZero, "0.001", 4, false},
      {kZero, "-0.01", 4, false},
      {kZero, "1", 0, false},

      {kBig, "1000000000000000", kAll, true},
      {kBig, "999999999999999", kAll, false},  // another digit follows
      {kBig, "999999999999999.", kAll, false},
      {kBig, "999999999999999.8", 16, false},
      {kBig, "999999999999999.9", kAll, false},
      {kBig, "999999999999999.93", 17, false},   // 17 digits, and it reads below 1e15
      {kBig, "999999999999999.94", kAll, true},  // reads as 1e15
      {kBig, "1000000000000000.5", kAll, true},
      {kNegBig, "-1000000000000000", kAll, true},
      {kNegBig, "-999999999999999", kAll, false},
      {kNegBig, "-999999999999999.", kAll, false},
      {kNegBig, "-999999999999999.8", 17, false},
      {kNegBig, "-1000000000000000.5", kAll, true},
      {kNegBig, "1", 0, false},
  });
}

// Inside containers, unions and type lists.
TEST(JsonMatcher, NumberBoundsInContext) {
  Schema arr = S(R"({"type":"array","items":{"type":"number","minimum":0,"maximum":1}})");
  EXPECT_TRUE(matches(arr, "[0.5,1,0,-0,1.000]"));
  EXPECT_EQ(taken(arr, "[1.]"), 3u);
  EXPECT_EQ(taken(arr, "[0.5,1.5]"), 7u);
  EXPECT_EQ(taken(arr, "[2]"), 1u);
  Schema open = S(R"({"type":"array","items":{"type":"number","exclusiveMinimum":0}})");
  EXPECT_EQ(taken(open, "[0]"), 2u);  // 0 may not end
  EXPECT_EQ(taken(open, "[0.0,1]"), 4u);
  EXPECT_TRUE(matches(open, "[0.01, 7]"));

  Schema obj = S(R"({"type":"object","properties":{"p":{"type":"number","minimum":-1,
    "exclusiveMaximum":1}},"required":["p"]})");
  EXPECT_TRUE(matches(obj, R"({"p":-1})"));
  EXPECT_TRUE(matches(obj, R"({"p": 0.999 })"));
  EXPECT_EQ(taken(obj, R"({"p":1})"), 5u);
  EXPECT_EQ(taken(obj, R"({"p":-1.5})"), 8u);

  // Disjoint ranges in anyOf: a prefix lives while one branch can still take it.
  Schema split = S(R"({"anyOf":[{"type":"number","minimum":0,"maximum":1},
    {"type":"number","minimum":10,"maximum":20}]})");
  EXPECT_TRUE(matches(split, "1"));
  EXPECT_TRUE(matches(split, "15.5"));
  EXPECT_TRUE(matches(split, "0.5"));
  EXPECT_TRUE(matches(split, "20"));
  EXPECT_EQ(taken(split, "5"), 0u);
  EXPECT_EQ(taken(split, "1.5"), 2u);
  EXPECT_EQ(taken(split, "21"), 1u);
  EXPECT_EQ(taken(split, "200"), 2u);

  // A type list with bounds: each type keeps them (integers rounded inward).
  Schema either = S(R"({"type":["integer","number"],"minimum":0.5,"maximum":2.5})");
  for (const char* ok : {"1", "2", "0.5", "2.5", "1.75"}) EXPECT_TRUE(matches(either, ok)) << ok;
  EXPECT_EQ(taken(either, "3"), 0u);
  EXPECT_EQ(taken(either, "2.6"), 2u);
  EXPECT_EQ(taken(either, "0.3"), 2u);
  EXPECT_FALSE(matches(either, "0.4"));
  EXPECT_FALSE(matches(either, "0"));
  Schema maybe = S(R"({"type":["number","null"],"minimum":-1,"maximum":1})");
  EXPECT_TRUE(matches(maybe, "null"));
  EXPECT_TRUE(matches(maybe, "-0.5"));
  EXPECT_EQ(taken(maybe, "-1.5"), 3u);

  // Bounds without a type make it "number".
  Schema untyped = S(R"({"minimum":0,"maximum":1})");
  EXPECT_TRUE(matches(untyped, "0.5"));
  EXPECT_EQ(taken(untyped, "2"), 0u);
  EXPECT_EQ(taken(untyped, "\"a\""), 0u);
  EXPECT_EQ(taken(untyped, "1e0"), 1u);

  // Integer bounds are unchanged: exact 64-bit integers, no fraction.
  Schema integer = S(R"({"type":"integer","minimum":0.5,"maximum":1e18})");
  EXPECT_TRUE(matches(integer, "1"));
  EXPECT_TRUE(matches(integer, "1000000000000000000"));
  EXPECT_EQ(taken(integer, "0"), 0u);
  EXPECT_EQ(taken(integer, "1.5"), 1u);
  EXPECT_EQ(taken(integer, "1000000000000000001"), 18u);
}

// Bounds that are not binary fractions (0.1 …): the schema's number is the double nearest its
// text, and so is a reader's value of the document's text. An inclusive bound written as its
// shortest text is within range; an exclusive one is not, and neither is anything a reader parses
// to the same double.
TEST(JsonMatcher, NumberBoundsAtTheirDoubles) {
  expect_number_cases({
      {R"({"type":"number","minimum":0.1})", "0.1", kAll, true},
      {R"({"type":"number","minimum":0.1})", "0.10", kAll, true},
      {R"({"type":"number","minimum":0.1})", "0.09", kAll, false},  // 0.099999999999999999
      {R"({"type":"number","minimum":0.1})", "0.0", kAll, false},
      {R"({"type":"number","minimum":0.1})", "0.08", 3, false},
      {R"({"type":"number","minimum":0.1})", "0.09999999999999999", kAll, false},
      {R"({"type":"number","minimum":0.1})", "0.099999999999999999", kAll, true},
      {R"({"type":"number","maximum":-0.1})", "-0.1", kAll, true},
      {R"({"type":"number","maximum":0.1000001})", "0.1000001", kAll, true},
      {R"({"type":"number","maximum":0.1000001})", "0.10000010", kAll, true},
      {R"({"type":"number","maximum":0.1000001})", "0.1000002", 8, false},
      {R"({"type":"number","minimum":-0.1000001})", "-0.1000001", kAll, true},
      {R"({"type":"number","minimum":0.1,"maximum":0.1000001})", "0.1", kAll, true},
      {R"({"type":"number","minimum":0.1,"maximum":0.1000001})", "0.1000001", kAll, true},
      {R"({"type":"number","minimum":0.1,"maximum":0.1000001})", "0.10000005", kAll, true},
      {R"({"type":"number","minimum":0.1,"maximum":0.1000001})", "0.10000011", 9, false},
      {R"({"type":"number","minimum":0.1,"maximum":0.1000001})", "0.2", 2, false},
      {R"({"type":"number","minimum":0.15,"maximum":0.15})", "0.15", kAll, true},
      {R"({"type":"number","minimum":0.15,"maximum":0.15})", "0.150", kAll, true},
      {R"({"type":"number","minimum":1e-15})", "0.000000000000001", kAll, true},
      {R"({"type":"number","minimum":1e-15})", "0.0000000000000009", kAll, false},
      {R"({"type":"number","minimum":1e-15})", "0.0000000000000008", 17, false},
      {R"({"type":"number","exclusiveMinimum":0,"maximum":1e-12})", "0.000000000001", kAll, true},
      {R"({"type":"number","exclusiveMinimum":0,"maximum":1e-12})", "0.0000000000011", 14, false},
      {R"({"type":"number","minimum":0.001,"maximum":0.002})", "0.001", kAll, true},
      {R"({"type":"number","minimum":0.001,"maximum":0.002})", "0.002", kAll, true},
      {R"({"type":"number","minimum":-0.3,"maximum":-0.1})", "-0.3", kAll, true},
      {R"({"type":"number","minimum":-0.3,"maximum":-0.1})", "-0.1", kAll, true},
      // Exclusive: the bound's own text is out, and so is what a reader rounds onto it.
      {R"({"type":"number","exclusiveMaximum":0.1})", "0.1", 2, false},
      {R"({"type":"number","exclusiveMaximum":0.1})", "0.0999", kAll, true},
      {R"({"type":"number","exclusiveMinimum":0.1})", "0.1", kAll, false},
      {R"({"type":"number","exclusiveMinimum":0.1})", "0.1000001", kAll, true},
      {R"({"type":"number","exclusiveMinimum":-0.1})", "-0.1", 3, false},
      {R"({"type":"number","exclusiveMaximum":-0.1})", "-0.1", kAll, false},
      {R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1e-15})", "0.000000000000001",
       16, false},
      {R"({"type":"number","exclusiveMaximum":1})", "0.99999999999999999999", 18, false},
  });
}

// Past 17 significant digits the digits still count: a reader's double of the whole text must be
// within (near a bound, the 18th digit decides), and a value halfway between two doubles reads as
// the one with an even mantissa.
// A bounded number has at most 17 significant digits (zeros may follow them), so its value is
// never in doubt; within them it is judged by the double a reader makes of it (the bound widened
// by half an ulp).
TEST(JsonMatcher, NumberBoundsSeventeenSignificantDigits) {
  expect_number_cases({
      // 0.25 + 2e-17 reads as 0.25 (half an ulp above 0.25 is 2.8e-17); + 3e-17 does not.
      {R"({"type":"number","maximum":0.25})", "0.25000000000000002", kAll, true},
      {R"({"type":"number","maximum":0.25})", "0.25000000000000003", 18, false},
      {R"({"type":"number","maximum":0.25})", "0.250000000000000028", 19, false},  // 18th digit
      {R"({"type":"number","maximum":0.25})", "0.25000000000000002000", kAll, true},
      {R"({"type":"number","maximum":0.25})", "0.2500000000000000200001", 23, false},
      // Below 0.25 half an ulp is 1.4e-17: 0.25 - 1e-17 reads as 0.25, 0.25 - 2e-17 does not.
      {R"({"type":"number","minimum":0.25})", "0.24999999999999999", kAll, true},
      {R"({"type":"number","minimum":0.25})", "0.24999999999999998", 18, false},
      {R"({"type":"number","minimum":-0.25})", "-0.25000000000000001", kAll, true},
      {R"({"type":"number","minimum":-0.25})", "-0.25000000000000003", 19, false},
      // Integer zeros past the 17 digits scale the value.
      {R"({"type":"number","minimum":1e15})", "99999999999999990", kAll, true},
      {R"({"type":"number","maximum":1e15})", "1000000000000000.0", kAll, true},
      {R"({"type":"number","maximum":1e15})", "1000000000000000.1", 17, false},
  });
}

namespace {
// The oracle for bounded numbers: exact decimal arithmetic on values scaled by 10^12 (the ranges
// below are binary fractions with a few decimals), plus what a reader's rounding to a double adds:
// values just below a closed lower end (of the magnitude: minimum, or a negative maximum) read as
// that end.
using Int128 = __int128;
constexpr int kOracleDecimals = 12;
constexpr Int128 pow10i(int k) {
  Int128 r = 1;
  while (k-- > 0) r *= 10;
  return r;
}
constexpr Int128 kOracleScale = pow10i(kOracleDecimals);
constexpr Int128 kOracleFar = pow10i(36);  // past every value below, scaled

struct OracleRange {
  Int128 lo = -kOracleFar, hi = kOracleFar;  // scaled
  bool lo_open = false, hi_open = false;
  bool contains(Int128 x) const {
    return (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
  }
  OracleRange negated() const { return {-hi, -lo, hi_open, lo_open}; }
};

// Some a + t·step (t >= 0) below a + width lies in r, or (with `fine` steps) comes so close
// below a closed lower end that a reader rounds it onto that end's double.
bool grid_meets(Int128 a, Int128 width, Int128 step, const OracleRange& r, bool fine) {
  if (fine && !r.lo_open && a + width == r.lo && r.lo <= r.hi) return true;
  Int128 g = a;
  if (r.lo > a) g = a + (r.lo - a + step - 1) / step * step;
  if (r.lo_open && g == r.lo) g += step;
  return g < a + width && (r.hi_open ? g < r.hi : g <= r.hi);
}

Int128 oracle_step(size_t decimals) {
  return pow10i(kOracleDecimals - static_cast<int>(std::min<size_t>(decimals, kOracleDecimals)));
}
// Enough decimals to come within half a double's ulp of the bounds below.
constexpr size_t kFineDecimals = 24;

// Whether `p` (over "-0123456789.eE+") can still become a number without an exponent, at most 40
// characters, within r; and whether it is one already.
Prefix number_prefix(const std::string& p, const OracleRange& r) {
  if (p.empty() || p == "-") {
    bool viable = false;
    for (const char* d : {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"})
      viable = viable || number_prefix(p + d, r).viable;
    if (p.empty()) viable = viable || number_prefix("-", r).viable;
    return {viable, false};
  }
  const bool neg = p[0] == '-';
  const OracleRange m = neg ? r.negated() : r;  // the range of the magnitude
  const std::string body = p.substr(neg ? 1 : 0);
  const size_t dot = body.find('.');
  const std::string int_digits = body.substr(0, dot);
  const std::string frac = dot == std::string::npos ? "" : body.substr(dot + 1);
  const auto digits = [](const std::string& t) {
    return std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (int_digits.empty() || !digits(int_digits) || !digits(frac)) return {false, false};
  if (int_digits.size() > 1 && int_digits[0] == '0') return {false, false};
  const size_t room = JsonMatcher::kMaxNumberChars - std::min(p.size(), size_t{40});
  Int128 whole = 0;
  for (char c : int_digits) whole = whole * 10 + (c - '0');
  if (dot != std::string::npos) {
    if (frac.size() > kOracleDecimals) return {false, false};  // not asked below
    if (frac.empty() && room == 0) return {false, false};
    Int128 f = 0;
    for (char c : frac) f = f * 10 + (c - '0');
    const Int128 unit = pow10i(kOracleDecimals - static_cast<int>(frac.size()));
    const Int128 a = whole * kOracleScale + f * unit;
    return {grid_meets(a, unit, oracle_step(frac.size() + room), m,
                       frac.size() + room >= kFineDecimals),
            !frac.empty() && m.contains(a)};
  }
  const bool complete = m.contains(whole * kOracleScale);
  if (whole == 0)  // "0", then only a fraction
    return {complete || (room >= 2 && grid_meets(0, kOracleScale, oracle_step(room - 1), m,
                                                 room - 1 >= kFineDecimals)),
            complete};
  // k more integer digits, then maybe a fraction with the characters left.
  Int128 a = whole * kOracleScale, width = kOracleScale;
  for (size_t k = 0; k <= room && a <= kOracleFar; ++k, a *= 10, width *= 10) {
    const size_t left = room - k;
    const size_t decimals = left >= 2 ? left - 1 : 0;
    if (grid_meets(a, width, oracle_step(decimals), m, decimals >= kFineDecimals))
      return {true, complete};
  }
  return {false, complete};
}
}  // namespace

// Every prefix over "-0123456789.eE+" up to a few characters: a byte is taken exactly when some
// completion lands in range, the text is accepting exactly when it is in range, and finished
// exactly when it is in range and no byte may follow.
TEST(JsonMatcher, NumberBoundsExhaustive) {
  const Int128 u = kOracleScale, far = kOracleFar;
  struct Bounds {
    const char* schema;
    OracleRange range;
    size_t max_len;
  };
  const Bounds cases[] = {
      {R"({"type":"number","minimum":0,"maximum":1})", {0, u, false, false}, 6},
      {R"({"type":"number","exclusiveMinimum":0,"maximum":1})", {0, u, true, false}, 6},
      {R"({"type":"number","minimum":0.25,"maximum":0.75})", {u / 4, 3 * u / 4, false, false}, 6},
      {R"({"type":"number","minimum":-5.5,"exclusiveMaximum":-2})",
       {-11 * u / 2, -2 * u, false, true},
       6},
      {R"({"type":"number","minimum":2.5})", {5 * u / 2, far, false, false}, 4},
      {R"({"type":"number","exclusiveMaximum":-0.125})", {-far, -u / 8, false, true}, 4},
      {R"({"type":"number","exclusiveMinimum":0})", {0, far, true, false}, 4},
      {R"({"type":"number","minimum":0,"exclusiveMinimum":true,"maximum":0.5,)"
       R"("exclusiveMaximum":true})",
       {0, u / 2, true, true},
       6},
      {R"({"type":"number","minimum":-1,"maximum":1})", {-u, u, false, false}, 5},
      {R"({"type":"number","minimum":1.5,"maximum":1.5})", {3 * u / 2, 3 * u / 2, false, false}, 6},
      {R"({"type":"number","exclusiveMinimum":-0.5,"exclusiveMaximum":0})",
       {-u / 2, 0, true, true},
       6},
      {R"({"type":"number","minimum":0,"maximum":0})", {0, 0, false, false}, 6},
      {R"({"type":"number","minimum":-1000.5,"maximum":99.75})",
       {-2001 * u / 2, 399 * u / 4, false, false},
       4},
      {R"({"type":"number","exclusiveMinimum":100,"maximum":200.5})",
       {100 * u, 401 * u / 2, true, false},
       6},
      {R"({"type":"number","minimum":0.0625,"exclusiveMaximum":0.0703125})",
       {u / 16, 9 * u / 128, false, true},
       7},
      {R"({"type":"number","minimum":-3.75,"maximum":-2})", {-15 * u / 4, -2 * u, false, false}, 6},
  };
  const std::string alphabet = "-0123456789.eE+";
  for (const Bounds& c : cases) {
    Schema s = S(c.schema);
    std::vector<std::string> wrong;
    std::vector<std::pair<std::string, JsonMatcher>> todo;
    todo.emplace_back("", JsonMatcher(s));
    JsonMatcher next(s);
    size_t visited = 0;
    while (!todo.empty()) {
      auto [p, m] = std::move(todo.back());
      todo.pop_back();
      ++visited;
      const Prefix here = number_prefix(p, c.range);
      if (m.accepting() != here.complete)
        wrong.push_back(fmt::format("'{}' accepting {}", p, m.accepting()));
      bool more = false;
      for (char ch : alphabet) more = more || number_prefix(p + ch, c.range).viable;
      if (m.finished() != (here.complete && !more))
        wrong.push_back(fmt::format("'{}' finished {}", p, m.finished()));
      if (p.size() >= c.max_len) continue;
      for (char ch : alphabet) {
        const std::string q = p + ch;
        next = m;
        const bool got = next.feed(static_cast<uint8_t>(ch));
        const bool want = number_prefix(q, c.range).viable;
        if (got != want) wrong.push_back(fmt::format("'{}' taken {}", q, got));
        if (got && want) todo.emplace_back(q, next);
      }
    }
    const size_t n_wrong = wrong.size();
    wrong.resize(std::min<size_t>(wrong.size(), 12));
    EXPECT_EQ(n_wrong, 0u) << c.schema << ": " << fmt::format("{}", fmt::join(wrong, ", "));
    EXPECT_GT(visited, 5u) << c.schema;
  }
}

// The 40-character cap: a digit is refused where no completion within it can land in range, and a
// number that reaches it in range is finished.
TEST(JsonMatcher, NumberBoundsNearTheCap) {
  Schema pos = S(R"({"type":"number","exclusiveMinimum":0})");
  const std::string zeros37 = "0." + std::string(37, '0');  // 39 characters, 0 so far
  {
    JsonMatcher m(pos);
    ASSERT_TRUE(m.feed(zeros37));
    EXPECT_FALSE(m.accepting());
    JsonMatcher last = m;
    EXPECT_FALSE(last.feed("0"));  // 40 characters of 0
    ASSERT_TRUE(m.feed("1"));
    EXPECT_TRUE(m.accepting());
    EXPECT_TRUE(m.finished());
  }
  EXPECT_EQ(taken(pos, zeros37 + "01"), 39u);
  Schema neg = S(R"({"type":"number","exclusiveMaximum":0})");
  EXPECT_TRUE(matches(neg, "-0." + std::string(36, '0') + "1"));
  EXPECT_EQ(taken(neg, "-0." + std::string(37, '0') + "1"), 39u);
  Schema unit = S(R"({"type":"number","minimum":0,"maximum":1})");
  JsonMatcher full(unit);
  ASSERT_TRUE(full.feed("0." + std::string(38, '0')));
  EXPECT_TRUE(full.accepting());
  EXPECT_TRUE(full.finished());
  Schema arr = S(R"({"type":"array","items":{"type":"number","exclusiveMinimum":0}})");
  EXPECT_EQ(taken(arr, "[" + zeros37 + "0]"), 40u);
  EXPECT_TRUE(matches(arr, "[" + zeros37 + "1]"));
  // Large magnitudes fit in the cap too.
  Schema big = S(R"({"type":"number","minimum":1e15})");
  EXPECT_EQ(taken(big, std::string(40, '9')), 17u);  // an 18th significant digit
  EXPECT_TRUE(matches(big, std::string(17, '9') + std::string(23, '0')));
  EXPECT_EQ(taken(big, "1000000000000000." + std::string(23, '5')), 18u);
  EXPECT_TRUE(matches(big, "1000000000000000.5" + std::string(22, '0')));
  Schema tiny = S(R"({"type":"number","minimum":1e-15,"exclusiveMaximum":2e-15})");
  EXPECT_TRUE(matches(tiny, "0.0000000000000015"));
  EXPECT_TRUE(matches(tiny, "0.00000000000000199999"));
  EXPECT_EQ(taken(tiny, "0.000000000000002"), 16u);
  EXPECT_EQ(taken(tiny, "0.0000000000000008"), 17u);
}

namespace {
// Feeds `steer` into an array of `item`s, skipping the bytes the matcher refuses and checking that
// some byte is allowed after each; then ends the number and the array with the first of
// "]0123456789." each step takes, until finished, and checks the reference accepts the text.
std::string steer_walk(const std::string& item, const std::string& steer) {
  const std::string schema_text = R"({"type":"array","items":)" + item + "}";
  Schema s = S(schema_text);
  JsonMatcher m(s), c(s);
  std::string text = "[";
  if (!m.feed(text)) return "'[' refused";
  const auto stuck = [&] {
    for (int b = 0; b < 256; ++b) {
      c = m;
      if (c.feed(static_cast<uint8_t>(b))) return false;
    }
    return true;
  };
  for (const char ch : steer) {
    c = m;
    if (c.feed(static_cast<uint8_t>(ch))) {
      m = c;
      text += ch;
    }
    if (stuck()) return "a dead end after " + text;
  }
  for (int i = 0; i < 64 && !m.finished(); ++i) {
    bool fed = false;
    for (const char ch : std::string_view("]0123456789.")) {
      c = m;
      if (c.feed(static_cast<uint8_t>(ch))) {
        m = c;
        text += ch;
        fed = true;
        break;
      }
    }
    if (!fed) return "cannot end after " + text;
  }
  if (!m.finished()) return "not finished after " + text;
  const std::string why = check_document(Reference{json::parse(schema_text)}, text);
  return why.empty() ? "" : "accepted " + text + ": " + why;
}
}  // namespace

// Walks steered along a bound (its digits, then nines or zeros past long double precision) never
// strand the number: some byte is always allowed, and the text ends valid.
TEST(JsonMatcher, NumberBoundsNeverDeadEnd) {
  const std::string n40(40, '9'), z40(40, '0');
  const std::pair<const char*, std::vector<std::string>> cases[] = {
      {R"({"type":"number","minimum":0,"exclusiveMaximum":1})",
       {"0." + n40, "1.0000", "0.99999999999999999999999"}},
      {R"({"type":"number","minimum":0,"maximum":1})", {"1." + z40, "0." + n40, "1." + z40 + "1"}},
      {R"({"type":"number","exclusiveMinimum":0})", {"0." + z40 + "1", "-0." + z40}},
      {R"({"type":"number","exclusiveMaximum":0})", {"-0." + z40 + "1", "0." + z40}},
      {R"({"type":"number","minimum":0.1})", {"0.1" + z40, "0.0" + n40, "0.09" + n40}},
      {R"({"type":"number","exclusiveMaximum":0.1})", {"0.0" + n40, "0.1", "0.1" + z40}},
      {R"({"type":"number","minimum":0.1,"maximum":0.1000001})",
       {"0.1000001" + z40, "0.1000000" + n40, "0.100000099999" + n40, "0.1" + z40}},
      {R"({"type":"number","minimum":0.15,"maximum":0.15})",
       {"0.15" + z40, "0.14" + n40, "0.1499999999999999944488848768742172978818"}},
      {R"({"type":"number","minimum":1e-15})", {"0." + std::string(14, '0') + n40, "0." + z40}},
      {R"({"type":"number","exclusiveMinimum":0,"maximum":1e-15})",
       {"0." + z40 + "1", "0.000000000000001" + z40, "0.000000000000000" + n40}},
      {R"({"type":"number","minimum":-5.5,"exclusiveMaximum":-2})",
       {"-2." + z40 + "1", "-5.5" + z40 + "1", "-1.9" + n40, "-5.4" + n40}},
      {R"({"type":"number","minimum":1e15})",
       {n40, "999999999999999." + n40, "999999999999999.9375" + z40}},
      // Near a bound the 18th and later significant digits decide.
      {R"({"type":"number","minimum":0.25})", {"0.2499999999999999862" + z40}},
      {R"({"type":"number","maximum":0.25})", {"0.25000000000000002776"}},
      {R"({"type":"number","exclusiveMaximum":-1e15})",
       {"-1000000000000000" + z40 + "1", "-999999999999999." + n40}},
      {R"({"type":"number","minimum":-1e-15,"maximum":1e-15})",
       {"-0." + z40 + "1", "0.000000000000001" + z40 + "1", "-0.000000000000000" + n40}},
  };
  for (const auto& [item, steers] : cases)
    for (const std::string& steer : steers)
      EXPECT_EQ(steer_walk(item, steer), "") << item << " steered by " << steer;
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
