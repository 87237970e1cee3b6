# Kernel benchmarks: GEMV per type/ISA/threads (bench_gemv) and the read-bandwidth ceiling it is
# compared with (bench_membw). Results and commands: bench/RESULTS.md.
add_executable(bench_gemv bench_gemv.cpp)
target_link_libraries(bench_gemv PRIVATE strata_kernels benchmark::benchmark)
add_executable(bench_membw bench_membw.cpp)
target_link_libraries(bench_membw PRIVATE strata_kernels benchmark::benchmark)
add_executable(bench_moe bench_moe.cpp)
target_link_libraries(bench_moe PRIVATE strata_engine)
# REPACK: one expert-shaped GEMV streamed in the file's layout vs interleaved (kernels/interleave.h).
add_executable(bench_layout bench_layout.cpp)
target_link_libraries(bench_layout PRIVATE strata_kernels)
# The attention core at decode per KV cache type (f32, f16, q8_0): cached and streamed rates.
add_executable(bench_attention bench_attention.cpp)
target_link_libraries(bench_attention PRIVATE strata_kernels)
# Prefill's dense GEMM: strata's own kernels against oneDNN's sgemm / u8s8s32 on the same shapes.
add_executable(bench_prefill_dense bench_prefill_dense.cpp)
target_link_libraries(bench_prefill_dense PRIVATE strata_kernels DNNL::dnnl)
