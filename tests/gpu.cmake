# CUDA tests: only with a CUDA build. The device tests GTEST_SKIP when cuda_device_count() == 0;
# the CudaHost.* cases (emulated kernels vs reference, error paths) need no GPU and also run as a
# `unit` test.
if(STRATA_HAVE_CUDA)
  strata_add_test(test_cuda_dequant LABEL gpu SOURCES test_cuda_dequant.cpp LIBS strata_cuda strata_kernels)
  # The reference rounds every product like ggml's scalar code: no FMA contraction.
  target_compile_options(test_cuda_dequant PRIVATE -ffp-contract=off)
  add_test(NAME test_cuda_dequant_host COMMAND test_cuda_dequant --gtest_filter=CudaHost.*)
  set_tests_properties(test_cuda_dequant_host PROPERTIES LABELS unit TIMEOUT 300)
endif()
