// Register-tiled AVX2 GEMM for the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS
// (quant_gemm.h, QuantGemmJob::tiles; the AVX2 counterpart of avx512/kquant_tiles_avx512.cpp).
// Compiled with -mavx2 -mfma -mf16c and -ffp-contract=off (kernels/CMakeLists.txt: the float
// part below must not be fused into FMAs); run only when isa_supported(Isa::kAvx2).
//
// A tile is RM weight rows x RN activation rows with RM * RN = 8 (8 x 1 for decode, 4 x 2,
// 2 x 4 for prefill and batched decode): each super-block of a weight row is unpacked once per
// tile, 32 values per ymm, and multiplied with every activation row of the tile by maddubs
// (u8 weight x s8 activation -> int16 pairs, no saturation: 63 * 127 * 2 < 32767; IQ4_XS's
// signed table values through |w| and sign(x, w)), then madd against the sub-block scales as
// int16 (-> int32, exact). At the end of a super-block the 8 (row, token) pairs' integer sums
// (and the min / offset sums against the activations' bsums) are reduced together, one pair
// per lane, and the float part runs for the 8 pairs in one vector with the operations, in the
// order, of the scalar finish_* (quant_dot.cpp: (d * dx) * S added, (dmin * dx) * M
// subtracted, no fma): bit-identical to the scalar oracle and to the row-at-a-time paths,
// which take the rows and tokens a full tile does not cover.
// Thread-safety: called concurrently for disjoint (rows, tokens) tiles; no shared state.
#include <immintrin.h>

#include <cstring>

#include "quant_gemm.h"
#include "tessera/common/quants.h"

namespace tessera::kernels::cpu {
namespace {

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// One super-block's scales as int16 per 16 values (per-32 formats repeat each), and the
// int16 factors of the 16 activation bsums for the min / offset term (zero: none).
struct Scales {
  alignas(32) int16_t sc[16];
  alignas(32) int16_t mt[16];
};

// The 32 nibbles of 16 bytes as bytes: low nibbles then high nibbles.
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4));
}

// Bits 2k, 2k + 1 of 32 bytes (chunk 4h + k of the Q2_K / Q3_K layout).
inline __m256i crumbs(const uint8_t* qs32, int k) {
  return _mm256_and_si256(_mm256_srl_epi16(load32(qs32), _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(0x03));
}

struct Q4K {
  using Block = BlockQ4_K;
  static constexpr bool kMin = true, kSigned = false;
  static constexpr int kOffsetShift = 0;
  static void scales(const Block& q, Scales* s) {
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      q4k_scale_min(j, q.scales, &sc, &m);
      s->sc[2 * j] = s->sc[2 * j + 1] = sc;
      s->mt[2 * j] = s->mt[2 * j + 1] = m;
    }
  }
  static __m256i unpack(const Block& q, int c) {
    return _mm256_and_si256(_mm256_srl_epi16(load32(q.qs + 32 * (c / 2)), _mm_cvtsi32_si128(4 * (c % 2))),
                            _mm256_set1_epi8(0x0F));
  }
  static uint16_t d(const Block& q) { return q.d; }
  static uint16_t dmin(const Block& q) { return q.dmin; }
};

struct Q5K : Q4K {
  using Block = BlockQ5_K;
  static void scales(const Block& q, Scales* s) {
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      q4k_scale_min(j, q.scales, &sc, &m);
      s->sc[2 * j] = s->sc[2 * j + 1] = sc;
      s->mt[2 * j] = s->mt[2 * j + 1] = m;
    }
  }
  static __m256i unpack(const Block& q, int c) {
    const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(load32(q.qs + 32 * (c / 2)), _mm_cvtsi32_si128(4 * (c % 2))),
                                        _mm256_set1_epi8(0x0F));
    const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(load32(q.qh), _mm_cvtsi32_si128(c)), _mm256_set1_epi8(1));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
  }
  static uint16_t d(const Block& q) { return q.d; }
  static uint16_t dmin(const Block& q) { return q.dmin; }
};

