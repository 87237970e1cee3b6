# Tokenizer, vocabulary and chat templates (engine/vocab, pretokenize, tokenizer, chat_template).
# test_tokenizer compares with llama.cpp's references in the fixtures (skips without them).
strata_add_test(test_tokenizer LABEL model SOURCES test_tokenizer.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
strata_add_test(test_chat_template LABEL unit SOURCES test_chat_template.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
