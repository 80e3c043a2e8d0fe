// IEEE binary16 ("fp16") and bfloat16 <-> float conversions: the one implementation every
// module uses (kernels, model loaders, kvstore codecs). Scalar, exact, round-to-nearest-even;
// bit-identical to ggml's reference GGML_FP32_TO_FP16 / GGML_FP16_TO_FP32 and
// ggml_compute_fp32_to_bf16 (tests/unit/common/half_test.cpp checks that against the
// implementations these replaced). NaN stays NaN (quiet; fp16 NaN = sign | 0x7e00), overflow
// rounds to infinity, fp16 subnormals are produced and read exactly. Pure functions, no
// dependence on the floating-point rounding mode.
#pragma once

#include <bit>
#include <cstdint>

namespace tessera {

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits = 0;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t f32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN -> quiet NaN
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (ax < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal (or zero) in units of 2^-24.
    // Shift the full 24-bit significand right with round-to-nearest-even, in integers.
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to zero (ties too)
    const uint32_t e = ax >> 23;                               // 102 .. 112
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;           // 24-bit significand
    const uint32_t shift = 126u - e;                           // 14 .. 24
    const uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    const uint32_t up = rem > halfway || (rem == halfway && (q & 1u));
    return static_cast<uint16_t>(sign | (q + up));
  }
  const uint32_t mant_odd = (ax >> 13) & 1u;
  const uint32_t rounded = ax + 0xfffu + mant_odd;  // round half to even
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

}  // namespace tessera
