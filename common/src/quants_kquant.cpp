// K-quant, IQ4 and Q8_K reference quantizers: ggml's quantize_row_q{2..6}_K_ref, quantize_iq4_nl /
// quantize_iq4_xs (no importance matrix, ntry = 7: what llama-quantize writes) and
// quantize_row_q8_K_ref, with ggml's float operations in ggml's order (compiled without FMA).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quants_impl.h"
#include "tessera/common/check.h"
#include "tessera/common/half.h"

namespace tessera {
namespace quants {
namespace {

inline uint16_t f2h(float f) { return f32_to_fp16(f); }
inline float h2f(uint16_t h) { return fp16_to_f32(h); }

// Packs 4 two-bit levels of L (at l, l+32, l+64, l+96 of each 128) into qs.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
  }
}

// Sub-block (scale, min) search shared by Q4_K and Q5_K, then the 6-bit packing of scales.
template <class Block>
void kquant_scales_mins(const float* x, Block* y, uint8_t* L, int nmax, float rmin, int nstep) {
  uint8_t Laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    if (j < 4) {
      y->scales[j] = ls;
      y->scales[j + 4] = lm;
    } else {
      y->scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      y->scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      y->scales[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  y->d = f2h(max_scale / 63.f);
  y->dmin = f2h(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(j, y->scales, &sc, &m);
    const float d = h2f(y->d) * sc;
    if (d == 0.f) continue;
    const float dm = h2f(y->dmin) * m;
    for (int ii = 0; ii < 32; ++ii) {
      L[32 * j + ii] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax));
    }
  }
}

int best_index_int8(const int8_t* val, float x) {
  if (x <= val[0]) return 0;
  if (x >= val[15]) return 15;
  int ml = 0, mu = 15;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < val[mav]) {
      mu = mav;
    } else {
      ml = mav;
    }
  }
  return x - static_cast<float>(val[mu - 1]) < static_cast<float>(val[mu]) - x ? mu - 1 : mu;
}

// ggml quantize_row_iq4_nl_impl without importance weights, ntry = 7. n = 32 (IQ4_NL) or 256
// (IQ4_XS, with 6-bit sub-block scales in scales_h / scales_l).
void quantize_iq4(int n, const float* x, uint16_t* dh, uint8_t* q4, uint16_t* scales_h, uint8_t* scales_l) {
  constexpr int kNtry = 7;
  const int8_t* values = kIQ4NLValues;
  uint8_t L[kQK_K];
  float scales[8], weight[32];
  std::memset(q4, 0, static_cast<size_t>(n / 2));
  *dh = f2h(0.f);
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < n / 32; ++ib) {
    const float* xb = x + ib * 32;
    uint8_t* Lb = L + ib * 32;
    for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) { amax = ax; max = xb[j]; }
    }
    if (amax < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    float d = -max / static_cast<float>(values[0]);
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const int l = best_index_int8(values, id * xb[j]);
      Lb[j] = static_cast<uint8_t>(l);
      const float q = values[l];
      sumqx += weight[j] * q * xb[j];
      sumq2 += weight[j] * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int itry = -kNtry; itry <= kNtry; ++itry) {
      id = static_cast<float>(itry + values[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < 32; ++j) {
        const float q = values[best_index_int8(values, id * xb[j])];
        sumqx += weight[j] * q * xb[j];
        sumq2 += weight[j] * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) {
      amax_scale = std::fabs(d);
      max_scale = d;
    }
  }
  if (n > 32) {
    *scales_h = 0;
    const float d = -max_scale / 32;
    *dh = f2h(d);
    const float id = d != 0.f ? 1 / d : 0.f;
    for (int ib = 0; ib < n / 32; ++ib) {
      int l = std::clamp(nearest_int(id * scales[ib]), -32, 31);
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0.f ? 1 / dl : 0.f;
      for (int j = 0; j < 32; ++j) L[ib * 32 + j] = static_cast<uint8_t>(best_index_int8(values, idl * x[ib * 32 + j]));
      l += 32;
      const auto l_l = static_cast<uint8_t>(l & 0xf), l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0) {
        scales_l[ib / 2] = l_l;
      } else {
        scales_l[ib / 2] |= static_cast<uint8_t>(l_l << 4);
      }
      *scales_h = static_cast<uint16_t>(*scales_h | (l_h << (2 * ib)));
    }
  } else {
    *dh = f2h(scales[0]);
    const float id = scales[0] != 0.f ? 1 / scales[0] : 0;
    for (int j = 0; j < n; ++j) L[j] = static_cast<uint8_t>(best_index_int8(values, id * x[j]));
  }
  for (int i = 0; i < n / 32; ++i) {
    for (int j = 0; j < 16; ++j) q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
  }
}

}  // namespace

