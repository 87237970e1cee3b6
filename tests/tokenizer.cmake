# Tokenizer, vocabulary and chat templates (engine/vocab, pretokenize, tokenizer, chat_template).
# test_tokenizer compares with llama.cpp's references in the fixtures (skips without them).
strata_add_test(test_tokenizer LABEL model SOURCES test_tokenizer.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
strata_add_test(test_chat_template LABEL unit SOURCES test_chat_template.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
# Any text through every fixture vocabulary (no throw, ids in range, UTF-8 round trips); unit,
# so the ASan pass runs it. scripts/fuzz.sh text fuzzes the same checks.
strata_add_test(test_tokenizer_text LABEL unit SOURCES test_tokenizer_text.cpp LIBS strata_engine)
add_dependencies(strata_unit_tests test_tokenizer_text)
if(STRATA_FUZZ)
  add_executable(fuzz_tokenize fuzz_tokenize.cpp)
  target_link_libraries(fuzz_tokenize PRIVATE strata_engine -fsanitize=fuzzer)
  target_compile_definitions(fuzz_tokenize PRIVATE STRATA_FIXTURES_DIR="${STRATA_FIXTURES_DIR}")
endif()
