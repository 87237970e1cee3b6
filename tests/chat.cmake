# Chat sessions (engine/session) and the `strata chat` CLI (tools/cmd_chat). Both run the fixture
# models and skip without them.
strata_add_test(test_session LABEL model SOURCES test_session.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
strata_add_test(test_chat_cli LABEL model SOURCES test_chat_cli.cpp LIBS fmt::fmt)
add_dependencies(test_chat_cli strata)
# LOOKUP (engine/lookup): drafts, bit-identical rows against plain decode on every architecture.
strata_add_test(test_lookup LABEL model SOURCES test_lookup.cpp LIBS strata_engine fmt::fmt)
# PROMPT_CACHE (engine/prompt_cache): restored prefixes continue bit-identically on every
# architecture; unusable files say why; a restored chat replies as a fresh one.
strata_add_test(test_prompt_cache LABEL model SOURCES test_prompt_cache.cpp LIBS strata_engine fmt::fmt)
# `strata serve` (tools/cmd_serve): the OpenAI-compatible server against `strata chat`'s replies,
# streaming, prefix reuse, stop strings, bad requests, SIGINT.
strata_add_test(test_serve LABEL model SOURCES test_serve.cpp
                LIBS fmt::fmt nlohmann_json::nlohmann_json PkgConfig::HTTPLIB)
add_dependencies(test_serve strata)
# `strata bench` (tools/cmd_bench): llama-bench's tests, JSON and markdown, bad values.
strata_add_test(test_bench_cli LABEL model SOURCES test_bench_cli.cpp
                LIBS fmt::fmt nlohmann_json::nlohmann_json)
add_dependencies(test_bench_cli strata)
# Structured output (engine/token_constraint, engine/json_schema through the sampler and
# ChatSession) on the fixtures' BPE and SentencePiece vocabularies.
strata_add_test(test_token_constraint LABEL model SOURCES test_token_constraint.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
# Thinking models (engine/reasoning through ChatSession, `strata chat`, `strata serve`) on a copy
# of tiny-qwen3moe given <think> tokens and an enable_thinking switch; function calling
# (engine/tool_calls through serve) on one given <tool_call> tokens.
strata_add_test(test_thinking LABEL model SOURCES test_thinking.cpp
                LIBS strata_engine fmt::fmt nlohmann_json::nlohmann_json PkgConfig::HTTPLIB)
add_dependencies(test_thinking strata)
# Anthropic's Messages API for serve (tools/anthropic_api): requests, messages, errors and stream
# events translated (end to end in test_thinking).
strata_add_test(test_anthropic_api LABEL unit
                SOURCES test_anthropic_api.cpp ${PROJECT_SOURCE_DIR}/tools/anthropic_api.cpp
                LIBS strata_io fmt::fmt nlohmann_json::nlohmann_json)
