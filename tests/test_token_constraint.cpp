// Structured output at the token level (engine/token_constraint.h) on the fixtures' real
// vocabularies — byte-level BPE (qwen3moe) and SentencePiece (mixtral): each token's bytes are
// its reply piece; mask() agrees with allows() token by token at every kind of state; the
// sampler's filtered pick is the best allowed token (greedy), always allowed (sampled), the
// unfiltered pick whenever that is allowed, and for plain temperature sampling distributed as
// the masked softmax; a ChatSession with a schema replies with documents the schema accepts and
// ends each at its last byte.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/forward.h"
#include "engine/json_schema.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "engine/token_constraint.h"
#include "engine/tokenizer.h"

using namespace strata::engine;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const fs::path kFixtures = STRATA_FIXTURES_DIR;

const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 10},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
    "ok": {"type": "boolean"},
    "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 6}]}
  },
  "required": ["name", "age", "ok"]
})";

// The schema's constraints, checked on a parsed reply.
void expect_follows_schema(const json& v, const std::string& text) {
  ASSERT_TRUE(v.is_object()) << text;
  for (const auto& [k, x] : v.items())
    EXPECT_TRUE(k == "name" || k == "age" || k == "tags" || k == "ok" || k == "note") << text;
  ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << text;
  ASSERT_TRUE(v.contains("age") && v["age"].is_number_integer()) << text;
  EXPECT_GE(v["age"].get<int64_t>(), 0) << text;
  EXPECT_LE(v["age"].get<int64_t>(), 120) << text;
  ASSERT_TRUE(v.contains("ok") && v["ok"].is_boolean()) << text;
  if (v.contains("tags")) {
    ASSERT_TRUE(v["tags"].is_array()) << text;
    EXPECT_LE(v["tags"].size(), 3u) << text;
    for (const json& t : v["tags"]) EXPECT_TRUE(t == "red" || t == "green" || t == "blue") << text;
  }
  if (v.contains("note")) {
    EXPECT_TRUE(v["note"].is_null() || v["note"].is_string()) << text;
  }
}

class Vocabulary : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const fs::path path = kFixtures / GetParam();
    if (!fs::exists(path)) GTEST_SKIP() << "fixture not found: " << path;
    model_ = std::make_unique<Model>(Model::load(path.string()));
    tok_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(model_->file()));
    texts_ = std::make_shared<const TokenTexts>(*tok_);
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::shared_ptr<const TokenTexts> texts_;
};

TEST_P(Vocabulary, TokenTextsAreTheReplyPieces) {
  const Vocab& v = tok_->vocab();
  ASSERT_EQ(texts_->size(), size_t(v.n_tokens()));
  size_t empty = 0;
  for (int32_t id = 0; id < v.n_tokens(); ++id) {
    EXPECT_EQ(texts_->text(id), tok_->token_to_piece(id, false)) << id;
    EXPECT_EQ(texts_->eog(id), v.is_eog(id)) << id;
    empty += texts_->text(id).empty();
  }
  EXPECT_LT(empty, size_t(v.n_tokens()) / 10);  // control tokens only
  // plain(): the tokens a string takes as they stand, between characters, with their length.
  const auto str = JsonSchema::parse(R"({"type": "string"})");
  size_t n_plain = 0;
  for (int32_t id = 0; id < v.n_tokens(); ++id) {
    const std::string_view t = texts_->text(id);
    JsonMatcher m(str);
    ASSERT_TRUE(m.feed("\""));
    const bool whole = m.feed(t) && m.plain_string_room() > 0;
    const bool simple = t.find('"') == std::string_view::npos &&
                        t.find('\\') == std::string_view::npos && !texts_->eog(id);
    EXPECT_EQ(texts_->plain(id) > 0, whole && simple && !t.empty()) << id << " '" << t << "'";
    if (texts_->plain(id) > 0) {
      JsonMatcher capped(JsonSchema::parse(
          fmt::format(R"({{"type": "string", "maxLength": {}}})", texts_->plain(id))));
      ASSERT_TRUE(capped.feed("\""));
      EXPECT_TRUE(capped.feed(t) && capped.feed("\"")) << id;  // exactly that many characters
      JsonMatcher short_by_one(JsonSchema::parse(
          fmt::format(R"({{"type": "string", "maxLength": {}}})", texts_->plain(id) - 1)));
      ASSERT_TRUE(short_by_one.feed("\""));
      EXPECT_FALSE(short_by_one.feed(t)) << id;
      ++n_plain;
    }
  }
  EXPECT_GT(n_plain, size_t(v.n_tokens()) / 2);
}

