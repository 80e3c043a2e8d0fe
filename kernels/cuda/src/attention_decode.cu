// Split-K paged decode attention (flash-decoding) for GQA; see attention.h.
#include <algorithm>
#include <cmath>

#include "device_util.cuh"
#include "tessera/kernels/cuda/attention.h"

namespace tessera::kernels::cuda {
namespace {

using detail::to_f32;
using detail::warp_max;
using detail::warp_sum;

constexpr int kWarps = 4;
constexpr int kLaneDims = kMaxHeadDim / 32;  // head dims each lane owns: d = lane + 32 * i
constexpr int kKeysPerIter = 4;              // positions a warp loads before reducing

// Block (kvh, s, split): all `group` query heads of KV head kvh over this split's positions.
// Warps take interleaved runs of kKeysPerIter positions; they merge their (m, l, acc) at the end.
template <class T>
__global__ void __launch_bounds__(kWarps * 32) decode_kernel(DecodeAttentionArgs a, int group) {
  const int kvh = blockIdx.x, s = blockIdx.y, split = blockIdx.z;
  const int hd = a.kv.head_dim, n_kv = a.kv.n_kv_heads, ps = a.kv.page_size;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int len = a.positions[s] + 1;
  const int chunk = (len + a.n_splits - 1) / a.n_splits;
  const int begin = split * chunk, end = min(len, begin + chunk);

  __shared__ float q_s[kMaxGroup][kMaxHeadDim];
  __shared__ float m_s[kWarps][kMaxGroup], l_s[kWarps][kMaxGroup];
  __shared__ float acc_s[kWarps][kMaxGroup][kMaxHeadDim];
  for (int i = threadIdx.x; i < group * hd; i += blockDim.x) {
    const int g = i / hd, d = i % hd;
    q_s[g][d] = a.q[s * a.q_stride + static_cast<int64_t>(kvh * group + g) * hd + d] * a.scale;
  }
  __syncthreads();

  float m[kMaxGroup], l[kMaxGroup], acc[kMaxGroup][kLaneDims];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < kLaneDims; ++i) acc[g][i] = 0.0f;
  }
  const T* kv = static_cast<const T*>(a.kv.kv);
  const int64_t tok_stride = static_cast<int64_t>(n_kv) * hd;
  const int64_t page_stride = 2 * static_cast<int64_t>(ps) * tok_stride, v_off = static_cast<int64_t>(ps) * tok_stride;
  const int32_t* pages = a.kv.page_ids + a.kv.page_indptr[s];
  // Each warp takes kKeysPerIter consecutive positions per iteration and issues all their
  // loads before the first reduction, so several K/V rows are in flight per warp.
  for (int p0 = begin + warp * kKeysPerIter; p0 < end; p0 += kWarps * kKeysPerIter) {
    float kf[kKeysPerIter][kLaneDims], vf[kKeysPerIter][kLaneDims];
#pragma unroll
    for (int u = 0; u < kKeysPerIter; ++u) {
      const int p = min(p0 + u, end - 1);  // past the end: reload the last row, skipped below
      const T* kr = kv + pages[p / ps] * page_stride + static_cast<int64_t>(p % ps) * tok_stride + static_cast<int64_t>(kvh) * hd;
      const T* vr = kr + v_off;
#pragma unroll
      for (int i = 0; i < kLaneDims; ++i) {
        const int d = lane + 32 * i;
        kf[u][i] = d < hd ? to_f32(kr[d]) : 0.0f;
        vf[u][i] = d < hd ? to_f32(vr[d]) : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kKeysPerIter; ++u) {
      if (p0 + u >= end) break;  // warp-uniform
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g >= group) break;
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < kLaneDims; ++i) {
          const int d = lane + 32 * i;
          if (d < hd) part += q_s[g][d] * kf[u][i];
        }
        const float score = warp_sum(part);
        const float mn = fmaxf(m[g], score);
        const float corr = __expf(m[g] - mn);  // 0 on the first key (m = -inf)
        const float e = __expf(score - mn);
        l[g] = l[g] * corr + e;
#pragma unroll
        for (int i = 0; i < kLaneDims; ++i) acc[g][i] = acc[g][i] * corr + e * vf[u][i];
        m[g] = mn;
      }
    }
  }
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g >= group) break;
    if (lane == 0) {
      m_s[warp][g] = m[g];
      l_s[warp][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < kLaneDims; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) acc_s[warp][g][d] = acc[g][i];
    }
  }
  __syncthreads();

  const int n_heads = a.n_heads;
  for (int i = threadIdx.x; i < group * hd; i += blockDim.x) {
    const int g = i / hd, d = i % hd;
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_s[w][g]);
    float lsum = 0.0f, o = 0.0f;
    if (mx != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        if (m_s[w][g] == -INFINITY) continue;
        const float wgt = __expf(m_s[w][g] - mx);
        lsum += l_s[w][g] * wgt;
        o += acc_s[w][g][d] * wgt;
      }
    }
    const int h = kvh * group + g;
    if (a.n_splits == 1) {
      T* out = static_cast<T*>(a.out) + s * a.out_stride + static_cast<int64_t>(h) * hd;
      out[d] = detail::from_f32<T>(o / lsum);
    } else {
      // workspace [n_seqs][n_heads][n_splits][hd + 2]: unnormalized acc, then max, then sum.
      float* ws = a.workspace + ((static_cast<int64_t>(s) * n_heads + h) * a.n_splits + split) * (hd + 2);
      ws[d] = o;
      if (d == 0) {
        ws[hd] = mx;
        ws[hd + 1] = lsum;
      }
    }
  }
}

