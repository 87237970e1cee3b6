strata_add_test(test_threadpool LABEL unit SOURCES test_threadpool.cpp LIBS strata_kernels)
