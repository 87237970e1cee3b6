// Structured output at the token level: which of a vocabulary's tokens keep a reply a viable
// prefix of a document a JSON Schema accepts (json_schema.h), or of a tool call in XML form
// (xml_call.h), for the sampler (TokenFilter).
// Tested by tests/test_token_constraint.cpp on the fixtures' tokenizers.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/harmony_call.h"
#include "engine/json_schema.h"
#include "engine/sampler.h"
#include "engine/section_call.h"
#include "engine/xml_call.h"

namespace strata::engine {

class Tokenizer;

// The bytes each token adds to a reply (Tokenizer::append_piece without special tokens), built
// once per vocabulary; control tokens add none. End-of-generation tokens are marked.
class TokenTexts {
 public:
  explicit TokenTexts(const Tokenizer& tok);
  size_t size() const { return eog_.size(); }
  std::string_view text(int32_t id) const {
    return std::string_view(bytes_).substr(offsets_[size_t(id)],
                                           offsets_[size_t(id) + 1] - offsets_[size_t(id)]);
  }
  bool eog(int32_t id) const { return eog_[size_t(id)] != 0; }
  // Code points when the token is plain string content (well-formed UTF-8, whole characters, no
  // '"', '\\' or control bytes), else 0.
  uint32_t plain(int32_t id) const { return plain_[size_t(id)]; }

 private:
  std::string bytes_;
  std::vector<uint32_t> offsets_;  // [size + 1]
  std::vector<uint8_t> eog_;
  std::vector<uint16_t> plain_;
};

// A filter whose picks make a document (ChatSession drives one per constrained span): told each
// pick, it says when the document is complete.
class DocumentFilter : public TokenFilter {
 public:
  // The sampler's pick (allows(id) held): the text goes on with its bytes.
  virtual void accept(int32_t id) = 0;
  // The document is complete and nothing may follow: the reply ends here.
  virtual bool finished() const = 0;
  // Bytes the reply already holds (a trigger's token ran past it): false when they do not keep
  // the text viable.
  virtual bool feed_text(std::string_view bytes) = 0;
};

// Matcher: JsonMatcher, or any byte matcher with its interface (feed, accepting, finished,
// plain_string_room, copy-assignment) — XmlCallMatcher (xml_call.h).
template <class Matcher>
class BasicTokenConstraint final : public DocumentFilter {
 public:
  // spec: what the Matcher is built from (a JsonSchema, an XmlCallSpec).
  template <class Spec>
  BasicTokenConstraint(const std::shared_ptr<Spec>& spec, std::shared_ptr<const TokenTexts> texts)
      : texts_(std::move(texts)), matcher_(spec), scratch_(spec) {}

  // A token is allowed when its bytes keep the text a viable prefix; an end-of-generation token
  // when the text is a whole document; a token that adds no bytes, or is outside the
  // vocabulary (a padded output head), never.
  bool allows(int32_t id) override;
  void mask(std::span<float> logits) override;
  void accept(int32_t id) override;
  bool finished() const override { return matcher_.finished(); }
  bool feed_text(std::string_view bytes) override { return matcher_.feed(bytes); }
  bool accepting() const { return matcher_.accepting(); }
  const Matcher& matcher() const { return matcher_; }
  // Passes over the vocabulary (the sampler's pick refused) and their time.
  uint64_t masks() const { return masks_; }
  double mask_seconds() const { return mask_seconds_; }

 private:
  std::shared_ptr<const TokenTexts> texts_;
  Matcher matcher_;
  Matcher scratch_;  // assigned from matcher_ per token tried (its storage reused)
  std::vector<uint8_t> pairs_ = std::vector<uint8_t>(1 << 16);  // mask's two-byte memo:
                                                                // 0 unknown, 1 viable, 2 not
  uint64_t masks_ = 0;
  double mask_seconds_ = 0;
};

using TokenConstraint = BasicTokenConstraint<JsonMatcher>;
using XmlCallConstraint = BasicTokenConstraint<XmlCallMatcher>;
using HarmonyCallConstraint = BasicTokenConstraint<HarmonyCallMatcher>;
using SectionCallConstraint = BasicTokenConstraint<SectionCallMatcher>;

// Makes a fresh filter for one constrained span (a tool call's body).
using DocumentFilterFn =
    std::function<std::unique_ptr<DocumentFilter>(std::shared_ptr<const TokenTexts>)>;

}  // namespace strata::engine
