// Pre-tokenizer regexes per tokenizer.ggml.pre family, run with PCRE2 (see pretokenize.h).
// Exercised by tests/test_tokenizer.cpp.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/pretokenize.h"

#include <pcre2.h>

#include <string>

#include "engine/unicode.h"
#include "io/check.h"

namespace strata::engine {

namespace {

// The patterns are llama.cpp's (src/llama-vocab.cpp). llama.cpp runs \p{..} classes through
// std::regex on a "collapsed" string (each non-ASCII code point replaced by one byte per Unicode
// category, ASCII matched against fixed lists); PCRE2 with UCP gives the same classes directly.
// Two notes:
// - ASCII '~' is \p{S} here, as in Unicode and in llama.cpp since its PR #26972 (Aug 2026);
//   older llama.cpp left it out of the collapsed \p{S}, which only matters for deepseek-v3's
//   " ~" (the fixtures cannot tell the two apart).
// - (?=[\p{L}])([^a-z]) is written as the class [^\P{L}a-z] (a letter that is not a-z): the
//   same set, without a repeated group, so long words cannot exhaust the backtracking stack.
constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr std::string_view kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kDeepseek3Digits = R"(\p{N}{1,3})";
// 一-龥 ぁ-ゟ ゠-ヿ
constexpr std::string_view kDeepseek3Cjk =
    R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr std::string_view kDeepseek3Words =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[^\P{L}a-z]*[^\P{L}A-Z]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[^\P{L}a-z]+[^\P{L}A-Z]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Kimi-K2 (Moonshot's tokenization_kimi.py pat_str): Han runs apart, then o200k's words with
// the letter classes less Han (Python regex's [...&&[^\p{Han}]], here a lookahead per letter).
// llama.cpp's hand-written kimi-k2 splitter takes one run of any non-Han letters instead (no
// case split: "getUserName" is one word there, three here) and leaves the marks \p{M} out; this
// follows the model's own tokenizer.
// The letter classes: (?:(?!\p{Han})[...]) is [...&&[^\p{Han}]].
constexpr std::string_view kKimiK2 =
    R"(\p{Han}+|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Ling's (bailingmoe, bailingmoe2): its tokenizer.json's pattern with llama.cpp's greedy
// quantifiers for the possessive ones.
constexpr std::string_view kBailingMoe =
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
constexpr std::string_view kTekken =
    R"([^\r\n\p{L}\p{N}]?[^\P{L}a-z]*[^\P{L}A-Z]+|[^\r\n\p{L}\p{N}]?[^\P{L}a-z]+[^\P{L}A-Z]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kDigit = R"(\p{N})";
constexpr std::string_view kDigits = R"(\p{N}+)";
constexpr std::string_view kThreeAsciiDigits = R"([0-9][0-9][0-9])";
constexpr std::string_view kDefaultPunct = R"([\p{P}\$\+<=>\^~\|]+)";
constexpr std::string_view kFalconPunct = R"([\p{P}\$\+<=>\^~\|`]+)";
constexpr std::string_view kNewline = R"([\r\n])";
constexpr std::string_view kSpaceLetters = R"(\s?\p{L}+)";
constexpr std::string_view kSpacePunct = R"(\s?\p{P}+)";
// 一-龥 ࠀ-一 가-퟿
constexpr std::string_view kCoderCjk = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
// " ?[^(\s|.,!?…。，、।۔،)]+"
constexpr std::string_view kBloom =
    R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::vector<std::string_view> pretokenize_patterns(PreType type) {
  switch (type) {
    case PreType::kDefault:
      return {kDefaultPunct, kGpt2, kDigits, kThreeAsciiDigits};
    case PreType::kLlama3:
    case PreType::kChatGlm4:
      return {kLlama3};
    case PreType::kDeepseekCoder:
      return {kNewline, kSpaceLetters, kSpacePunct, kCoderCjk, kDigit};
    case PreType::kDeepseek3:
      return {kDeepseek3Digits, kDeepseek3Cjk, kDeepseek3Words};
    case PreType::kFalcon:
      return {kFalconPunct, kGpt2, kThreeAsciiDigits};
    case PreType::kStarcoder:
      return {kDigit, kGpt2};
    case PreType::kGpt2:
      return {kGpt2};
    case PreType::kQwen2:
      return {kQwen2};
    case PreType::kGpt4o:
      return {kGpt4o};
    case PreType::kTekken:
      return {kTekken};
    case PreType::kBloom:
      return {kBloom};
    case PreType::kKimiK2:
      return {kKimiK2};
    case PreType::kBailingMoe:
      return {kBailingMoe};
  }
  return {};
}

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;

  explicit Regex(std::string_view pattern) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset, nullptr);
    STRATA_ASSERT(code, "pre-tokenizer regex '{}' does not compile at {}: {}", pattern, err_offset,
                  pcre2_message(err));
    jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Regex() { pcre2_code_free(code); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
};

PreTokenizer::PreTokenizer(PreType type) {
  for (const std::string_view p : pretokenize_patterns(type)) {
    regexes_.push_back(std::make_unique<Regex>(p));
  }
}
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

void PreTokenizer::split(std::string_view text, std::vector<size_t>& lengths) const {
  if (text.empty()) return;
  std::vector<size_t> cur = {text.size()};
  std::vector<size_t> next;
  using MatchData = std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)>;
  MatchData md(pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  if (!md) fail(ErrorKind::kOutOfMemory, "pre-tokenizer: pcre2_match_data_create failed");

  for (const auto& re : regexes_) {
    next.clear();
    size_t start = 0;
    for (const size_t len : cur) {
      // Each word is its own subject, so lookaheads see its end as the end of the text.
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + start);
      size_t pos = 0;   // next search offset, relative to the word
      size_t done = 0;  // bytes of the word already emitted
      while (pos < len) {
        int rc = pcre2_match(re->code, subject, len, pos, 0, md.get(), nullptr);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && re->jit) {
          // JIT stack exhausted on a pathological word: the interpreter uses the heap.
          rc = pcre2_match(re->code, subject, len, pos, PCRE2_NO_JIT, md.get(), nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          fail(ErrorKind::kBadValue, "pre-tokenizer: regex match failed at byte {}: {}",
               start + pos, pcre2_message(rc));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t m_begin = ov[0];
        const size_t m_end = ov[1];
        if (m_end == m_begin) {  // none of the patterns can match empty; step over it anyway
          pos = m_begin + utf8_seq_len(text[start + m_begin]);
          continue;
        }
        if (m_begin > done) next.push_back(m_begin - done);
        next.push_back(m_end - m_begin);
        done = pos = m_end;
      }
      if (done < len) next.push_back(len - done);
      start += len;
    }
    cur.swap(next);
  }
  lengths.insert(lengths.end(), cur.begin(), cur.end());
}

}  // namespace strata::engine
