// AVX-512 (F/BW/VL/DQ + VNNI) paths. Compiled with those flags only in this translation unit;
// called only when isa_supported(Isa::kAvx512).
//
// Float GEMM: register tiles of RM weight rows x RN tokens, each accumulator a dot product
// along cols in 16-lane vectors (horizontal sum at the end), masked loads for the column tail.
// Q8_0 GEMM: two 32-element blocks per zmm; activations arrive as uint8 (q + 128), so
// vpdpbusd(acc = -128 * sum(w), x_u8, w_s8) gives sum(x * w) exactly per 4-lane group;
// each block's int32 partial sums are scaled by d_w * d_x and accumulated in f32.
#include <immintrin.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <utility>

#include "isa_table.h"
#include "simd_math.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {
namespace {


struct LoadF32 {
  static __m512 load(const uint8_t* row, int64_t k) { return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k); }
  static __m512 load_mask(const uint8_t* row, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + k);
  }
};
struct LoadF16 {
  static __m512 load(const uint8_t* row, int64_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  }
  static __m512 load_mask(const uint8_t* row, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * k));
  }
};
struct LoadBF16 {
  static __m512 load(const uint8_t* row, int64_t k) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load_mask(const uint8_t* row, int64_t k, __mmask16 m) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

template <class L, int RM, int RN>
void tile_float(const GemmJob& g, int64_t r, int64_t t) {
  __m512 acc[RM][RN];
  const uint8_t* w[RM];
  const float* x[RN];
  for (int i = 0; i < RM; ++i) {
    w[i] = g.w + (r + i) * g.w_row_bytes;
    for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  for (int j = 0; j < RN; ++j) x[j] = g.x + (t + j) * g.x_stride;
  int64_t k = 0;
  for (; k + 16 <= g.cols; k += 16) {
    __m512 xv[RN];
    for (int j = 0; j < RN; ++j) xv[j] = _mm512_loadu_ps(x[j] + k);
    for (int i = 0; i < RM; ++i) {
      const __m512 wv = L::load(w[i], k);
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  if (k < g.cols) {
    const __mmask16 m = static_cast<__mmask16>((1u << (g.cols - k)) - 1u);
    __m512 xv[RN];
    for (int j = 0; j < RN; ++j) xv[j] = _mm512_maskz_loadu_ps(m, x[j] + k);
    for (int i = 0; i < RM; ++i) {
      const __m512 wv = L::load_mask(w[i], k, m);
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  for (int j = 0; j < RN; ++j) {
    float* y = g.y + (t + j) * g.y_stride + r;
    for (int i = 0; i < RM; ++i) y[i] = hsum(acc[i][j]);
  }
}

inline float half_to_float(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Two blocks' fp16 scales (at blk and blk + 34) as [d0 x 8, d1 x 8].
inline __m512 block_pair_scales(const uint8_t* blk) {
  uint16_t h0, h1;
  std::memcpy(&h0, blk, 2);
  std::memcpy(&h1, blk + 34, 2);
  return _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(static_cast<short>(h1)), _mm_set1_epi16(static_cast<short>(h0))));
}

template <int RM, int RN>
void tile_q8(const GemmQ8Job& g, int64_t r, int64_t t) {
  const int64_t nb = g.cols / 32;
  __m512 acc[RM][RN];
  const uint8_t* w[RM];
  const uint8_t* xq[RN];
  const float* xd[RN];  // 8 copies of each block's scale: a block pair is one zmm
  for (int i = 0; i < RM; ++i) {
    w[i] = g.w + (r + i) * g.w_row_bytes;
    for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  for (int j = 0; j < RN; ++j) {
    xq[j] = reinterpret_cast<const uint8_t*>(g.xq) + (t + j) * g.cols;
    xd[j] = g.xd + (t + j) * nb * 8;
  }
  const __m512i c128 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i zero = _mm512_setzero_si512();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    for (int i = 0; i < RM; ++i) {
      const uint8_t* blk = w[i] + b * 34;
      _mm_prefetch(reinterpret_cast<const char*>(blk + 2048), _MM_HINT_T0);  // a few rows ahead
      const __m512i wv = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 36)), 1);
      const __m512 dw = block_pair_scales(blk);
      const __m512i nsw = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, wv));
      for (int j = 0; j < RN; ++j) {
        const __m512i d = _mm512_dpbusd_epi32(nsw, _mm512_loadu_si512(xq[j] + b * 32), wv);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, _mm512_loadu_ps(xd[j] + b * 8)), acc[i][j]);
      }
    }
  }
  if (b < nb) {  // odd block count: one 256-bit block
    const __m256i c128h = _mm256_set1_epi8(static_cast<char>(0x80));
    const __m256i zeroh = _mm256_setzero_si256();
    for (int i = 0; i < RM; ++i) {
      const uint8_t* blk = w[i] + b * 34;
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      uint16_t h;
      std::memcpy(&h, blk, 2);
      const __m256 dw = _mm256_set1_ps(_cvtsh_ss(h));
      const __m256i nsw = _mm256_sub_epi32(zeroh, _mm256_dpbusd_epi32(zeroh, c128h, wv));
      for (int j = 0; j < RN; ++j) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[j] + b * 32));
        const __m256i d = _mm256_dpbusd_epi32(nsw, xv, wv);
        const __m256 sc = _mm256_mul_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(dw, _mm256_loadu_ps(xd[j] + b * 8)));
        acc[i][j] = _mm512_add_ps(acc[i][j], _mm512_zextps256_ps512(sc));
      }
    }
  }
  for (int j = 0; j < RN; ++j) {
    float* y = g.y + (t + j) * g.y_stride + r;
    for (int i = 0; i < RM; ++i) y[i] = hsum(acc[i][j]);
  }
}

