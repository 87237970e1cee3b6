// JsonPattern (engine/json_pattern.h), a JSON Schema `pattern` as a position automaton stepped on
// code points, and its use by JsonMatcher for {"type":"string","pattern":…} (json_schema.h):
//   - a reference twin: ~60 patterns of the subset against std::wregex (ECMAScript, regex_search,
//     over code points: wchar_t is 32 bits here) on thousands of strings, non-ASCII included;
//   - what is refused, by name (directly and through JsonSchema::parse, with the schema path);
//   - the matcher on JSON-escaped strings (\uXXXX, surrogate pairs, \n \/ … and raw UTF-8): it
//     accepts exactly the matching strings, refuses a byte within the first character that makes
//     a match impossible and never before, and at the exact bytes of hand-picked cases;
//   - random walks over the allowed bytes (tests/json_schema_probe.h) never dead-end.
// GCC 12 warns inside <regex> (a std::function member of its NFA states "may be used
// uninitialized") in the sanitizer build: a known false positive in the standard library.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/json_pattern.h"
#include "engine/json_schema.h"
#include "io/check.h"
#include "json_schema_probe.h"

using namespace strata;
using namespace strata::engine;
using json = nlohmann::json;

namespace {

static_assert(sizeof(wchar_t) == 4, "the reference runs std::wregex over code points");

// Valid UTF-8 (test data) into code points.
std::u32string decode(std::string_view s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const auto b = uint8_t(s[i]);
    const int len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    char32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (int k = 1; k < len; ++k) cp = cp << 6 | (uint8_t(s[i + size_t(k)]) & 0x3F);
    out += cp;
    i += size_t(len);
  }
  return out;
}

std::string encode(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
  return out;
}

// Code points for messages: printable ASCII and UTF-8 as is, the rest as \u{…}.
std::string show(const std::u32string& s) {
  std::string out = "\"";
  for (const char32_t c : s)
    out += c < 0x20 || c == 0x7F || c == '\\' || c == '"' ? fmt::format("\\u{{{:x}}}", uint32_t(c))
                                                          : encode(c);
  return out + "\"";
}

// Bytes as printable ASCII, the rest as \xHH.
std::string show_bytes(std::string_view s) {
  std::string out;
  for (const unsigned char c : s)
    out += c >= 0x20 && c < 0x7F && c != '\\' ? std::string(1, char(c))
                                              : fmt::format("\\x{:02X}", unsigned(c));
  return out;
}

// The pattern run over s: start(), step() per code point, accepts(). Also checks that can_step
// agrees with step on each single code point.
bool run(const JsonPattern& p, const std::u32string& s) {
  uint64_t set = p.start();
  for (const char32_t c : s) {
    const uint64_t next = p.step(set, uint32_t(c));
    EXPECT_EQ(p.can_step(set, uint32_t(c), uint32_t(c)), next != 0)
        << p.source() << " at " << uint32_t(c) << " in " << show(s);
    set = next;
    if (!set) return false;
  }
  return p.accepts(set);
}

std::wregex reference_regex(std::string_view pattern) {
  const std::u32string u = decode(pattern);
  return std::wregex(std::wstring(u.begin(), u.end()), std::regex::ECMAScript);
}

bool reference(const std::wregex& re, const std::u32string& s) {
  const std::wstring w(s.begin(), s.end());
  return std::regex_search(w, re);
}

std::string compile_error(std::string_view pattern) {
  try {
    JsonPattern::compile(pattern);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadValue) << pattern;
    return e.what();
  }
  return "";
}

std::string schema_for(std::string_view pattern) {
  return json{{"type", "string"}, {"pattern", std::string(pattern)}}.dump();
}

