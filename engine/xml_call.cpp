// A tool call in Qwen3-Coder's, GLM's or MiniMax-M2's XML form, byte by byte (see xml_call.h).
#include "engine/xml_call.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <nlohmann/json.hpp>

namespace strata::engine {
namespace {

bool open_name_byte(uint8_t b) {
  return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == '_' ||
         b == '-' || b == '.';
}

}  // namespace

bool xml_raw_param(const nlohmann::json& schema) {
  if (!schema.is_object()) return true;
  if (const auto t = schema.find("type"); t != schema.end()) {
    if (t->is_string()) return *t == "string";
    if (t->is_array()) return std::find(t->begin(), t->end(), "string") != t->end();
    return true;
  }
  if (const auto e = schema.find("enum"); e != schema.end() && e->is_array())
    return std::any_of(e->begin(), e->end(), [](const nlohmann::json& v) { return v.is_string(); });
  if (const auto c = schema.find("const"); c != schema.end()) return c->is_string();
  for (const char* k : {"anyOf", "oneOf"})
    if (const auto u = schema.find(k); u != schema.end() && u->is_array())
      return std::any_of(u->begin(), u->end(),
                         [](const nlohmann::json& s) { return xml_raw_param(s); });
  return !schema.contains("properties") && !schema.contains("items");
}

XmlCallMatcher::XmlCallMatcher(std::shared_ptr<const XmlCallSpec> spec)
    : spec_(std::move(spec)), value_(JsonSchema::any_value()) {}

bool XmlCallMatcher::feed(std::string_view bytes) {
  for (const char c : bytes)
    if (!feed(uint8_t(c))) return false;
  return true;
}

bool XmlCallMatcher::feed(uint8_t b) {
  if (phase_ == kDead) return false;
  if (!step(b)) phase_ = kDead;
  return phase_ != kDead;
}

bool XmlCallMatcher::step(uint8_t b) {
  const std::vector<XmlCallSpec::Function>& fns = spec_->functions;
  const XmlCallSyntax& syn = spec_->syntax;
  // After a name's end byte: the rest of its end, then `then`.
  const auto literal = [&](std::string_view rest, Phase then) {
    buf_.clear();
    lit_ = rest;
    next_ = then;
    phase_ = rest.empty() ? then : kLiteral;
    if (phase_ == kValue) start_value();
  };
  switch (phase_) {
    case kLead: {
      if (syn.lead.empty()) {
        phase_ = kName;
        return step(b);
      }
      if (buf_.empty() && syn.lead_newline_optional && b == uint8_t(syn.lead[1]))
        buf_.push_back('\n');
      buf_ += char(b);
      if (!syn.lead.starts_with(buf_)) return false;
      if (buf_.size() == syn.lead.size()) {
        buf_.clear();
        phase_ = kName;
      }
      return true;
    }
    case kName: {
      if (b == uint8_t(syn.name_end[0])) {
        for (size_t f = 0; f < fns.size(); ++f) {
          if (fns[f].name != buf_) continue;
          function_ = int32_t(f);
          literal(syn.name_end.substr(1), kParamOrEnd);
          return true;
        }
        return false;
      }
      buf_ += char(b);
      return std::any_of(fns.begin(), fns.end(), [&](const XmlCallSpec::Function& f) {
        return std::string_view(f.name).starts_with(buf_);
      });
    }
    case kLiteral:
      if (lit_.empty() || uint8_t(lit_[0]) != b) return false;
      lit_.remove_prefix(1);
      if (lit_.empty()) literal({}, next_);
      return true;
    case kParamOrEnd: {
      buf_ += char(b);
      const XmlCallSpec::Function& f = fns[size_t(function_)];
      bool missing = false;  // a required parameter not given yet
      for (size_t p = 0; p < f.params.size(); ++p)
        missing = missing || (f.params[p].required && !(used_ >> p & 1));
      const bool all_given = !f.open_params && std::popcount(used_) == int(f.params.size());
      if (!all_given && syn.key_open.starts_with(buf_)) {
        if (buf_.size() == syn.key_open.size()) {
          buf_.clear();
          phase_ = kParamName;
        }
        return true;
      }
      if (!missing && syn.call_close.starts_with(buf_)) {
        if (buf_.size() == syn.call_close.size()) {
          buf_.clear();
          phase_ = syn.section_end.empty() ? kDone : kNext;
        }
        return true;
      }
      return false;
    }
    case kNext: {  // another call's lead (its '\n' optional), or the section's end
      buf_ += char(b);
      const std::string_view lead =
          syn.lead_newline_optional && buf_[0] != '\n' ? syn.lead.substr(1) : syn.lead;
      if (spec_->parallel && lead.starts_with(buf_)) {
        if (buf_.size() == lead.size()) {
          buf_.clear();
          function_ = -1;
          used_ = 0;
          phase_ = kName;
        }
        return true;
      }
      if (syn.section_end.starts_with(buf_)) {
        if (buf_.size() == syn.section_end.size()) phase_ = kDone;
        return true;
      }
      return false;
    }
    case kParamName: {
      const XmlCallSpec::Function& f = fns[size_t(function_)];
      if (b == uint8_t(syn.key_end[0])) {
        param_ = -1;
        for (size_t p = 0; p < f.params.size() && param_ < 0; ++p)
          if (!(used_ >> p & 1) && f.params[p].name == buf_) param_ = int32_t(p);
        if (param_ < 0 && !(f.open_params && !buf_.empty())) return false;
        if (param_ >= 0) used_ |= uint64_t(1) << param_;
        literal(syn.key_end.substr(1), kValue);
        return true;
      }
      buf_ += char(b);
      if (f.open_params) return open_name_byte(b) && buf_.size() <= kMaxOpenName;
      for (size_t p = 0; p < f.params.size(); ++p)
        if (!(used_ >> p & 1) && std::string_view(f.params[p].name).starts_with(buf_)) return true;
      return false;
    }
    case kValue:
      return value_byte(b);
    case kDone:
    case kDead:
      return false;
  }
  return false;
}

void XmlCallMatcher::start_value() {
  const XmlCallSpec::Function& f = spec_->functions[size_t(function_)];
  const XmlCallSpec::Param* p = param_ >= 0 ? &f.params[size_t(param_)] : nullptr;
  raw_ = !p || p->raw;
  value_ = JsonMatcher(p && p->schema ? p->schema : JsonSchema::any_value());
  value_alive_ = true;
  delim_ = 0;
  if (raw_) value_alive_ = value_.feed('"');
}

bool XmlCallMatcher::value_can_end() const {
  if (!value_alive_) return false;
  if (!raw_) return value_.accepting();
  JsonMatcher m = value_;
  return m.feed('"') && m.accepting();
}

bool XmlCallMatcher::feed_value(uint8_t b) {
  if (!raw_) return value_.feed(b);
  switch (b) {
    case '"':
      return value_.feed("\\\"");
    case '\\':
      return value_.feed("\\\\");
    case '\n':
      return value_.feed("\\n");
    case '\r':
      return value_.feed("\\r");
    case '\t':
      return value_.feed("\\t");
    default:
      if (b < 0x20) return value_.feed(fmt::format("\\u{:04x}", b));
      return value_.feed(b);
  }
}

bool XmlCallMatcher::value_byte(uint8_t b) {
  // The delimiter branch: goes on, or starts at its first byte where the content could end.
  const std::string_view end = spec_->syntax.value_end;
  uint8_t delim = 0;
  if (delim_ > 0 && uint8_t(end[delim_]) == b)
    delim = uint8_t(delim_ + 1);
  else if (b == uint8_t(end[0]) && value_can_end())
    delim = 1;
  if (delim == end.size()) {  // the first value_end ends the VALUE
    phase_ = kParamOrEnd;
    buf_.clear();
    return true;
  }
  value_alive_ = value_alive_ && feed_value(b);
  delim_ = delim;
  return value_alive_ || delim_ > 0;
}

uint32_t XmlCallMatcher::plain_string_room() const {
  if (phase_ != kValue || delim_ > 0 || !value_alive_) return 0;
  return value_.plain_string_room();
}

}  // namespace strata::engine
