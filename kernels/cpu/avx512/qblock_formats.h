// Private (AVX-512 translation units only): the 32-value block formats' unpacking to bytes and
// an 8 x 16 dword transpose, shared by the interleaved VNNI tiles (qblock_tiles_avx512.cpp) and
// the AMX tiles (qblock_amx.cpp). Include it before any `#pragma GCC target` so both units
// compile these inline functions with the same flags.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "tessera/common/quants.h"

namespace tessera::kernels::cpu::qblock_avx512 {

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The 16 nibble bytes at q0 and q1 as 64 values 0..15: [lo(q0), hi(q0), lo(q1), hi(q1)].
inline __m512i nibble_pair(const uint8_t* q0, const uint8_t* q1) {
  const __m256i both = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q1)),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(q0)));
  const __m512i z = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(both));
  return _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFF00FF00u, z, 4), _mm512_set1_epi8(0x0F));
}

// 0x10 in byte j where bit j of the blocks' 32-bit qh words (q0's, then q1's) is set.
inline __m512i fifth_pair(const uint8_t* qh0, const uint8_t* qh1) {
  const __mmask64 m = static_cast<__mmask64>(load_u32(qh0)) | (static_cast<__mmask64>(load_u32(qh1)) << 32);
  return _mm512_maskz_mov_epi8(m, _mm512_set1_epi8(0x10));
}

// Per format: block bytes, whether the float sums follow the scalar oracle's order, and the
// signed weights of the same block index in two rows (b0 -> bytes 0..31, b1 -> 32..63).
struct Q4_0 {
  static constexpr int kBytes = sizeof(BlockQ4_0);
  static constexpr bool kOracleOrder = true;
  static constexpr bool kMin = false;  // Q4_1 / Q5_1: the fp16 min m at byte 2, x's block sum times m * xd
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_sub_epi8(nibble_pair(b0 + 2, b1 + 2), _mm512_set1_epi8(8));
  }
};
struct Q5_0 {
  static constexpr int kBytes = sizeof(BlockQ5_0);
  static constexpr bool kOracleOrder = true;
  static constexpr bool kMin = false;
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {
    const __m512i v = _mm512_or_si512(nibble_pair(b0 + 6, b1 + 6), fifth_pair(b0 + 2, b1 + 2));
    return _mm512_sub_epi8(v, _mm512_set1_epi8(16));
  }
};
struct Q4_1 {
  static constexpr int kBytes = sizeof(BlockQ4_1);
  static constexpr bool kOracleOrder = true;
  static constexpr bool kMin = true;
  static __m512i values(const uint8_t* b0, const uint8_t* b1) { return nibble_pair(b0 + 4, b1 + 4); }  // 0..15
};
struct Q5_1 {
  static constexpr int kBytes = sizeof(BlockQ5_1);
  static constexpr bool kOracleOrder = true;
  static constexpr bool kMin = true;
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {  // 0..31
    return _mm512_or_si512(nibble_pair(b0 + 8, b1 + 8), fifth_pair(b0 + 4, b1 + 4));
  }
};
struct IQ4_NL {
  static constexpr int kBytes = sizeof(BlockIQ4_NL);
  static constexpr bool kOracleOrder = true;
  static constexpr bool kMin = false;
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
    return _mm512_shuffle_epi8(table, nibble_pair(b0 + 2, b1 + 2));
  }
};
// Q8_0 has no bit-identity contract across ISAs (its VNNI tiles sum in one fma accumulator).
struct Q8_0 {
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static constexpr bool kOracleOrder = false;
  static constexpr bool kMin = false;
  static __m512i values(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)), 1);
  }
};

// out[k] lane l = dword k of row l, for rows given as r[i] = [row i | row i + 8] (8 dwords
// each): an 8 x 8 dword transpose inside both 256-bit halves at once.
inline void transpose16x8(const __m512i r[8], __m512i out[8]) {
  __m512i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[0..3]: rows 0-3 (and 8-11), dwords {0,4}, {1,5}, {2,6}, {3,7} per 128-bit lane pair; u[4..7]: rows 4-7.
  for (int h = 0; h < 2; ++h) {
    const __m512i* a = t + 4 * h;
    u[4 * h + 0] = _mm512_unpacklo_epi64(a[0], a[2]);
    u[4 * h + 1] = _mm512_unpackhi_epi64(a[0], a[2]);
    u[4 * h + 2] = _mm512_unpacklo_epi64(a[1], a[3]);
    u[4 * h + 3] = _mm512_unpackhi_epi64(a[1], a[3]);
  }
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int k = 0; k < 4; ++k) {
    out[k] = _mm512_permutex2var_epi64(u[k], lo, u[4 + k]);
    out[k + 4] = _mm512_permutex2var_epi64(u[k], hi, u[4 + k]);
  }
}

}  // namespace tessera::kernels::cpu::qblock_avx512
