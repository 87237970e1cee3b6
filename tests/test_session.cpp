// engine::ChatSession on the fixtures: the KV cache holds exactly tokenize(format_chat(whole
// conversation)) after each turn's prefill (and llama.cpp's reference ids for the spec
// conversation), reusing earlier turns gives the logits of a fresh prefill (bit-identical with the
// same chunking, within 1e-5 with one chunk), greedy replies are deterministic, a full context and
// Ctrl-C return clear statuses.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/perplexity.h"
#include "engine/session.h"
#include "engine/tokenizer.h"

namespace fs = std::filesystem;
using namespace strata::engine;

namespace {

const fs::path kFixtures = STRATA_FIXTURES_DIR;

SamplerParams greedy() {
  SamplerParams p;
  p.temperature = 0;
  return p;
}

class Session : public ::testing::TestWithParam<const char*> {
 public:
  std::string name() const { return fs::path(GetParam()).stem().string(); }

 protected:
  void SetUp() override {
    const fs::path path = kFixtures / GetParam();
    if (!fs::exists(path)) GTEST_SKIP() << "fixture not found: " << path;
    model_ = std::make_unique<Model>(Model::load(path.string()));
    tok_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(model_->file()));
    family_ = chat_family_for_template(tok_->vocab().chat_template());
  }

  std::unique_ptr<Forward> forward(uint32_t n_ctx = 512, uint32_t n_ubatch = 512) const {
    ForwardOptions fo;
    fo.n_ctx = n_ctx;
    fo.n_ubatch = n_ubatch;
    fo.n_threads = 2;
    return std::make_unique<Forward>(*model_, fo);
  }
  std::vector<int32_t> tokens_of(const std::vector<ChatMessage>& msgs) const {
    return tok_->tokenize(format_chat(family_, msgs, true), true, true);
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  ChatFamily family_ = ChatFamily::kChatml;
};

std::vector<int32_t> as_vector(std::span<const int32_t> s) {
  return {s.begin(), s.end()};
}

TEST_P(Session, TwoTurnTokensEqualFormattedConversation) {
  auto fwd = forward();
  ChatSession s(*fwd, *tok_, family_, greedy(), "You are a helpful assistant.");
  const TurnResult r1 = s.send("Hello!", 12, nullptr);
  ASSERT_NE(r1.status, TurnStatus::kPromptTooLong);

  ASSERT_EQ(s.begin_turn("What is 2+2?"), TurnStatus::kEndOfGeneration);
  const std::vector<ChatMessage> msgs = {{"system", "You are a helpful assistant."},
                                         {"user", "Hello!"},
                                         {"assistant", r1.text},
                                         {"user", "What is 2+2?"}};
  const std::vector<int32_t> want = tokens_of(msgs);
  EXPECT_EQ(as_vector(s.kv_tokens()), want);
  EXPECT_EQ(s.n_past(), want.size());
  const TurnStats& st = s.last_stats();
  EXPECT_EQ(st.n_prompt, want.size());
  EXPECT_EQ(st.n_reused + st.n_prefilled, st.n_prompt);
  // Turn 1's prompt is a prefix of turn 2's (the formatting is stable); the reply's tokens match
  // too unless they re-tokenize differently.
  EXPECT_GE(st.n_matched, r1.stats.n_prompt);
  fmt::print("turn 2: {} tokens, {} matched, {} reused, {} prefilled; reply 1 = {} tokens\n",
             st.n_prompt, st.n_matched, st.n_reused, st.n_prefilled, r1.stats.n_generated);

  const TurnResult r2 = s.generate(12, nullptr);
  EXPECT_NE(r2.status, TurnStatus::kPromptTooLong);
  ASSERT_EQ(s.messages().size(), 5u);
  EXPECT_EQ(s.messages()[4].role, "assistant");
  EXPECT_EQ(s.messages()[4].content, r2.text);
}

TEST_P(Session, RestoredConversationMatchesLlamaCppIds) {
  const std::string model = fs::path(GetParam()).parent_path().string();
  std::string variant = fs::path(GetParam()).stem().string();
  variant = variant.substr(variant.rfind('-') + 1);
  std::ifstream in(kFixtures / model / "ref" / variant / "ref.json");
  ASSERT_TRUE(in) << "no ref.json for " << GetParam();
  const nlohmann::json chat = nlohmann::json::parse(in)["chat"];
  const auto& conv = chat["conversation"];
  ASSERT_EQ(conv.back()["role"], "user");

  auto fwd = forward();
  std::string system;
  size_t first = 0;
  if (conv[0]["role"] == "system") {
    system = conv[0]["content"];
    first = 1;
  }
  ChatSession s(*fwd, *tok_, family_, greedy(), system);
  for (size_t i = first; i + 1 < conv.size(); ++i)
    s.append_message({conv[i]["role"], conv[i]["content"]});
  ASSERT_EQ(s.begin_turn(conv.back()["content"].get<std::string>()), TurnStatus::kEndOfGeneration);
  EXPECT_EQ(as_vector(s.kv_tokens()), chat["ids_add_special"].get<std::vector<int32_t>>());
}

// The logits that start the reply after s.begin_turn against fresh Forwards. With the session's
// chunking (turn 1's prompt of n1 tokens in one prefill, the reused reply tokens decoded one at a
// time, the new suffix in one prefill) they must be bit-identical; with the whole conversation in
// one chunk (another summation grouping) within 1e-5.
void expect_fresh_prefill_logits(const Session& t, const ChatSession& s, uint32_t n1,
                                 const std::function<std::unique_ptr<Forward>()>& make) {
  const std::vector<float> got(s.logits().begin(), s.logits().end());
  const std::vector<int32_t> all = as_vector(s.kv_tokens());
  const TurnStats& st = s.last_stats();

  auto same = make();
  if (st.n_reused > 0) {
    ASSERT_LE(n1, st.n_reused);
    same->prefill(std::span(all).first(n1));
    for (uint32_t p = n1; p < st.n_reused; ++p) same->decode(all[p]);
  }
  const std::span<const float> same_logits = same->prefill(std::span(all).subspan(st.n_reused));
  ASSERT_EQ(same_logits.size(), got.size());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), same_logits.begin()))
      << "the same chunking must give bit-identical logits";

  auto fresh = make();
  const std::span<const float> one = fresh->prefill(all);
  double max_abs = 0;
  for (size_t i = 0; i < got.size(); ++i)
    max_abs = std::max(max_abs, std::fabs(double(got[i]) - one[i]));
  fmt::print("{}: {} tokens, {} reused: max |diff| vs a one-chunk fresh prefill = {:.3g}\n",
             t.name(), st.n_prompt, st.n_reused, max_abs);
  EXPECT_LE(max_abs, 1e-5);
  EXPECT_EQ(argmax(got), argmax(one));
}