struct Q6K {
  using Block = BlockQ6_K;
  static constexpr bool kMin = false, kSigned = false;
  static constexpr int kOffsetShift = 5;  // total = S - 32 * (scales . bsums)
  static void scales(const Block& q, Scales* s) {
    for (int g = 0; g < 16; ++g) s->sc[g] = s->mt[g] = q.scales[g];
  }
  // Chunk c = 4h + k: the low (k < 2) or high nibbles of ql[64h + 32(k % 2) ..), bits 2k, 2k + 1
  // of qh[32h ..) on top.
  static __m256i unpack(const Block& q, int c) {
    const int h = c / 4, k = c % 4;
    const __m256i ql = load32(q.ql + 64 * h + 32 * (k % 2));
    const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(k < 2 ? 0 : 4)), _mm256_set1_epi8(0x0F));
    const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(load32(q.qh + 32 * h), _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(0x03));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  }
  static uint16_t d(const Block& q) { return q.d; }
  static uint16_t dmin(const Block&) { return 0; }
};

struct Q2K {
  using Block = BlockQ2_K;
  static constexpr bool kMin = true, kSigned = false;
  static constexpr int kOffsetShift = 0;
  static void scales(const Block& q, Scales* s) {
    for (int g = 0; g < 16; ++g) {
      s->sc[g] = q.scales[g] & 0xF;
      s->mt[g] = q.scales[g] >> 4;
    }
  }
  static __m256i unpack(const Block& q, int c) { return crumbs(q.qs + 32 * (c / 4), c % 4); }
  static uint16_t d(const Block& q) { return q.d; }
  static uint16_t dmin(const Block& q) { return q.dmin; }
};

struct Q3K {
  using Block = BlockQ3_K;
  static constexpr bool kMin = false, kSigned = false;
  static constexpr int kOffsetShift = 2;  // the values were summed as v + 4
  static void scales(const Block& q, Scales* s) {
    int8_t sc[16];
    q3k_unpack_scales(q.scales, sc);
    for (int g = 0; g < 16; ++g) s->sc[g] = s->mt[g] = sc[g];
  }
  static __m256i unpack(const Block& q, int c) {
    const int h = c / 4, k = c % 4;
    const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(load32(q.hmask), _mm_cvtsi32_si128(4 * h + k)), _mm256_set1_epi8(1));
    return _mm256_or_si256(crumbs(q.qs + 32 * h, k), _mm256_slli_epi16(hb, 2));
  }
  static uint16_t d(const Block& q) { return q.d; }
  static uint16_t dmin(const Block&) { return 0; }
};

struct IQ4XS {
  using Block = BlockIQ4_XS;
  static constexpr bool kMin = false, kSigned = true;
  static constexpr int kOffsetShift = 0;  // no offset term
  static void scales(const Block& q, Scales* s) {
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((q.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((q.scales_h >> (2 * ib)) & 3) << 4);
      s->sc[2 * ib] = s->sc[2 * ib + 1] = static_cast<int16_t>(ls - 32);
      s->mt[2 * ib] = s->mt[2 * ib + 1] = 0;
    }
  }
  static __m256i unpack(const Block& q, int c) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
    return _mm256_shuffle_epi8(table, nibbles(q.qs + 16 * c));
  }
  static uint16_t d(const Block& q) { return q.d; }
  static uint16_t dmin(const Block&) { return 0; }
};

// p[k]'s 8 int32 partials -> lane k = their sum.
inline __m256i reduce8(const __m256i p[8]) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

