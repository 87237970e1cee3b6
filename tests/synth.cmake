# `strata synth` (engine/synth.*, tools/progress.*) and `strata inspect` (engine/model_info.*).
strata_add_test(test_synth LABEL unit
  SOURCES test_synth.cpp ${PROJECT_SOURCE_DIR}/tools/progress.cpp
  LIBS strata_engine)
strata_add_test(test_inspect LABEL unit SOURCES test_inspect.cpp
  LIBS strata_engine nlohmann_json::nlohmann_json)
# test_inspect runs the built binary on bad files.
add_dependencies(test_inspect strata)
