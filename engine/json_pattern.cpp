// JSON Schema `pattern` as a position automaton (see json_pattern.h).
#include "engine/json_pattern.h"

#include <algorithm>
#include <cctype>

#include "engine/unicode.h"
#include "io/check.h"

namespace strata::engine {

bool JsonPattern::Class::contains(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges)
    if (cp >= lo && cp <= hi) {
      in = true;
      break;
    }
  return in != negate;
}

bool JsonPattern::Class::meets(uint32_t lo, uint32_t hi) const {
  if (!negate) {
    for (const auto& [a, b] : ranges)
      if (a <= hi && b >= lo) return true;
    return false;
  }
  // Negated: unless the ranges (sorted at compile) cover [lo, hi] whole.
  uint32_t next = lo;  // the first code point not yet covered
  for (const auto& [a, b] : ranges) {
    if (a > next) break;
    if (b >= next) {
      if (b >= hi) return false;
      next = b + 1;
    }
  }
  return true;
}

bool JsonPattern::can_step(uint64_t set, uint32_t lo, uint32_t hi) const {
  uint64_t cand = 0;
  for (uint64_t s = set; s; s &= s - 1) cand |= follow_[size_t(__builtin_ctzll(s))];
  cand &= live_;
  for (uint64_t c = cand; c; c &= c - 1)
    if (classes_[size_t(__builtin_ctzll(c))].meets(lo, hi)) return true;
  return false;
}

uint64_t JsonPattern::step(uint64_t set, uint32_t cp) const {
  uint64_t cand = 0;
  for (uint64_t s = set; s; s &= s - 1) cand |= follow_[size_t(__builtin_ctzll(s))];
  uint64_t next = 0;
  for (uint64_t c = cand; c; c &= c - 1) {
    const int q = __builtin_ctzll(c);
    if (classes_[size_t(q)].contains(cp)) next |= uint64_t(1) << q;
  }
  return next & live_;
}

namespace {

using Class = JsonPattern::Class;

Class digit_class() {
  return {{{'0', '9'}}, false};
}
Class word_class() {
  return {{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}, false};
}
Class space_class() {  // ECMA-262 WhiteSpace and LineTerminator
  return {{{'\t', '\r'},
           {' ', ' '},
           {0xA0, 0xA0},
           {0x1680, 0x1680},
           {0x2000, 0x200A},
           {0x2028, 0x2029},
           {0x202F, 0x202F},
           {0x205F, 0x205F},
           {0x3000, 0x3000},
           {0xFEFF, 0xFEFF}},
          false};
}
Class dot_class() {
  return {{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true};
}
Class any_class() {
  return {{}, true};
}

}  // namespace

// Recursive descent over the pattern into a tree; positions are the tree's class leaves.
class PatternParser {
 public:
  explicit PatternParser(std::string_view re) : re_(re) {}

  JsonPattern build() {
    // Each top-level alternative carries its own anchors (ECMAScript reads ^a|b$ as (^a)|(b$)).
    int root = -1;
    for (const std::string_view piece : top_level_alternatives()) {
      std::string_view body = piece;
      const bool anchored_start = !body.empty() && body.front() == '^';
      if (anchored_start) body.remove_prefix(1);
      bool anchored_end = false;
      if (!body.empty() && body.back() == '$') {
        size_t slashes = 0;  // "\$" is a literal dollar
        for (size_t i = body.size() - 1; i > 0 && body[i - 1] == '\\'; --i) ++slashes;
        if (slashes % 2 == 0) {
          anchored_end = true;
          body.remove_suffix(1);
        }
      }
      src_ = body;
      at_ = 0;
      int r = concat();
      if (at_ < src_.size()) bad(src_[at_] == ')' ? "an unmatched ')'" : "an unexpected character");
      if (!anchored_start) r = cat(star(leaf(any_class())), r);
      if (!anchored_end) r = cat(r, star(leaf(any_class())));
      root = root < 0 ? r : add({Node::kAlt, -1, root, r});
    }

    JsonPattern p;
    p.source_ = std::string(re_);
    // Positions: the class leaves reachable from the root (a repeat's copies; not the original
    // it was copied from).
    number_leaves(root, p);
    p.follow_.assign(64, 0);
    const Sets r = glushkov(root, p.follow_);
    p.follow_[63] = r.first;
    p.accept_ = r.last | (r.nullable ? p.start_ : 0);
    // Alive: positions a JSON string can write (not only UTF-16 surrogates, not an empty class)
    // that are accepting or lead to one, and the start if it leads to one.
    uint64_t writable = 0;
    for (size_t q = 0; q < p.classes_.size(); ++q)
      if (p.classes_[q].meets(0, 0xD7FF) || p.classes_[q].meets(0xE000, 0x10FFFF))
        writable |= uint64_t(1) << q;
    uint64_t live = (p.accept_ & writable) | (p.accept_ & p.start_);
    for (bool grew = true; grew;) {
      grew = false;
      for (int q = 0; q < 64; ++q) {
        const uint64_t bit = uint64_t(1) << q;
        if ((live & bit) || !((writable | p.start_) & bit)) continue;
        if (p.follow_[size_t(q)] & live) {
          live |= bit;
          grew = true;
        }
      }
    }
    p.live_ = live;
    if (!(live & p.start_)) fail(ErrorKind::kBadValue, "pattern \"{}\": no string matches it", re_);
    return p;
  }