// Turn 1's reply given as text (it re-tokenizes as it was written), so turn 1's prompt stays in
// the cache and only the reply and the new message are prefilled.
TEST_P(Session, KvReuseGivesFreshPrefillLogits) {
  auto fwd = forward();
  ChatSession s(*fwd, *tok_, family_, greedy(), "You are a helpful assistant.");
  ASSERT_EQ(s.begin_turn("Hello!"), TurnStatus::kEndOfGeneration);
  const uint32_t n1 = s.n_past();
  s.append_message({"assistant", "Hi there. How can I help?"});
  ASSERT_EQ(s.begin_turn("What is 2+2?"), TurnStatus::kEndOfGeneration);
  EXPECT_EQ(s.last_stats().n_matched, n1);
  EXPECT_EQ(s.last_stats().n_reused, n1);
  EXPECT_EQ(s.last_stats().n_prefilled, s.n_past() - n1);
  expect_fresh_prefill_logits(*this, s, n1, [&] { return forward(); });
}

// Turn 1's reply generated: its tokens may re-tokenize differently (always, for these random
// models' byte soup); the cache is rolled back to the first differing token and must still give
// a fresh prefill's logits.
TEST_P(Session, KvReuseAfterGeneratedReply) {
  auto fwd = forward();
  ChatSession s(*fwd, *tok_, family_, greedy(), "You are a helpful assistant.");
  const TurnResult r1 = s.send("Hello!", 10, nullptr);
  ASSERT_EQ(s.begin_turn("Tell me more about that."), TurnStatus::kEndOfGeneration);
  EXPECT_GE(s.last_stats().n_matched, r1.stats.n_prompt);
  expect_fresh_prefill_logits(*this, s, r1.stats.n_prompt, [&] { return forward(); });
}

TEST_P(Session, GreedyReplyIsDeterministic) {
  auto fwd = forward();
  ChatSession s(*fwd, *tok_, family_, greedy());
  const TurnResult a1 = s.send("Hello!", 16, nullptr);
  const TurnResult a2 = s.send("And then?", 16, nullptr);
  s.reset();
  EXPECT_EQ(s.n_past(), 0u);
  EXPECT_TRUE(s.messages().empty());
  const TurnResult b1 = s.send("Hello!", 16, nullptr);
  const TurnResult b2 = s.send("And then?", 16, nullptr);
  EXPECT_EQ(a1.text, b1.text);
  EXPECT_EQ(a2.text, b2.text);
  EXPECT_EQ(a1.stats.n_generated, b1.stats.n_generated);

  auto fwd2 = forward(512, 7);  // another session, another prefill chunking
  ChatSession s2(*fwd2, *tok_, family_, greedy());
  std::string streamed;
  const TurnResult c1 = s2.send("Hello!", 16, [&](std::string_view p) { streamed += p; });
  EXPECT_EQ(c1.text, a1.text);
  EXPECT_EQ(streamed, c1.text);
  fmt::print("greedy reply 1 ({}): '{}'\n", turn_status_name(a1.status), a1.text);
}

