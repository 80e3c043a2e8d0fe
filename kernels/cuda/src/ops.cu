// Element-wise and row-wise kernels; see ops.h.
#include "device_util.cuh"
#include "tessera/kernels/cuda/ops.h"

namespace tessera::kernels::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

template <class T>
__global__ void embedding_kernel(const T* table, int64_t dim, const int32_t* tokens, float* out) {
  const int64_t t = blockIdx.x;
  const T* row = table + static_cast<int64_t>(tokens[t]) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) out[t * dim + i] = to_f32(row[i]);
}

__device__ float block_sum(float v, float* red) {
  v = detail::warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += red[w];
  __syncthreads();
  return total;
}

template <class T>
__global__ void rmsnorm_kernel(float* x, const float* delta, const float* weight, T* out, int64_t dim, float eps) {
  __shared__ float red[kThreads / 32];
  const int64_t t = blockIdx.x;
  float* row = x + t * dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = row[i];
    if (delta != nullptr) {
      v += delta[t * dim + i];
      row[i] = v;
    }
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, red) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) out[t * dim + i] = from_f32<T>(row[i] * inv * weight[i]);
}

// Block t: bias, rotation of every Q and K head, then K and V into the token's slot.
template <class T>
__global__ void rope_kv_kernel(RopeWriteKvArgs a) {
  const int64_t t = blockIdx.x;
  const int hd = a.head_dim, half = hd / 2;
  const int q_dim = a.n_heads * hd, kv_dim = a.n_kv_heads * hd, width = q_dim + 2 * kv_dim;
  float* row = a.qkv + t * a.qkv_stride;
  if (a.bias != nullptr) {
    for (int i = threadIdx.x; i < width; i += blockDim.x) row[i] += a.bias[i];
    __syncthreads();
  }
  const double pos = a.positions[t];
  const int n_pairs = (a.n_heads + a.n_kv_heads) * half;
  for (int i = threadIdx.x; i < n_pairs; i += blockDim.x) {
    const int head = i / half, k = i % half;  // heads [0, n_heads) are Q, then the K heads
    const double ang = pos * pow(static_cast<double>(a.theta), -2.0 * k / hd);
    const float c = static_cast<float>(cos(ang)), s = static_cast<float>(sin(ang));
    float* v = row + static_cast<int64_t>(head) * hd;
    const int ia = a.interleaved ? 2 * k : k, ib = a.interleaved ? 2 * k + 1 : k + half;
    const float v0 = v[ia], v1 = v[ib];
    v[ia] = v0 * c - v1 * s;
    v[ib] = v0 * s + v1 * c;
  }
  __syncthreads();
  const int64_t slot = a.slots[t];
  const int64_t page = slot / a.page_size, off = slot % a.page_size;
  T* k_dst = static_cast<T*>(a.kv) + (page * 2 * a.page_size + off) * kv_dim;
  T* v_dst = k_dst + static_cast<int64_t>(a.page_size) * kv_dim;
  for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    k_dst[i] = from_f32<T>(row[q_dim + i]);
    v_dst[i] = from_f32<T>(row[q_dim + kv_dim + i]);
  }
}

template <class T>
__global__ void swiglu_kernel(const float* gate_up, int64_t n, int64_t hidden, T* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * hidden) return;
  const int64_t t = i / hidden, c = i % hidden;
  const float g = gate_up[t * 2 * hidden + c], u = gate_up[t * 2 * hidden + hidden + c];
  out[i] = from_f32<T>(g / (1.0f + expf(-g)) * u);
}

template <class S, class T>
__global__ void convert_kernel(const S* src, int64_t n, T* dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    if constexpr (sizeof(S) == 4) {
      dst[i] = from_f32<T>(src[i]);
    } else {
      dst[i] = from_f32<T>(to_f32(src[i]));
    }
  }
}

// Q8_0 block: {fp16 d; int8 q[32]} (34 bytes); element i of a block is q[i] * d.
template <class T>
__global__ void q8_0_kernel(const uint8_t* src, int64_t rows, int64_t cols, T* dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  const uint8_t* block = src + r * (cols / 32) * 34 + (c / 32) * 34;
  const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(block[0] | (block[1] << 8))));
  const auto q = static_cast<int8_t>(block[2 + c % 32]);
  dst[i] = from_f32<T>(static_cast<float>(q) * d);
}

template <class T>
__global__ void to_f32_kernel(const T* src, int64_t n, float* dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = to_f32(src[i]);
}

