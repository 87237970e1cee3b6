// Q4_0 x Q8_0 GEMV over the kQ4_0x16 layout (kernels/interleave.h), and IQ4_NL / MXFP4 over
// kIQ4_NLx16 / kMXFP4x16 (table value + bias as the unsigned code), for AVX2 CPUs that also have
// AVX-VNNI (the VEX-encoded vpdpbusd: Intel client cores since Alder Lake, AMD Zen 5 run with
// ISA=avx2). Picked by interleave.cpp's dispatch at the AVX2 level, GEMV and GEMM.
//
// The group kernel and the GEMM are interleave_onepass.h's, instantiated here with vpdpbusd.
//
// Session 18 (bench/RESULTS.md), Zen 5 at one thread, a harness alternating variants over a
// 2 GiB pool: 1.30-1.43x the AVX2 two-half kernel's streaming rate (median of 9 paired rounds,
// 768 x 2048 and 2048 x 768), 37-50 GB/s against 24-26 from cache. Tested by
// tests/test_interleave.cpp.
#include "kernels/interleave_onepass.h"

namespace strata::kernels::detail {
namespace {

// kQ4_0x16, kIQ4_NLx16 and kMXFP4x16 (each group by its parity).
template <WeightLayout kLayout>
void gemv_x16(const void* w, size_t row_stride, const void* xq, float* y, int64_t row_begin,
              int64_t row_end, int64_t n_cols) {
  gemv_q4_0x16_groups(w, row_stride, xq, y, row_begin, row_end, n_cols,
                      [](const uint8_t* g, int64_t r, const BlockQ8_0* x, const XPrep* prep,
                         int64_t nb, float* out, const uint8_t* next) {
                        with_ymm_format<kLayout>(r, nb, [&](auto fmt) {
                          group_dot<decltype(fmt), true>(g, x, prep, nb, out, next);
                        });
                      });
}

}  // namespace

GemvKernels interleaved_kernels_avxvnni(WeightLayout layout) {
  GemvKernels k = interleaved_kernels_avx2(layout);
  if (layout == WeightLayout::kQ4_0x16)
    k = {&gemv_x16<WeightLayout::kQ4_0x16>, &gemm_x16<WeightLayout::kQ4_0x16, true>};
  if (layout == WeightLayout::kIQ4_NLx16)
    k = {&gemv_x16<WeightLayout::kIQ4_NLx16>, &gemm_x16<WeightLayout::kIQ4_NLx16, true>};
  if (layout == WeightLayout::kMXFP4x16)
    k = {&gemv_x16<WeightLayout::kMXFP4x16>, &gemm_x16<WeightLayout::kMXFP4x16, true>};
  return k;
}

}  // namespace strata::kernels::detail