void quantize_q2_k(const float* x, BlockQ2_K* y) {
  uint8_t L[kQK_K], Laux[16];
  float weights[16], mins[16], scales[16];
  constexpr float q4scale = 15.f;
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  if (max_scale > 0) {
    const float iscale = q4scale / max_scale;
    for (int j = 0; j < 16; ++j) y->scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
    y->d = f2h(max_scale / q4scale);
  } else {
    std::memset(y->scales, 0, 16);
    y->d = f2h(0.f);
  }
  if (max_min > 0) {
    const float iscale = q4scale / max_min;
    for (int j = 0; j < 16; ++j) y->scales[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
    y->dmin = f2h(max_min / q4scale);
  } else {
    y->dmin = f2h(0.f);
  }
  for (int j = 0; j < 16; ++j) {
    const float d = h2f(y->d) * static_cast<float>(y->scales[j] & 0xF);
    if (d == 0.f) continue;
    const float dm = h2f(y->dmin) * static_cast<float>(y->scales[j] >> 4);
    for (int ii = 0; ii < 16; ++ii) {
      L[16 * j + ii] = static_cast<uint8_t>(std::clamp(nearest_int((x[16 * j + ii] + dm) / d), 0, 3));
    }
  }
  pack_2bit(L, y->qs);
}

void quantize_q3_k(const float* x, BlockQ3_K* y) {
  int8_t L[kQK_K];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
    const float scale = std::fabs(scales[j]);
    if (scale > amax) {
      amax = scale;
      max_scale = scales[j];
    }
  }
  std::memset(y->scales, 0, 12);
  if (max_scale != 0.f) {
    const float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; ++j) {
      auto l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
      l = static_cast<int8_t>(std::max<int>(-32, std::min<int>(31, l)) + 32);
      if (j < 8) {
        y->scales[j] = static_cast<uint8_t>(l & 0xF);
      } else {
        y->scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
      }
      l = static_cast<int8_t>(l >> 4);
      y->scales[j % 4 + 8] |= static_cast<uint8_t>(l << (2 * (j / 4)));
    }
    y->d = f2h(1 / iscale);
  } else {
    y->d = f2h(0.f);
  }
  int8_t sc[16];
  q3k_unpack_scales(y->scales, sc);
  for (int j = 0; j < 16; ++j) {
    const float d = h2f(y->d) * static_cast<float>(sc[j]);
    if (d == 0.f) continue;
    for (int ii = 0; ii < 16; ++ii) {
      L[16 * j + ii] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
    }
  }
  std::memset(y->hmask, 0, 32);
  int m = 0;
  uint8_t hm = 1;
  for (int j = 0; j < kQK_K; ++j) {
    if (L[j] > 3) {
      y->hmask[m] |= hm;
      L[j] = static_cast<int8_t>(L[j] - 4);
    }
    if (++m == 32) {
      m = 0;
      hm = static_cast<uint8_t>(hm << 1);
    }
  }
  uint8_t Lu[kQK_K];
  for (int j = 0; j < kQK_K; ++j) Lu[j] = static_cast<uint8_t>(L[j]);
  pack_2bit(Lu, y->qs);
}

void quantize_q4_k(const float* x, BlockQ4_K* y) {
  uint8_t L[kQK_K];
  kquant_scales_mins(x, y, L, 15, -1.f, 20);
  uint8_t* q = y->qs;
  for (int j = 0; j < kQK_K; j += 64) {
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    q += 32;
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* y) {
  uint8_t L[kQK_K];
  kquant_scales_mins(x, y, L, 31, -0.5f, 15);
  uint8_t* ql = y->qs;
  std::memset(y->qh, 0, 32);
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < kQK_K; n += 64) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j], l2 = L[n + j + 32];
      if (l1 > 15) {
        l1 -= 16;
        y->qh[j] |= m1;
      }
      if (l2 > 15) {
        l2 -= 16;
        y->qh[j] |= m2;
      }
      ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
    m1 = static_cast<uint8_t>(m1 << 2);
    m2 = static_cast<uint8_t>(m2 << 2);
    ql += 32;
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y) {
  int8_t L[kQK_K];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
    scales[ib] = scale;
    if (std::fabs(scale) > max_abs_scale) {
      max_abs_scale = std::fabs(scale);
      max_scale = scale;
    }
  }
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(y, 0, sizeof(BlockQ6_K));
    y->d = f2h(0.f);
    return;
  }
  const float iscale = -128.f / max_scale;
  y->d = f2h(1 / iscale);
  for (int ib = 0; ib < 16; ++ib) y->scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
  for (int j = 0; j < 16; ++j) {
    const float d = h2f(y->d) * static_cast<float>(y->scales[j]);
    if (d == 0.f) continue;
    for (int ii = 0; ii < 16; ++ii) {
      L[16 * j + ii] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
    }
  }
  uint8_t* ql = y->ql;
  uint8_t* qh = y->qh;
  for (int j = 0; j < kQK_K; j += 128) {
    for (int l = 0; l < 32; ++l) {
      const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
      ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                   ((L[j + l + 96] >> 4) << 6));
    }
    ql += 64;
    qh += 32;
  }
}

void quantize_iq4_nl(const float* x, BlockIQ4_NL* y) { quantize_iq4(32, x, &y->d, y->qs, nullptr, nullptr); }

void quantize_iq4_xs(const float* x, BlockIQ4_XS* y) {
  quantize_iq4(kQK_K, x, &y->d, y->qs, &y->scales_h, y->scales_l);
}

}  // namespace quants

void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t cols) {
  TS_CHECK_EQ(cols % kQK_K, 0);
  for (int64_t i = 0; i < cols / kQK_K; ++i, x += kQK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.f) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, kQK_K);
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, quants::nearest_int(iscale * x[j])));
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace tessera
