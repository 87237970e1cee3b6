# SSD tier benchmark: raw O_DIRECT io_uring throughput vs tiers::IoReader (bench_ssd).
# Results and commands: bench/RESULTS.md, "SSD".
add_executable(bench_ssd bench_ssd.cpp)
target_link_libraries(bench_ssd PRIVATE strata_tiers PkgConfig::URING)

# Global vs per-layer LRU over recorded routing, through tiers::ExpertCache (bench/RESULTS.md
# "Cache policy").
add_executable(bench_cache_policy bench_cache_policy.cpp)
target_link_libraries(bench_cache_policy PRIVATE strata_engine strata_tiers fmt::fmt)