TEST_P(Session, ContextFullIsAClearStatus) {
  const std::vector<int32_t> prompt = tokens_of({{"user", "Hello!"}});
  const uint32_t n_ctx = uint32_t(prompt.size()) + 3;
  auto fwd = forward(n_ctx);
  ChatSession s(*fwd, *tok_, family_, greedy());
  const TurnResult r = s.send("Hello!", -1, nullptr);
  if (r.status == TurnStatus::kEndOfGeneration) GTEST_SKIP() << "greedy reply ended early";
  EXPECT_EQ(r.status, TurnStatus::kContextFull);
  EXPECT_EQ(s.n_past(), n_ctx);
  EXPECT_EQ(r.stats.n_generated, 4u);  // 3 decoded positions + the last sampled token
  ASSERT_EQ(s.messages().size(), 2u);  // the partial reply is kept

  const TurnResult again = s.send("More?", 4, nullptr);
  EXPECT_EQ(again.status, TurnStatus::kPromptTooLong);
  EXPECT_GT(again.stats.n_prompt, n_ctx);
  EXPECT_EQ(s.messages().size(), 2u);  // nothing changed
  EXPECT_EQ(s.n_past(), n_ctx);

  s.reset();
  const TurnResult fresh = s.send("Hello!", 2, nullptr);
  EXPECT_EQ(fresh.status, TurnStatus::kMaxTokens);
  EXPECT_EQ(fresh.text, r.text.substr(0, fresh.text.size()));

  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "a long message ";
  EXPECT_EQ(s.send(long_text, 2, nullptr).status, TurnStatus::kPromptTooLong);
}

TEST_P(Session, StopFlagInterruptsTheReply) {
  auto fwd = forward();
  ChatSession s(*fwd, *tok_, family_, greedy());
  std::atomic<bool> stop{false};
  int pieces = 0;
  const TurnResult r = s.send(
      "Hello!", 32, [&](std::string_view) { stop = ++pieces == 2; }, &stop);
  if (r.status == TurnStatus::kEndOfGeneration && pieces < 2) GTEST_SKIP() << "reply too short";
  EXPECT_EQ(r.status, TurnStatus::kInterrupted);
  EXPECT_EQ(r.stats.n_generated, 2u);
  // The conversation goes on after an interrupted reply.
  EXPECT_EQ(s.send("Go on.", 2, nullptr).status, TurnStatus::kMaxTokens);
}

