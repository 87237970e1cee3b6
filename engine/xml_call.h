// A tool call in one of the XML forms models are trained on, byte by byte: after the <tool_call>
// token, Qwen3-Coder's
//
//   <function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n ... </function>
//
// (one optional '\n' first), GLM-4.5's and GLM-4.6's
//
//   NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n ... </tool_call>
//
// or, after <minimax:tool_call>, MiniMax-M2's section of calls
//
//   \n<invoke name="NAME">\n<parameter name="KEY">VALUE</parameter>\n ... </invoke>\n
//   ... (more calls, when parallel) </minimax:tool_call>
//
// (XmlCallSyntax). XmlCallMatcher follows the text being generated as JsonMatcher does a
// JSON document, for TokenConstraint (token_constraint.h): NAME is one of the tools', each KEY one
// of that function's parameters, at most once, the required ones before the call's close. A VALUE
// ends at the first "\n</parameter>\n" (GLM: "</arg_value>\n"). A parameter whose schema takes
// strings is raw text (the template writes strings as they are): its bytes, read as the characters
// of a JSON string, must keep the string a viable prefix of one the schema accepts (maxLength,
// enum, pattern …); any other parameter's VALUE is JSON text its schema accepts (no whitespace
// after it). Tested by tests/test_tool_calls.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "engine/json_schema.h"

namespace strata::engine {

// Where a form's names and values start and end. name_end's and key_end's first byte ends the
// NAME or KEY (which cannot hold it); the rest follows it. A syntax with a section_end holds
// its calls in one section: after a call's close, another lead or the section's end.
struct XmlCallSyntax {
  std::string_view lead;              // before NAME
  bool lead_newline_optional;         // lead's first byte, a '\n', may be left out
  std::string_view name_end;          // after NAME
  std::string_view key_open;          // before a KEY
  std::string_view key_end;           // after it, before its VALUE
  std::string_view value_end;         // the first after the VALUE ends it
  std::string_view call_close;        // the call is complete
  std::string_view section_end = {};  // the section is complete (empty: one call, no section)
};
inline constexpr XmlCallSyntax kQwenCoderSyntax = {
    "\n<function=", true, ">\n", "<parameter=", ">\n", "\n</parameter>\n", "</function>"};
inline constexpr XmlCallSyntax kGlmSyntax = {
    "", false, "\n", "<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n", "</tool_call>"};
inline constexpr XmlCallSyntax kMinimaxSyntax = {.lead = "\n<invoke name=\"",
                                                 .lead_newline_optional = true,
                                                 .name_end = "\">\n",
                                                 .key_open = "<parameter name=\"",
                                                 .key_end = "\">",
                                                 .value_end = "</parameter>\n",
                                                 .call_close = "</invoke>\n",
                                                 .section_end = "</minimax:tool_call>"};

struct XmlCallSpec {
  struct Param {
    std::string name;
    bool raw = true;  // a string VALUE written as it is (else JSON text)
    bool required = false;
    std::shared_ptr<const JsonSchema> schema;  // what VALUE must be (a raw one: as a JSON string)
  };
  struct Function {
    std::string name;
    std::vector<Param> params;
    // Parameters named freely (the tool's schema lists none but takes an object): raw values.
    bool open_params = false;
  };
  std::vector<Function> functions;
  XmlCallSyntax syntax = kQwenCoderSyntax;
  bool parallel = true;  // a section (syntax.section_end) may hold more than one call
};

// Whether a parameter with this JSON Schema is written raw: it may be a string (its type names
// "string", or it has none and neither properties nor items; an enum or const of strings; a
// union with such a branch).
bool xml_raw_param(const nlohmann::json& schema);

class XmlCallMatcher {
 public:
  static constexpr size_t kMaxOpenName = 64;  // an open parameter's name, bytes

  explicit XmlCallMatcher(std::shared_ptr<const XmlCallSpec> spec);

  bool feed(uint8_t b);
  bool feed(std::string_view bytes);
  // The call is complete (its syntax's call_close; a section's: its section_end): nothing may
  // follow.
  bool finished() const { return phase_ == kDone; }
  bool accepting() const { return finished(); }
  bool dead() const { return phase_ == kDead; }
  // Inside a VALUE with no "\n</parameter>" under way: how many more code points of plain text
  // (TokenTexts::plain) it may take without being fed; else 0.
  uint32_t plain_string_room() const;

 private:
  enum Phase : uint8_t {
    kLead,        // lead ("\n<function=", the '\n' optional)
    kName,        // the function's name, up to name_end
    kLiteral,     // the rest of lit_, then next_
    kParamOrEnd,  // key_open ("<parameter=") or call_close ("</function>")
    kParamName,   // a parameter's name, up to key_end
    kValue,       // VALUE, then value_end ("\n</parameter>\n")
    kNext,        // a section's next call (lead) or its section_end
    kDone,
    kDead,
  };
  bool step(uint8_t b);
  bool value_byte(uint8_t b);
  bool feed_value(uint8_t b);  // the VALUE's content branch
  bool value_can_end() const;
  void start_value();

  std::shared_ptr<const XmlCallSpec> spec_;
  Phase phase_ = kLead;
  Phase next_ = kLead;    // kLiteral: the phase after it
  std::string_view lit_;  // kLiteral: what is still due
  std::string buf_;       // kLead / kParamOrEnd: bytes matched; kName / kParamName: the name
  int32_t function_ = -1;
  int32_t param_ = -1;  // the VALUE's parameter (-1: an open one)
  uint64_t used_ = 0;   // parameters given (bits; an open function's are not tracked)
  // kValue: the content branch (JSON text, or a raw string as a JSON string's characters), and
  // how much of value_end the last bytes matched (0: none) when that branch may end
  // there.
  JsonMatcher value_;
  bool value_alive_ = false;
  bool raw_ = false;
  uint8_t delim_ = 0;
};

}  // namespace strata::engine
