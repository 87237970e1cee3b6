# Forward pass, model config/weights binding, dump formats and the replay CLI (engine/model_config,
# weights, forward, moe, attention, ops, logit_dump; tools/cmd_replay). The `model` tests compare
# with llama.cpp's references in the fixtures and skip without them.
strata_add_test(test_ops LABEL unit SOURCES test_ops.cpp LIBS strata_engine)
strata_add_test(test_model_config LABEL model SOURCES test_model_config.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
# Bad metadata (every fixture key edited, fuzzer findings) is a strata::Error, never a crash.
strata_add_test(test_model_meta LABEL unit SOURCES test_model_meta.cpp LIBS strata_engine)
add_dependencies(strata_unit_tests test_model_meta)
if(STRATA_FUZZ)
  # libFuzzer target for a model load's metadata (scripts/fuzz.sh meta) and its seed writer.
  add_executable(fuzz_model_meta fuzz_model_meta.cpp)
  target_link_libraries(fuzz_model_meta PRIVATE strata_engine -fsanitize=fuzzer)
  add_executable(fuzz_meta_seeds fuzz_meta_seeds.cpp)
  target_link_libraries(fuzz_meta_seeds PRIVATE strata_engine)
endif()
strata_add_test(test_model_forward LABEL model SOURCES test_model_forward.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
# Runs the built `strata` binary (replay + run) against the fixtures.
strata_add_test(test_model_replay LABEL model SOURCES test_model_replay.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
add_dependencies(test_model_replay strata)
# Q4_1, Q5_1, Q2_K, Q3_K, Q5_K models (the F32 fixture requantized) vs dequantized peers.
strata_add_test(test_kquant_model LABEL model SOURCES test_kquant_model.cpp LIBS strata_engine)
# KV_TYPE=f16 / q8_0 (engine/kv_cache): paths to the bit, closeness to F32, MLA latents, prompt
# cache and stash with rounded rows, q8_0 refused on heads that are not whole blocks.
strata_add_test(test_kv_types LABEL model SOURCES test_kv_types.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json fmt::fmt)