// set_stash (`strata serve`): a side conversation stashes the main one's rows; the main one's
// next turn trades them back and prefills only what is new — with the logits and greedy reply a
// session without the stash gives (the rows are copies: the same bits); raw prompts use it too.
TEST_P(Session, StashKeepsTheMainConversationAcrossASideRequest) {
  const std::vector<ChatMessage> main_conv = {
      {"system", "You are a helpful assistant who answers at length about foxes."},
      {"user", "Tell me everything about the red fox, its habits, its dens and its food."}};
  const std::vector<ChatMessage> side = {{"user", "Write a title."}};
  std::vector<ChatMessage> next = main_conv;

  auto fwd = forward();
  ChatSession s(*fwd, *tok_, family_, greedy());
  s.set_stash(1);
  ASSERT_EQ(s.begin_messages(main_conv), TurnStatus::kEndOfGeneration);
  const TurnResult r1 = s.generate(20, nullptr);
  next.push_back({"assistant", r1.text});
  next.push_back({"user", "And its cubs?"});
  const uint32_t main_kept = s.n_past();
  ASSERT_GE(main_kept, 2 * ChatSession::kStashMinDrop);

  s.set_sampling(greedy());
  ASSERT_EQ(s.begin_messages(side), TurnStatus::kEndOfGeneration);  // stashes the main rows
  EXPECT_FALSE(s.last_stats().from_stash);
  EXPECT_GT(s.stash_bytes(), 0u);
  (void)s.generate(4, nullptr);

  s.set_sampling(greedy());
  ASSERT_EQ(s.begin_messages(next), TurnStatus::kEndOfGeneration);  // trades them back
  EXPECT_TRUE(s.last_stats().from_stash);
  EXPECT_GE(s.last_stats().n_reused + 1, r1.stats.n_prompt);
  const std::vector<float> stashed_logits(s.logits().begin(), s.logits().end());
  const std::vector<int32_t> stashed_tokens = as_vector(s.kv_tokens());
  const TurnResult r2 = s.generate(12, nullptr);

  // Without the stash: the same conversation from scratch.
  auto fwd2 = forward();
  ChatSession fresh(*fwd2, *tok_, family_, greedy());
  ASSERT_EQ(fresh.begin_messages(next), TurnStatus::kEndOfGeneration);
  EXPECT_EQ(as_vector(fresh.kv_tokens()), stashed_tokens);
  float max_diff = 0;
  for (size_t i = 0; i < stashed_logits.size(); ++i)
    max_diff = std::max(max_diff, std::fabs(stashed_logits[i] - fresh.logits()[i]));
  EXPECT_LE(max_diff, 1e-5f);  // one prefill chunk against several: within float rounding
  EXPECT_EQ(fresh.generate(12, nullptr).text, r2.text);

  // The side request comes back: it is in the stash now, but too short to be worth a trade
  // (fewer than kStashMinDrop positions more): it is prefilled, the conversation stashed.
  s.set_sampling(greedy());
  ASSERT_EQ(s.begin_messages(side), TurnStatus::kEndOfGeneration);
  EXPECT_FALSE(s.last_stats().from_stash);
  s.set_sampling(greedy());
  ASSERT_EQ(s.begin_messages(next), TurnStatus::kEndOfGeneration);
  EXPECT_TRUE(s.last_stats().from_stash);
  // A raw prompt that starts no conversation, then off: the stash is dropped.
  s.set_stash(0);
  EXPECT_EQ(s.stash_bytes(), 0u);
  ASSERT_EQ(s.begin_tokens({1, 2, 3}), TurnStatus::kEndOfGeneration);
  EXPECT_FALSE(s.last_stats().from_stash);
}

// Several stash slots (`strata serve --stash N`, one per user of a shared server): the least
// recently used conversation leaves when they are full; a conversation that comes back trades
// places with the cache; a stashed sequence the cache's extends is replaced, not kept twice.
TEST_P(Session, StashSlotsKeepTheMostRecentConversations) {
  const auto conv = [&](const char* topic) {
    return tok_->tokenize(
        fmt::format("{} {} {} {} {} {}", topic,
                    "is the subject of this long conversation, which goes on and on about", topic,
                    "and nothing else, so that the cache holds enough positions of it,", topic,
                    "again and again."),
        true, true);
  };
  const std::vector<int32_t> a = conv("foxes"), b = conv("rivers"), c = conv("castles"),
                             d = conv("engines");
  for (const auto* t : {&a, &b, &c, &d}) ASSERT_GE(t->size(), 2 * ChatSession::kStashMinDrop);
  auto fwd = forward();
  ChatSession s(*fwd, *tok_, family_, greedy());
  s.set_stash(2);
  const auto begin = [&](const std::vector<int32_t>& t) {
    s.set_sampling(greedy());
    EXPECT_EQ(s.begin_tokens(t), TurnStatus::kEndOfGeneration);
    return s.last_stats().from_stash;
  };
  EXPECT_FALSE(begin(a));
  EXPECT_FALSE(begin(b));  // stash: a
  EXPECT_FALSE(begin(c));  // stash: b, a
  EXPECT_EQ(s.stash_size(), 2u);
  EXPECT_TRUE(begin(a));  // a back; stash: c, b
  EXPECT_EQ(s.last_stats().n_reused, a.size() - 1);
  EXPECT_FALSE(begin(d));  // stash: a, c (b, least recently used, left)
  EXPECT_EQ(s.stash_size(), 2u);
  EXPECT_FALSE(begin(b));  // stash: d, a
  EXPECT_LT(s.last_stats().n_reused, b.size() / 2);
  EXPECT_TRUE(begin(a));  // stash: b, d
  // a, continued: when it is stashed again its shorter state does not stay beside it.
  std::vector<int32_t> a2 = a;
  for (int32_t t : conv("and more")) a2.push_back(t);
  EXPECT_FALSE(begin(a2));  // keeps a's rows: no stash involved
  EXPECT_EQ(s.last_stats().n_reused, a.size());
  EXPECT_TRUE(begin(b));  // stash: a2, d
  EXPECT_TRUE(begin(a));  // a2's rows serve a's prefix; stash: b, d
  EXPECT_EQ(s.stash_size(), 2u);
  s.set_stash(1);
  EXPECT_EQ(s.stash_size(), 1u);
}