std::string parse_error(std::string_view schema) {
  try {
    JsonSchema::parse(schema);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Patterns of the subset, the code points random strings are drawn from, and a few strings that
// match (random edits of them give near misses).
struct TwinCase {
  const char* pattern;
  const char* alphabet;  // UTF-8
  std::vector<const char*> samples;
};

const std::vector<TwinCase>& twin_cases() {
  static const std::vector<TwinCase> cases = {
      {R"(^\d{4}-\d{2}-\d{2}$)", "0129-a/", {"2024-01-31", "0000-00-00"}},
      {R"(^[A-Z]{3}(-[0-9]+)?$)", "ABZa-09x", {"ABC", "XYZ-42"}},
      {"fox", "fox ", {"fox", "the fox jumps"}},
      {"^(a|bc)*d?$", "abcd", {"abcad", "", "bcbc"}},
      {"[^aeiou]{2,3}", "aeixyz", {"xy", "axyza"}},
      {R"(^.+@.+\..+$)", "a@.\n", {"a@b.c", "aa@@..a"}},
      {"^(?:ab){2,}$", "abc", {"abab", "ababab"}},
      {"x.y", "xy.\n\r日", {"xay", "axxyb", "x.y"}},
      {"^$", "a\n", {""}},
      {"^a*?b+?c??$", "abc", {"aabbc", "b"}},
      {"^[a-c]{1,3}$", "abcd", {"a", "cab"}},
      {R"(\s+x)", " \t\n\v\fxa", {" x", "a\t\nx"}},
      {R"(^\S\S$)", " a\t\né", {"ab", "é!"}},
      {R"(^\w+$)", "aZ9_-é", {"a_Z9", "_"}},
      {R"(^\W$)", "a!_ é", {"!", " ", "é"}},
      {R"(^\D*$)", "0a9b😀", {"ab", ""}},
      {R"(a\.b)", "a.bx", {"a.b", "xa.bx"}},
      {R"(^\(\d+\)$)", "()12", {"(1)", "(21)"}},
      {R"(^[-+]?\d+(\.\d+)?$)", "+-.012", {"-1.5", "20", "+0.01"}},
      {"^(?:a|b)(?:c|d)$", "abcd", {"ac", "bd"}},
      {"(ab|a)(bc|c)", "abcx", {"abc", "xabcx", "ac"}},
      {"^a{3}$", "ab", {"aaa"}},
      {"^a{2,}$", "ab", {"aa", "aaaaa"}},
      {"^(a?){3}$", "ab", {"", "aa", "aaa"}},
      {R"(^[^\d\s]+$)", "a1 é\t", {"ab", "é"}},
      {R"(^[\w.-]+$)", "a.-_!", {"a.b-c", "_"}},
      {R"(^\t\n$)", "\t\na", {"\t\n"}},
      {R"(^\x41\u0042$)", "ABC", {"AB"}},
      {"b$", "ab", {"b", "ab"}},
      {"^b", "ab", {"b", "ba"}},
      {"^(?:(?:a|b)c)+$", "abc", {"ac", "acbc"}},
      {"^[a-z]+(?:_[a-z]+)*$", "ab_", {"a_b", "ab_ba"}},
      {"[0-9]{2}", "0a9", {"00", "a09a"}},
      {"^é+$", "éea", {"é", "ééé"}},
      {"^[à-ÿ]$", "àéÿaß", {"à", "ÿ"}},
      {"日本", "日本a", {"日本", "a日本a"}},
      {"^.{2}$", "a😀é\n", {"a😀", "éé"}},
      {"^[^a]$", "a😀日\n", {"😀", "日", "\n"}},
      {"^😀+$", "😀😁a", {"😀", "😀😀"}},
      {"^[😀-😂]$", "😀😁😂😃a", {"😁"}},
      {R"(^\u00e9$)", "éea", {"é"}},
      {"^(?:)$", "a", {""}},
      {"^(a|b|)c$", "abc", {"c", "ac"}},
      {R"(^\/\-$)", "/-a", {"/-"}},
      {R"([\]\[])", "[]a", {"[", "a]"}},
      {R"(^[\^]$)", "^a", {"^"}},
      {R"(^\$$)", "$a", {"$"}},
      {R"(a\$)", "a$", {"a$", "aa$a"}},
      {R"(^\\$)", "\\a", {"\\"}},
      {R"(^a\d*?x{1,2}?$)", "a1x", {"ax", "a12xx"}},
      {"^(?:a|b)*?c+$", "abc", {"c", "abacc"}},
      {R"(^[a\-z]+$)", "a-zb", {"a-z"}},
      {"", "ab", {""}},
      {"^", "ab", {"", "a"}},
      {"$", "ab", {"", "b"}},
      {"^|a", "ab", {"", "b"}},
      {R"(a\\\$)", "a\\$", {"a\\$"}},
      {R"(^a\\\\$)", "a\\", {"a\\\\"}},
      {"^(?:[ab]c?){2,5}$", "abc", {"ab", "acbcac"}},
  };
  return cases;
}

std::u32string random_string(std::mt19937& rng, const TwinCase& c) {
  const std::u32string alphabet = decode(c.alphabet);
  const auto pick = [&] { return alphabet[rng() % alphabet.size()]; };
  std::u32string s;
  if (rng() % 2) {
    const size_t n = rng() % 9;
    for (size_t i = 0; i < n; ++i) s += pick();
    return s;
  }
  s = decode(c.samples[rng() % c.samples.size()]);
  for (int edits = int(rng() % 3); edits > 0; --edits) {
    const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 3) {
      case 0:
        s.insert(s.begin() + long(at), pick());
        break;
      case 1:
        if (at < s.size()) s.erase(at, 1);
        break;
      default:
        if (at < s.size()) s[at] = pick();
    }
  }
  return s;
}

// One code point as JSON string text, in one of the forms JSON allows (chosen by rng).
std::string json_char(char32_t c, std::mt19937& rng) {
  const auto u = [&](uint32_t v) {
    return rng() % 2 ? fmt::format("\\u{:04x}", v) : fmt::format("\\u{:04X}", v);
  };
  const bool escape = rng() % 3 == 0;
  switch (c) {
    case '"':
      return escape ? u(c) : "\\\"";
    case '\\':
      return escape ? u(c) : "\\\\";
    case '/':
      return escape ? "\\/" : "/";
    case '\n':
      return escape ? u(c) : "\\n";
    case '\t':
      return escape ? u(c) : "\\t";
    case '\r':
      return escape ? u(c) : "\\r";
    case '\b':
      return escape ? u(c) : "\\b";
    case '\f':
      return escape ? u(c) : "\\f";
    default:
      break;
  }
  if (c < 0x20) return u(c);
  if (!escape) return encode(c);
  if (c < 0x10000) return u(c);
  const uint32_t v = c - 0x10000;
  return u(0xD800 + (v >> 10)) + u(0xDC00 + (v & 0x3FF));
}

// How many bytes of `text` a fresh matcher takes, one at a time, before it refuses one.
size_t taken(const std::shared_ptr<const JsonSchema>& schema, std::string_view text) {
  JsonMatcher m(schema);
  for (size_t i = 0; i < text.size(); ++i)
    if (!m.feed(uint8_t(text[i]))) return i;
  return text.size();
}

bool matches(const std::shared_ptr<const JsonSchema>& schema, std::string_view text) {
  JsonMatcher m(schema);
  return m.feed(text) && m.accepting();
}

// ---------------------------------------------------------------------------------------------
// 1. The reference twin.

TEST(JsonPattern, AgreesWithStdRegex) {
  std::mt19937 rng(20240611);
  size_t checked = 0, matched = 0;
  for (const TwinCase& c : twin_cases()) {
    SCOPED_TRACE(c.pattern);
    const JsonPattern p = JsonPattern::compile(c.pattern);
    EXPECT_EQ(p.source(), c.pattern);
    const std::wregex re = reference_regex(c.pattern);
    for (const char* sample : c.samples) {
      const std::u32string s = decode(sample);
      EXPECT_TRUE(reference(re, s)) << "a sample that does not match: " << show(s);
      EXPECT_TRUE(run(p, s)) << show(s);
    }
    for (int i = 0; i < 300; ++i) {
      const std::u32string s = random_string(rng, c);
      const bool want = reference(re, s);
      EXPECT_EQ(run(p, s), want) << show(s);
      ++checked;
      matched += want;
    }
  }
  // Both outcomes are well represented.
  EXPECT_GT(matched, checked / 5);
  EXPECT_LT(matched, checked * 4 / 5);
}

// Where std::wregex's classes follow the C locale rather than ECMA-262 (\s's Unicode spaces),
// and the line terminators '.' leaves out, by explicit expectations.
TEST(JsonPattern, UnicodeClassesAndLineTerminators) {
  const auto m = [](std::string_view pattern, std::u32string s) {
    return run(JsonPattern::compile(pattern), s);
  };
  for (const char32_t sp :
       {U'\t', U'\n', U'\v', U'\f', U'\r', U' ', U'\u00A0', U'\u1680', U'\u2000', U'\u200A',
        U'\u2028', U'\u2029', U'\u202F', U'\u205F', U'\u3000', U'\uFEFF'}) {
    EXPECT_TRUE(m(R"(^\s$)", {sp})) << uint32_t(sp);
    EXPECT_FALSE(m(R"(^\S$)", {sp})) << uint32_t(sp);
    EXPECT_FALSE(m(R"(^[^\s]$)", {sp})) << uint32_t(sp);
  }
  for (const char32_t no : {U'a', U'\u0085', U'\u200B', U'\u180E', U'\u00E9', U'\U0001F600'}) {
    EXPECT_FALSE(m(R"(^\s$)", {no})) << uint32_t(no);
    EXPECT_TRUE(m(R"(^\S$)", {no})) << uint32_t(no);
  }
  for (const char32_t lt : {U'\n', U'\r', U'\u2028', U'\u2029'}) {
    EXPECT_FALSE(m("^.$", {lt})) << uint32_t(lt);
    EXPECT_TRUE(m("^[^a]$", {lt})) << uint32_t(lt);
  }
  for (const char32_t c : {U'\0', U'\v', U'\u0085', U'\uFFFF', U'\U0001F600', U'\U0010FFFF'})
    EXPECT_TRUE(m("^.$", {c})) << uint32_t(c);
  // \d \w are ASCII only; a non-ASCII letter is \W.
  EXPECT_FALSE(m(R"(^\w$)", U"é"));
  EXPECT_TRUE(m(R"(^\W$)", U"é"));
  EXPECT_FALSE(m(R"(^\d$)", U"٣"));  // ARABIC-INDIC DIGIT THREE
  EXPECT_TRUE(m(R"(^\D$)", U"٣"));
  // An astral character is one code point: '.', a negated class and a range take it whole.
  EXPECT_TRUE(m("^.$", U"😀"));
  EXPECT_FALSE(m("^..$", U"😀"));
  EXPECT_TRUE(m("^[^x]$", U"😀"));
  EXPECT_TRUE(m("^[😀-😂]{2}$", U"😂😀"));
  EXPECT_FALSE(m("^[😀-😂]$", U"😃"));
  // \u, \x and \0 escapes name code points; \b in a class is a backspace.
  EXPECT_TRUE(m(R"(^\u65e5\u672C$)", U"日本"));
  EXPECT_TRUE(m(R"(^\x7f\0$)", std::u32string{0x7F, 0}));
  EXPECT_TRUE(m(R"(^[\b]$)", U"\b"));
  EXPECT_TRUE(m(R"(^\f\v\r$)", U"\f\v\r"));
  // Unanchored: anything around the match, line terminators included.
  EXPECT_TRUE(m("fox", U"\n\u2028fox😀\r"));
  EXPECT_TRUE(m("^fox", U"fox\n"));
  EXPECT_FALSE(m("^fox", U"\nfox"));
  EXPECT_TRUE(m("fox$", U"\nfox"));
  EXPECT_FALSE(m("fox$", U"fox\n"));
}

TEST(JsonPattern, StepsAfterADeadSetStayDead) {
  const JsonPattern p = JsonPattern::compile("^ab$");
  uint64_t set = p.step(p.start(), 'x');
  EXPECT_EQ(set, 0u);
  EXPECT_EQ(p.step(set, 'a'), 0u);
  EXPECT_FALSE(p.accepts(set));
  EXPECT_FALSE(p.can_step(set, 0, 0x10FFFF));
  // The empty string: accepted at start() exactly when the pattern allows it.
  EXPECT_TRUE(p.accepts(p.step(p.step(p.start(), 'a'), 'b')));
  EXPECT_FALSE(p.accepts(p.start()));
  EXPECT_TRUE(JsonPattern::compile("^a*$").accepts(JsonPattern::compile("^a*$").start()));
  EXPECT_TRUE(JsonPattern::compile("x|").accepts(JsonPattern::compile("x|").start()));
  // can_step over ranges.
  const JsonPattern q = JsonPattern::compile("^[d-f]$");
  EXPECT_TRUE(q.can_step(q.start(), 'a', 'd'));
  EXPECT_TRUE(q.can_step(q.start(), 'f', 0x10FFFF));
  EXPECT_FALSE(q.can_step(q.start(), 'g', 0x10FFFF));
  EXPECT_FALSE(q.can_step(q.start(), 0, 'c'));
  const JsonPattern r = JsonPattern::compile("^[^d-f]$");
  EXPECT_FALSE(r.can_step(r.start(), 'd', 'f'));
  EXPECT_TRUE(r.can_step(r.start(), 'd', 'g'));
  EXPECT_TRUE(r.can_step(r.start(), 'c', 'f'));
}

// A counted repeat expands to copies of what it repeats (each copy its own positions).
TEST(JsonPattern, CountedRepeatsExpandToCopies) {
  const JsonPattern p = JsonPattern::compile("^a{40}$");
  EXPECT_TRUE(run(p, std::u32string(40, U'a')));
  EXPECT_FALSE(run(p, std::u32string(39, U'a')));
  EXPECT_FALSE(run(p, std::u32string(41, U'a')));
  const JsonPattern q = JsonPattern::compile("^(?:[ab]c?){2,5}$");
  EXPECT_TRUE(run(q, U"abcab"));
  EXPECT_FALSE(run(q, U"a"));
  EXPECT_FALSE(run(q, U"abababa"));
  EXPECT_EQ(compile_error("^(?:ab){30}$"), "");
  EXPECT_EQ(compile_error("^a{0}b$"), "");
  EXPECT_TRUE(run(JsonPattern::compile("^a{0}b$"), U"b"));
  EXPECT_EQ(compile_error("^a{0,}$"), "");
  EXPECT_TRUE(run(JsonPattern::compile("^a{0,}$"),
                  U"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
}

// ---------------------------------------------------------------------------------------------
// 2. Refusals, by name.

TEST(JsonPattern, RefusesWhatItDoesNotSupportByName) {
  std::string nested;
  for (int i = 0; i < 65; ++i) nested += '(';
  nested += 'a';
  for (int i = 0; i < 65; ++i) nested += ')';
  std::string nested_ok;
  for (int i = 0; i < 64; ++i) nested_ok += "(?:";
  nested_ok += 'a';
  for (int i = 0; i < 64; ++i) nested_ok += ')';
  EXPECT_EQ(compile_error(nested_ok), "");
  const std::pair<std::string, const char*> cases[] = {
      {R"((a)\1)", "backreference"},
      {R"(\k<n>)", "named backreference"},
      {"a(?=b)", "lookaround"},
      {"a(?!b)", "lookaround"},
      {"(?<=a)b", "lookaround"},
      {"(?<n>a)", "named group"},
      {R"(\bfoo)", "word boundary"},
      {R"(a\B)", "word boundary"},
      {R"(\p{L})", "Unicode property"},
      {R"(\P{L})", "Unicode property"},
      {R"(\cA)", "control escape"},
      {R"(\q)", "the escape \\q"},
      {R"(\u12)", "malformed \\u"},
      {R"(\xZ1)", "malformed \\x"},
      {R"([\D])", "\\D inside a class"},
      {R"([a-\d])", "a class escape as a range's end"},
      {"[b-a]", "range out of order"},
      {"[ab", "unclosed '['"},
      {"a^b", "'^' inside the pattern"},
      {"a$b", "'$' inside the pattern"},
      {"(?:^a)", "'^' inside the pattern"},
      {"(^a)", "'^' inside the pattern"},
      {"(a$)", "'$' inside the pattern"},
      {"(a", "unclosed '('"},
      {"((a)", "unclosed '('"},
      {"a)", "unmatched ')'"},
      {"(a))b", "unmatched ')'"},
      {"*a", "nothing to repeat"},
      {"a|+b", "nothing to repeat"},
      {"(?b)", "lookaround or named group"},
      {"^?", "nothing to repeat"},
      {"{2}", "nothing to repeat"},
      {"a{3,2}", "m < n"},
      {"a\\", "trailing backslash"},
      {"[a\\", "trailing backslash"},
      {"a{70}", "repeat count over 63"},
      {"a{1,99999999999}", "repeat count over 63"},
      {"[ab]{40}c{30}", "over 63 character positions"},
      {"(?:a{9}){9}", "over 63 character positions"},
      {std::string(4097, 'a'), "at most 4096"},
      {nested, "groups nested over 64 deep"},
  };
  for (const auto& [pattern, what] : cases) {
    SCOPED_TRACE(pattern.size() > 80 ? pattern.substr(0, 80) + "…" : pattern);
    const std::string e = compile_error(pattern);
    EXPECT_NE(e.find(what), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_LT(e.size(), 4096 + 200u);
  }
}

TEST(JsonPattern, RefusalsThroughTheSchemaNameThePath) {
  std::string e = parse_error(schema_for(R"((a)\1)"));
  EXPECT_NE(e.find("schema #"), std::string::npos) << e;
  EXPECT_NE(e.find("backreference"), std::string::npos) << e;
  EXPECT_NE(e.find(R"((a)\1)"), std::string::npos) << e;

  e = parse_error(json{{"type", "object"},
                       {"properties",
                        {{"id", {{"type", "string"}, {"pattern", "x(?=y)"}}},
                         {"tags", {{"type", "array"}, {"items", {{"pattern", "a{3,2}"}}}}}}}}
                      .dump());
  EXPECT_TRUE(e.find("#/properties/id") != std::string::npos ||
              e.find("#/properties/tags/items") != std::string::npos)
      << e;
  e = parse_error(
      json{{"type", "array"}, {"items", {{"type", "string"}, {"pattern", "a{3,2}"}}}}.dump());
  EXPECT_NE(e.find("#/items"), std::string::npos) << e;
  EXPECT_NE(e.find("m < n"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;

  e = parse_error(json{{"type", "string"}, {"pattern", "^a+$"}, {"minLength", 2}}.dump());
  EXPECT_NE(e.find("'pattern' with 'minLength'"), std::string::npos) << e;
  e = parse_error(json{{"type", "string"}, {"pattern", "^a+$"}, {"maxLength", 2}}.dump());
  EXPECT_NE(e.find("'pattern' with 'minLength' / 'maxLength'"), std::string::npos) << e;
  e = parse_error(R"({"type":"string","pattern":7})");
  EXPECT_NE(e.find("'pattern' must be a string"), std::string::npos) << e;
  e = parse_error(schema_for(std::string(5000, 'a')));
  EXPECT_NE(e.find("at most 4096"), std::string::npos) << e.substr(0, 200);

  // Accepted: a pattern alone makes the schema a string; beside other types it applies to the
  // string branch only.
  EXPECT_EQ(parse_error(R"({"pattern":"^a+$"})"), "");
  EXPECT_TRUE(matches(JsonSchema::parse(R"({"pattern":"^a+$"})"), R"("aa")"));
  EXPECT_FALSE(matches(JsonSchema::parse(R"({"pattern":"^a+$"})"), R"("ab")"));
  EXPECT_FALSE(matches(JsonSchema::parse(R"({"pattern":"^a+$"})"), "1"));
  const auto either = JsonSchema::parse(R"({"type":["string","integer"],"pattern":"^a+$"})");
  EXPECT_TRUE(matches(either, "12"));
  EXPECT_TRUE(matches(either, R"("a")"));
  EXPECT_FALSE(matches(either, R"("b")"));
}

// ---------------------------------------------------------------------------------------------
// 3. Through the matcher.

// Random strings of each twin pattern, written as JSON in random forms: the matcher takes every
// byte while the code points so far can still lead to a match, refuses a byte of the first code
// point that cannot, and accepts the closing quote exactly when the string matches.
TEST(JsonPatternMatcher, AcceptsExactlyTheMatchingStrings) {
  std::mt19937 rng(77);
  size_t accepted = 0, total = 0;
  for (const TwinCase& c : twin_cases()) {
    SCOPED_TRACE(c.pattern);
    const auto schema = JsonSchema::parse(schema_for(c.pattern));
    const JsonPattern p = JsonPattern::compile(c.pattern);
    const std::wregex re = reference_regex(c.pattern);
    for (int i = 0; i < 100; ++i) {
      const std::u32string s = random_string(rng, c);
      const bool want = reference(re, s);
      // The text and where each code point's bytes end.
      std::string text = "\"";
      std::vector<size_t> ends;
      for (const char32_t ch : s) {
        text += json_char(ch, rng);
        ends.push_back(text.size());
      }
      // The first code point after which no match is possible (s.size(): none).
      size_t dead = s.size();
      uint64_t set = p.start();
      for (size_t k = 0; k < s.size() && dead == s.size(); ++k)
        if (!(set = p.step(set, uint32_t(s[k])))) dead = k;
      const size_t n = taken(schema, text + '"');
      const std::string what = show(s) + " as " + show_bytes(text);
      if (dead < s.size()) {
        EXPECT_FALSE(want) << what;
        const size_t begin = dead == 0 ? 1 : ends[dead - 1];
        EXPECT_GE(n, begin) << what;
        EXPECT_LT(n, ends[dead]) << what;
      } else {
        EXPECT_GE(n, text.size()) << what;
        EXPECT_EQ(n == text.size() + 1, want) << what;
        EXPECT_EQ(matches(schema, text + '"'), want) << what;
      }
      ++total;
      accepted += want;
    }
  }
  EXPECT_GT(accepted, total / 5);
}

TEST(JsonPatternMatcher, RefusesAtTheFirstImpossibleByte) {
  const auto P = [](std::string_view pattern) { return JsonSchema::parse(schema_for(pattern)); };
  const auto a = P("^a$");
  EXPECT_TRUE(matches(a, R"("a")"));
  EXPECT_EQ(taken(a, R"("b")"), 1u);
  EXPECT_EQ(taken(a, R"("")"), 1u);  // the closing quote needs a match
  EXPECT_EQ(taken(a, R"("aa")"), 2u);
  EXPECT_TRUE(matches(a, R"("\u0061")"));
  EXPECT_TRUE(matches(a, R"("\u0061")"));
  EXPECT_EQ(taken(a, R"("\u0062")"), 6u);  // "\u006" can still be 'a'
  EXPECT_EQ(taken(a, R"("\u01")"), 4u);    // "\u0" can, "\u01" cannot
  EXPECT_EQ(taken(a, R"("\u007")"), 5u);
  EXPECT_EQ(taken(a, R"("\n")"), 2u);       // the '\' can still be \u0061
  EXPECT_EQ(taken(a, "\"\xC3\xA9\""), 1u);  // no 2-byte character is 'a'
  EXPECT_EQ(taken(a, "\"a \""), 2u);

  const auto dot = P("^.$");
  EXPECT_TRUE(matches(dot, "\"\xC3\xA9\""));
  EXPECT_TRUE(matches(dot, R"("\u00e9")"));
  EXPECT_TRUE(matches(dot, R"("\/")"));
  EXPECT_TRUE(matches(dot, R"("\"")"));
  EXPECT_TRUE(matches(dot, R"("\t")"));
  EXPECT_EQ(taken(dot, R"("\n")"), 2u);
  EXPECT_EQ(taken(dot, R"("\r")"), 2u);
  EXPECT_EQ(taken(dot, R"("\u000a")"), 6u);
  EXPECT_EQ(taken(dot, R"("\u2028")"), 6u);
  EXPECT_EQ(taken(dot, "\"\xE2\x80\xA8\""), 3u);  // U+2028 in UTF-8
  EXPECT_TRUE(matches(dot, "\"\xE2\x80\xA7\""));
  EXPECT_TRUE(matches(dot, "\"\xF0\x9F\x98\x80\""));
  EXPECT_TRUE(matches(dot, R"("\ud83d\ude00")"));
  EXPECT_EQ(taken(dot, R"("ab")"), 2u);

  const auto smile = P("^😀$");  // U+1F600: F0 9F 98 80, \ud83d\ude00
  EXPECT_TRUE(matches(smile, "\"\xF0\x9F\x98\x80\""));
  EXPECT_TRUE(matches(smile, R"("\ud83d\ude00")"));
  EXPECT_TRUE(matches(smile, R"("\uD83D\uDE00")"));
  EXPECT_EQ(taken(smile, R"("\ud83c")"), 6u);
  EXPECT_EQ(taken(smile, R"("\ud83d\ude01")"), 12u);
  EXPECT_EQ(taken(smile, R"("\ud83d\ud")"), 10u);  // "\ud" can still be \ude00
  EXPECT_EQ(taken(smile, R"("\ud83d\udf")"), 10u);
  EXPECT_EQ(taken(smile, R"("\ud83d\n")"), 8u);  // a high surrogate's partner must be \u
  EXPECT_EQ(taken(smile, R"("\u00")"), 3u);      // no BMP escape becomes U+1F600
  EXPECT_EQ(taken(smile, R"("\ue")"), 3u);
  EXPECT_EQ(taken(smile, "\"\xF0\x9F\x98\x81\""), 4u);
  EXPECT_EQ(taken(smile, "\"\xF0\x9E"), 2u);
  EXPECT_EQ(taken(smile, "\"\xF1"), 1u);
  EXPECT_EQ(taken(smile, "\"\xE2"), 1u);
  EXPECT_EQ(taken(smile, "\"a"), 1u);

  const auto ri = P("^日$");  // U+65E5: E6 97 A5
  EXPECT_TRUE(matches(ri, "\"\xE6\x97\xA5\""));
  EXPECT_TRUE(matches(ri, R"("\u65E5")"));
  EXPECT_EQ(taken(ri, "\"\xE6\x97\xA6"), 3u);
  EXPECT_EQ(taken(ri, "\"\xE6\x98"), 2u);
  EXPECT_EQ(taken(ri, "\"\xE7"), 1u);
  EXPECT_EQ(taken(ri, "\"\xC3"), 1u);
  EXPECT_EQ(taken(ri, R"("\u65f")"), 5u);
  EXPECT_EQ(taken(ri, R"("\u7")"), 3u);

  const auto not_a = P("^[^a]$");
  EXPECT_TRUE(matches(not_a, R"("\ud83d\ude00")"));
  EXPECT_TRUE(matches(not_a, R"("\n")"));
  EXPECT_EQ(taken(not_a, R"("\u0061")"), 6u);
  EXPECT_EQ(taken(not_a, R"("a")"), 1u);

  const auto fox = P("fox");
  EXPECT_TRUE(matches(fox, R"("the fox jumps")"));
  EXPECT_TRUE(matches(fox, R"("\u0066ox")"));
  EXPECT_EQ(taken(fox, R"("the fo")"), 7u);  // all but the closing quote
  EXPECT_TRUE(matches(fox, "\"\xF0\x9F\x98\x80\\nfox\xE6\x97\xA5\""));

  const auto nl = P(R"(^a\nb$)");
  EXPECT_TRUE(matches(nl, R"("a\nb")"));
  EXPECT_TRUE(matches(nl, R"("a\u000Ab")"));
  EXPECT_EQ(taken(nl, R"("a\u000b")"), 7u);
  EXPECT_EQ(taken(nl, R"("a\tb")"), 3u);

  const auto punct = P(R"(^/"\\$)");  // the string /"\ .
  EXPECT_TRUE(matches(punct, R"("\/\"\\")"));
  EXPECT_TRUE(matches(punct, R"("/\u0022\u005c")"));
  EXPECT_EQ(taken(punct, R"("\/\"\/")"), 6u);

  const auto ctrl = P(R"(^\0\x01$)");
  EXPECT_TRUE(matches(ctrl, R"("\u0000\u0001")"));
  EXPECT_EQ(taken(ctrl, std::string("\"\x00", 2)), 1u);  // raw control bytes are not JSON

  const auto date = P(R"(^\d{4}-\d{2}-\d{2}$)");
  EXPECT_TRUE(matches(date, R"("2024-06-11")"));
  EXPECT_EQ(taken(date, R"("12a")"), 3u);
  EXPECT_EQ(taken(date, R"("2024-06-1")"), 10u);
  EXPECT_EQ(taken(date, R"("2024-06-111")"), 11u);

  // Between characters the matcher gives plain text no room: every byte goes through the pattern.
  JsonMatcher m(fox);
  ASSERT_TRUE(m.feed("\"ab"));
  EXPECT_EQ(m.plain_string_room(), 0u);
}

TEST(JsonPatternMatcher, InsideObjectsArraysAndAnyOf) {
  const auto schema = JsonSchema::parse(json{
      {"type", "object"},
      {"properties",
       {{"id", {{"type", "string"}, {"pattern", "^[a-f0-9]{4}$"}}},
        {"tags", {{"type", "array"}, {"items", {{"pattern", R"(^#\w+$)"}}}}}}},
      {"required", {"id"}}}.dump());
  EXPECT_TRUE(matches(schema, R"({"id":"beef","tags":["#a","#b_1"]})"));
  EXPECT_TRUE(matches(schema, R"({"tags":[],"id":"0a9f"})"));
  EXPECT_FALSE(matches(schema, R"({"id":"beeg"})"));
  EXPECT_FALSE(matches(schema, R"({"id":"bee"})"));
  EXPECT_FALSE(matches(schema, R"({"id":"beef","tags":["a"]})"));
  EXPECT_EQ(taken(schema, R"({"id":"beeg"})"), 10u);
  EXPECT_FALSE(matches(schema, R"({"id":"beef","tags":["#"]})"));

  const auto any = JsonSchema::parse(
      R"({"anyOf":[{"type":"string","pattern":"^a+$"},{"type":"string","pattern":"^b+$"}]})");
  EXPECT_TRUE(matches(any, R"("aaa")"));
  EXPECT_TRUE(matches(any, R"("bb")"));
  EXPECT_EQ(taken(any, R"("ab")"), 2u);
  EXPECT_EQ(taken(any, R"("c")"), 1u);
}

// ---------------------------------------------------------------------------------------------
// 4. No dead ends.

// A fuzz input: the schema, a NUL, then random steering bytes.
std::string probe_input(const std::string& schema, std::mt19937& rng, size_t steer) {
  std::string in = schema;
  in += '\0';
  for (size_t i = 0; i < steer; ++i) in += char(rng() & 0xFF);
  return in;
}

TEST(JsonPatternMatcher, RandomWalksNeverDeadEnd) {
  const std::vector<std::string> schemas = {
      schema_for(R"(^\d{4}-\d{2}-\d{2}$)"),
      schema_for(R"(^[A-Z]{3}(-[0-9]+)?$)"),
      schema_for("fox"),
      schema_for("^😀[^a]日?$"),
      schema_for(R"(^[\u0080-\u00ff\u0800-\u0801]+$)"),
      schema_for(R"(^[^\u0000-\uffff]{2}$)"),  // astral only: 4-byte UTF-8 or surrogate pairs
      schema_for(R"(^[\ud7ff\ue000]x$)"),      // around the surrogates
      schema_for(R"(^(?:[^\n"\\]|\n\\)+$)"),
      schema_for(R"(^\s*\S$)"),
      json{{"type", "object"},
           {"properties",
            {{"id", {{"type", "string"}, {"pattern", "^[a-f0-9]{4}$"}}},
             {"tags", {{"type", "array"}, {"items", {{"pattern", R"(^#\w+$)"}}}}}}},
           {"required", {"id"}}}
          .dump(),
      R"({"anyOf":[{"type":"string","pattern":"^a+$"},{"type":"string","pattern":"^.b$"}]})",
  };
  std::mt19937 rng(4242);
  for (const std::string& schema : schemas) {
    SCOPED_TRACE(schema);
    ASSERT_EQ(parse_error(schema), "");
    for (int walk = 0; walk < 300; ++walk) {
      const std::string in = probe_input(schema, rng, 32);
      ASSERT_EQ(strata::test::probe_json_schema(in), "")
          << "steering " << show_bytes(in.substr(schema.size() + 1));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Found while writing these tests, since fixed: each checks behaviour that either refusal or a
// correct implementation satisfies.

// ECMA-262: ^ and $ bind tighter than |: "^a|b$" is (^a)|(b$). Each top-level alternative
// carries its own anchors.
TEST(JsonPattern, AnchorsBindToTheirAlternative) {
  for (const char* pattern : {"^a|b$", "^a|b", "a|b$", "^ab|cd$", "^(?:a)|b", "a|^b$"}) {
    SCOPED_TRACE(pattern);
    ASSERT_EQ(compile_error(pattern), "");
    const JsonPattern p = JsonPattern::compile(pattern);
    const std::wregex re = reference_regex(pattern);
    const std::u32string alphabet = U"abcdx";
    std::vector<std::string> wrong;
    for (size_t n = 0, count = 1; n <= 4; ++n, count *= alphabet.size())
      for (size_t v = 0; v < count; ++v) {
        std::u32string s;
        for (size_t w = v, i = 0; i < n; ++i, w /= alphabet.size())
          s += alphabet[w % alphabet.size()];
        if (run(p, s) != reference(re, s))
          wrong.push_back(show(s) + (reference(re, s) ? " matches" : " does not match"));
      }
    EXPECT_TRUE(wrong.empty()) << wrong.size() << " strings disagree with ECMAScript, e.g. "
                               << fmt::format("{}", fmt::join(wrong.begin(),
                                                              wrong.begin() + long(std::min<size_t>(
                                                                                  wrong.size(), 4)),
                                                              ", "));
  }
}

// A position whose class no JSON string can write (empty, or UTF-16 surrogates only) must not be
// offered: the matcher takes a byte (the '\' of an escape, a UTF-8 lead byte ED, the opening
// quote) after which no byte can follow and the text cannot end. Refusing the pattern, or never
// stepping toward such a position, both pass.
TEST(JsonPattern, NoDeadEndOnUnwritableCodePoints) {
  const std::pair<const char*, const char*> cases[] = {
      {"^[]$", "\""},  // nothing matches (std::regex agrees)
      {"^a[]$", "\"a"},
      {R"(^a(?:\uD83D)?$)", "\"a\\"},  // a lone surrogate in the pattern
      {R"(^a(?:\uD83D)?$)", "\"a\xED"},
      {R"(^(?:x|[\uD800-\uDBFF]))", "\"\xED"},
      {R"(^\uD83D\uDE00$)", "\"\\"},  // 😀 as JavaScript source writes it
      {R"(^\uD83D\uDE00$)", "\"\xED"},
      {R"(^[\uD800-\uDFFF]+$)", "\"\\"},
      {R"(^[^\u0000-\uD7FF]$)", "\"\xED"},  // ED starts D000-D7FF only
  };
  for (const auto& [pattern, prefix] : cases) {
    SCOPED_TRACE(fmt::format("{} after {}", pattern, show_bytes(prefix)));
    const std::string schema_text = schema_for(pattern);
    if (parse_error(schema_text) != "") continue;  // refused: fine
    const auto schema = JsonSchema::parse(schema_text);
    JsonMatcher m(schema);
    if (!m.feed(prefix)) continue;  // the prefix refused: fine
    bool next = m.accepting();
    for (int b = 0; b < 256 && !next; ++b) {
      JsonMatcher probe = m;
      next = probe.feed(uint8_t(b));
    }
    EXPECT_TRUE(next) << "dead end";
  }
  // The same through the fuzz walk.
  std::mt19937 rng(9);
  for (const auto& [pattern, prefix] : cases) {
    const std::string schema = schema_for(pattern);
    for (int walk = 0; walk < 100; ++walk) {
      const std::string in = probe_input(schema, rng, 12);
      const std::string r = strata::test::probe_json_schema(in);
      EXPECT_EQ(r, "") << pattern << ", steering " << show_bytes(in.substr(schema.size() + 1));
      if (r != "") break;
    }
  }
}

}  // namespace

namespace {

// An escape's error names the offset of its backslash.
TEST(JsonPattern, EscapeErrorsNameTheBackslashsOffset) {
  EXPECT_NE(compile_error(R"((a)\1)").find("a backreference at offset 3"), std::string::npos)
      << compile_error(R"((a)\1)");
  EXPECT_NE(compile_error(R"(ab\bc)").find("at offset 2"), std::string::npos)
      << compile_error(R"(ab\bc)");
  EXPECT_NE(compile_error(R"(^x\p{L})").find("at offset 2"), std::string::npos)
      << compile_error(R"(^x\p{L})");
}

}  // namespace
