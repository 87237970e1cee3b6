# Forward pass, model config/weights binding, dump formats and the replay CLI (engine/model_config,
# weights, forward, moe, attention, ops, logit_dump; tools/cmd_replay). The `model` tests compare
# with llama.cpp's references in the fixtures and skip without them.
strata_add_test(test_ops LABEL unit SOURCES test_ops.cpp LIBS strata_engine)
strata_add_test(test_model_config LABEL model SOURCES test_model_config.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
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