// Block (h, s): merges the n_splits partials of one query head.
template <class T>
__global__ void merge_kernel(DecodeAttentionArgs a) {
  const int h = blockIdx.x, s = blockIdx.y, hd = a.kv.head_dim;
  const float* ws = a.workspace + (static_cast<int64_t>(s) * a.n_heads + h) * a.n_splits * (hd + 2);
  float mx = -INFINITY;
  for (int k = 0; k < a.n_splits; ++k) mx = fmaxf(mx, ws[k * (hd + 2) + hd]);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float lsum = 0.0f, o = 0.0f;
    for (int k = 0; k < a.n_splits; ++k) {
      const float* part = ws + k * (hd + 2);
      if (part[hd] == -INFINITY) continue;
      const float wgt = __expf(part[hd] - mx);
      lsum += part[hd + 1] * wgt;
      o += part[d] * wgt;
    }
    T* out = static_cast<T*>(a.out) + s * a.out_stride + static_cast<int64_t>(h) * hd;
    out[d] = detail::from_f32<T>(o / lsum);
  }
}

}  // namespace

size_t decode_workspace_floats(int32_t n_seqs, int32_t n_heads, int32_t head_dim, int32_t n_splits) {
  return static_cast<size_t>(n_seqs) * static_cast<size_t>(n_heads) * static_cast<size_t>(n_splits) *
         static_cast<size_t>(head_dim + 2);
}

int32_t choose_decode_splits(int32_t n_seqs, int32_t n_kv_heads, int32_t max_seq_len, int32_t num_sms) {
  const int64_t blocks = std::max<int64_t>(1, static_cast<int64_t>(n_seqs) * n_kv_heads);
  const int64_t want = std::max<int64_t>(1, (2 * static_cast<int64_t>(num_sms) + blocks - 1) / blocks);
  const int64_t by_len = std::max<int64_t>(1, max_seq_len / 64);
  return static_cast<int32_t>(std::min<int64_t>({want, by_len, 64}));
}

cudaError_t decode_attention(const DecodeAttentionArgs& a, cudaStream_t stream) {
  const PagedKvView& kv = a.kv;
  if (a.n_seqs <= 0) return cudaSuccess;
  if (kv.n_kv_heads <= 0 || a.n_heads % kv.n_kv_heads != 0 || kv.head_dim <= 0 || kv.head_dim % 2 != 0 ||
      kv.head_dim > kMaxHeadDim || kv.page_size <= 0 || a.n_splits < 1 || a.n_splits > 65535 ||
      (a.n_splits > 1 && a.workspace == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const int group = a.n_heads / kv.n_kv_heads;
  if (group > kMaxGroup) return cudaErrorInvalidValue;
  return detail::dispatch_half(kv.kv_type, [&](auto tag) {
    using T = decltype(tag);
    decode_kernel<T><<<dim3(kv.n_kv_heads, a.n_seqs, a.n_splits), kWarps * 32, 0, stream>>>(a, group);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess || a.n_splits == 1) return err;
    merge_kernel<T><<<dim3(a.n_heads, a.n_seqs), 128, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace tessera::kernels::cuda
