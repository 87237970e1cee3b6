# Second-batch architectures (deepseek2, glm4moe, olmoe, gpt-oss): engine/rope, gating, mla,
# attention_block, shared_expert and their config/weights binding. The `model` tests compare with
# llama.cpp's references in the fixtures and skip without them.
strata_add_test(test_arch_forward LABEL model SOURCES test_arch_forward.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
strata_add_test(test_arch_config LABEL model SOURCES test_arch_config.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
strata_add_test(test_arch_rope LABEL unit SOURCES test_arch_rope.cpp LIBS strata_engine)
strata_add_test(test_arch_ops LABEL unit SOURCES test_arch_ops.cpp LIBS strata_engine)
strata_add_test(test_arch_synth LABEL unit SOURCES test_arch_synth.cpp LIBS strata_engine)
# qwen2moe and granitemoe against llama.cpp's logits for synthetic models (tests/data/peer): no
# fixtures needed, so it is a unit test.
strata_add_test(test_synth_peer LABEL unit SOURCES test_synth_peer.cpp LIBS strata_engine)
