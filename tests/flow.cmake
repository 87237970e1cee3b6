# PROF report (engine/prof) and the workflow commands `strata sweep` / `strata ab`
# (tools/cmd_sweep, tools/cmd_ab, tools/replay_child) on a `strata synth --preset tiny` model.
strata_add_test(test_prof LABEL unit SOURCES test_prof.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
strata_add_test(test_ab_sweep LABEL tier SOURCES test_ab_sweep.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
add_dependencies(test_ab_sweep strata)