 private:
  struct Node {
    enum Kind { kLeaf, kCat, kAlt, kStar, kPlus, kOpt, kEmpty } kind;
    int cls = -1;
    int a = -1, b = -1;
    int position = -1;
  };
  struct Sets {
    bool nullable;
    uint64_t first, last;
  };

  [[noreturn]] void bad(const std::string& what) const {
    const size_t at = esc_start_ != std::string_view::npos ? esc_start_ : at_;
    fail(ErrorKind::kBadValue, "pattern \"{}\": {} at offset {} is not supported", re_, what,
         at + size_t(src_.data() - re_.data()));
  }

  // The pattern split at its top-level '|' (outside groups, classes and escapes).
  std::vector<std::string_view> top_level_alternatives() const {
    std::vector<std::string_view> out;
    int depth = 0;
    bool in_class = false;
    size_t begin = 0;
    for (size_t i = 0; i < re_.size(); ++i) {
      const char c = re_[i];
      if (c == '\\') {
        ++i;
      } else if (in_class) {
        if (c == ']') in_class = false;
      } else if (c == '[') {
        in_class = true;
      } else if (c == '(') {
        ++depth;
      } else if (c == ')') {
        --depth;
      } else if (c == '|' && depth == 0) {
        out.push_back(re_.substr(begin, i - begin));
        begin = i + 1;
      }
    }
    out.push_back(re_.substr(begin));
    return out;
  }

  void number_leaves(int n, JsonPattern& p) {
    Node& x = nodes_[size_t(n)];
    if (x.kind == Node::kLeaf) {
      if (int(p.classes_.size()) >= JsonPattern::kMaxPositions)
        fail(ErrorKind::kBadValue,
             "pattern \"{}\": over {} character positions once its repeats are expanded", re_,
             JsonPattern::kMaxPositions);
      x.position = int(p.classes_.size());
      p.classes_.push_back(classes_[size_t(x.cls)]);
      return;
    }
    if (x.a >= 0) number_leaves(x.a, p);
    if (nodes_[size_t(n)].b >= 0) number_leaves(nodes_[size_t(n)].b, p);
  }

  int add(Node n) {
    nodes_.push_back(n);
    if (nodes_.size() > 4096) fail(ErrorKind::kBadValue, "pattern \"{}\": too large", re_);
    return int(nodes_.size() - 1);
  }
  int leaf(Class c) {
    std::sort(c.ranges.begin(), c.ranges.end());  // Class::meets walks them in order
    classes_.push_back(std::move(c));
    return add({Node::kLeaf, int(classes_.size() - 1)});
  }
  int cat(int a, int b) { return add({Node::kCat, -1, a, b}); }
  int star(int a) { return add({Node::kStar, -1, a}); }
  int empty() { return add({Node::kEmpty}); }

  // A copy of subtree n (its leaves become new positions).
  int clone(int n) {
    Node c = nodes_[size_t(n)];
    if (c.a >= 0) c.a = clone(c.a);
    if (c.b >= 0) c.b = clone(c.b);
    return add(c);
  }

  bool more() const { return at_ < src_.size(); }
  char peek() const { return src_[at_]; }

  int alt() {
    int left = concat();
    while (more() && peek() == '|') {
      ++at_;
      left = add({Node::kAlt, -1, left, concat()});
    }
    return left;
  }

  int concat() {
    int left = -1;
    while (more() && peek() != '|' && peek() != ')') {
      const int r = repeat();
      left = left < 0 ? r : cat(left, r);
    }
    return left < 0 ? empty() : left;
  }

