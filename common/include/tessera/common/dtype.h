// Element types of weights and K/V, shared by kernels (which know nothing of models) and the
// worker. Blocked (quantized) types are laid out along the contiguous dimension.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kQ8_0 = 3,  // ggml Q8_0: blocks of 32, {fp16 scale d; int8 q[32]} = 34 bytes; x = q * d
  kQ4_0 = 4,  // ggml Q4_0: blocks of 32, {fp16 scale d; uint8 q[16]} = 18 bytes; x = (nibble - 8) * d
};

const char* dtype_name(DType t);          // "f32", "f16", "bf16", "q8_0", "q4_0"
int64_t dtype_block_size(DType t);        // elements per block: 1 or 32
size_t dtype_block_bytes(DType t);        // bytes per block
// Bytes of one row of `cols` elements; cols must be a multiple of dtype_block_size(t).
size_t dtype_row_bytes(DType t, int64_t cols);

}  // namespace tessera
