// Portable float exp and SiLU that give the same bits on the CPU and in CUDA device code: only
// separately rounded IEEE + - * / (no libm, no FMA), so a CPU expert and a GPU expert agree to the
// bit (DESIGN.md invariant 1). Header-only; the functions are STRATA_HD (host and device under
// nvcc). Host translation units that use it must be compiled with -ffp-contract=off (a fused
// a*b+c would change bits). Tested by tests/test_cuda_portable_math.cpp (ulp sweep against double
// exp, special values, device == host bit for bit).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__
#else
#define STRATA_HD
#endif

namespace strata::kernels {

// Round-to-nearest-even arithmetic that no compiler may fuse: explicit intrinsics on the device
// (nvcc contracts a*b+c by default), plain operators on the host (-ffp-contract=off).
STRATA_HD inline float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
STRATA_HD inline float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
STRATA_HD inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
STRATA_HD inline float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

STRATA_HD inline uint32_t f32_to_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}
STRATA_HD inline float bits_to_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// e^x, within about 1 ulp of the exact value over the whole float range (1.03 at worst in the
// test's sweep), subnormal results included. Overflow gives +inf, underflow +0, NaN stays NaN.
//   x = k·ln2 + r, |r| <= ln2/2: k = nearest integer to x·log2(e) (the 1.5·2^23 shifter rounds
//   half-to-even through the adder), r = (x - k·ln2_hi) - k·ln2_lo with ln2_hi holding 16
//   significant bits so k·ln2_hi and the first subtraction are exact (|k| <= 151).
//   e^r = 1 + (r + r²·P(r)), P(r) = 1/2! + r/3! + ... + r^5/7! (Taylor; truncation < 6e-9
//   relative).
//   e^x = e^r · 2^k, the power of two applied in at most two exact-or-once-rounded products.
STRATA_HD inline float portable_expf(float x) {
  if (x != x) return x + x;                        // NaN (quieted)
  if (x > 89.0f) return bits_to_f32(0x7F800000u);  // e^89 > FLT_MAX: +inf
  if (x < -104.0f) return 0.0f;                    // e^-104 < 2^-150: rounds to +0
  constexpr float kLog2e = 0x1.715476p+0f;
  constexpr float kLn2Hi = 0x1.62e4p-1f;
  constexpr float kLn2Lo = 0x1.7f7d1cp-20f;
  constexpr float kShifter = 0x1.8p23f;
  const float kf = sub_rn(add_rn(mul_rn(x, kLog2e), kShifter), kShifter);
  const float r = sub_rn(sub_rn(x, mul_rn(kf, kLn2Hi)), mul_rn(kf, kLn2Lo));
  float p = 0x1.a01a02p-13f;                                          // 1/7!
  p = add_rn(mul_rn(p, r), 0x1.6c16c2p-10f);                          // 1/6!
  p = add_rn(mul_rn(p, r), 0x1.111112p-7f);                           // 1/5!
  p = add_rn(mul_rn(p, r), 0x1.555556p-5f);                           // 1/4!
  p = add_rn(mul_rn(p, r), 0x1.555556p-3f);                           // 1/3!
  p = add_rn(mul_rn(p, r), 0.5f);                                     // 1/2!
  const float er = add_rn(1.0f, add_rn(r, mul_rn(mul_rn(r, r), p)));  // in [0.7, 1.42]
  const int k = static_cast<int>(kf);                                 // in [-151, 129]
  if (k > 127)  // 2^k is not a float: 2^127 exactly, then 2^(k-127), which may overflow to inf
    return mul_rn(mul_rn(er, bits_to_f32(254u << 23)), bits_to_f32(static_cast<uint32_t>(k) << 23));
  if (k >= -126) return mul_rn(er, bits_to_f32(static_cast<uint32_t>(k + 127) << 23));
  // Subnormal result: an exact scaling into the normal range, then one rounding by 2^-100.
  return mul_rn(mul_rn(er, bits_to_f32(static_cast<uint32_t>(k + 100 + 127) << 23)),
                bits_to_f32(static_cast<uint32_t>(-100 + 127) << 23));
}

// SiLU as the engine's SwiGLU uses it: g / (1 + e^-g). Large negative g gives -0, large positive
// g gives g, NaN stays NaN.
STRATA_HD inline float portable_silu(float g) {
  return div_rn(g, add_rn(1.0f, portable_expf(-g)));
}

// One SwiGLU element: silu(g) · u, in this order.
STRATA_HD inline float portable_swiglu(float g, float u) {
  return mul_rn(portable_silu(g), u);
}

}  // namespace strata::kernels
