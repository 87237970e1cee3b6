// The read-bandwidth probe loops bench_layout and bench_moe run next to the kernels they measure:
// 256-bit loads into 4 accumulators, and 512-bit loads into 4 accumulators with an L1 prefetch
// 1 KiB ahead. The benches take the faster of the two each round: on the machine of
// bench/RESULTS.md a plain 512-bit loop reads ~10% slower than either and would flatter the
// kernels' % of probe. n: a multiple of 256 bytes (a tail is not read).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace strata::bench {

__attribute__((target("avx512f"))) inline uint64_t read_avx512(const uint8_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 256 <= n; i += 256) {
    for (int l = 0; l < 4; ++l) __builtin_prefetch(p + i + 1024 + 64 * l, 0, 3);
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
  }
  alignas(64) uint64_t o[8];
  _mm512_store_si512(o, _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3)));
  return o[0];
}

__attribute__((target("avx2"))) inline uint64_t read_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  alignas(32) uint64_t o[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(o),
                     _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3)));
  return o[0];
}

}  // namespace strata::bench
