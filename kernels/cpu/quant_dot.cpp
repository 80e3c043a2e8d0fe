// Scalar integer dot products of ggml weight blocks with quantized activations: the oracle of
// the SIMD versions (avx2/quant_dot_avx2.cpp).
//
// Every path splits the work the same way: the integer part of each block (sum over its
// sub-blocks of scale * (q . x), exact in int32) is computed by the path (scalar here, SIMD
// there), then the finish_* functions below turn the per-block integers into the row's float
// dot in one fixed order. They live in this translation unit (compiled without FMA), so every
// ISA path gives bit-identical results, and greedy decoding does not depend on the ISA. The
// 32-value formats use explicit fma in a fixed lane order instead (quant_gemm.h), which the
// SIMD path reproduces 8 blocks at a time.
#include <cmath>
#include <cstring>

#include "quant_gemm.h"
#include "tessera/common/half.h"

namespace tessera::kernels::cpu {
namespace {

template <class Block>
float finish_kquant_min(const Block* b, const BlockQ8_K* x, const int32_t* sums, int64_t nb, float acc) {
  for (int64_t i = 0; i < nb; ++i) {
    int32_t msum = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      q4k_scale_min(j, b[i].scales, &sc, &m);
      msum += m * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
    }
    const float dx = x[i].d;
    acc += fp16_to_f32(b[i].d) * dx * static_cast<float>(sums[i]);
    acc -= fp16_to_f32(b[i].dmin) * dx * static_cast<float>(msum);
  }
  return acc;
}

template <class Block, bool kHigh>
int32_t q45k_block_sum(const Block& q, const BlockQ8_K& x) {
  int32_t sum = 0;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(j, q.scales, &sc, &m);
    const uint8_t* qs = q.qs + 32 * (j / 2);
    const int shift = (j % 2) * 4;
    int32_t s = 0;
    for (int l = 0; l < 32; ++l) {
      int v = (qs[l] >> shift) & 0xF;
      if constexpr (kHigh) v |= ((q.qh[l] >> j) & 1) << 4;
      s += v * x.qs[32 * j + l];
    }
    sum += sc * s;
  }
  return sum;
}

}  // namespace

float finish_q4_k(const uint8_t* w, const BlockQ8_K* xk, const int32_t* sums, int64_t nb, float acc) {
  return finish_kquant_min(reinterpret_cast<const BlockQ4_K*>(w), xk, sums, nb, acc);
}
float finish_q5_k(const uint8_t* w, const BlockQ8_K* xk, const int32_t* sums, int64_t nb, float acc) {
  return finish_kquant_min(reinterpret_cast<const BlockQ5_K*>(w), xk, sums, nb, acc);
}

float finish_q6_k(const uint8_t* w, const BlockQ8_K* xk, const int32_t* sums, int64_t nb, float acc) {
  const auto* b = reinterpret_cast<const BlockQ6_K*>(w);
  for (int64_t i = 0; i < nb; ++i) {
    int32_t offset = 0;  // the -32 of every 6-bit value, through the activation block sums
    for (int g = 0; g < 16; ++g) offset += b[i].scales[g] * xk[i].bsums[g];
    acc += fp16_to_f32(b[i].d) * xk[i].d * static_cast<float>(sums[i] - 32 * offset);
  }
  return acc;
}

float finish_q2_k(const uint8_t* w, const BlockQ8_K* xk, const int32_t* sums, int64_t nb, float acc) {
  const auto* b = reinterpret_cast<const BlockQ2_K*>(w);
  for (int64_t i = 0; i < nb; ++i) {
    int32_t msum = 0;  // the mins (high nibbles of the scales), through the activation block sums
    for (int g = 0; g < 16; ++g) msum += (b[i].scales[g] >> 4) * xk[i].bsums[g];
    const float dx = xk[i].d;
    acc += fp16_to_f32(b[i].d) * dx * static_cast<float>(sums[i]);
    acc -= fp16_to_f32(b[i].dmin) * dx * static_cast<float>(msum);
  }
  return acc;
}

float finish_q3_k(const uint8_t* w, const BlockQ8_K* xk, const int32_t* sums, int64_t nb, float acc) {
  const auto* b = reinterpret_cast<const BlockQ3_K*>(w);
  for (int64_t i = 0; i < nb; ++i) {
    int8_t sc[16];
    q3k_unpack_scales(b[i].scales, sc);
    int32_t offset = 0;  // the values were summed as v + 4 (0..7): remove 4 * sum of x per group
    for (int g = 0; g < 16; ++g) offset += sc[g] * xk[i].bsums[g];
    acc += fp16_to_f32(b[i].d) * xk[i].d * static_cast<float>(sums[i] - 4 * offset);
  }
  return acc;
}

