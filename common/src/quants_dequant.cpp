// Dequantization of every ggml block format, bit-identical to ggml's dequantize_row_*: the
// same float operations in the same order (this file is compiled without FMA, so no
// contraction changes a rounding).
#include <cstring>

#include "quants_impl.h"
#include "tessera/common/check.h"
#include "tessera/common/half.h"
#include "tessera/common/quants.h"

namespace tessera {

void q3k_unpack_scales(const uint8_t packed[12], int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

namespace quants {
namespace {

inline float h2f(uint16_t h) { return fp16_to_f32(h); }

void deq_q4_0(const BlockQ4_0& b, float* y) {
  const float d = h2f(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b.qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
  }
}

void deq_q4_1(const BlockQ4_1& b, float* y) {
  const float d = h2f(b.d), m = h2f(b.m);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(b.qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(b.qs[j] >> 4) * d + m;
  }
}

template <class Block>
uint32_t high_bits(const Block& b) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  return qh;
}

void deq_q5_0(const BlockQ5_0& b, float* y) {
  const float d = h2f(b.d);
  const uint32_t qh = high_bits(b);
  for (int j = 0; j < 16; ++j) {
    const int h0 = static_cast<int>(((qh >> j) << 4) & 0x10);
    const int h1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>(((b.qs[j] & 0x0F) | h0) - 16) * d;
    y[j + 16] = static_cast<float>(((b.qs[j] >> 4) | h1) - 16) * d;
  }
}

void deq_q5_1(const BlockQ5_1& b, float* y) {
  const float d = h2f(b.d), m = h2f(b.m);
  const uint32_t qh = high_bits(b);
  for (int j = 0; j < 16; ++j) {
    const int h0 = static_cast<int>(((qh >> j) << 4) & 0x10);
    const int h1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>((b.qs[j] & 0x0F) | h0) * d + m;
    y[j + 16] = static_cast<float>((b.qs[j] >> 4) | h1) * d + m;
  }
}

void deq_q8_0(const BlockQ8_0& b, float* y) {
  const float d = h2f(b.d);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
}

void deq_q2_k(const BlockQ2_K& b, float* y) {
  const float d = h2f(b.d), dmin = h2f(b.dmin);
  const uint8_t* q = b.qs;
  int is = 0;
  for (int n = 0; n < kQK_K; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = b.scales[is++];
        const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
      }
    }
    q += 32;
  }
}

void deq_q3_k(const BlockQ3_K& b, float* y) {
  const float d_all = h2f(b.d);
  int8_t scales[16];
  q3k_unpack_scales(b.scales, scales);
  const uint8_t* q = b.qs;
  uint8_t m = 1;
  int is = 0;
  for (int n = 0; n < kQK_K; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * static_cast<float>(scales[is++]);
        for (int l = 0; l < 16; ++l) {
          const int k = l + 16 * half;
          const int v = ((q[k] >> shift) & 3) - ((b.hmask[k] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
      m = static_cast<uint8_t>(m << 1);
    }
    q += 32;
  }
}

void deq_q4_k(const BlockQ4_K& b, float* y) {
  const float d = h2f(b.d), dmin = h2f(b.dmin);
  const uint8_t* q = b.qs;
  for (int is = 0; is < 8; is += 2) {
    uint8_t sc, m;
    q4k_scale_min(is, b.scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    q4k_scale_min(is + 1, b.scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
  }
}

void deq_q5_k(const BlockQ5_K& b, float* y) {
  const float d = h2f(b.d), dmin = h2f(b.dmin);
  const uint8_t* ql = b.qs;
  uint8_t u1 = 1, u2 = 2;
  for (int is = 0; is < 8; is += 2) {
    uint8_t sc, m;
    q4k_scale_min(is, b.scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    q4k_scale_min(is + 1, b.scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (b.qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (b.qh[l] & u2 ? 16 : 0)) - m2;
    ql += 32;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

void deq_q6_k(const BlockQ6_K& b, float* y) {
  const float d = h2f(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int n = 0; n < kQK_K; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

void deq_iq4_nl(const BlockIQ4_NL& b, float* y) {
  const float d = h2f(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIQ4NLValues[b.qs[j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kIQ4NLValues[b.qs[j] >> 4]);
  }
}

void deq_iq4_xs(const BlockIQ4_XS& b, float* y) {
  const float d = h2f(b.d);
  const uint8_t* qs = b.qs;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(kIQ4NLValues[qs[j] & 0xF]);
      y[j + 16] = dl * static_cast<float>(kIQ4NLValues[qs[j] >> 4]);
    }
    y += 32;
    qs += 16;
  }
}

template <class Block, void (*Fn)(const Block&, float*)>
void deq_blocks(const void* row, float* out, int64_t nb, int64_t per_block) {
  const auto* blocks = static_cast<const Block*>(row);
  for (int64_t b = 0; b < nb; ++b) Fn(blocks[b], out + b * per_block);
}

}  // namespace

}  // namespace quants

void dequantize(DType t, const void* row, float* out, int64_t cols) {
  using namespace quants;
  const int64_t bs = dtype_block_size(t);
  TS_CHECK_EQ(cols % bs, 0) << "dequantize: " << dtype_name(t) << " row of " << cols << " elements";
  const int64_t nb = cols / bs;
  const auto* p = static_cast<const uint8_t*>(row);
  switch (t) {
    case DType::kF32: std::memcpy(out, p, static_cast<size_t>(cols) * 4); return;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h;
        std::memcpy(&h, p + 2 * c, 2);
        out[c] = t == DType::kF16 ? fp16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    case DType::kQ4_0: deq_blocks<BlockQ4_0, deq_q4_0>(row, out, nb, bs); return;
    case DType::kQ4_1: deq_blocks<BlockQ4_1, deq_q4_1>(row, out, nb, bs); return;
    case DType::kQ5_0: deq_blocks<BlockQ5_0, deq_q5_0>(row, out, nb, bs); return;
    case DType::kQ5_1: deq_blocks<BlockQ5_1, deq_q5_1>(row, out, nb, bs); return;
    case DType::kQ8_0: deq_blocks<BlockQ8_0, deq_q8_0>(row, out, nb, bs); return;
    case DType::kQ2_K: deq_blocks<BlockQ2_K, deq_q2_k>(row, out, nb, bs); return;
    case DType::kQ3_K: deq_blocks<BlockQ3_K, deq_q3_k>(row, out, nb, bs); return;
    case DType::kQ4_K: deq_blocks<BlockQ4_K, deq_q4_k>(row, out, nb, bs); return;
    case DType::kQ5_K: deq_blocks<BlockQ5_K, deq_q5_k>(row, out, nb, bs); return;
    case DType::kQ6_K: deq_blocks<BlockQ6_K, deq_q6_k>(row, out, nb, bs); return;
    case DType::kIQ4_NL: deq_blocks<BlockIQ4_NL, deq_iq4_nl>(row, out, nb, bs); return;
    case DType::kIQ4_XS: deq_blocks<BlockIQ4_XS, deq_iq4_xs>(row, out, nb, bs); return;
  }
  TS_CHECK(false) << "dequantize: unknown dtype";
}

}  // namespace tessera