template <class F, int RM, int RN>
void tile(const QuantGemmJob& g, int64_t r, int64_t t) {
  static_assert(RM * RN == 8);
  using Block = typename F::Block;
  const int64_t nb = g.cols / kQK_K;
  const Block* w[RM];
  const BlockQ8_K* x[RN];
  for (int i = 0; i < RM; ++i) w[i] = reinterpret_cast<const Block*>(g.w + (r + i) * g.w_row_bytes);
  for (int j = 0; j < RN; ++j) x[j] = g.xk + (t + j) * nb;
  const __m256i lo_pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                           2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i comb_s[8], comb_m[8];
    alignas(16) uint16_t d16[8], m16[8];
    alignas(32) float dx[8];
    for (int i = 0; i < RM; ++i) {
      const Block& q = w[i][b];
      const char* ahead = reinterpret_cast<const char*>(&q) + RM * g.w_row_bytes;  // the next tile's rows
      for (size_t l = 0; l < sizeof(Block); l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
      Scales sc;
      F::scales(q, &sc);
      const __m256i sc_all = _mm256_load_si256(reinterpret_cast<const __m256i*>(sc.sc));
      __m256i s[RN];
      for (int j = 0; j < RN; ++j) s[j] = _mm256_setzero_si256();
      for (int c = 0; c < 8; ++c) {
        // int16 scale of values 32c .. 32c + 15 in the low 128 bits, 32c + 16 .. in the high.
        const __m256i scv = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(sc_all, _mm256_set1_epi32(c)), lo_pick);
        const __m256i wv = F::unpack(q, c);
        if constexpr (F::kSigned) {
          const __m256i wa = _mm256_sign_epi8(wv, wv);
          for (int j = 0; j < RN; ++j) {
            const __m256i xv = _mm256_sign_epi8(load32(x[j][b].qs + 32 * c), wv);
            s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(_mm256_maddubs_epi16(wa, xv), scv));
          }
        } else {
          for (int j = 0; j < RN; ++j) {
            s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(_mm256_maddubs_epi16(wv, load32(x[j][b].qs + 32 * c)), scv));
          }
        }
      }
      const __m256i mt = _mm256_load_si256(reinterpret_cast<const __m256i*>(sc.mt));
      for (int j = 0; j < RN; ++j) {
        comb_s[i * RN + j] = s[j];
        comb_m[i * RN + j] = _mm256_madd_epi16(mt, load32(x[j][b].bsums));
        d16[i * RN + j] = F::d(q);
        m16[i * RN + j] = F::dmin(q);
        dx[i * RN + j] = x[j][b].d;
      }
    }
    const __m256i sv = reduce8(comb_s);
    const __m256i mv = reduce8(comb_m);
    const __m256 dxv = _mm256_load_ps(dx);
    const __m256 dv = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d16)));
    if constexpr (F::kMin) {
      const __m256 mw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(m16)));
      acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dv, dxv), _mm256_cvtepi32_ps(sv)));
      acc = _mm256_sub_ps(acc, _mm256_mul_ps(_mm256_mul_ps(mw, dxv), _mm256_cvtepi32_ps(mv)));
    } else {
      __m256i total = sv;
      if constexpr (F::kOffsetShift > 0) total = _mm256_sub_epi32(sv, _mm256_slli_epi32(mv, F::kOffsetShift));
      acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dv, dxv), _mm256_cvtepi32_ps(total)));
    }
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, acc);
  for (int i = 0; i < RM; ++i) {
    for (int j = 0; j < RN; ++j) g.y[(t + j) * g.y_stride + r + i] = out[i * RN + j];
  }
}

// Tokens in steps of 4 (2 x 4 tiles), then 2 (4 x 2), then 1 (8 x 1); in each step the rows a
// full tile does not cover go row by row (quant_gemm_rowwise: the same results).
template <class F>
void gemm_tiles(const QuantGemmJob& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  int64_t t = t0;
  auto step = [&]<int RM, int RN>() {
    int64_t r = r0;
    for (; r + RM <= r1; r += RM) tile<F, RM, RN>(g, r, t);
    if (r < r1) quant_gemm_rowwise(g, r, r1, t, t + RN);
    t += RN;
  };
  while (t1 - t >= 4) step.template operator()<2, 4>();
  if (t1 - t >= 2) step.template operator()<4, 2>();
  if (t1 - t >= 1) step.template operator()<8, 1>();
}

}  // namespace

QuantTileFn kquant_tiles_avx2(DType t) {
  switch (t) {
    case DType::kQ4_K: return gemm_tiles<Q4K>;
    case DType::kQ5_K: return gemm_tiles<Q5K>;
    case DType::kQ6_K: return gemm_tiles<Q6K>;
    case DType::kQ2_K: return gemm_tiles<Q2K>;
    case DType::kQ3_K: return gemm_tiles<Q3K>;
    case DType::kIQ4_XS: return gemm_tiles<IQ4XS>;
    default: return nullptr;
  }
}

}  // namespace tessera::kernels::cpu
