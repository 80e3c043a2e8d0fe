// Reference quantizers, bit-identical to ggml's quantize_row_*_ref (and, for IQ4_NL / IQ4_XS,
// to quantize_iq4_* without an importance matrix, which is what llama-quantize writes).
// Every float operation keeps ggml's order; this file is compiled without FMA.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "quants_impl.h"
#include "tessera/common/check.h"
#include "tessera/common/half.h"
#include "tessera/common/quants.h"

namespace tessera {
namespace {

using quants::nearest_int;
inline uint16_t f2h(float f) { return f32_to_fp16(f); }

// ---- 32-element formats ----------------------------------------------------------------

void quantize_q4_0(const float* x, BlockQ4_0* y) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) { amax = std::fabs(x[j]); max = x[j]; }
  }
  const float d = max / -8;
  const float id = d != 0.f ? 1.0f / d : 0.0f;
  y->d = f2h(d);
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
    const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
    y->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

template <class Block, int kMaxQ>
void quantize_min_block(const float* x, Block* y, uint32_t* qh_out) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    min = x[j] < min ? x[j] : min;
    max = x[j] > max ? x[j] : max;
  }
  const float d = (max - min) / kMaxQ;
  const float id = d != 0.f ? 1.0f / d : 0.0f;
  y->d = f2h(d);
  y->m = f2h(min);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    int q0, q1;
    if constexpr (kMaxQ == 15) {
      q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      q1 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
    } else {
      q0 = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
      q1 = static_cast<uint8_t>((x[j + 16] - min) * id + 0.5f);
    }
    y->qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
    qh |= ((static_cast<uint32_t>(q0) & 0x10u) >> 4) << j;
    qh |= ((static_cast<uint32_t>(q1) & 0x10u) >> 4) << (j + 16);
  }
  if (qh_out != nullptr) *qh_out = qh;
}

void quantize_q4_1(const float* x, BlockQ4_1* y) { quantize_min_block<BlockQ4_1, 15>(x, y, nullptr); }

void quantize_q5_1(const float* x, BlockQ5_1* y) {
  uint32_t qh;
  quantize_min_block<BlockQ5_1, 31>(x, y, &qh);
  std::memcpy(y->qh, &qh, 4);
}

void quantize_q5_0(const float* x, BlockQ5_0* y) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) { amax = std::fabs(x[j]); max = x[j]; }
  }
  const float d = max / -16;
  const float id = d != 0.f ? 1.0f / d : 0.0f;
  y->d = f2h(d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
    const int q1 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 16.5f)));
    y->qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
    qh |= ((static_cast<uint32_t>(q0) & 0x10u) >> 4) << j;
    qh |= ((static_cast<uint32_t>(q1) & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(y->qh, &qh, 4);
}

void quantize_q8_0(const float* x, BlockQ8_0* y) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0.f ? 1.0f / d : 0.0f;
  y->d = f2h(d);
  for (int j = 0; j < 32; ++j) y->qs[j] = static_cast<int8_t>(std::round(x[j] * id));
}

}  // namespace

namespace {

template <class Block, void (*Fn)(const float*, Block*)>
void quantize_blocks(const float* x, void* out, int64_t cols, int64_t per_block) {
  auto* y = static_cast<Block*>(out);
  for (int64_t b = 0; b < cols / per_block; ++b) Fn(x + b * per_block, y + b);
}

}  // namespace

void quantize_row(DType t, const float* x, void* out, int64_t cols) {
  const int64_t bs = dtype_block_size(t);
  TS_CHECK_EQ(cols % bs, 0) << "quantize_row: " << dtype_name(t) << " row of " << cols << " elements";
  auto* p = static_cast<uint8_t*>(out);
  switch (t) {
    case DType::kF32: std::memcpy(p, x, static_cast<size_t>(cols) * 4); return;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t h = t == DType::kF16 ? f32_to_fp16(x[c]) : f32_to_bf16(x[c]);
        std::memcpy(p + 2 * c, &h, 2);
      }
      return;
    case DType::kQ4_0: quantize_blocks<BlockQ4_0, quantize_q4_0>(x, out, cols, bs); return;
    case DType::kQ4_1: quantize_blocks<BlockQ4_1, quantize_q4_1>(x, out, cols, bs); return;
    case DType::kQ5_0: quantize_blocks<BlockQ5_0, quantize_q5_0>(x, out, cols, bs); return;
    case DType::kQ5_1: quantize_blocks<BlockQ5_1, quantize_q5_1>(x, out, cols, bs); return;
    case DType::kQ8_0: quantize_blocks<BlockQ8_0, quantize_q8_0>(x, out, cols, bs); return;
    case DType::kQ2_K: quantize_blocks<BlockQ2_K, quants::quantize_q2_k>(x, out, cols, bs); return;
    case DType::kQ3_K: quantize_blocks<BlockQ3_K, quants::quantize_q3_k>(x, out, cols, bs); return;
    case DType::kQ4_K: quantize_blocks<BlockQ4_K, quants::quantize_q4_k>(x, out, cols, bs); return;
    case DType::kQ5_K: quantize_blocks<BlockQ5_K, quants::quantize_q5_k>(x, out, cols, bs); return;
    case DType::kQ6_K: quantize_blocks<BlockQ6_K, quants::quantize_q6_k>(x, out, cols, bs); return;
    case DType::kIQ4_NL: quantize_blocks<BlockIQ4_NL, quants::quantize_iq4_nl>(x, out, cols, bs); return;
    case DType::kIQ4_XS: quantize_blocks<BlockIQ4_XS, quants::quantize_iq4_xs>(x, out, cols, bs); return;
  }
  TS_CHECK(false) << "quantize_row: unknown dtype";
}

}  // namespace tessera