float finish_iq4_xs(const uint8_t* w, const BlockQ8_K* xk, const int32_t* sums, int64_t nb, float acc) {
  const auto* b = reinterpret_cast<const BlockIQ4_XS*>(w);
  for (int64_t i = 0; i < nb; ++i) acc += fp16_to_f32(b[i].d) * xk[i].d * static_cast<float>(sums[i]);
  return acc;
}

namespace {

// Scalar integer sums of one super-block (the layouts of quants_dequant.cpp).
int32_t q2k_block_sum(const BlockQ2_K& q, const BlockQ8_K& x) {
  int32_t sum = 0;
  for (int e = 0; e < kQK_K; ++e) {
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    sum += (q.scales[e / 16] & 0xF) * ((q.qs[32 * half + l] >> (2 * k)) & 3) * x.qs[e];
  }
  return sum;
}

int32_t q3k_block_sum(const BlockQ3_K& q, const BlockQ8_K& x) {
  int8_t sc[16];
  q3k_unpack_scales(q.scales, sc);
  int32_t sum = 0;
  for (int e = 0; e < kQK_K; ++e) {
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    const int u = ((q.qs[32 * half + l] >> (2 * k)) & 3) | (((q.hmask[l] >> (4 * half + k)) & 1) << 2);  // v + 4
    sum += sc[e / 16] * u * x.qs[e];
  }
  return sum;
}

int32_t iq4xs_block_sum(const BlockIQ4_XS& q, const BlockQ8_K& x) {
  int32_t sum = 0;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((q.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((q.scales_h >> (2 * ib)) & 3) << 4);
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) {
      s += kIQ4NLValues[q.qs[16 * ib + j] & 0xF] * x.qs[32 * ib + j];
      s += kIQ4NLValues[q.qs[16 * ib + j] >> 4] * x.qs[32 * ib + 16 + j];
    }
    sum += (ls - 32) * s;
  }
  return sum;
}

template <class Block, int32_t (*BlockSum)(const Block&, const BlockQ8_K&),
          float (*Finish)(const uint8_t*, const BlockQ8_K*, const int32_t*, int64_t, float)>
float kdot(const uint8_t* w, const BlockQ8_K* xk, int64_t nb) {
  const auto* b = reinterpret_cast<const Block*>(w);
  float acc = 0.0f;
  for (int64_t i0 = 0; i0 < nb; i0 += kFinishChunk) {
    const int64_t n = std::min<int64_t>(kFinishChunk, nb - i0);
    int32_t sums[kFinishChunk];
    for (int64_t i = 0; i < n; ++i) sums[i] = BlockSum(b[i0 + i], xk[i0 + i]);
    acc = Finish(w + i0 * sizeof(Block), xk + i0, sums, n, acc);
  }
  return acc;
}

}  // namespace

float dot_q2_k_q8_k(const uint8_t* w, const BlockQ8_K* xk, const int8_t*, const float*, int64_t nb) {
  return kdot<BlockQ2_K, q2k_block_sum, finish_q2_k>(w, xk, nb);
}
float dot_q3_k_q8_k(const uint8_t* w, const BlockQ8_K* xk, const int8_t*, const float*, int64_t nb) {
  return kdot<BlockQ3_K, q3k_block_sum, finish_q3_k>(w, xk, nb);
}
float dot_iq4_xs_q8_k(const uint8_t* w, const BlockQ8_K* xk, const int8_t*, const float*, int64_t nb) {
  return kdot<BlockIQ4_XS, iq4xs_block_sum, finish_iq4_xs>(w, xk, nb);
}

float dot_q4_k_q8_k(const uint8_t* w, const BlockQ8_K* xk, const int8_t*, const float*, int64_t nb) {
  const auto* b = reinterpret_cast<const BlockQ4_K*>(w);
  float acc = 0.0f;
  for (int64_t i0 = 0; i0 < nb; i0 += kFinishChunk) {
    const int64_t n = std::min<int64_t>(kFinishChunk, nb - i0);
    int32_t sums[kFinishChunk];
    for (int64_t i = 0; i < n; ++i) sums[i] = q45k_block_sum<BlockQ4_K, false>(b[i0 + i], xk[i0 + i]);
    acc = finish_q4_k(w + i0 * sizeof(BlockQ4_K), xk + i0, sums, n, acc);
  }
  return acc;
}

float dot_q5_k_q8_k(const uint8_t* w, const BlockQ8_K* xk, const int8_t*, const float*, int64_t nb) {
  const auto* b = reinterpret_cast<const BlockQ5_K*>(w);
  float acc = 0.0f;
  for (int64_t i0 = 0; i0 < nb; i0 += kFinishChunk) {
    const int64_t n = std::min<int64_t>(kFinishChunk, nb - i0);
    int32_t sums[kFinishChunk];
    for (int64_t i = 0; i < n; ++i) sums[i] = q45k_block_sum<BlockQ5_K, true>(b[i0 + i], xk[i0 + i]);
    acc = finish_q5_k(w + i0 * sizeof(BlockQ5_K), xk + i0, sums, n, acc);
  }
  return acc;
}

