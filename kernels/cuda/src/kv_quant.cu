// Group-wise int8 K/V quantization matching the kvstore codec; see kv_quant.h.
#include "device_util.cuh"
#include "tessera/kernels/cuda/kv_quant.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <class S>
__device__ __forceinline__ float load(const S* x, int64_t i) {
  if constexpr (sizeof(S) == 4) {
    return x[i];
  } else {
    return detail::to_f32(x[i]);
  }
}

// Block g: one group. The arithmetic is written with explicit round-to-nearest intrinsics so
// nvcc cannot contract it into FMAs: results are bit-identical to the kvstore's C++ codec.
template <class S>
__global__ void quantize_kernel(const S* x, int64_t n, int32_t group, float* params, uint8_t* codes) {
  __shared__ float lo_s[kThreads / 32], hi_s[kThreads / 32];
  const int64_t g = blockIdx.x, begin = g * group, end = min(n, begin + group);
  float lo = INFINITY, hi = -INFINITY;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float v = load(x, i);
    lo = fminf(lo, v);
    hi = fmaxf(hi, v);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  if (threadIdx.x % 32 == 0) {
    lo_s[threadIdx.x / 32] = lo;
    hi_s[threadIdx.x / 32] = hi;
  }
  __syncthreads();
  lo = lo_s[0];
  hi = hi_s[0];
  for (int w = 1; w < kThreads / 32; ++w) {
    lo = fminf(lo, lo_s[w]);
    hi = fmaxf(hi, hi_s[w]);
  }
  const float scale = __fdiv_rn(__fsub_rn(hi, lo), 255.0f);
  const float inv = scale > 0.0f ? __fdiv_rn(1.0f, scale) : 0.0f;
  if (threadIdx.x == 0) {
    params[2 * g] = scale;
    params[2 * g + 1] = lo;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float q = fminf(fmaxf(rintf(__fmul_rn(__fsub_rn(load(x, i), lo), inv)), 0.0f), 255.0f);
    codes[i] = static_cast<uint8_t>(q);
  }
}

template <class D>
__global__ void dequantize_kernel(const float* params, const uint8_t* codes, int64_t n, int32_t group, float mult, D* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t g = i / group;
  float v = __fadd_rn(params[2 * g + 1], __fmul_rn(static_cast<float>(codes[i]), params[2 * g]));
  if (mult != 1.0f) v = __fmul_rn(v, mult);
  if constexpr (sizeof(D) == 4) {
    out[i] = v;
  } else {
    out[i] = detail::from_f32<D>(v);
  }
}

}  // namespace

cudaError_t quantize_int8_groups(DType x_type, const void* x, int64_t n, int32_t group_size, float* params,
                                 uint8_t* codes, cudaStream_t stream) {
  if (n <= 0) return n < 0 ? cudaErrorInvalidValue : cudaSuccess;
  if (group_size < 2 || group_size > 65536) return cudaErrorInvalidValue;
  const int64_t groups = kv_quant_groups(n, group_size);
  if (groups > 0x7fffffff) return cudaErrorInvalidValue;
  const auto grid = static_cast<unsigned>(groups);
  switch (x_type) {
    case DType::kF32: quantize_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x), n, group_size, params, codes); break;
    case DType::kF16: quantize_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __half*>(x), n, group_size, params, codes); break;
    case DType::kBF16:
      quantize_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), n, group_size, params, codes);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t dequantize_int8_groups(const float* params, const uint8_t* codes, int64_t n, int32_t group_size,
                                   float multiplier, DType out_type, void* out, cudaStream_t stream) {
  if (n <= 0) return n < 0 ? cudaErrorInvalidValue : cudaSuccess;
  if (group_size < 2 || group_size > 65536) return cudaErrorInvalidValue;
  const auto grid = static_cast<unsigned>(detail::ceil_div(n, kThreads));
  switch (out_type) {
    case DType::kF32:
      dequantize_kernel<<<grid, kThreads, 0, stream>>>(params, codes, n, group_size, multiplier, static_cast<float*>(out));
      break;
    case DType::kF16:
      dequantize_kernel<<<grid, kThreads, 0, stream>>>(params, codes, n, group_size, multiplier, static_cast<__half*>(out));
      break;
    case DType::kBF16:
      dequantize_kernel<<<grid, kThreads, 0, stream>>>(params, codes, n, group_size, multiplier,
                                                       static_cast<__nv_bfloat16*>(out));
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
