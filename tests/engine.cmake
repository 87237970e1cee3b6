strata_add_test(test_knobs LABEL unit SOURCES test_knobs.cpp LIBS strata_engine)
strata_add_test(test_sampler LABEL unit SOURCES test_sampler.cpp LIBS strata_engine)
strata_add_test(test_perplexity LABEL unit SOURCES test_perplexity.cpp LIBS strata_engine)
strata_add_test(test_json_schema LABEL unit SOURCES test_json_schema.cpp LIBS strata_engine)
strata_add_test(test_json_pattern LABEL unit SOURCES test_json_pattern.cpp LIBS strata_engine)
# Function calling: the Hermes, Qwen3-Coder XML and harmony formats (engine/tool_calls).
strata_add_test(test_tool_calls LABEL unit
                SOURCES test_tool_calls.cpp ${PROJECT_SOURCE_DIR}/tools/anthropic_api.cpp
                LIBS strata_engine)
# Thinking models: reasoning apart from the answer (engine/reasoning).
strata_add_test(test_reasoning LABEL unit SOURCES test_reasoning.cpp LIBS strata_engine)
if(STRATA_FUZZ)
  # scripts/fuzz.sh schema: the JSON Schema compiler and matcher (no dead ends, accepted text is
  # JSON).
  add_executable(fuzz_json_schema fuzz_json_schema.cpp)
  target_link_libraries(fuzz_json_schema PRIVATE strata_engine -fsanitize=fuzzer)
  # scripts/fuzz.sh tools: function calling's parsers and matchers, serve's Anthropic requests.
  add_executable(fuzz_tool_calls fuzz_tool_calls.cpp ${PROJECT_SOURCE_DIR}/tools/anthropic_api.cpp)
  target_link_libraries(fuzz_tool_calls PRIVATE strata_engine -fsanitize=fuzzer)
endif()
