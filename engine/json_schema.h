// Structured output: JSON text constrained to a JSON Schema, byte by byte.
//
// JsonSchema compiles a schema (the subset below) into nodes; JsonMatcher follows a text being
// generated and says, for any next bytes, whether the text stays the prefix of a document the
// schema accepts. TokenConstraint (token_constraint.h) lifts this to a vocabulary's tokens for
// the sampler: `strata run/chat --json-schema`, `strata serve`'s `response_format`.
//
// The subset (anything else that constrains is refused with the keyword's name; annotations —
// title, description, examples, default, $schema, $id, $comment … — are ignored, and `format`
// too except date, time, date-time and uuid, which become patterns on a string without a pattern
// or lengths of its own):
//   type (a name or a list of names), enum, const, anyOf / oneOf (taken as anyOf), allOf with
//   one schema, $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed);
//   objects: properties, required, additionalProperties (false, true or a schema; when the
//   schema lists properties and does not say, false: a generated object holds the listed keys
//   only); keys in any order, each at most once, required ones before '}';
//   arrays: items, minItems, maxItems; strings: minLength, maxLength (code points), or a
//   pattern (json_pattern.h: an ECMA-262 subset, unanchored unless ^ / $ say otherwise);
//   integers: minimum, maximum, exclusiveMinimum, exclusiveMaximum (exact, within int64);
//   numbers: the same bounds (0 or magnitudes 1e-15 to 1e15; a bounded number is written without
//   an exponent and with at most 17 significant digits, zeros after them aside, and its value as
//   a double — the bound widened by half an ulp, what a parser rounds onto it — must be within).
// The text: no leading zeros, integers without a fraction or an exponent, exponents of at most 2
// digits, strings of valid UTF-8 without raw control characters and with \u surrogates in pairs,
// at most 40 characters a number, at most 32 whitespace bytes in a row (a model may otherwise pad
// forever), nesting at most kMaxDepth deep, nothing after the top-level value, no key twice in an
// object (additional keys compared by their bytes as written). Enum and const values match their
// compact JSON text (nlohmann's dump()); beside them only `type` is allowed (it filters the
// values). A keyword that implies a type (minLength, items, properties …) without `type` makes the
// schema that type.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/json_pattern.h"

namespace strata::engine {

class JsonSchema {
 public:
  // Any JSON value / any JSON object (OpenAI's response_format "json_object").
  static std::shared_ptr<const JsonSchema> any_value();
  static std::shared_ptr<const JsonSchema> any_object();
  // Parses and compiles a schema given as JSON text. Throws strata::Error (kBadValue) with a
  // one-line reason: not JSON, an unsupported keyword (named, with its path), a bad $ref …
  static std::shared_ptr<const JsonSchema> parse(std::string_view schema_json);
  // The same from a parsed document (serve's response_format). A document nested deeper than
  // kMaxSchemaDepth levels is refused before anything recurses into it (a request must not be
  // able to overflow the stack).
  static std::shared_ptr<const JsonSchema> from_json(const nlohmann::json& schema);
  static constexpr size_t kMaxSchemaDepth = 128;
  // A "number"'s bounds: 0, or a magnitude within [1e-15, 1e15] (wider ones are refused).
  static constexpr double kNumberBoundLimit = 1e15;

  // A compiled schema node. `any` is a union of the five kinds of value.
  struct Node {
    enum Kind : uint8_t { kUnion, kObject, kArray, kString, kNumber, kInteger, kLiterals };
    Kind kind = kUnion;
    std::vector<uint32_t> alts;      // kUnion: alternatives (anyOf, a list of types, a $ref)
    std::vector<std::string> names;  // kObject: property keys as JSON text without the quotes,
                                     // sorted
    std::vector<uint32_t> props;     // kObject: each name's value node
    uint64_t required = 0;           // kObject: bits of `names` (at most 64 properties)
    int64_t additional = -1;         // kObject: the node other keys' values follow; -1: none
    uint32_t items = 0;              // kArray
    uint32_t min = 0;                // kArray items, kString code points
    uint32_t max = UINT32_MAX;
    bool has_lo = false, has_hi = false;  // kInteger: inclusive bounds; kNumber: flo, fhi
    int64_t lo = 0, hi = 0;
    double flo = 0, fhi = 0;  // kNumber's bounds, each inclusive or exclusive
    bool lo_excl = false, hi_excl = false;
    std::vector<std::string> literals;           // kLiterals: compact JSON texts, sorted, unique
    std::shared_ptr<const JsonPattern> pattern;  // kString: `pattern` (null: none)
    // The fewest frames (nesting levels) a value of this node needs to be completed: the matcher
    // opens a value, a key or an item only where it fits under kMaxDepth, so it never dead-ends.
    uint32_t depth = 1;
  };
  const Node& node(uint32_t i) const { return nodes_[i]; }
  uint32_t root() const { return root_; }
  // The 5 kinds of value an `any` node stands for (object, array, string, number, keyword).
  uint32_t any_node() const { return any_; }

