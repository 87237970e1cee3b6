// A JSON Schema `pattern` (an ECMA-262 regular expression subset) as a position (Glushkov)
// automaton of at most 63 positions, stepped on code points: the set of positions alive is one
// uint64_t, so a string frame carries it (json_schema.h). Unanchored patterns match anywhere in
// the string, as JSON Schema says (a leading / trailing "any" loop is added unless the pattern
// starts with ^ / ends with $).
//
// The subset: literals, '.', classes [a-z0-9_] and [^…] (with \d \w \s inside), \d \D \w \W \s
// \S, escaped punctuation, \t \n \r \f \v \uXXXX, groups ( ) and (?: ), alternation |,
// quantifiers * + ? {n} {n,} {n,m} (and their lazy forms, which match the same strings), ^ at the
// start and $ at the end. Anything else (backreferences, lookaround, \b, \p{…}, flags) is refused
// with what it is. Tested by tests/test_json_pattern.cpp against std::regex.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::engine {

class JsonPattern {
 public:
  static constexpr int kMaxPositions = 63;  // bit 63 is the start
  // Throws strata::Error (kBadValue) naming what is not supported, or a pattern too large.
  static JsonPattern compile(std::string_view re);

  uint64_t start() const { return start_; }
  // The positions alive after code point cp (only those from which the end can still be
  // reached); 0: no string with this prefix matches.
  uint64_t step(uint64_t set, uint32_t cp) const;
  bool accepts(uint64_t set) const { return (set & accept_) != 0; }
  // Whether some code point in [lo, hi] can step `set` to a live one (a character still being
  // written — UTF-8 bytes or a \u escape — must be able to end as one that fits).
  bool can_step(uint64_t set, uint32_t lo, uint32_t hi) const;
  const std::string& source() const { return source_; }

  struct Class {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive
    bool negate = false;
    bool contains(uint32_t cp) const;
    bool meets(uint32_t lo, uint32_t hi) const;  // some code point in [lo, hi] is in the class
  };

 private:
  friend class PatternParser;
  std::vector<Class> classes_;    // per position
  std::vector<uint64_t> follow_;  // per position, and [63]: the start's
  uint64_t start_ = uint64_t(1) << 63;
  uint64_t accept_ = 0;
  uint64_t live_ = 0;  // positions from which an accepting one is reachable, and the start
  std::string source_;
};

}  // namespace strata::engine
