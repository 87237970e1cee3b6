// CPUID / XGETBV feature bits (Intel SDM vol. 2A, CPUID leaves 1 and 7). See cpu_features.h.
#include "kernels/cpu_features.h"

#include <cpuid.h>

#include <cstdint>

namespace strata::kernels {
namespace {

struct Bits {
  uint32_t l1_ecx = 0, l7_ebx = 0, l7_ecx = 0, l7s1_eax = 0;
  bool avx_os = false, avx512_os = false;  // XCR0 saves YMM / ZMM and opmask state
};

Bits read_bits() {
  Bits b;
  uint32_t eax, ebx, ecx, edx;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return b;
  b.l1_ecx = ecx;
  if ((ecx & (1u << 27)) != 0) {  // OSXSAVE: XGETBV is available
    uint32_t lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    b.avx_os = (lo & 0x6u) == 0x6u;       // SSE and AVX state
    b.avx512_os = (lo & 0xE6u) == 0xE6u;  // and opmask, ZMM_Hi256, Hi16_ZMM
  }
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0) {
    b.l7_ebx = ebx;
    b.l7_ecx = ecx;
    const uint32_t max_sub = eax;
    if (max_sub >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0) b.l7s1_eax = eax;
  }
  return b;
}

bool bit(uint32_t word, int n) {
  return ((word >> n) & 1u) != 0;
}

}  // namespace

bool cpu_has(CpuFeature f) {
  static const Bits b = read_bits();
  const bool avx = b.avx_os && bit(b.l1_ecx, 28);
  switch (f) {
    case CpuFeature::kAvx2:
      return avx && bit(b.l7_ebx, 5);
    case CpuFeature::kFma:
      return avx && bit(b.l1_ecx, 12);
    case CpuFeature::kF16c:
      return avx && bit(b.l1_ecx, 29);
    case CpuFeature::kBmi2:
      return bit(b.l7_ebx, 8);
    case CpuFeature::kAvx512f:
      return b.avx512_os && bit(b.l7_ebx, 16);
    case CpuFeature::kAvx512dq:
      return b.avx512_os && bit(b.l7_ebx, 17);
    case CpuFeature::kAvx512bw:
      return b.avx512_os && bit(b.l7_ebx, 30);
    case CpuFeature::kAvx512vl:
      return b.avx512_os && bit(b.l7_ebx, 31);
    case CpuFeature::kAvx512vbmi:
      return b.avx512_os && bit(b.l7_ecx, 1);
    case CpuFeature::kAvx512vnni:
      return b.avx512_os && bit(b.l7_ecx, 11);
    case CpuFeature::kGfni:
      return bit(b.l7_ecx, 8);
    case CpuFeature::kAvxVnni:
      return avx && bit(b.l7s1_eax, 4);
  }
  return false;
}

}  // namespace strata::kernels
