// Group-wise int8 quantization of K/V regions on the device, bit-compatible with the kvstore's
// int8 codec (kvstore/include/tessera/kvstore/blob.h): groups are `group_size` consecutive
// elements of the flattened region (the last may be shorter); per group
//   zero = min, scale = (max - min) / 255, q = nearbyint((x - zero) * (1 / scale)) in [0, 255]
//   (scale == 0: every q is 0), and x' = zero + q * scale.
// The params array holds {f32 scale, f32 zero} per group, interleaved, exactly as the blob's
// (uncompressed) quantized payload does; codes hold one byte per element.
#pragma once

#include "tessera/common/dtype.h"
#include "tessera/kernels/cuda/types.h"

namespace tessera::kernels::cuda {

inline int64_t kv_quant_groups(int64_t n, int32_t group_size) { return (n + group_size - 1) / group_size; }

// x: [n] of x_type (kF32, kF16 or kBF16); params: [kv_quant_groups(n, group_size) * 2] f32;
// codes: [n] uint8. group_size in [2, 65536]. Values must be finite (not checked here).
cudaError_t quantize_int8_groups(DType x_type, const void* x, int64_t n, int32_t group_size, float* params,
                                 uint8_t* codes, cudaStream_t stream);

// out[i] = (zero + q * scale) * multiplier, in out_type (kF32, kF16 or kBF16; 16-bit rounds to
// nearest even). multiplier = 1 reproduces the codec; the worker passes alpha for V.
cudaError_t dequantize_int8_groups(const float* params, const uint8_t* codes, int64_t n, int32_t group_size,
                                   float multiplier, DType out_type, void* out, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
