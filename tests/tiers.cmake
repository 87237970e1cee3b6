# Tier tests: placement plans and expert homes (RAM arenas, RAM cache, io_uring/pread reader,
# ExpertStore). The `tier` ones read real files on disk under the build directory.
strata_add_test(test_plan LABEL unit SOURCES test_plan.cpp LIBS strata_placement)
strata_add_test(test_tiers_cache LABEL unit SOURCES test_tiers_cache.cpp LIBS strata_tiers)
strata_add_test(test_tiers_arena LABEL unit SOURCES test_tiers_arena.cpp LIBS strata_tiers)
strata_add_test(test_tiers_io LABEL tier SOURCES test_tiers_io.cpp LIBS strata_tiers)
strata_add_test(test_tiers_store LABEL tier SOURCES test_tiers_store.cpp LIBS strata_tiers)
strata_add_test(test_prefetch LABEL tier SOURCES test_prefetch.cpp LIBS strata_tiers)
