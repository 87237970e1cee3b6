# SSD tier benchmark: raw O_DIRECT io_uring throughput vs tiers::IoReader (bench_ssd).
# Results and commands: bench/RESULTS.md, "SSD".
add_executable(bench_ssd bench_ssd.cpp)
target_link_libraries(bench_ssd PRIVATE strata_tiers PkgConfig::URING)