  int repeat() {
    int a = atom();
    while (more()) {
      const char c = peek();
      if (c == '*' || c == '+' || c == '?') {
        ++at_;
        a = add({c == '*' ? Node::kStar : c == '+' ? Node::kPlus : Node::kOpt, -1, a});
      } else if (c == '{' && counted()) {
        const size_t save = at_;
        ++at_;
        const int n = number();
        int m = n;
        bool open = false;
        if (more() && peek() == ',') {
          ++at_;
          if (more() && peek() == '}') {
            open = true;
          } else {
            m = number();
          }
        }
        if (!more() || peek() != '}') {
          at_ = save;
          bad("a malformed {n,m}");
        }
        ++at_;
        if (m < n) bad("{n,m} with m < n");
        if (n > JsonPattern::kMaxPositions || m > JsonPattern::kMaxPositions)
          fail(ErrorKind::kBadValue, "pattern \"{}\": a repeat count over {}", re_,
               JsonPattern::kMaxPositions);
        // X{n,m}: n copies, then m - n optional ones (X{n,}: then X*).
        int out = -1;
        for (int i = 0; i < n; ++i) out = out < 0 ? clone(a) : cat(out, clone(a));
        if (open) {
          const int s = star(clone(a));
          out = out < 0 ? s : cat(out, s);
        } else {
          for (int i = n; i < m; ++i) {
            const int o = add({Node::kOpt, -1, clone(a)});
            out = out < 0 ? o : cat(out, o);
          }
        }
        a = out < 0 ? empty() : out;
      } else {
        break;
      }
      if (more() && peek() == '?') ++at_;  // lazy: the same strings
    }
    return a;
  }

  // "{" starts a quantifier {n}, {n,} or {n,m} here.
  bool counted() const {
    size_t i = at_ + 1;
    if (i >= src_.size() || src_[i] < '0' || src_[i] > '9') return false;
    while (i < src_.size() && ((src_[i] >= '0' && src_[i] <= '9') || src_[i] == ',')) ++i;
    return i < src_.size() && src_[i] == '}';
  }

  int number() {
    int n = 0;
    if (!more() || peek() < '0' || peek() > '9') bad("a malformed {n,m}");
    while (more() && peek() >= '0' && peek() <= '9') {
      n = std::min(n * 10 + (peek() - '0'), 1 << 20);
      ++at_;
    }
    return n;
  }

  // One code point of the pattern's text (UTF-8; nlohmann has checked a schema's strings).
  uint32_t code_point() {
    const size_t start = at_;
    const uint32_t cp = next_codepoint(src_, at_);
    // next_codepoint reads a bad sequence as U+FFFD over one byte; the real U+FFFD is 3 bytes.
    if (cp == 0xFFFD && at_ - start != 3) {
      at_ = start;
      bad("invalid UTF-8");
    }
    return cp;
  }

  // After a backslash: a class (\d …) into c, or a code point.
  bool escape(Class& c, uint32_t& cp, bool in_class) {
    esc_start_ = at_ - 1;  // an error names where the escape starts
    const bool is_class = escape_body(c, cp, in_class);
    esc_start_ = std::string_view::npos;
    return is_class;
  }

  bool escape_body(Class& c, uint32_t& cp, bool in_class) {
    if (!more()) bad("a trailing backslash");
    const char e = src_[at_++];
    switch (e) {
      case 'd':
      case 'w':
      case 's':
        c = e == 'd' ? digit_class() : e == 'w' ? word_class() : space_class();
        return true;
      case 'D':
      case 'W':
      case 'S':
        if (in_class) bad(std::string("\\") + e + " inside a class");
        c = e == 'D' ? digit_class() : e == 'W' ? word_class() : space_class();
        c.negate = true;
        return true;
      case 't':
        cp = '\t';
        return false;
      case 'n':
        cp = '\n';
        return false;
      case 'r':
        cp = '\r';
        return false;
      case 'f':
        cp = '\f';
        return false;
      case 'v':
        cp = '\v';
        return false;
      case '0':
        cp = 0;
        return false;
      case 'u':
      case 'x': {
        const int digits = e == 'u' ? 4 : 2;
        cp = 0;
        for (int i = 0; i < digits; ++i) {
          const int d = more() ? hex_digit(uint8_t(peek())) : -1;
          if (d < 0) bad(std::string("a malformed \\") + e);
          ++at_;
          cp = cp * 16 + uint32_t(d);
        }
        return false;
      }
      case 'b':
        if (in_class) {
          cp = '\b';
          return false;
        }
        bad("\\b (a word boundary)");
      case 'B':
        bad("\\B (a word boundary)");
      case 'p':
      case 'P':
        bad("\\p{…} (a Unicode property)");
      case 'k':
        bad("\\k<…> (a named backreference)");
      case 'c':
        bad("\\c (a control escape)");
      default:
        if (e >= '1' && e <= '9') bad("a backreference");
        if (std::isalnum(uint8_t(e))) bad(std::string("the escape \\") + e);
        cp = uint8_t(e);
        if (uint8_t(e) >= 0x80) {
          --at_;
          cp = code_point();
        }
        return false;
    }
  }

