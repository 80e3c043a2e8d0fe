// Element types of weights and K/V, shared by kernels (which know nothing of models) and the
// worker. Blocked (quantized) types are laid out along the contiguous dimension, in ggml's
// block layouts byte for byte (ggml-common.h), so GGUF tensor data is used in place.
// The numeric values are stable (they travel in messages and blobs): append only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kQ8_0 = 3,  // ggml Q8_0: blocks of 32, {fp16 scale d; int8 q[32]} = 34 bytes; x = q * d
  kQ4_0 = 4,  // ggml Q4_0: blocks of 32, {fp16 d; uint8 q[16]} = 18 bytes; x = (nibble - 8) * d
  kQ4_1 = 5,  // blocks of 32, {fp16 d, m; uint8 q[16]} = 20 bytes; x = nibble * d + m
  kQ5_0 = 6,  // blocks of 32, {fp16 d; uint8 qh[4]; uint8 q[16]} = 22 bytes; x = (q5 - 16) * d
  kQ5_1 = 7,  // blocks of 32, {fp16 d, m; uint8 qh[4]; uint8 q[16]} = 24 bytes; x = q5 * d + m
  // K-quants: super-blocks of 256 (QK_K) with quantized sub-block scales.
  kQ2_K = 8,   // {uint8 scales[16]; uint8 qs[64]; fp16 d, dmin} = 84 bytes
  kQ3_K = 9,   // {uint8 hmask[32]; uint8 qs[64]; uint8 scales[12]; fp16 d} = 110 bytes
  kQ4_K = 10,  // {fp16 d, dmin; uint8 scales[12]; uint8 qs[128]} = 144 bytes
  kQ5_K = 11,  // {fp16 d, dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128]} = 176 bytes
  kQ6_K = 12,  // {uint8 ql[128]; uint8 qh[64]; int8 scales[16]; fp16 d} = 210 bytes
  // Non-linear 4-bit: nibbles index a fixed 16-entry table (kvalues_iq4nl).
  kIQ4_NL = 13,  // blocks of 32, {fp16 d; uint8 qs[16]} = 18 bytes
  kIQ4_XS = 14,  // super-blocks of 256, {fp16 d; uint16 scales_h; uint8 scales_l[4]; uint8 qs[128]} = 136 bytes
};
inline constexpr int kDTypeCount = 15;

const char* dtype_name(DType t);          // "f32", "f16", "bf16", "q8_0", "q4_0", ..., "q4_k", "iq4_xs"
int64_t dtype_block_size(DType t);        // elements per block: 1, 32 or 256
size_t dtype_block_bytes(DType t);        // bytes per block
bool dtype_is_quantized(DType t);         // a blocked type (not F32/F16/BF16)
// Bytes of one row of `cols` elements; cols must be a multiple of dtype_block_size(t).
size_t dtype_row_bytes(DType t, int64_t cols);

}  // namespace tessera
