// What loading a model does with a GGUF's metadata, on bytes in memory: parse, the ModelConfig,
// the model summary (`strata inspect`), the vocabulary and tokenizer (a round trip over awkward
// text), the chat template's family, a formatted conversation and what the chat tools read from
// the template (thinking, tool format). Shared by the libFuzzer target
// tests/fuzz_model_meta.cpp and the regression test over tests/data/meta_bad/
// (test_model_config.cpp): any input must load or throw strata::Error, never crash, hang or
// throw anything else.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/model_config.h"
#include "engine/model_info.h"
#include "engine/reasoning.h"
#include "engine/tokenizer.h"
#include "engine/tool_calls.h"
#include "io/check.h"
#include "io/gguf.h"

namespace strata::testing {

inline void load_model_metadata(std::span<const std::byte> bytes) {
  const io::GgufFile f = io::GgufFile::parse("meta", bytes);
  try {
    (void)engine::load_model_config(f);
  } catch (const Error&) {
    // The config's errors do not stop the rest: inspect and the tokenizer read the same file.
  }
  try {
    const engine::ModelInfo info = engine::summarize_model(f);
    (void)engine::format_model_info(info);
    // As `strata inspect --json` writes it (invalid UTF-8 in a name becomes U+FFFD).
    (void)engine::model_info_json(info).dump(2, ' ', false,
                                             nlohmann::json::error_handler_t::replace);
  } catch (const Error&) {
  }
  const engine::Tokenizer tok = engine::Tokenizer::from_gguf(f);
  for (const char* text : {"Hello world", " \t\n  x  ", "caf\xc3\xa9 \xe4\xb8\xad 42 <|im_start|>",
                           "\xf0\x9f\x98\x80'll", ""}) {
    for (const bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.tokenize(text, special, special);
      (void)tok.detokenize(ids, special, !special);
      for (const int32_t id : ids) (void)tok.token_to_piece(id, special);
    }
  }
  const std::string& tmpl = tok.vocab().chat_template();
  if (const auto family = engine::detect_chat_family(tmpl)) {
    const engine::ChatMessage msgs[] = {{"system", "Be brief."}, {"user", "Hi"}};
    (void)engine::format_chat(*family, msgs, true);
    // What the chat tools read from the template's text without running it.
    (void)engine::reasoning_style(*family, tok.vocab(), tmpl);
    (void)engine::tool_format(*family, tmpl);
  }
}

}  // namespace strata::testing
