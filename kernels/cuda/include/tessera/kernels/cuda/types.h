// Shared vocabulary of the CUDA kernels (kernels/cuda): the 16-bit storage types and limits.
//
// Every CUDA kernel in tessera::kernels::cuda is framework-free (STYLE.md habit 6): raw device
// pointers, explicit strides and a cudaStream_t; each pointer's shape is written next to it.
// Launchers only enqueue work and return the cudaError_t of the launch (cudaErrorInvalidValue
// for arguments outside the documented limits); they never synchronize and never abort. The
// worker converts the error to a Result once, at its boundary (FlashInfer's convention).
//
// These headers compile with a plain C++ compiler: they need only <cuda_runtime_api.h>.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::kernels::cuda {

// The 16-bit type of device weights, K/V pages and GEMM activations.
enum class HalfType : uint8_t {
  kF16 = 0,   // IEEE binary16 (__half)
  kBF16 = 1,  // bfloat16 (__nv_bfloat16)
};

inline const char* half_type_name(HalfType t) { return t == HalfType::kF16 ? "f16" : "bf16"; }

// Largest head_dim the attention kernels accept (any even value up to this works).
inline constexpr int32_t kMaxHeadDim = 128;
// Largest GQA group (query heads per KV head) the decode kernel keeps in registers.
inline constexpr int32_t kMaxGroup = 8;

}  // namespace tessera::kernels::cuda