// Activations to (q + 128) as uint8 and per-block scales repeated 8 times; rounds exactly as
// the scalar quantizer (multiply by 1/d, convert with round-to-nearest-even).
void quantize_q8(const float* x, int64_t cols, int8_t* q, float* d) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < cols / 32; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * 32), x1 = _mm512_loadu_ps(x + b * 32 + 16);
    const __m512 m = _mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1));
    const float amax = _mm512_reduce_max_ps(m);
    const float db = fp16_to_f32(f32_to_fp16(amax / 127.0f));  // ggml block_q8_0: fp16 scale
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;        // ggml quantize_row_q8_0
    const __m512 idv = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, idv));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, idv));
    const __m128i offset = _mm_set1_epi8(static_cast<char>(0x80));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32), _mm_xor_si128(_mm512_cvtepi32_epi8(q0), offset));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32 + 16), _mm_xor_si128(_mm512_cvtepi32_epi8(q1), offset));
    _mm256_storeu_ps(d + b * 8, _mm256_set1_ps(db));
  }
}

// Largest register tiles (weight rows x tokens); the tiling itself is shared.
constexpr int kFloatRM = 4, kFloatRN = 6;
constexpr int kQ8RM = 4, kQ8RN = 4;
#include "gemm_tiling.inc"

float dot(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return hsum(_mm512_add_ps(acc0, acc1));
}

void axpy(float a, const float* x, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

void scale(float a, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, y + i)));
  }
}

void f16_row(const uint8_t* src, float* dst, int32_t n) {
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i))));
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = _cvtsh_ss(h);
  }
}
float f16_one(uint16_t h) { return _cvtsh_ss(h); }

#include "attention_impl.inc"


// Addresses of the K slots of positions [p0, p0 + n) in the group's kv head (one division per
// call, not one per key: with a run-time page size it is a real divide).
inline void key_slots(const AttnGroup& g, int32_t p0, int32_t n, const uint8_t** out) {
  int32_t page = p0 / g.page_size, off = p0 % g.page_size;
  const uint8_t* base = g.kv + g.pages[page] * g.page_stride + g.kv_offset;
  for (int32_t j = 0; j < n; ++j) {
    out[j] = base + off * g.token_stride;
    if (++off == g.page_size && j + 1 < n) {
      off = 0;
      base = g.kv + g.pages[++page] * g.page_stride + g.kv_offset;
    }
  }
}

// Values [16 v, 16 v + 16) of a head row in page dtype D as 16 floats (kv_decode_row's values).
// int8: the row's group is 32 (head_dim 64 and 128), so a vector lies in one group.
template <KvDtype D>
inline __m512 load_row16(const uint8_t* row, int32_t v, int32_t n_groups) {
  if constexpr (D == KvDtype::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + 16 * v);
  } else if constexpr (D == KvDtype::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * v)));
  } else {
    uint16_t hs;
    std::memcpy(&hs, row + 2 * (v / 2), 2);
    const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * n_groups + 16 * v))));
    return _mm512_mul_ps(q, _mm512_set1_ps(_cvtsh_ss(hs)));
  }
}