  int atom() {
    const char c = peek();
    if (c == '(') {
      if (++groups_ > 64) bad("groups nested over 64 deep");
      ++at_;
      if (more() && peek() == '?') {
        if (at_ + 1 < src_.size() && src_[at_ + 1] == ':') {
          at_ += 2;
        } else {
          bad("a lookaround or named group");
        }
      }
      const int inner = alt();
      if (!more() || peek() != ')') bad("an unclosed '('");
      ++at_;
      --groups_;
      return inner;
    }
    if (c == '[') return bracket();
    if (c == '.') {
      ++at_;
      return leaf(dot_class());
    }
    if (c == '\\') {
      ++at_;
      Class k;
      uint32_t cp = 0;
      if (escape(k, cp, false)) return leaf(std::move(k));
      return leaf({{{cp, cp}}, false});
    }
    if (c == '*' || c == '+' || c == '?') bad("a quantifier with nothing to repeat");
    if (c == '{' && counted()) bad("a quantifier with nothing to repeat");
    if (c == '^' || c == '$') bad(std::string("'") + c + "' inside the pattern");
    const uint32_t cp = code_point();
    return leaf({{{cp, cp}}, false});
  }

  int bracket() {
    ++at_;  // '['
    Class k;
    if (more() && peek() == '^') {
      k.negate = true;
      ++at_;
    }
    while (more() && peek() != ']') {
      uint32_t lo = 0;
      if (peek() == '\\') {
        ++at_;
        Class inner;
        if (escape(inner, lo, true)) {
          k.ranges.insert(k.ranges.end(), inner.ranges.begin(), inner.ranges.end());
          continue;
        }
      } else {
        lo = code_point();
      }
      uint32_t hi = lo;
      if (at_ + 1 < src_.size() && peek() == '-' && src_[at_ + 1] != ']') {
        ++at_;
        if (peek() == '\\') {
          ++at_;
          Class inner;
          if (escape(inner, hi, true)) bad("a class escape as a range's end");
        } else {
          hi = code_point();
        }
        if (hi < lo) bad("a range out of order");
      }
      k.ranges.push_back({lo, hi});
    }
    if (!more()) bad("an unclosed '['");
    ++at_;  // ']'
    return leaf(std::move(k));
  }

  Sets glushkov(int n, std::vector<uint64_t>& follow) const {
    const Node& x = nodes_[size_t(n)];
    switch (x.kind) {
      case Node::kLeaf: {
        const uint64_t p = uint64_t(1) << x.position;
        return {false, p, p};
      }
      case Node::kEmpty:
        return {true, 0, 0};
      case Node::kCat: {
        const Sets a = glushkov(x.a, follow), b = glushkov(x.b, follow);
        for (uint64_t s = a.last; s; s &= s - 1) follow[size_t(__builtin_ctzll(s))] |= b.first;
        return {a.nullable && b.nullable, a.first | (a.nullable ? b.first : 0),
                b.last | (b.nullable ? a.last : 0)};
      }
      case Node::kAlt: {
        const Sets a = glushkov(x.a, follow), b = glushkov(x.b, follow);
        return {a.nullable || b.nullable, a.first | b.first, a.last | b.last};
      }
      case Node::kStar:
      case Node::kPlus: {
        const Sets a = glushkov(x.a, follow);
        for (uint64_t s = a.last; s; s &= s - 1) follow[size_t(__builtin_ctzll(s))] |= a.first;
        return {x.kind == Node::kStar || a.nullable, a.first, a.last};
      }
      case Node::kOpt: {
        const Sets a = glushkov(x.a, follow);
        return {true, a.first, a.last};
      }
    }
    return {true, 0, 0};
  }

  std::string_view re_;   // the whole pattern
  std::string_view src_;  // without its anchors
  size_t at_ = 0;
  int groups_ = 0;                             // open '(' (recursion depth)
  size_t esc_start_ = std::string_view::npos;  // the escape being read (error offsets)
  std::vector<Node> nodes_;
  std::vector<Class> classes_;
};

JsonPattern JsonPattern::compile(std::string_view re) {
  if (re.size() > 4096) fail(ErrorKind::kBadValue, "pattern: {} bytes; at most 4096", re.size());
  return PatternParser(re).build();
}

}  // namespace strata::engine
