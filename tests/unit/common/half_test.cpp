// common/half.h against the three implementations it replaced, bit for bit: the kernels'
// (explicit rounding via nearbyint), the model loaders' (ggml's float-arithmetic fallback,
// Maratyszcza's FP16 library) and the kvstore codecs'. Exhaustive over every fp16/bf16 value,
// and over every float whose rounding to fp16 is decided near a representable value or a tie
// (each half's neighbourhood and each midpoint ±2 ulp), plus a stride over all 2^32 floats.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "tessera/common/half.h"

namespace tessera {
namespace {

// ---- The replaced implementations, verbatim in behaviour. ----
uint16_t kernels_f32_to_fp16(float f) {  // kernels/cpu/ops.cpp
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax < 0x38800000u) {
    float a;
    std::memcpy(&a, &ax, 4);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f)));
  }
  const uint32_t mant_odd = (ax >> 13) & 1u;
  return static_cast<uint16_t>(sign | ((ax + 0xfffu + mant_odd - (112u << 23)) >> 13));
}

uint16_t ggml_f32_to_fp16(float f) {  // model/src/half.h (ggml's fallback)
  const float scale_to_inf = std::bit_cast<float>(UINT32_C(0x77800000));
  const float scale_to_zero = std::bit_cast<float>(UINT32_C(0x08800000));
  volatile float base = (f < 0 ? -f : f) * scale_to_inf;  // volatile: no contraction/reordering
  base = base * scale_to_zero;
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & UINT32_C(0x80000000);
  uint32_t bias = shl1_w & UINT32_C(0xFF000000);
  if (bias < UINT32_C(0x71000000)) bias = UINT32_C(0x71000000);
  base = std::bit_cast<float>((bias >> 1) + UINT32_C(0x07800000)) + base;
  const uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(base));
  const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
  const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT16_C(0x7E00) : exp_bits + mantissa_bits));
}

float reference_fp16_to_f32(uint16_t h) {  // kvstore/src/blob.cpp element_to_float
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
    }
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t reference_f32_to_bf16(float f) {  // all three copies agreed
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Checks one float against both replaced fp16 encoders; reports the first mismatch only.
void expect_same_fp16(uint32_t bits, int* failures) {
  const float f = std::bit_cast<float>(bits);
  const uint16_t got = f32_to_fp16(f);
  const uint16_t k = kernels_f32_to_fp16(f);
  const uint16_t g = ggml_f32_to_fp16(f);
  if ((got != k || got != g) && ++*failures <= 5) {
    ADD_FAILURE() << std::hex << "f32 bits 0x" << bits << ": half.h 0x" << got << ", kernels 0x" << k << ", ggml 0x" << g;
  }
}

TEST(Half, EveryFp16DecodesAsBefore) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = fp16_to_f32(static_cast<uint16_t>(h));
    const float want = reference_fp16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << "half 0x" << std::hex << h;
    // Every non-NaN half survives the round trip exactly.
    if (!std::isnan(got)) {
      ASSERT_EQ(f32_to_fp16(got), h) << "half 0x" << std::hex << h;
    }
  }
}

TEST(Half, EncodesAroundEveryHalfAndEveryTieAsBefore) {
  int failures = 0;
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite non-negative half
    const uint32_t lo = std::bit_cast<uint32_t>(fp16_to_f32(static_cast<uint16_t>(h)));
    const uint32_t hi = std::bit_cast<uint32_t>(fp16_to_f32(static_cast<uint16_t>(h + 1)));
    // Midpoint between the two halves (exactly representable as a float) and its neighbours.
    const float mid_f = (std::bit_cast<float>(lo) + std::bit_cast<float>(hi)) / 2;
    const uint32_t mid = std::bit_cast<uint32_t>(mid_f);
    for (uint32_t base : {lo, mid, hi}) {
      for (int d = -2; d <= 2; ++d) {
        const uint32_t b = base + static_cast<uint32_t>(d);
        if (b > 0x7f800000u) continue;
        expect_same_fp16(b, &failures);
        expect_same_fp16(b | 0x80000000u, &failures);
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Half, EncodesAStrideOfAllFloatsAsBefore) {
  int failures = 0;
  for (uint64_t b = 0; b <= 0xffffffffu; b += 61) expect_same_fp16(static_cast<uint32_t>(b), &failures);
  for (uint32_t b : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x477ff000u, 0x477fefffu,
                     0x38800000u, 0x387fffffu, 0x33000000u, 0x33000001u, 0x32ffffffu}) {
    expect_same_fp16(b, &failures);
  }
  EXPECT_EQ(failures, 0);
}

TEST(Half, Bf16IsExactAsBefore) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(std::bit_cast<uint32_t>(f), h << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), h);
    }
  }
  for (uint64_t b = 0; b <= 0xffffffffu; b += 97) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(b));
    ASSERT_EQ(f32_to_bf16(f), reference_f32_to_bf16(f)) << std::hex << b;
  }
}

TEST(Half, KnownValues) {
  EXPECT_EQ(f32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);                  // ties to even -> inf
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);    // smallest subnormal
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);    // tie -> even (zero)
  EXPECT_EQ(f32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);    // 1.5 units -> 2
  EXPECT_EQ(f32_to_fp16(std::nanf("")), 0x7e00);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_FLOAT_EQ(fp16_to_f32(0x3555), 0.333251953125f);
}

}  // namespace
}  // namespace tessera