  JsonSchema();
  ~JsonSchema();
  JsonSchema(JsonSchema&&) noexcept;
  JsonSchema& operator=(JsonSchema&&) noexcept;

 private:
  friend class SchemaCompiler;
  std::vector<Node> nodes_;
  uint32_t root_ = 0;
  uint32_t any_ = 0;
};

// The state of a text being matched against a schema: a few alternative parse stacks (anyOf
// branches still alive). Copy-assignment reuses the storage of the target, so a scratch
// matcher assigned from the current one many times (TokenConstraint's mask) allocates nothing
// after the first.
class JsonMatcher {
 public:
  static constexpr uint32_t kMaxDepth = 64;        // nested values (frames) at most
  static constexpr uint32_t kMaxWhitespace = 32;   // whitespace bytes in a row
  static constexpr uint32_t kMaxNumberChars = 40;  // characters of one number

  explicit JsonMatcher(std::shared_ptr<const JsonSchema> schema);
  JsonMatcher(const JsonMatcher&) = default;
  JsonMatcher& operator=(const JsonMatcher& o);

  // Feeds bytes; true when the text stays a viable prefix. On false the matcher is dead (every
  // later feed fails too): callers test on a copy.
  bool feed(std::string_view bytes);
  bool feed(uint8_t b);
  // The text so far is a whole document (a top-level number or enum value may go on, so it can
  // be both accepting and not finished).
  bool accepting() const;
  // The document is complete and no byte may follow.
  bool finished() const;
  bool dead() const { return n_alive_ == 0; }
  // Inside a string value, between characters, on the one stack alive: how many more code
  // points it may take (TokenConstraint lets plain text through on this without feeding it);
  // else 0.
  uint32_t plain_string_room() const;
  // The stacks alive (tests; anyOf branches).
  size_t alternatives() const { return n_alive_; }

  struct Frame {
    uint32_t node = 0;
    uint8_t type = 0;    // FrameType (json_schema.cpp)
    uint8_t phase = 0;   // per type
    uint8_t esc = 0;     // string lexing: 0, 1 after '\', 2..5 hex digits to come + 1; a
                         // number: 1 when negative
    uint8_t utf8 = 0;    // string lexing: continuation bytes still due
    uint8_t lead = 0;    // string lexing: the lead byte whose first continuation is narrower
    uint8_t surr = 0;    // string lexing: 1 a high surrogate escape ended, 2 its low one's '\' came
    uint16_t hex = 0;    // string lexing: the \u escape's value so far
    uint32_t count = 0;  // items, code points, matched bytes, number characters
    uint32_t lo = 0, hi = 0;  // candidate properties / literals
    uint32_t keys_at = 0;     // an object: where its additional keys start in Stack::keys
    uint64_t used = 0;        // an object: the properties given
    uint64_t value = 0;       // an integer's magnitude so far (saturated), a bounded number's
                              // significant digits; a key's hash, then the node its value follows
    int32_t e10 = 0;          // a bounded number: its value is value · 10^e10
    bool operator==(const Frame&) const = default;
  };
  struct Stack {
    std::vector<Frame> frames;
    std::vector<uint64_t> keys;  // hashes of the open objects' additional keys (no repeats)
    uint32_t ws = 0;             // whitespace bytes in a row
    bool done = false;
    bool operator==(const Stack&) const = default;
  };

 private:
  void step(Stack& s, uint8_t b);  // into next_
  bool consume(Stack& s, uint8_t b);
  bool open_value(Stack& s, uint32_t node, uint8_t b);
  void emit(const Stack& s);
  bool key_possible(const Frame& f, size_t depth) const;
  bool fits(int64_t node, size_t depth) const;
  bool can_close(const Frame& f) const;
  bool can_end(const Frame& f) const;
  bool number_can_go_on(const Frame& f) const;
  enum class NumberStep { kTaken, kRefused, kNotNumber };
  NumberStep take_number(Frame& f, const JsonSchema::Node& n, uint8_t b) const;
  bool number_feasible(const Frame& f, const JsonSchema::Node& n) const;
  bool meets(const JsonSchema::Node& n, long double a, bool a_open, long double b,
             bool b_open) const;
  void settle(Stack& s) const;

  std::shared_ptr<const JsonSchema> schema_;
  std::vector<Stack> alive_;  // [0, n_alive_) in use; the rest keeps capacity
  size_t n_alive_ = 0;
  std::vector<Stack> next_;  // feed's output, swapped with alive_
  size_t n_next_ = 0;
  Stack work_;                // the stack a byte is stepping
  bool ws_consumed_ = false;  // the byte was whitespace between tokens
};

}  // namespace strata::engine
