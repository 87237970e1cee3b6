# Kernel tests: block formats and (de)quantizers (test_quant), GEMV/GEMM variants (test_gemv),
# interleaved layouts (test_interleave).
strata_add_test(test_quant LABEL unit SOURCES test_quant.cpp LIBS strata_kernels strata_io)
strata_add_test(test_gemv LABEL unit SOURCES test_gemv.cpp LIBS strata_kernels strata_io)
# The canonical-order tests spell out a*b+c sequences; the compiler must not fuse them.
set_source_files_properties(test_gemv.cpp PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
# Interleaved weight layouts (kernels/interleave.h): repack round trip, kernels == GGUF layout's.
strata_add_test(test_interleave LABEL unit SOURCES test_interleave.cpp LIBS strata_kernels strata_io)
# ggml's table GELU (kernels/gelu.h) against a digest of llama.cpp's.
strata_add_test(test_gelu LABEL unit SOURCES test_gelu.cpp LIBS strata_kernels strata_io)