// Lane j of the result = the sum of the 16 lanes of v[j] (a 16 x 16 transpose-and-add).
inline __m512 reduce16(const __m512 v[16]) {
  __m512 t[8], u[4];
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane L: element c = lane-L sum of v[4i + c]
    const __m512d a = _mm512_castps_pd(t[2 * i]), b = _mm512_castps_pd(t[2 * i + 1]);
    u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // Sum the four 128-bit lanes of u[i] into lane i.
  const __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

// attend_group (attention_impl.inc) with explicit AVX-512 for head_dim = 16 * NV: the block's
// 16 K rows are loaded once (no transpose) and each query row's 16 scores are 16 lane-wise dot
// products folded by reduce16, a row's output dims held in NV registers across a key block (NV is a
// template parameter so the accumulators stay in registers, not on the stack). The next key
// block's K and V rows are prefetched while the current one is processed: a decode query reads
// each K/V row once, from a pool far larger than the caches, one kv head (a few cache lines)
// per token slot, which the hardware prefetcher does not follow.
template <int NV, KvDtype D>
void attend_group_nv(const AttnGroup& g) {
  constexpr int32_t hd = 16 * NV;
  const int32_t nq = g.n_rows, ng = g.fmt.n_groups();
  const auto row_bytes = static_cast<int32_t>(g.fmt.row_bytes());
  float* acc = g.scratch + hd * kAttnKeys;  // [nq][hd] (the first hd * 16 floats are unused here)
  float* qs = acc + nq * hd;                // [nq][hd]
  float* m = qs + nq * hd;
  float* l = m + nq;
  float* vbuf = l + nq;  // f16/int8: the block's 16 V rows decoded once, read by every query row
  int32_t max_pos = 0;
  const __m512 sv = _mm512_set1_ps(g.scale);
  for (int32_t r = 0; r < nq; ++r) {
    max_pos = std::max(max_pos, g.pos[r]);
    m[r] = -INFINITY;
    l[r] = 0.0f;
    for (int32_t v = 0; v < NV; ++v) {
      _mm512_storeu_ps(acc + r * hd + 16 * v, _mm512_setzero_ps());
      _mm512_storeu_ps(qs + r * hd + 16 * v, _mm512_mul_ps(_mm512_loadu_ps(g.q_rows[r] + 16 * v), sv));
    }
  }
  const uint8_t* krow[kAttnKeys];
  const uint8_t* next[kAttnKeys];
  const uint8_t* vrow[kAttnKeys];
  key_slots(g, 0, std::min(kAttnKeys, max_pos + 1), next);
  for (int32_t k0 = 0; k0 <= max_pos; k0 += kAttnKeys) {
    const int32_t nk = std::min(kAttnKeys, max_pos + 1 - k0);
    std::copy(next, next + nk, krow);
    const int32_t next_nk = std::min(kAttnKeys, max_pos + 1 - (k0 + kAttnKeys));
    if (next_nk > 0) key_slots(g, k0 + kAttnKeys, next_nk, next);
    for (int32_t j = 0; j < next_nk; ++j) {  // prefetch the next block (K and V rows)
      const char* base = reinterpret_cast<const char*>(next[j]);
      const char* vbase = reinterpret_cast<const char*>(next[j] + g.v_offset);
      for (int32_t c = 0; c < row_bytes; c += 64) {
        _mm_prefetch(base + c, _MM_HINT_T0);
        _mm_prefetch(vbase + c, _MM_HINT_T0);
      }
    }
    __m512 kv[kAttnKeys][NV];  // the block's K rows, in registers or L1
    for (int32_t j = 0; j < kAttnKeys; ++j) {
      if (j < nk) {
        const uint8_t* base = krow[j];
        vrow[j] = base + g.v_offset;
        for (int32_t v = 0; v < NV; ++v) kv[j][v] = load_row16<D>(base, v, ng);
        if constexpr (D != KvDtype::kF32) {
          for (int32_t v = 0; v < NV; ++v) _mm512_storeu_ps(vbuf + j * hd + 16 * v, load_row16<D>(vrow[j], v, ng));
        }
      } else {
        for (int32_t v = 0; v < NV; ++v) kv[j][v] = _mm512_setzero_ps();
      }
    }
    for (int32_t r = 0; r < nq; ++r) {
      const int32_t pos = g.pos[r];
      if (k0 > pos) continue;
      const float* q = qs + r * hd;
      __m512 qv[NV];
      for (int32_t v = 0; v < NV; ++v) qv[v] = _mm512_loadu_ps(q + 16 * v);
      __m512 part[kAttnKeys];  // lane-wise partial dot products, one vector per key
      for (int32_t j = 0; j < kAttnKeys; ++j) {
        __m512 sj = _mm512_mul_ps(qv[0], kv[j][0]);
        for (int32_t v = 1; v < NV; ++v) sj = _mm512_fmadd_ps(qv[v], kv[j][v], sj);
        part[j] = sj;
      }
      const __m512 sc = reduce16(part);
      const int32_t valid = std::min(nk, pos - k0 + 1);
      const __mmask16 vm = valid >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << valid) - 1u);
      const float bmax = _mm512_mask_reduce_max_ps(vm, sc);
      const float new_m = std::max(m[r], bmax);
      float* a = acc + r * hd;
      __m512 av[NV];
      for (int32_t v = 0; v < NV; ++v) av[v] = _mm512_loadu_ps(a + 16 * v);
      if (new_m > m[r] && l[r] != 0.0f) {
        const float corr = std::exp(m[r] - new_m);
        l[r] *= corr;
        const __m512 cv = _mm512_set1_ps(corr);
        for (int32_t v = 0; v < NV; ++v) av[v] = _mm512_mul_ps(av[v], cv);
      }
      m[r] = new_m;
      const __m512 pv = _mm512_maskz_mov_ps(vm, exp512(_mm512_sub_ps(sc, _mm512_set1_ps(new_m))));
      l[r] += hsum(pv);
      alignas(64) float p[kAttnKeys];
      _mm512_store_ps(p, pv);
      for (int32_t j = 0; j < valid; ++j) {
        const __m512 pj = _mm512_set1_ps(p[j]);
        if constexpr (D == KvDtype::kF32) {
          for (int32_t v = 0; v < NV; ++v) av[v] = _mm512_fmadd_ps(pj, load_row16<D>(vrow[j], v, ng), av[v]);
        } else {
          for (int32_t v = 0; v < NV; ++v) av[v] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vbuf + j * hd + 16 * v), av[v]);
        }
      }
      for (int32_t v = 0; v < NV; ++v) _mm512_storeu_ps(a + 16 * v, av[v]);
    }
  }
  for (int32_t r = 0; r < nq; ++r) {
    const __m512 inv = _mm512_set1_ps(1.0f / l[r]);
    for (int32_t v = 0; v < NV; ++v) _mm512_storeu_ps(g.out_rows[r] + 16 * v, _mm512_mul_ps(_mm512_loadu_ps(acc + r * hd + 16 * v), inv));
  }
}