// A scored raw prompt (`strata serve`'s echo with logprobs): every token's logprob is the log
// softmax of a fresh prefill's logits at the position before it; a second prompt sharing a prefix
// keeps the prefix's scores and cache rows and scores the rest as a fresh prefill would; the
// reply's own scores are the logits' the sampler picked from.
TEST_P(Session, ScoredPromptIsAFreshPrefillsLogSoftmax) {
  std::vector<int32_t> prompt = tok_->tokenize(
      "The quick brown fox jumps over the lazy dog while the engineers measure bytes.", true, true);
  ASSERT_GE(prompt.size(), 8u);
  const size_t n_vocab = tok_->vocab().n_tokens();
  // The reference: one prefill of the prompt with every position's logits.
  const auto reference = [&](const std::vector<int32_t>& tokens) {
    auto f = forward();
    std::vector<float> all(tokens.size() * n_vocab);
    (void)f->prefill(tokens, all.data());
    std::vector<double> lp(tokens.size(), std::nan(""));
    for (size_t i = 1; i < tokens.size(); ++i)
      lp[i] =
          -token_nll(std::span<const float>(all.data() + (i - 1) * n_vocab, n_vocab), tokens[i]);
    return lp;
  };
  const auto expect_scores = [&](const ChatSession& s, const std::vector<int32_t>& tokens,
                                 double tol) {
    const std::vector<double> want = reference(tokens);
    const std::span<const TokenScore> got = s.prompt_scores();
    ASSERT_EQ(got.size(), tokens.size());
    EXPECT_EQ(got[0].id, tokens[0]);
    EXPECT_TRUE(std::isnan(got[0].logprob));
    for (size_t i = 1; i < tokens.size(); ++i) {
      EXPECT_EQ(got[i].id, tokens[i]) << i;
      EXPECT_NEAR(got[i].logprob, want[i], tol) << i;
      ASSERT_EQ(got[i].top.size(), ChatSession::kMaxTopLogprobs);
      EXPECT_GE(got[i].top[0].logprob, got[i].logprob) << i;
    }
  };

  auto fwd = forward();
  ChatSession s(*fwd, *tok_, family_, greedy());
  ASSERT_EQ(s.begin_tokens(prompt, true), TurnStatus::kEndOfGeneration);
  expect_scores(s, prompt, 1e-6);  // the same single chunk: the same bits up to the double sum
  // The reply's scores: the greedy token is the most likely, its logprob the top entry's.
  const std::vector<float> first_logits(s.logits().begin(), s.logits().end());
  std::vector<TokenScore> reply;
  const TurnResult r = s.generate(
      3, [&](std::string_view, const TokenScore* sc) { reply.push_back(*sc); }, nullptr, 2);
  ASSERT_EQ(reply.size(), r.stats.n_generated);  // the end-of-generation token is not a piece
  ASSERT_FALSE(reply.empty());
  EXPECT_EQ(reply[0].logprob, score_token(first_logits, reply[0].id, 0).logprob);
  for (const TokenScore& r : reply) {
    ASSERT_EQ(r.top.size(), 2u);
    EXPECT_EQ(r.top[0].id, r.id);
    EXPECT_EQ(r.top[0].logprob, r.logprob);
  }

  // A prompt sharing the first half: that half's rows and scores stay.
  std::vector<int32_t> second(prompt.begin(), prompt.begin() + ptrdiff_t(prompt.size() / 2));
  for (int32_t t : tok_->tokenize(" Then the cat slept.", false, false)) second.push_back(t);
  s.set_sampling(greedy());
  ASSERT_EQ(s.begin_tokens(second, true), TurnStatus::kEndOfGeneration);
  EXPECT_EQ(s.last_stats().n_reused, prompt.size() / 2 - 1);
  expect_scores(s, second, 1e-4);  // other chunk boundaries: within float rounding
  // An unscored prompt, then the same prompt scored: only the last position runs again.
  s.set_sampling(greedy());
  ASSERT_EQ(s.begin_tokens(second), TurnStatus::kEndOfGeneration);
  ASSERT_EQ(s.begin_tokens(second, true), TurnStatus::kEndOfGeneration);
  EXPECT_EQ(s.last_stats().n_prefilled, 1u);
  expect_scores(s, second, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Session,
                         ::testing::Values("tiny-qwen3moe/tiny-qwen3moe-Q8_0.gguf",
                                           "tiny-mixtral/tiny-mixtral-F32.gguf"),
                         [](const auto& info) {
                           std::string n = fs::path(info.param).stem().string();
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
