# GPU benchmarks (only with CUDA): bench_gpu_grouped measures the grouped expert kernel against
# the device copy bandwidth. Run by bench/gpu_check.sh; results in bench/RESULTS.md.
if(STRATA_HAVE_CUDA)
  add_executable(bench_gpu_grouped bench_gpu_grouped.cpp)
  target_link_libraries(bench_gpu_grouped PRIVATE strata_cuda strata_kernels)
endif()