TEST_P(Vocabulary, MaskAgreesWithAllowsAtEveryKindOfState) {
  const auto schema = JsonSchema::parse(kSchema);
  const auto top_int = JsonSchema::parse(R"({"type": "integer", "maximum": 500})");
  // Prefixes: the start, inside a key, after a key, inside a string value, after a value,
  // inside an array, a complete document; and a top-level integer (accepting, not finished).
  const std::vector<std::pair<std::shared_ptr<const JsonSchema>, std::string>> states = {
      {schema, ""},
      {schema, "{\"na"},
      {schema, "{\"name\""},
      {schema, "{\"name\": \"ab"},
      {schema, "{\"name\": \"abcdefgh"},    // 2 characters of room
      {schema, "{\"name\": \"abcdefghij"},  // maxLength reached: only '"' may follow
      {schema, "{\"name\": \"ab\\"},        // inside an escape
      {schema, "{\"name\": \"x\", \"age\": 12"},
      {schema, "{\"name\": \"x\", \"tags\": [\"re"},
      {schema, "{\"name\": \"x\", \"age\": 1, \"ok\": true}"},
      {top_int, "4"},
  };
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0, 3);
  for (const auto& [s, prefix] : states) {
    TokenConstraint c(s, texts_);
    for (size_t i = 0; i < prefix.size();) {  // fed as single bytes via the matcher's tokens
      JsonMatcher m = c.matcher();
      ASSERT_TRUE(m.feed(prefix.substr(i, 1))) << prefix;
      // Find a one-byte token for this byte to accept (every vocabulary here has them).
      int32_t byte_token = -1;
      for (int32_t id = 0; id < int32_t(texts_->size()); ++id)
        if (texts_->text(id) == prefix.substr(i, 1)) {
          byte_token = id;
          break;
        }
      ASSERT_GE(byte_token, 0) << "no token for byte '" << prefix[i] << "'";
      ASSERT_TRUE(c.allows(byte_token));
      c.accept(byte_token);
      ++i;
    }
    // Logits wider than the vocabulary (a padded head): the extra ids are never allowed.
    std::vector<float> logits(texts_->size() + 7);
    for (float& x : logits) x = d(rng);
    std::vector<float> masked = logits;
    c.mask(masked);
    size_t allowed = 0;
    for (size_t id = 0; id < logits.size(); ++id) {
      const bool a = c.allows(int32_t(id));
      ASSERT_EQ(masked[id] != -INFINITY, a)
          << "prefix '" << prefix << "' token " << id << " '"
          << (id < texts_->size() ? texts_->text(int32_t(id)) : "(beyond)") << "'";
      if (a) {
        ++allowed;
        EXPECT_EQ(masked[id], logits[id]);
      }
    }
    if (c.finished()) {  // nothing follows a complete object but the end of the reply
      for (size_t id = 0; id < texts_->size(); ++id)
        if (masked[id] != -INFINITY) {
          EXPECT_TRUE(texts_->eog(int32_t(id))) << id;
        }
    } else {
      EXPECT_GT(allowed, 0u) << prefix;
    }
    // Every allowed token keeps the text viable, and a refused one does not: checked against a
    // fresh matcher over the whole text.
    for (int32_t id = 0; id < int32_t(texts_->size()); id += 97) {
      if (texts_->eog(id) || texts_->text(id).empty()) continue;
      JsonMatcher m(s);
      const bool ok = m.feed(prefix) && m.feed(texts_->text(id));
      EXPECT_EQ(ok, c.allows(id)) << prefix << " + token " << id;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Vocabulary,
                         ::testing::Values("tiny-qwen3moe/tiny-qwen3moe-F32.gguf",
                                           "tiny-mixtral/tiny-mixtral-F32.gguf"),
                         [](const auto& info) {
                           return fs::path(info.param).parent_path().filename().string() ==
                                          "tiny-qwen3moe"
                                      ? std::string("bpe")
                                      : std::string("spm");
                         });

// A filter over a small vocabulary: the ids in `ok`.
class SetFilter final : public TokenFilter {
 public:
  explicit SetFilter(std::vector<int32_t> ok) : ok_(std::move(ok)) {}
  bool allows(int32_t id) override {
    ++asked;
    return std::find(ok_.begin(), ok_.end(), id) != ok_.end();
  }
  void mask(std::span<float> logits) override {
    ++masked;
    for (size_t i = 0; i < logits.size(); ++i)
      if (!allows(int32_t(i))) logits[i] = -INFINITY;
  }
  int asked = 0, masked = 0;

 private:
  std::vector<int32_t> ok_;
};

TEST(FilteredSampler, GreedyPicksTheBestAllowedToken) {
  SamplerParams p;
  p.temperature = 0;
  Sampler s(p);
  const std::vector<float> l = {5, 1, 4, 3, 4.5f, 0};
  SetFilter f({1, 3, 4});
  EXPECT_EQ(s.sample(l, &f), 4);
  EXPECT_EQ(f.masked, 1);
  SetFilter top({0, 2});  // the argmax is allowed: no mask pass
  EXPECT_EQ(s.sample(l, &top), 0);
  EXPECT_EQ(top.masked, 0);
  SetFilter none({});
  EXPECT_EQ(s.sample(l, &none), -1);
}

TEST(FilteredSampler, AnAllowedPickIsTheUnfilteredOne) {
  SamplerParams p;
  p.temperature = 0.9f;
  p.seed = 11;
  p.repeat_penalty = 1.3f;  // the penalty window hears each pick once, filtered or not
  Sampler free(p), filtered(p);
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0, 2);
  std::vector<int32_t> all(64);
  for (int32_t i = 0; i < 64; ++i) all[size_t(i)] = i;
  SetFilter f(all);
  for (int step = 0; step < 200; ++step) {
    std::vector<float> l(64);
    for (float& x : l) x = d(rng);
    EXPECT_EQ(free.sample(l), filtered.sample(l, &f));
  }
  EXPECT_EQ(f.masked, 0);
}