#include "attention_hd8.inc"

// head_dim 16, 32, 64 and 128 (the Llama family's), DeepSeek-V2's per-head keys (192) and the
// latent rows of multi-head latent attention (272, 576: K/V in L1 rather than registers) get the explicit AVX-512 path, head_dim 8
// its own (attention_hd8.inc), others the portable one.
void attend_group_avx512(const AttnGroup& g) {
  if (g.softcap > 0.0f || g.window > 0) {  // the explicit kernels have neither
    attend_group(g);
    return;
  }
  if (g.head_dim == 8) {  // int8: one group of 8
    switch (g.fmt.dtype) {
      case KvDtype::kF32: attend_group_hd8<KvDtype::kF32>(g); return;
      case KvDtype::kF16: attend_group_hd8<KvDtype::kF16>(g); return;
      case KvDtype::kInt8: attend_group_hd8<KvDtype::kInt8>(g); return;
    }
  }
  if (g.fmt.dtype == KvDtype::kInt8 && g.fmt.group != 32) {
    attend_group(g);
    return;
  }
  auto by_dtype = [&g]<int NV>() {
    switch (g.fmt.dtype) {
      case KvDtype::kF32: attend_group_nv<NV, KvDtype::kF32>(g); return;
      case KvDtype::kF16: attend_group_nv<NV, KvDtype::kF16>(g); return;
      case KvDtype::kInt8: attend_group_nv<NV, KvDtype::kInt8>(g); return;
    }
  };
  switch (g.head_dim) {
    case 16: by_dtype.template operator()<1>(); return;
    case 32: by_dtype.template operator()<2>(); return;
    case 64: by_dtype.template operator()<4>(); return;
    case 128: by_dtype.template operator()<8>(); return;
    case 192: by_dtype.template operator()<12>(); return;  // DeepSeek-V2 per-head keys (128 + 64): expanded MLA prefill
    case 272: by_dtype.template operator()<17>(); return;  // the MLA latent rows: 256 + 16 (test shapes)
    case 576: by_dtype.template operator()<36>(); return;  // 512 + 64 (DeepSeek-V2/V2-Lite/V3)
    default: attend_group(g); return;
  }
}

}  // namespace

const IsaKernels& avx512_kernels() {
  static const IsaKernels k{
      .gemm_f32 = gemm_float<LoadF32>,
      .gemm_f16 = gemm_float<LoadF16>,
      .gemm_bf16 = gemm_float<LoadBF16>,
      .gemm_q8_0 = gemm_q8_0,
      .quantize_q8 = quantize_q8,
      .q8_scale_repeat = 8,
      .attend_group = attend_group_avx512,
      .dot = dot,
      .axpy = axpy,
      .scale = scale,
  };
  return k;
}

}  // namespace tessera::kernels::cpu
