# Tiers wired into the engine (engine/expert_source, prof, sysmem; tools/tier_setup): `strata
# replay` logits byte-identical whatever RAM_GB / THREADS / URING / DIRECT / NUMA, and the faults
# (budget below the minimum, bad knobs, file truncated/replaced, read errors, io_uring fallback).
strata_add_test(test_tier_invariance LABEL tier SOURCES test_tier_invariance.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
add_dependencies(test_tier_invariance strata)
strata_add_test(test_tier_faults LABEL tier SOURCES test_tier_faults.cpp LIBS strata_engine)
add_dependencies(test_tier_faults strata)
strata_add_test(test_tier_zstd LABEL tier SOURCES test_tier_zstd.cpp
                LIBS strata_engine nlohmann_json::nlohmann_json)
add_dependencies(test_tier_zstd strata)
# DENSE_ARENA: the decode path's dense tensors in one huge-page arena, logits unchanged.
strata_add_test(test_dense_arena LABEL unit SOURCES test_dense_arena.cpp LIBS strata_engine)
