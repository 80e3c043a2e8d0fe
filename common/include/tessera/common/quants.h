// ggml weight formats: block layouts, dequantization and reference quantizers.
//
// The block structs are ggml's (ggml-common.h) byte for byte, so GGUF tensor data is read in
// place (sizes are checked by static_assert; all fp16 fields are raw IEEE binary16 bits).
// dequantize() decodes every DType; it is bit-identical to ggml's dequantize_row_*
// (tests/unit/kernels/quants_test.cpp checks values recorded from ggml).
// quantize_row() encodes with ggml's reference algorithms (quantize_row_*_ref, i.e. what
// llama-quantize writes without an importance matrix), bit-identical too, so files written
// by Tessera are the files llama.cpp would write.
// Pure functions; thread-safe; no allocation beyond the stack. Kept in common (not kernels) so
// that the model writer (`model synth`) can quantize without linking the compute kernels.
#pragma once

#include <cstdint>

#include "tessera/common/dtype.h"

namespace tessera {

inline constexpr int kQK_K = 256;  // super-block size of the K-quants and IQ4_XS

struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[16]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; };
struct BlockQ3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct BlockIQ4_NL { uint16_t d; uint8_t qs[16]; };
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };
// Activations for the K-quant integer dot products (ggml block_q8_K): x = qs * d.
struct BlockQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };  // bsums: sums of 16 qs

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210 && sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockQ8_K) == 292);

// The IQ4_NL / IQ4_XS value table (ggml kvalues_iq4nl).
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Scale and min (6 bits each) of sub-block j of a Q4_K / Q5_K super-block (ggml get_scale_min_k4).
inline void q4k_scale_min(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}
// The 16 six-bit scales of a Q3_K super-block, unpacked, minus 32 (ggml's kmask shuffle).
void q3k_unpack_scales(const uint8_t packed[12], int8_t out[16]);

// x[0, cols) = the row of `cols` elements of dtype t at row; cols % dtype_block_size(t) == 0.
void dequantize(DType t, const void* row, float* out, int64_t cols);
// Every DType has a quantizer (F32/F16/BF16: plain conversion).
// x[0, cols) -> dtype_row_bytes(t, cols) bytes at out; cols % dtype_block_size(t) == 0.
void quantize_row(DType t, const float* x, void* out, int64_t cols);
// ggml quantize_row_q8_K_ref: cols % 256 == 0; out gets cols / 256 blocks.
void quantize_row_q8_K(const float* x, BlockQ8_K* out, int64_t cols);

}  // namespace tessera
