// The interleaved AVX-512 kernels with GFNI for the high nibbles (see gemv_interleaved_avx512.cpp),
// picked by interleave.cpp on CPUs that have GFNI. Tested by tests/test_interleave.cpp.
#define STRATA_INTERLEAVED_GFNI 1
#include "kernels/gemv_interleaved_avx512.cpp"  // NOLINT(bugprone-suspicious-include)