template <class T>
__global__ void gather_kernel(const T* src, int64_t cols, const int32_t* rows, T* dst) {
  const int64_t i = blockIdx.x;
  const T* row = src + static_cast<int64_t>(rows[i]) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[i * cols + c] = row[c];
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t embedding_gather(HalfType table_type, const void* table, int64_t dim, const int32_t* tokens, int64_t n,
                             float* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (dim <= 0 || n > 0x7fffffff) return cudaErrorInvalidValue;
  return detail::dispatch_half(table_type, [&](auto tag) {
    using T = decltype(tag);
    embedding_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(static_cast<const T*>(table), dim, tokens, out);
    return cudaGetLastError();
  });
}

cudaError_t rmsnorm_residual(float* x, const float* delta, const float* weight, HalfType out_type, void* out, int64_t n,
                             int64_t dim, float eps, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (dim <= 0 || n > 0x7fffffff) return cudaErrorInvalidValue;
  return detail::dispatch_half(out_type, [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(x, delta, weight, static_cast<T*>(out), dim, eps);
    return cudaGetLastError();
  });
}

cudaError_t rope_write_kv(const RopeWriteKvArgs& a, cudaStream_t stream) {
  if (a.n_tokens <= 0) return cudaSuccess;
  if (a.head_dim <= 0 || a.head_dim % 2 != 0 || a.n_heads <= 0 || a.n_kv_heads <= 0 || a.page_size <= 0) {
    return cudaErrorInvalidValue;
  }
  return detail::dispatch_half(a.kv_type, [&](auto tag) {
    using T = decltype(tag);
    rope_kv_kernel<T><<<static_cast<unsigned>(a.n_tokens), kThreads, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t swiglu(const float* gate_up, int64_t n, int64_t hidden, HalfType out_type, void* out, cudaStream_t stream) {
  if (n <= 0 || hidden <= 0) return n < 0 || hidden < 0 ? cudaErrorInvalidValue : cudaSuccess;
  return detail::dispatch_half(out_type, [&](auto tag) {
    using T = decltype(tag);
    swiglu_kernel<T><<<grid_for(n * hidden), kThreads, 0, stream>>>(gate_up, n, hidden, static_cast<T*>(out));
    return cudaGetLastError();
  });
}

cudaError_t convert_weights(DType src_type, const void* src, int64_t rows, int64_t cols, HalfType dst_type, void* dst,
                            cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaErrorInvalidValue;
  const int64_t n = rows * cols;
  return detail::dispatch_half(dst_type, [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(dst);
    switch (src_type) {
      case DType::kF32: convert_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const float*>(src), n, out); break;
      case DType::kF16: convert_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const __half*>(src), n, out); break;
      case DType::kBF16:
        convert_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(src), n, out);
        break;
      case DType::kQ8_0:
        if (cols % 32 != 0) return cudaErrorInvalidValue;
        q8_0_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const uint8_t*>(src), rows, cols, out);
        break;
      default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
  });
}

cudaError_t gather_rows(HalfType t, const void* src, int64_t cols, const int32_t* rows, int64_t n, void* dst,
                        cudaStream_t stream) {
  if (n <= 0) return n < 0 ? cudaErrorInvalidValue : cudaSuccess;
  if (cols <= 0 || n > 0x7fffffff) return cudaErrorInvalidValue;
  return detail::dispatch_half(t, [&](auto tag) {
    using T = decltype(tag);
    gather_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(static_cast<const T*>(src), cols, rows,
                                                                       static_cast<T*>(dst));
    return cudaGetLastError();
  });
}

cudaError_t half_to_f32(HalfType src_type, const void* src, int64_t n, float* dst, cudaStream_t stream) {
  if (n <= 0) return n < 0 ? cudaErrorInvalidValue : cudaSuccess;
  return detail::dispatch_half(src_type, [&](auto tag) {
    using T = decltype(tag);
    to_f32_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(src), n, dst);
    return cudaGetLastError();
  });
}

cudaError_t f32_to_half(const float* src, int64_t n, HalfType dst_type, void* dst, cudaStream_t stream) {
  if (n <= 0) return n < 0 ? cudaErrorInvalidValue : cudaSuccess;
  return detail::dispatch_half(dst_type, [&](auto tag) {
    using T = decltype(tag);
    convert_kernel<<<grid_for(n), kThreads, 0, stream>>>(src, n, static_cast<T*>(dst));
    return cudaGetLastError();
  });
}

}  // namespace tessera::kernels::cuda
