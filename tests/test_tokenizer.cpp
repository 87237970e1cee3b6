// Tokenizer and vocabulary against llama.cpp: for every fixture model, each ref.json's
// tokenizer_tests (ids with and without specials, pieces, detokenize both ways), the chat prompt
// and its ids, the greedy prompts and stream 0; plus malformed-vocabulary unit tests.
// Exercises engine/vocab, engine/pretokenize, engine/tokenizer, engine/chat_template.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/pretokenize.h"
#include "engine/tokenizer.h"
#include "engine/vocab.h"
#include "io/check.h"
#include "io/gguf.h"

namespace strata::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixtures = STRATA_FIXTURES_DIR;

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::string to_hex(std::string_view s) {
  std::string out;
  for (const char c : s) out += fmt::format("{:02x}", static_cast<uint8_t>(c));
  return out;
}

std::vector<int32_t> ids_of(const json& j) {
  return j.get<std::vector<int32_t>>();
}

// Any .gguf of the model (the tokenizer is the same in every variant) and every ref.json.
struct ModelFiles {
  fs::path gguf;
  std::vector<fs::path> refs;
};

ModelFiles model_files(const std::string& name) {
  ModelFiles m;
  const fs::path dir = kFixtures / name;
  if (!fs::is_directory(dir)) return m;
  std::vector<fs::path> ggufs;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".gguf") ggufs.push_back(e.path());
  }
  std::sort(ggufs.begin(), ggufs.end());
  if (!ggufs.empty()) m.gguf = ggufs.front();
  if (fs::is_directory(dir / "ref")) {
    for (const auto& e : fs::directory_iterator(dir / "ref")) {
      if (fs::exists(e.path() / "ref.json")) m.refs.push_back(e.path() / "ref.json");
    }
  }
  std::sort(m.refs.begin(), m.refs.end());
  return m;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

class FixtureTokenizer : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!fs::is_directory(kFixtures)) GTEST_SKIP() << "no fixtures at " << kFixtures;
    files_ = model_files(GetParam());
    if (files_.gguf.empty() || files_.refs.empty()) {
      GTEST_SKIP() << "fixture " << GetParam() << " has no .gguf or no ref.json";
    }
    gguf_ = std::make_unique<io::GgufFile>(io::GgufFile::open(files_.gguf.string()));
    tok_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(*gguf_));
  }

  ModelFiles files_;
  std::unique_ptr<io::GgufFile> gguf_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(FixtureTokenizer, SpecialIdsMatchReference) {
  for (const fs::path& ref_path : files_.refs) {
    const json ref = read_json(ref_path);
    EXPECT_EQ(tok_->vocab().bos(), ref.at("bos").get<int32_t>()) << ref_path;
    EXPECT_EQ(tok_->vocab().eos(), ref.at("eos").get<int32_t>()) << ref_path;
    EXPECT_EQ(tok_->vocab().n_tokens(), ref.at("n_vocab").get<int32_t>()) << ref_path;
    EXPECT_TRUE(tok_->vocab().is_eog(tok_->vocab().eos()));
  }
}

TEST_P(FixtureTokenizer, TokenizerTestsMatchReference) {
  for (const fs::path& ref_path : files_.refs) {
    const json ref = read_json(ref_path);
    EXPECT_GE(ref.at("tokenizer_tests").size(), 10u) << ref_path;
    for (const json& t : ref.at("tokenizer_tests")) {
      const std::string text = unhex(t.at("text_hex").get<std::string>());
      SCOPED_TRACE(ref_path.string() + " text: " + t.at("text").get<std::string>());
      const std::vector<int32_t> ids = ids_of(t.at("ids"));
      EXPECT_EQ(tok_->tokenize(text, true, true), ids);
      EXPECT_EQ(tok_->tokenize(text, false, false), ids_of(t.at("ids_no_special")));

      const auto& pieces = t.at("pieces_hex");
      ASSERT_EQ(pieces.size(), ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        EXPECT_EQ(to_hex(tok_->token_to_piece(ids[i], true)), pieces[i].get<std::string>())
            << "piece of id " << ids[i];
      }
      EXPECT_EQ(to_hex(tok_->detokenize(ids, false, true)), t.at("detok_hex").get<std::string>());
      EXPECT_EQ(tok_->detokenize(ids, true, false),
                t.at("detok_remove_special").get<std::string>());
    }
  }
}

