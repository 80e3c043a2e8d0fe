// On-device sampling, one block per row; see sampling.h.
#include <cfloat>

#include "device_util.cuh"
#include "tessera/kernels/cuda/sampling.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

// Order-preserving map of floats to unsigned ints (larger float -> larger key).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

struct Reducer {
  float* f;     // [kWarps]
  uint32_t* u;  // [kWarps]

  __device__ float sum(float v) {
    v = detail::warp_sum(v);
    if (threadIdx.x % 32 == 0) f[threadIdx.x / 32] = v;
    __syncthreads();
    float t = 0.0f;
    for (int w = 0; w < kWarps; ++w) t += f[w];
    __syncthreads();
    return t;
  }
  __device__ float max(float v) {
    v = detail::warp_max(v);
    if (threadIdx.x % 32 == 0) f[threadIdx.x / 32] = v;
    __syncthreads();
    float t = -INFINITY;
    for (int w = 0; w < kWarps; ++w) t = fmaxf(t, f[w]);
    __syncthreads();
    return t;
  }
  __device__ uint32_t count(uint32_t v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) u[threadIdx.x / 32] = v;
    __syncthreads();
    uint32_t t = 0;
    for (int w = 0; w < kWarps; ++w) t += u[w];
    __syncthreads();
    return t;
  }
  // (value, index) argmax, lowest index on ties.
  __device__ int argmax(float v, int idx) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
      if (ov > v || (ov == v && oi < idx)) {
        v = ov;
        idx = oi;
      }
    }
    if (threadIdx.x % 32 == 0) {
      f[threadIdx.x / 32] = v;
      u[threadIdx.x / 32] = static_cast<uint32_t>(idx);
    }
    __syncthreads();
    float bv = f[0];
    int bi = static_cast<int>(u[0]);
    for (int w = 1; w < kWarps; ++w) {
      if (f[w] > bv || (f[w] == bv && static_cast<int>(u[w]) < bi)) {
        bv = f[w];
        bi = static_cast<int>(u[w]);
      }
    }
    __syncthreads();
    return bi;
  }
};

__device__ int row_argmax(const float* row, int vocab, Reducer& red) {
  float best = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    if (row[i] > best || (row[i] == best && i < bi)) {
      best = row[i];
      bi = i;
    }
  }
  return red.argmax(best, bi);
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* logits, int64_t stride, int vocab, int32_t* out) {
  __shared__ float fs[kWarps];
  __shared__ uint32_t us[kWarps];
  Reducer red{fs, us};
  const int tok = row_argmax(logits + blockIdx.x * stride, vocab, red);
  if (threadIdx.x == 0) out[blockIdx.x] = tok;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleArgs a) {
  __shared__ float fs[kWarps];
  __shared__ uint32_t us[kWarps];
  __shared__ float chunk_mass[kThreads];
  Reducer red{fs, us};
  const int r = blockIdx.x, vocab = a.vocab;
  const float* row = a.logits + r * a.stride;
  const float temp = a.temperature[r];
  const int top_k = a.top_k[r];
  if (temp == 0.0f || top_k == 1) {
    const int tok = row_argmax(row, vocab, red);
    if (threadIdx.x == 0) a.out_tokens[r] = tok;
    return;
  }
  const float inv_t = 1.0f / temp;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, row[i] * inv_t);
  mx = red.max(mx);

  // Top-k: the largest key threshold t with count(order_key(z) >= t) >= k.
  uint32_t k_thr = 0;
  if (top_k > 0 && top_k < vocab) {
    uint64_t lo = 0, hi = 0xffffffffu;  // invariant: count(>= lo) >= k; 64-bit so hi - lo + 1 cannot wrap
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo + 1) / 2;
      uint32_t c = 0;
      for (int i = threadIdx.x; i < vocab; i += blockDim.x) c += order_key(row[i] * inv_t) >= mid ? 1u : 0u;
      if (red.count(c) >= static_cast<uint32_t>(top_k)) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    k_thr = static_cast<uint32_t>(lo);
  }
  // Survivor weights e = exp(z - max) (the max survives: e = 1); min-p keeps e >= min_p.
  const float min_p = a.min_p[r];
  auto weight = [&](int i) {
    const float z = row[i] * inv_t;
    if (order_key(z) < k_thr) return 0.0f;
    const float e = __expf(z - mx);
    return e >= min_p ? e : 0.0f;
  };
  float total = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) total += weight(i);
  total = red.sum(total);
  // Top-p: the largest weight threshold w with mass(weights >= w) >= top_p * total.
  const float top_p = a.top_p[r];
  float p_thr = 0.0f;
  if (top_p < 1.0f) {
    const float need = top_p * total;
    uint32_t lo = 0, hi = __float_as_uint(1.0f);  // positive floats order like their bits (no wrap below 2^31)
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo + 1) / 2;
      const float w = __uint_as_float(mid);
      float m = 0.0f;
      for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float e = weight(i);
        m += e >= w ? e : 0.0f;
      }
      if (red.sum(m) >= need) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    p_thr = __uint_as_float(lo);
  }
  auto final_weight = [&](int i) {
    const float e = weight(i);
    return e >= p_thr ? e : 0.0f;
  };
  // Draw: thread j owns the contiguous ids [j * per, (j + 1) * per).
  const int per = (vocab + kThreads - 1) / kThreads;
  const int b = threadIdx.x * per, e_end = min(vocab, b + per);
  float mine = 0.0f;
  for (int i = b; i < e_end; ++i) mine += final_weight(i);
  chunk_mass[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    float mass = 0.0f;
    for (int j = 0; j < kThreads; ++j) mass += chunk_mass[j];
    const float target = a.uniform[r] * mass;
    float acc = 0.0f;
    int chosen = -1, last_chunk = -1;
    for (int j = 0; j < kThreads && chosen < 0; ++j) {
      if (chunk_mass[j] == 0.0f) continue;
      last_chunk = j;
      if (acc + chunk_mass[j] <= target) {
        acc += chunk_mass[j];
        continue;
      }
      for (int i = j * per; i < min(vocab, (j + 1) * per); ++i) {
        const float w = final_weight(i);
        if (w <= 0.0f) continue;
        acc += w;
        if (acc > target) {
          chosen = i;
          break;
        }
      }
    }
    if (chosen < 0) {  // rounding left nothing above target: the last survivor
      for (int i = last_chunk * per; last_chunk >= 0 && i < min(vocab, (last_chunk + 1) * per); ++i) {
        if (final_weight(i) > 0.0f) chosen = i;
      }
    }
    a.out_tokens[r] = chosen;
  }
}

}  // namespace

cudaError_t sample_tokens(const SampleArgs& a, cudaStream_t stream) {
  if (a.n_rows <= 0) return cudaSuccess;
  if (a.vocab <= 0 || a.stride < a.vocab) return cudaErrorInvalidValue;
  sample_kernel<<<static_cast<unsigned>(a.n_rows), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t argmax_rows(const float* logits, int64_t stride, int32_t vocab, int32_t n_rows, int32_t* out_tokens,
                        cudaStream_t stream) {
  if (n_rows <= 0) return cudaSuccess;
  if (vocab <= 0 || stride < vocab) return cudaErrorInvalidValue;
  argmax_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(logits, stride, vocab, out_tokens);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