TEST(FilteredSampler, SampledPicksAreAllowedAndFollowTheMaskedSoftmax) {
  // Plain temperature sampling (no truncation): the two-stage pick is exactly the masked
  // distribution, p(t) / Z over the allowed set.
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 7;
  Sampler s(p);
  const std::vector<float> l = {2.0f, 1.0f, 0.5f, 1.5f, 0.0f, 1.2f, -1.0f, 2.2f};
  const std::vector<int32_t> ok = {1, 3, 5, 6};
  double z = 0;
  for (int32_t i : ok) z += std::exp(l[size_t(i)]);
  std::vector<int> hits(l.size(), 0);
  constexpr int kDraws = 40000;
  for (int i = 0; i < kDraws; ++i) {
    SetFilter f(ok);
    const int32_t id = s.sample(l, &f);
    ASSERT_TRUE(std::find(ok.begin(), ok.end(), id) != ok.end()) << id;
    ++hits[size_t(id)];
  }
  for (int32_t i : ok) {
    const double want = std::exp(l[size_t(i)]) / z;
    EXPECT_NEAR(double(hits[size_t(i)]) / kDraws, want, 0.012) << "token " << i;
  }
  // With top-k / top-p on, every pick is still allowed.
  SamplerParams q;
  q.temperature = 1.3f;
  q.seed = 9;
  Sampler t(q);
  for (int i = 0; i < 2000; ++i) {
    SetFilter f(ok);
    const int32_t id = t.sample(l, &f);
    ASSERT_TRUE(std::find(ok.begin(), ok.end(), id) != ok.end()) << id;
  }
}