TEST_P(FixtureTokenizer, ChatPromptMatchesReference) {
  for (const fs::path& ref_path : files_.refs) {
    SCOPED_TRACE(ref_path.string());
    const json chat = read_json(ref_path).at("chat");
    EXPECT_EQ(tok_->vocab().chat_template(), chat.at("template").get<std::string>());
    std::vector<ChatMessage> msgs;
    for (const json& m : chat.at("conversation")) {
      msgs.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
    const ChatFamily family = chat_family_for_template(tok_->vocab().chat_template());
    const std::string prompt = format_chat(family, msgs, true);
    EXPECT_EQ(to_hex(prompt), chat.at("formatted_hex").get<std::string>())
        << "family " << chat_family_name(family);
    EXPECT_EQ(tok_->tokenize(prompt, false, true), ids_of(chat.at("ids")));
    EXPECT_EQ(tok_->tokenize(prompt, true, true), ids_of(chat.at("ids_add_special")));
  }
}

TEST_P(FixtureTokenizer, PromptsAndStreamMatchReference) {
  for (const fs::path& ref_path : files_.refs) {
    SCOPED_TRACE(ref_path.string());
    const json ref = read_json(ref_path);
    for (const json& g : ref.at("greedy")) {
      EXPECT_EQ(tok_->tokenize(g.at("prompt").get<std::string>(), true, true),
                ids_of(g.at("prompt_ids")));
      // generated_text is the pieces of the generated ids, specials rendered.
      std::string text;
      for (const int32_t id : ids_of(g.at("generated_ids"))) tok_->append_piece(text, id, true);
      EXPECT_EQ(to_hex(text), g.at("generated_text_hex").get<std::string>());
    }
    const json& s0 = ref.at("streams").at(0);
    if (s0.contains("source_text")) {
      const std::vector<int32_t> want = ids_of(s0.at("ids"));
      std::vector<int32_t> got =
          tok_->tokenize(s0.at("source_text").get<std::string>(), true, true);
      ASSERT_GE(got.size(), want.size());
      got.resize(want.size());
      EXPECT_EQ(got, want);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTokenizer,
                         ::testing::Values("tiny-qwen3moe", "tiny-mixtral", "tiny-deepseek2",
                                           "tiny-glm4moe", "tiny-olmoe", "tiny-gpt-oss"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// llama.cpp's EOG heuristics on the harmony vocabulary: <|endoftext|> becomes EOT, <|end|> is
// removed from the EOG set because <|return|> and <|call|> exist.
TEST(FixtureVocab, GptOssEndOfGeneration) {
  const ModelFiles files = model_files("tiny-gpt-oss");
  if (files.gguf.empty()) GTEST_SKIP() << "no tiny-gpt-oss fixture";
  const io::GgufFile f = io::GgufFile::open(files.gguf.string());
  const Vocab v = Vocab::from_gguf(f);
  const int32_t endoftext = v.text_to_token("<|endoftext|>");
  EXPECT_EQ(v.eot(), endoftext);
  const std::vector<int32_t> want = {endoftext, v.text_to_token("<|return|>"),
                                     v.text_to_token("<|call|>")};
  EXPECT_EQ(v.eog_ids(), want);
  EXPECT_FALSE(v.is_eog(v.text_to_token("<|end|>")));
  EXPECT_TRUE(v.has_attr(v.text_to_token("<|channel|>"), token_attr::kUserDefined));
}

TEST(FixtureVocab, OlmoeBosDefaultsToBpeEleven) {
  const ModelFiles files = model_files("tiny-olmoe");
  if (files.gguf.empty()) GTEST_SKIP() << "no tiny-olmoe fixture";
  const io::GgufFile f = io::GgufFile::open(files.gguf.string());
  const Vocab v = Vocab::from_gguf(f);
  EXPECT_EQ(v.bos(), 11);
  EXPECT_FALSE(v.add_bos());
  EXPECT_EQ(chat_family_for_template(v.chat_template()), ChatFamily::kGlmEdge);
}

// ---- malformed vocabularies (in-memory GGUF files) ----

struct MemGguf {
  std::vector<std::byte> bytes;
  std::optional<io::GgufFile> file;
};

// A tiny byte-level BPE vocabulary: the GPT-2 symbols of "a", "b", "ab" and one merge.
io::GgufWriter tiny_bpe_writer() {
  io::GgufWriter w;
  w.set("general.architecture", "llama");
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.pre", "qwen2");
  w.set("tokenizer.ggml.tokens", io::gguf_string_array({"a", "b", "ab", "<|im_end|>"}));
  w.set("tokenizer.ggml.token_type", io::gguf_i32_array({1, 1, 1, 3}));
  w.set("tokenizer.ggml.merges", io::gguf_string_array({"a b"}));
  w.set("tokenizer.ggml.eos_token_id", uint32_t{3});
  return w;
}

std::unique_ptr<MemGguf> parse(const io::GgufWriter& w) {
  auto m = std::make_unique<MemGguf>();
  m->bytes = w.to_bytes([](size_t, std::span<std::byte>) {});
  m->file.emplace(io::GgufFile::parse("mem.gguf", m->bytes));
  return m;
}

std::string load_error(const io::GgufWriter& w) {
  const auto m = parse(w);
  try {
    (void)Vocab::from_gguf(*m->file);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(VocabUnit, TinyBpeLoadsAndMerges) {
  const auto m = parse(tiny_bpe_writer());
  const Tokenizer tok = Tokenizer::from_gguf(*m->file);
  EXPECT_EQ(tok.vocab().bpe_rank("a", "b"), 0);
  EXPECT_EQ(tok.vocab().bpe_rank("b", "a"), -1);
  EXPECT_EQ(tok.tokenize("abab", false, false), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(tok.tokenize("ba<|im_end|>", false, true), (std::vector<int32_t>{1, 0, 3}));
  EXPECT_EQ(tok.detokenize(std::vector<int32_t>{2, 3, 0}, false, true), "ab<|im_end|>a");
  EXPECT_EQ(tok.detokenize(std::vector<int32_t>{2, 3, 0}, false, false), "aba");
  EXPECT_TRUE(tok.vocab().is_eog(3));
  EXPECT_FALSE(tok.vocab().is_eog(0));
}

// ERNIE 4.5's turn end, <|end_of_sentence|>, ends a generation though its files name </s> as
// eos; MiniMax-M2's tool-call markers are rendered.
TEST(VocabUnit, ErnieTurnEndAndMinimaxMarkers) {
  io::GgufWriter w = tiny_bpe_writer();
  w.set("tokenizer.ggml.tokens",
        io::gguf_string_array({"a", "b", "ab", "</s>", "<|end_of_sentence|>", "<minimax:tool_call>",
                               "</minimax:tool_call>"}));
  w.set("tokenizer.ggml.token_type", io::gguf_i32_array({1, 1, 1, 3, 3, 3, 3}));
  const auto m = parse(w);
  const Vocab v = Vocab::from_gguf(*m->file);
  EXPECT_TRUE(v.is_eog(3));
  EXPECT_TRUE(v.is_eog(4));
  EXPECT_TRUE(v.has_attr(5, token_attr::kUserDefined));
  EXPECT_TRUE(v.has_attr(6, token_attr::kUserDefined));
}

TEST(VocabUnit, MissingTokensKeyNamesIt) {
  io::GgufWriter w;
  w.set("tokenizer.ggml.model", "gpt2");
  EXPECT_NE(load_error(w).find("tokenizer.ggml.tokens"), std::string::npos) << load_error(w);
}

TEST(VocabUnit, MissingModelKeyNamesIt) {
  io::GgufWriter w;
  w.set("tokenizer.ggml.tokens", io::gguf_string_array({"a"}));
  EXPECT_NE(load_error(w).find("tokenizer.ggml.model"), std::string::npos) << load_error(w);
}

TEST(VocabUnit, MissingMergesNamesIt) {
  io::GgufWriter w2;
  w2.set("tokenizer.ggml.model", "gpt2");
  w2.set("tokenizer.ggml.pre", "qwen2");
  w2.set("tokenizer.ggml.tokens", io::gguf_string_array({"a", "b"}));
  EXPECT_NE(load_error(w2).find("tokenizer.ggml.merges"), std::string::npos) << load_error(w2);
}

TEST(VocabUnit, MergeWithUnknownTokenIsAnError) {
  io::GgufWriter w = tiny_bpe_writer();
  w.set("tokenizer.ggml.merges", io::gguf_string_array({"a b", "b c"}));
  const std::string err = load_error(w);
  EXPECT_NE(err.find("tokenizer.ggml.merges"), std::string::npos) << err;
  EXPECT_NE(err.find("'c'"), std::string::npos) << err;
}

TEST(VocabUnit, MergeWhoseResultIsNotATokenIsAnError) {
  io::GgufWriter w = tiny_bpe_writer();
  w.set("tokenizer.ggml.merges", io::gguf_string_array({"b a"}));
  EXPECT_NE(load_error(w).find("'ba'"), std::string::npos) << load_error(w);
}

TEST(VocabUnit, MalformedMergeLineIsAnError) {
  io::GgufWriter w = tiny_bpe_writer();
  w.set("tokenizer.ggml.merges", io::gguf_string_array({"ab"}));
  EXPECT_NE(load_error(w).find("tokenizer.ggml.merges"), std::string::npos) << load_error(w);
}

TEST(VocabUnit, DuplicateTokenIsAnError) {
  io::GgufWriter w = tiny_bpe_writer();
  w.set("tokenizer.ggml.tokens", io::gguf_string_array({"a", "b", "ab", "a"}));
  EXPECT_NE(load_error(w).find("duplicate token"), std::string::npos) << load_error(w);
}

TEST(VocabUnit, ShortScoresOrTypesAreErrors) {
  io::GgufWriter w = tiny_bpe_writer();
  w.set("tokenizer.ggml.token_type", io::gguf_i32_array({1, 1}));
  EXPECT_NE(load_error(w).find("tokenizer.ggml.token_type"), std::string::npos);
  io::GgufWriter w2 = tiny_bpe_writer();
  w2.set("tokenizer.ggml.scores", io::gguf_f32_array({0.0f}));
  EXPECT_NE(load_error(w2).find("tokenizer.ggml.scores"), std::string::npos);
}

TEST(VocabUnit, WrongKeyTypesAreErrors) {
  io::GgufWriter w = tiny_bpe_writer();
  w.set("tokenizer.ggml.tokens", io::gguf_i32_array({1, 2}));
  EXPECT_NE(load_error(w).find("tokenizer.ggml.tokens"), std::string::npos);
  io::GgufWriter w2 = tiny_bpe_writer();
  w2.set("tokenizer.ggml.add_bos_token", uint32_t{1});
  EXPECT_NE(load_error(w2).find("tokenizer.ggml.add_bos_token"), std::string::npos);
}

TEST(VocabUnit, UnknownModelAndPreAreNamed) {
  io::GgufWriter w = tiny_bpe_writer();
  w.set("tokenizer.ggml.model", "t5");
  EXPECT_NE(load_error(w).find("'t5'"), std::string::npos) << load_error(w);
  io::GgufWriter w2 = tiny_bpe_writer();
  w2.set("tokenizer.ggml.pre", "no-such-pre");
  const std::string err = load_error(w2);
  EXPECT_NE(err.find("no-such-pre"), std::string::npos) << err;
  EXPECT_NE(err.find("qwen2"), std::string::npos) << err;  // lists the accepted names
}

TEST(VocabUnit, AddBosWithoutBosIsAnError) {
  io::GgufWriter w = tiny_bpe_writer();
  w.set("tokenizer.ggml.pre", "glm4");  // no default bos
  w.set("tokenizer.ggml.add_bos_token", true);
  EXPECT_NE(load_error(w).find("bos_token_id"), std::string::npos) << load_error(w);
}

// SentencePiece-style BPE: score-ordered merges, the U+2581 space prefix, byte fallback, and the
// leading-space rules of detokenize.
TEST(TokenizerUnit, TinySpm) {
  io::GgufWriter w;
  w.set("tokenizer.ggml.model", "llama");
  w.set("tokenizer.ggml.tokens", io::gguf_string_array({"<unk>", "<s>", "</s>", "<0x0A>", "<0xC3>",
                                                        "<0xA9>", "\xe2\x96\x81", "a", "b",
                                                        "\xe2\x96\x81"
                                                        "a",
                                                        "ab",
                                                        "\xe2\x96\x81"
                                                        "ab"}));
  w.set("tokenizer.ggml.scores", io::gguf_f32_array({0, 0, 0, 0, 0, 0, -1, -2, -3, -4, -5, -6}));
  w.set("tokenizer.ggml.token_type", io::gguf_i32_array({2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1}));
  const auto m = parse(w);
  const Tokenizer tok = Tokenizer::from_gguf(*m->file);
  EXPECT_EQ(tok.vocab().bos(), 1);
  EXPECT_TRUE(tok.vocab().add_bos());
  // "▁a" (-4) merges before "ab" (-5); then "▁a"+"b" = "▁ab" (-6).
  const std::vector<int32_t> ids = tok.tokenize("ab\n\xc3\xa9", true, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 11, 3, 4, 5}));
  EXPECT_EQ(tok.detokenize(ids, false, true), "<s> ab\n\xc3\xa9");
  EXPECT_EQ(tok.detokenize(ids, true, false), " ab\n\xc3\xa9");
  EXPECT_EQ(tok.detokenize(std::vector<int32_t>{11, 9}, false, false), "ab a");
  // Text after a special token gets the space prefix again, as in llama.cpp.
  EXPECT_EQ(tok.tokenize("a</s>b", false, true), (std::vector<int32_t>{9, 2, 6, 8}));
  EXPECT_EQ(tok.newline_token(), 3);
}

TEST(TokenizerUnit, OutOfRangeIdIsAnError) {
  const auto m = parse(tiny_bpe_writer());
  const Tokenizer tok = Tokenizer::from_gguf(*m->file);
  EXPECT_THROW((void)tok.token_to_piece(4, true), Error);
  EXPECT_THROW((void)tok.token_to_piece(-1, true), Error);
}

TEST(TokenizerUnit, InvalidUtf8NeverCrashes) {
  const auto m = parse(tiny_bpe_writer());
  const Tokenizer tok = Tokenizer::from_gguf(*m->file);
  for (const std::string& s :
       {std::string("\xff\xfe"), std::string("a\xc3"), std::string("\xed\xa0\x80"),
        std::string("\xf7\xbf\xbf\xbf"), std::string("\0a", 2)}) {
    (void)tok.tokenize(s, true, true);
  }
}

// ---- pre-tokenizer splits with no fixture (the expected words follow from the pattern) ----

std::vector<std::string> words(PreType type, std::string_view text) {
  std::vector<size_t> lengths;
  PreTokenizer(type).split(text, lengths);
  std::vector<std::string> out;
  size_t at = 0;
  for (const size_t n : lengths) {
    out.emplace_back(text.substr(at, n));
    at += n;
  }
  EXPECT_EQ(at, text.size());
  return out;
}

using Words = std::vector<std::string>;

// Kimi-K2: Han runs are words of their own (letters on either side split off them), other
// letters split by case as o200k does, digits in threes.
TEST(PreTokenizerUnit, KimiK2) {
  EXPECT_EQ(words(PreType::kKimiK2, "\xe4\xbd\xa0\xe5\xa5\xbdworld"),  // 你好world
            (Words{"\xe4\xbd\xa0\xe5\xa5\xbd", "world"}));
  EXPECT_EQ(words(PreType::kKimiK2, "Hello \xe4\xb8\x96\xe7\x95\x8c!"),  // Hello 世界!
            (Words{"Hello", " ", "\xe4\xb8\x96\xe7\x95\x8c", "!"}));
  EXPECT_EQ(words(PreType::kKimiK2, "getUserName iPhone"),
            (Words{"get", "User", "Name", " i", "Phone"}));
  EXPECT_EQ(words(PreType::kKimiK2, "I don't KNOW'S 1234567"),
            (Words{"I", " don't", " KNOW'S", " ", "123", "456", "7"}));
  // Hiragana and Hangul are letters but not Han: one word with the Latin letters around them.
  EXPECT_EQ(words(PreType::kKimiK2,
                  "a\xe3\x81\x82\xea\xb0\x80\xe6\xbc\xa2"
                  "b"),  // aあ가漢b
            (Words{"a\xe3\x81\x82\xea\xb0\x80", "\xe6\xbc\xa2", "b"}));
  EXPECT_EQ(words(PreType::kKimiK2, "x\n\n  y ...\n"), (Words{"x", "\n\n", " ", " y", " ...\n"}));
  // A long word of capitals backtracks through the first word pattern: one word, no crash.
  EXPECT_EQ(words(PreType::kKimiK2, std::string(300000, 'A')).size(), 1u);
}

// Ling's (bailingmoe, bailingmoe2): each digit a word, a run of newlines one word (the last
// newline with the whitespace before it), contractions in either case.
TEST(PreTokenizerUnit, BailingMoe) {
  EXPECT_EQ(words(PreType::kBailingMoe, "I DON'T know 1234"),
            (Words{"I", " DON", "'T", " know", " ", "1", "2", "3", "4"}));
  EXPECT_EQ(words(PreType::kBailingMoe, "a\n\n  b!!\n"), (Words{"a", "\n\n", " ", " b", "!!\n"}));
  for (const char* pre : {"bailingmoe", "bailingmoe2", "llada-moe"})
    EXPECT_EQ(pre_type_from_name(pre), PreType::kBailingMoe) << pre;
}

TEST(VocabUnit, KimiK2PreTokenizerLoads) {
  io::GgufWriter w = tiny_bpe_writer();
  w.set("tokenizer.ggml.pre", "kimi-k2");
  const auto m = parse(w);
  const Tokenizer tok = Tokenizer::from_gguf(*m->file);
  EXPECT_EQ(tok.vocab().pre_type(), PreType::kKimiK2);
  EXPECT_EQ(tok.tokenize("abab", false, false), (std::vector<int32_t>{2, 2}));
}

}  // namespace
}  // namespace strata::engine