float dot_q6_k_q8_k(const uint8_t* w, const BlockQ8_K* xk, const int8_t*, const float*, int64_t nb) {
  const auto* b = reinterpret_cast<const BlockQ6_K*>(w);
  float acc = 0.0f;
  for (int64_t i0 = 0; i0 < nb; i0 += kFinishChunk) {
    const int64_t n = std::min<int64_t>(kFinishChunk, nb - i0);
    int32_t sums[kFinishChunk];
    for (int64_t i = 0; i < n; ++i) {
      const BlockQ6_K& q = b[i0 + i];
      const BlockQ8_K& x = xk[i0 + i];
      int32_t sum = 0;
      for (int e = 0; e < kQK_K; ++e) {
        const int half = e / 128, k = (e % 128) / 32, l = e % 32;
        const uint8_t lo = q.ql[half * 64 + l + (k % 2) * 32];
        const int v = ((k < 2 ? lo & 0xF : lo >> 4) | (((q.qh[half * 32 + l] >> (2 * k)) & 3) << 4));
        sum += q.scales[e / 16] * v * x.qs[e];
      }
      sums[i] = sum;
    }
    acc = finish_q6_k(w + i0 * sizeof(BlockQ6_K), xk + i0, sums, n, acc);
  }
  return acc;
}

namespace {

// The 32-value formats: one block's integers (q . x, and for Q4_1/Q5_1 the activation sum).
struct Block32 {
  int32_t s, xsum;
};
int32_t nib(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }
uint32_t high_bits(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}
template <class Fn>  // value(j) -> the weight's integer value j of the block
Block32 block32(Fn value, const int8_t* x) {
  Block32 r{0, 0};
  for (int j = 0; j < 32; ++j) {
    r.s += value(j) * x[j];
    r.xsum += x[j];
  }
  return r;
}

// lane i % 8: fma(s, d * xd) then, with a min, fma(xsum, m * xd); see quant_gemm.h.
template <class Block, bool kMin, class Fn>
float dot32(const uint8_t* w, const int8_t* xq, const float* xd, int64_t nb, Fn values) {
  const auto* b = reinterpret_cast<const Block*>(w);
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < nb; ++i) {
    const Block32 r = values(b[i], xq + 32 * i);
    float& l = lanes[i % 8];
    l = std::fma(static_cast<float>(r.s), fp16_to_f32(b[i].d) * xd[i], l);
    if constexpr (kMin) l = std::fma(static_cast<float>(r.xsum), fp16_to_f32(b[i].m) * xd[i], l);
  }
  return reduce_lanes(lanes);
}

}  // namespace

float dot_q4_0_q8_0(const uint8_t* w, const BlockQ8_K*, const int8_t* xq, const float* xd, int64_t nb) {
  return dot32<BlockQ4_0, false>(w, xq, xd, nb, [](const BlockQ4_0& q, const int8_t* x) {
    return block32([&](int j) { return nib(q.qs, j) - 8; }, x);
  });
}

float dot_q4_1_q8_0(const uint8_t* w, const BlockQ8_K*, const int8_t* xq, const float* xd, int64_t nb) {
  return dot32<BlockQ4_1, true>(w, xq, xd, nb, [](const BlockQ4_1& q, const int8_t* x) {
    return block32([&](int j) { return nib(q.qs, j); }, x);
  });
}

float dot_q5_0_q8_0(const uint8_t* w, const BlockQ8_K*, const int8_t* xq, const float* xd, int64_t nb) {
  return dot32<BlockQ5_0, false>(w, xq, xd, nb, [](const BlockQ5_0& q, const int8_t* x) {
    const uint32_t qh = high_bits(q.qh);
    return block32([&](int j) { return (nib(q.qs, j) | static_cast<int32_t>(((qh >> j) & 1) << 4)) - 16; }, x);
  });
}

float dot_q5_1_q8_0(const uint8_t* w, const BlockQ8_K*, const int8_t* xq, const float* xd, int64_t nb) {
  return dot32<BlockQ5_1, true>(w, xq, xd, nb, [](const BlockQ5_1& q, const int8_t* x) {
    const uint32_t qh = high_bits(q.qh);
    return block32([&](int j) { return nib(q.qs, j) | static_cast<int32_t>(((qh >> j) & 1) << 4); }, x);
  });
}

float dot_iq4_nl_q8_0(const uint8_t* w, const BlockQ8_K*, const int8_t* xq, const float* xd, int64_t nb) {
  return dot32<BlockIQ4_NL, false>(w, xq, xd, nb, [](const BlockIQ4_NL& q, const int8_t* x) {
    return block32([&](int j) { return int32_t{kIQ4NLValues[nib(q.qs, j)]}; }, x);
  });
}

}  // namespace tessera::kernels::cpu
