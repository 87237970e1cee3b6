strata_add_test(test_gguf LABEL unit SOURCES test_gguf.cpp LIBS strata_io nlohmann_json::nlohmann_json)
if(STRATA_FUZZ)
  # libFuzzer target for the GGUF parser: cmake -DSTRATA_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++
  add_executable(fuzz_gguf fuzz_gguf.cpp)
  target_link_libraries(fuzz_gguf PRIVATE strata_io -fsanitize=fuzzer)
endif()
# Split models (gguf-split shards) read as one GGUF (io/file_parts.h).
strata_add_test(test_gguf_split LABEL unit SOURCES test_gguf_split.cpp LIBS strata_io)
