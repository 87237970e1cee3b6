// The x86 features the kernels dispatch on, read from CPUID (and XGETBV: the OS must save the
// AVX / AVX-512 registers), cached on first use. One place instead of __builtin_cpu_supports,
// whose feature names differ between compilers (clang 14 knows neither "f16c" nor "avxvnni"; the
// fuzz builds use clang). tests/test_quant.cpp checks it against GCC's __builtin_cpu_supports.
#pragma once

namespace strata::kernels {

enum class CpuFeature {
  kAvx2,
  kFma,
  kF16c,
  kBmi2,
  kAvx512f,
  kAvx512bw,
  kAvx512vl,
  kAvx512dq,
  kAvx512vnni,
  kAvx512vbmi,
  kGfni,
  kAvxVnni,
};

bool cpu_has(CpuFeature f);

}  // namespace strata::kernels
