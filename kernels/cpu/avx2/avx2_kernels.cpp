// AVX2 + FMA + F16C paths (the baseline x86-64 SIMD level). Compiled with those flags only in
// this translation unit; called only when isa_supported(Isa::kAvx2).
//
// Float GEMM: register tiles of RM rows x RN tokens, 8-lane dot products along cols, scalar
// column tail. Q8_0 GEMM: per 32-element block, maddubs(|w|, sign(x, w)) -> madd -> int32,
// scaled by d_w * d_x in f32 (activations are signed int8 here).
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <utility>

#include "isa_table.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {
namespace {

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

struct LoadF32 {
  static __m256 load(const uint8_t* row, int64_t k) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k); }
  static float scalar(const uint8_t* row, int64_t k) {
    float v;
    std::memcpy(&v, row + 4 * k, 4);
    return v;
  }
};
struct LoadF16 {
  static __m256 load(const uint8_t* row, int64_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  }
  static float scalar(const uint8_t* row, int64_t k) {
    uint16_t h;
    std::memcpy(&h, row + 2 * k, 2);
    return _cvtsh_ss(h);
  }
};
struct LoadBF16 {
  static __m256 load(const uint8_t* row, int64_t k) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float scalar(const uint8_t* row, int64_t k) {
    uint16_t h;
    std::memcpy(&h, row + 2 * k, 2);
    return bf16_to_f32(h);
  }
};

template <class L, int RM, int RN>
void tile_float(const GemmJob& g, int64_t r, int64_t t) {
  __m256 acc[RM][RN];
  const uint8_t* w[RM];
  const float* x[RN];
  for (int i = 0; i < RM; ++i) {
    w[i] = g.w + (r + i) * g.w_row_bytes;
    for (int j = 0; j < RN; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  for (int j = 0; j < RN; ++j) x[j] = g.x + (t + j) * g.x_stride;
  int64_t k = 0;
  for (; k + 8 <= g.cols; k += 8) {
    __m256 xv[RN];
    for (int j = 0; j < RN; ++j) xv[j] = _mm256_loadu_ps(x[j] + k);
    for (int i = 0; i < RM; ++i) {
      const __m256 wv = L::load(w[i], k);
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  for (int j = 0; j < RN; ++j) {
    float* y = g.y + (t + j) * g.y_stride + r;
    for (int i = 0; i < RM; ++i) {
      float s = hsum(acc[i][j]);
      for (int64_t kk = k; kk < g.cols; ++kk) s += L::scalar(w[i], kk) * x[j][kk];
      y[i] = s;
    }
  }
}

inline float half_to_float(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

template <int RM, int RN>
void tile_q8(const GemmQ8Job& g, int64_t r, int64_t t) {
  const int64_t nb = g.cols / 32;
  __m256 acc[RM][RN];
  const uint8_t* w[RM];
  const int8_t* xq[RN];
  const float* xd[RN];
  for (int i = 0; i < RM; ++i) {
    w[i] = g.w + (r + i) * g.w_row_bytes;
    for (int j = 0; j < RN; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  for (int j = 0; j < RN; ++j) {
    xq[j] = g.xq + (t + j) * g.cols;
    xd[j] = g.xd + (t + j) * nb * 8;
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i xv[RN];
    for (int j = 0; j < RN; ++j) xv[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[j] + b * 32));
    for (int i = 0; i < RM; ++i) {
      const uint8_t* blk = w[i] + b * 34;
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      const __m256i aw = _mm256_sign_epi8(wv, wv);
      const __m256 dw = _mm256_set1_ps(half_to_float(blk));
      for (int j = 0; j < RN; ++j) {
        const __m256i sx = _mm256_sign_epi8(xv[j], wv);
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dw, _mm256_loadu_ps(xd[j] + b * 8)), acc[i][j]);
      }
    }
  }
  for (int j = 0; j < RN; ++j) {
    float* y = g.y + (t + j) * g.y_stride + r;
    for (int i = 0; i < RM; ++i) y[i] = hsum(acc[i][j]);
  }
}

// Largest register tiles (weight rows x tokens); the tiling itself is shared.
constexpr int kFloatRM = 2, kFloatRN = 4;
constexpr int kQ8RM = 2, kQ8RN = 3;
#include "gemm_tiling.inc"

// Activations to signed int8 and per-block scales repeated 8 times; rounds exactly as the
// scalar quantizer (multiply by 1/d, convert with round-to-nearest-even).
void quantize_q8(const float* x, int64_t cols, int8_t* q, float* d) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < cols / 32; ++b) {
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + b * 32 + 8 * k);
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float amax = _mm_cvtss_f32(m4);
    const float db = fp16_to_f32(f32_to_fp16(amax / 127.0f));  // ggml block_q8_0: fp16 scale
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;        // ggml quantize_row_q8_0
    const __m256 idv = _mm256_set1_ps(id);
    __m256i i32[4];
    for (int k = 0; k < 4; ++k) i32[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], idv));
    // Pack 32 x int32 -> 32 x int8 (values are within [-127, 127]), restoring element order.
    const __m256i p16a = _mm256_packs_epi32(i32[0], i32[1]);
    const __m256i p16b = _mm256_packs_epi32(i32[2], i32[3]);
    const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * 32), _mm256_permutevar8x32_epi32(p8, order));
    _mm256_storeu_ps(d + b * 8, _mm256_set1_ps(db));
  }
}

float dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

void scale(float a, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

void f16_row(const uint8_t* src, float* dst, int32_t n) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = _cvtsh_ss(h);
  }
}
float f16_one(uint16_t h) { return _cvtsh_ss(h); }

#include "attention_impl.inc"

}  // namespace

const IsaKernels& avx2_kernels() {
  static const IsaKernels k{
      .gemm_f32 = gemm_float<LoadF32>,
      .gemm_f16 = gemm_float<LoadF16>,
      .gemm_bf16 = gemm_float<LoadBF16>,
      .gemm_q8_0 = gemm_q8_0,
      .quantize_q8 = quantize_q8,
      .q8_scale_repeat = 8,
      .attend_group = attend_group,
      .dot = dot,
      .axpy = axpy,
      .scale = scale,
  };
  return k;
}

}  // namespace tessera::kernels::cpu