// A chat session with a schema: replies are documents the schema accepts, each ending at its
// last byte (kEndOfGeneration), sampled at temperature 1 from the fixtures' random weights.
class SchemaSession : public ::testing::TestWithParam<const char*> {};

TEST_P(SchemaSession, RepliesFollowTheSchema) {
  const fs::path path = kFixtures / GetParam();
  if (!fs::exists(path)) GTEST_SKIP() << "fixture not found: " << path;
  const Model model = Model::load(path.string());
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  ForwardOptions fo;
  fo.n_ctx = 2048;
  fo.n_threads = 2;
  Forward fwd(model, fo);
  SamplerParams p;
  p.temperature = 1.0f;
  p.seed = 1;
  ChatSession s(fwd, tok, chat_family_for_template(tok.vocab().chat_template()), p);
  s.set_json_schema(JsonSchema::parse(kSchema));
  int complete = 0;
  for (int turn = 0; turn < 4; ++turn) {
    s.reset();
    p.seed = uint64_t(turn + 1);
    s.set_sampling(p);
    ASSERT_EQ(s.begin_turn("Describe a person as JSON."), TurnStatus::kEndOfGeneration);
    const TurnResult r = s.generate(400, PieceFn{});
    if (r.status == TurnStatus::kMaxTokens) continue;  // a long name or whitespace run: allowed
    ASSERT_EQ(r.status, TurnStatus::kEndOfGeneration) << r.text;
    EXPECT_EQ(r.text.back(), '}') << r.text;  // ended at the document's last byte
    const json v = json::parse(r.text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << r.text;
    expect_follows_schema(v, r.text);
    ++complete;
  }
  EXPECT_GE(complete, 2);
  // JSON mode (any object), greedy.
  p.temperature = 0;
  s.set_sampling(p);
  s.set_json_schema(JsonSchema::any_object());
  s.reset();
  ASSERT_EQ(s.begin_turn("An object, please."), TurnStatus::kEndOfGeneration);
  const TurnResult obj = s.generate(300, PieceFn{});
  if (obj.status == TurnStatus::kEndOfGeneration) {
    const json v = json::parse(obj.text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << obj.text;
    EXPECT_TRUE(v.is_object()) << obj.text;
  } else {
    EXPECT_EQ(obj.status, TurnStatus::kMaxTokens);
    JsonMatcher m(JsonSchema::any_object());
    EXPECT_TRUE(m.feed(obj.text)) << obj.text;  // a viable prefix, cut by max_tokens
  }
  // Free text again: the first reply token is the unconstrained argmax.
  s.set_json_schema(nullptr);
  s.reset();
  ASSERT_EQ(s.begin_turn("An object, please."), TurnStatus::kEndOfGeneration);
  const int32_t first = argmax(s.logits());
  const TurnResult free = s.generate(1, PieceFn{});
  if (!tok.vocab().is_eog(first)) {
    EXPECT_EQ(free.text, tok.token_to_piece(first, false));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SchemaSession,
                         ::testing::Values("tiny-qwen3moe/tiny-qwen3moe-Q8_0.gguf",
                                           "tiny-mixtral/tiny-mixtral-Q4_0.gguf"),
                         [](const auto& info) {
                           return fs::path(info.param).parent_path().filename().string() ==
                                          "tiny-qwen3moe"
                                      ? std::string("qwen3moe")
                                      : std::string("mixtral");
                         });

}  // namespace
