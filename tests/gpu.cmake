# CUDA tests. The device cases GTEST_SKIP when cuda_device_count() == 0; the host cases (emulated
# kernels vs the CPU path, error paths) need no GPU and are also registered as `unit` tests.
# test_cuda_grouped and test_cuda_portable_math build without CUDA too (the grouped kernel's host
# emulation is in every strata_cuda; the device cases then skip).
if(STRATA_HAVE_CUDA)
  strata_add_test(test_cuda_dequant LABEL gpu SOURCES test_cuda_dequant.cpp LIBS strata_cuda strata_kernels)
  # The reference rounds every product like ggml's scalar code: no FMA contraction.
  target_compile_options(test_cuda_dequant PRIVATE -ffp-contract=off)
  add_test(NAME test_cuda_dequant_host COMMAND test_cuda_dequant --gtest_filter=CudaHost.*)
  set_tests_properties(test_cuda_dequant_host PROPERTIES LABELS unit TIMEOUT 300)
  add_dependencies(strata_unit_tests test_cuda_dequant)
endif()

strata_add_test(test_cuda_grouped LABEL gpu SOURCES test_cuda_grouped.cpp
                LIBS strata_cuda strata_kernels strata_engine)
target_compile_options(test_cuda_grouped PRIVATE -ffp-contract=off)
add_test(NAME test_cuda_grouped_host COMMAND test_cuda_grouped --gtest_filter=GroupedHost.*)
set_tests_properties(test_cuda_grouped_host PROPERTIES LABELS unit TIMEOUT 300)
add_dependencies(strata_unit_tests test_cuda_grouped)  # the ASan pass builds unit tests only

strata_add_test(test_cuda_portable_math LABEL unit SOURCES test_cuda_portable_math.cpp)
target_compile_options(test_cuda_portable_math PRIVATE -ffp-contract=off)

# The GPU lane end to end through `strata replay` (VRAM homes mixed with RAM and SSD): emulated
# (VRAM_EMULATE=1, runs everywhere, tier) and on a device (gpu, skips without one).
strata_add_test(test_gpu_lane LABEL tier SOURCES test_gpu_lane.cpp LIBS strata_engine)
add_dependencies(test_gpu_lane strata)
# APPEND: strata_add_test's USAGE_AUTO=0 stays (no learned profile in the user's cache).
set_property(TEST test_gpu_lane APPEND PROPERTY ENVIRONMENT "GTEST_FILTER=-GpuLane.Device*")
add_test(NAME test_gpu_lane_device COMMAND test_gpu_lane --gtest_filter=GpuLane.Device*)
set_tests_properties(test_gpu_lane_device PROPERTIES LABELS gpu TIMEOUT 600 ENVIRONMENT
                                                                            "USAGE_AUTO=0")
