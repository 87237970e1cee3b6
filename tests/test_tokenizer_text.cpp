// Any text through every fixture's tokenizer (tests/tokenizer_probe.h: no throw, ids in range,
// valid UTF-8 round-trips exactly): random strings of ASCII, whitespace runs, digits, letters of
// several scripts, emoji, special-token text and invalid bytes. Labelled `unit`, so it also runs
// under ASan/UBSan; tests/fuzz_tokenize.cpp fuzzes the same checks.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "fixture_models.h"
#include "io/gguf.h"
#include "tokenizer_probe.h"

namespace fs = std::filesystem;
using namespace strata;

namespace {

// One random string: pieces drawn from classes a tokenizer treats differently.
std::string random_text(std::mt19937& rng) {
  static const std::vector<std::string> kPieces = {
      " ",
      "  ",
      "\t",
      "\n",
      "\r\n",
      "\n\n\n",
      "a",
      "Hello",
      " world",
      "'s",
      "'LL",
      "don't",
      "0",
      "12345",
      "3.14",
      "caf\xc3\xa9",
      "\xc3\x9f",
      "\xe4\xb8\xad\xe6\x96\x87",
      "\xed\x95\x9c",
      "\xd0\x9f\xd1\x80\xd0\xb8",
      "\xd8\xa7\xd9\x84",
      "\xf0\x9f\x98\x80",
      "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",
      "<|im_start|>",
      "<|im_end|>",
      "<s>",
      "</s>",
      "[INST]",
      "<|endoftext|>",
      "\xe2\x96\x81",
      "http://x.y/z?a=1",
      "snake_case",
      "CamelCase",
      "!!!",
      "...",
      "\"",
      "\\",
      "\x7f",
  };
  static const std::vector<std::string> kBad = {
      "\xff", "\xc3", "\xed\xa0\x80", "\xf8\x88\x80\x80", "\xc0\xaf", std::string("\0", 1)};
  std::string s;
  const int n = int(rng() % 12);
  for (int i = 0; i < n; ++i) {
    const uint32_t r = rng() % 100;
    if (r < 80)
      s += kPieces[rng() % kPieces.size()];
    else if (r < 90)
      s += kBad[rng() % kBad.size()];
    else
      s += char(rng() % 256);  // any byte
  }
  return s;
}

TEST(TokenizerText, RandomTextBehavesInEveryFixtureVocabulary) {
  const auto files = strata::testing::one_gguf_per_fixture();
  if (files.empty()) GTEST_SKIP() << "fixtures not found";
  for (const fs::path& p : files) {
    const io::GgufFile f = io::GgufFile::open(p.string());
    const engine::Tokenizer tok = engine::Tokenizer::from_gguf(f);
    std::mt19937 rng(7);
    int valid = 0;
    for (int i = 0; i < 3000; ++i) {
      const std::string text = random_text(rng);
      valid += strata::testing::valid_utf8(text);
      std::string what;
      try {
        what = strata::testing::check_text(tok, text);
      } catch (const std::exception& e) {
        what = std::string("threw: ") + e.what();
      }
      ASSERT_EQ(what, "") << p.filename().string() << ": text '" << text << "'";
    }
    EXPECT_GT(valid, 1000) << "too few valid strings to check the round trip";
  }
}

TEST(TokenizerText, Utf8Validator) {
  EXPECT_TRUE(strata::testing::valid_utf8(""));
  EXPECT_TRUE(strata::testing::valid_utf8("a\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80"));
  EXPECT_FALSE(strata::testing::valid_utf8("\xc3"));              // cut short
  EXPECT_FALSE(strata::testing::valid_utf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(strata::testing::valid_utf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(strata::testing::valid_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(strata::testing::valid_utf8("\xff"));
}

}  // namespace
