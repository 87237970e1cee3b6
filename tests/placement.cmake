# Placement: usage stats files, the planner and its cost model, the machine profile (unit), and
# the held-out evidence that a pinned plan beats the usage-free default (tier).
strata_add_test(test_usage_stats LABEL unit SOURCES test_usage_stats.cpp LIBS strata_placement)
strata_add_test(test_planner LABEL unit SOURCES test_planner.cpp LIBS strata_placement)
strata_add_test(test_plan_vram LABEL unit SOURCES test_plan_vram.cpp LIBS strata_placement)
strata_add_test(test_pin_heldout LABEL tier SOURCES test_pin_heldout.cpp LIBS strata_engine)
# Route traces (ROUTE_TRACE): format, truncation/corruption, engine hook, `stats --from-trace`,
# SIGINT saving in run / replay / chat, chat's /save-usage (runs the built `strata`).
strata_add_test(test_route_trace LABEL tier SOURCES test_route_trace.cpp LIBS strata_engine)
add_dependencies(test_route_trace strata)
# `strata probe` end to end: a real temp file, every queue depth, the profile read back.
strata_add_test(test_probe LABEL tier SOURCES test_probe.cpp LIBS strata_placement)
add_dependencies(test_probe strata)
# USAGE_AUTO end to end: the learned usage profile written by run, read by the next run and by plan,
# left alone by replay; concurrent runs, halving, a broken profile (runs the built `strata`).
strata_add_test(test_usage_auto LABEL tier SOURCES test_usage_auto.cpp LIBS strata_engine)
add_dependencies(test_usage_auto strata)
