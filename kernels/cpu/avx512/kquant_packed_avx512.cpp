// AVX-512 VNNI matmul over packed Q4_K and Q6_K weights (kquant_packed.h). Every row of a
// 16-row group is a lane. Q4_K: per super-block and 64-value chunk c, the 8 stored vectors
// masked with 0x0F are the rows' unsigned weight dwords of sub-block 2c, masked with 0xF0 those
// of sub-block 2c + 1 times 16; vpdpbusd with each token's activation dwords broadcast from
// memory sums each sub-block's exact integer dot for 16 rows at once (|16 x dot| <= 16 * 32 *
// 15 * 127 < 2^20; S over the 8 sub-blocks < 2^28, in int32).
// The 16 rows' 6-bit scales and mins are unpacked from their packed bytes as ggml does, on 16
// rows' dwords at once; S = sum_j sc_j * dot_j (vpmulld; the odd sub-blocks' sum, all multiples
// of 16, shifted back exactly), M = sum_j m_j * (bsums of sub-block j) (vpdpwssd on int16
// pairs). The float part is finish_q4_k's (quant_dot.cpp) for 16 rows in one vector, in its
// order and without contraction ((d * dx) * S added, (dmin * dx) * M subtracted, explicit
// rounding intrinsics): every result is bit-identical to the scalar oracle. No unpacking
// shuffles of the weights, no horizontal sums, no gathers; one sequential read, prefetched.
// Q6_K likewise: the 6-bit values are a nibble or'ed with two qh bits (3-4 vector ops per 16
// rows x 4 values), one vpdpbusd accumulator per 16-value scale group, started at -32 x the
// group's activation sum (the -32 of every value), times its int8 scale (vpmulld), then
// finish_q6_k's (d * dx) * (S - 32 * offset).
#include <immintrin.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kquant_packed.h"
#include "quant_gemm.h"
#include "tessera/common/check.h"
#include "tessera/kernels/packed_weights.h"

namespace tessera::kernels::cpu {
namespace {

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// Bytes ahead of the super-block being read that the kernel prefetches into L1, each of its
// lines once per super-block, a line or two before each of its 32 weight loads (Q4_K 36 lines,
// Q5_K 44) or 3-4 before each of its 16 scale groups (Q6_K, 53 lines). A 75 MB Q4_K matrix x 1
// token (2048 columns, 1 thread, AMD Zen 5 at load 11-13, GB per CPU-s, medians of 9 passes,
// the read roofline 42), then 9 lines before each 64-value chunk: no prefetch 21.4; into L2 2 /
// 4 / 6 / 8 / 12 KiB ahead 27.4 / 33.4 / 34.8 / 35.3 / 32.7; into L1 2 / 3 / 4 / 6 / 8 / 10 /
// 12 / 16 KiB ahead 35.9 / 35 / 35-37 / 40-41 / 42-44 / 40-43 / 38-41 / 38-40. Bursts cost:
// Llama-1B-shaped matrices, each once per pass (1014 MB of Q6_K; Zen 5, load 3-6), Q6_K with
// 27 lines at once before each half super-block 28-30, with 4 before each scale group (11
// lines twice) 31-33, each line once 37-38 (6 / 8 / 10 / 12 KiB ahead 36 / 37-38 / 37 / 36);
// Q4_K (695 MB) 9 lines per chunk 33.4-34.2, 1-2 per load 34.6-35.8. Cache-resident (256
// rows, 200 passes) the kernels run at 85-100 GB per CPU-s: the stream, not the arithmetic,
// bounds them.
constexpr int64_t kPrefetch = 8192;

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Byte `i` of every dword, zero-extended to the dword.
template <int i>
inline __m512i byte_of(__m512i v) {
  if constexpr (i == 0) return _mm512_and_si512(v, _mm512_set1_epi32(0xFF));
  if constexpr (i == 3) return _mm512_srli_epi32(v, 24);
  return _mm512_and_si512(_mm512_srli_epi32(v, 8 * i), _mm512_set1_epi32(0xFF));
}

// One token's activations for a group: its Q8_K blocks and, per super-block, kAux int16 pairs
// of its block sums (the format's aux()).
struct TokX {
  const BlockQ8_K* x;
  const int32_t* bs;  // [nb][kAux]
};

inline int32_t pair16(int a, int b) {
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(a)) | static_cast<uint32_t>(static_cast<uint16_t>(b)) << 16);
}

// The float part of finish_q4_k / finish_q6_k for 16 rows: acc + (d * dx) * S [- (dmin * dx) * M].
inline __m512 finish_add(__m512 acc, __m512 d, __m512 dx, __m512i s) {
  const __m512 plus = _mm512_mul_round_ps(_mm512_mul_round_ps(d, dx, kRound), _mm512_cvt_roundepi32_ps(s, kRound), kRound);
  return _mm512_add_round_ps(acc, plus, kRound);
}
inline __m512 finish_sub(__m512 acc, __m512 d, __m512 dx, __m512i s) {
  const __m512 minus = _mm512_mul_round_ps(_mm512_mul_round_ps(d, dx, kRound), _mm512_cvt_roundepi32_ps(s, kRound), kRound);
  return _mm512_sub_round_ps(acc, minus, kRound);
}

// Share i of kShares of a super-block's kTotal lines, kPrefetch bytes ahead: lines
// [kTotal * i / kShares, kTotal * (i + 1) / kShares), every line exactly once per super-block.
template <int kTotal, int kShares>
inline void prefetch_share(const uint8_t* pb, int i) {
  const char* pf = reinterpret_cast<const char*>(pb) + kPrefetch;
  for (int l = kTotal * i / kShares; l < kTotal * (i + 1) / kShares; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
}

// Q4_K, or with kFifth Q5_K (the qh fifth bits or'ed in at 0x10; its high nibbles shifted down
// rather than masked in place, so no factor 16).
template <bool kFifth>
struct Q45KPacked {
  static constexpr DType kType = kFifth ? DType::kQ5_K : DType::kQ4_K;
  static constexpr int64_t kBlockBytes = kFifth ? kPackedQ5KBlockBytes : kPackedQ4KBlockBytes;
  static constexpr int kScales = kFifth ? kPackedQ5KScalesOffset : kPackedQ4KScalesOffset;
  static constexpr int kD = kFifth ? kPackedQ5KDOffset : kPackedQ4KDOffset;
  // The sub-block sums bs_j as int16 pairs (bs_0, bs_2), (bs_1, bs_3), (bs_4, bs_6), (bs_5, bs_7).
  static constexpr int kAux = 4;
  static void aux(const BlockQ8_K& x, int32_t* o) {
    auto sub = [&](int j) { return x.bsums[2 * j] + x.bsums[2 * j + 1]; };
    o[0] = pair16(sub(0), sub(2));
    o[1] = pair16(sub(1), sub(3));
    o[2] = pair16(sub(4), sub(6));
    o[3] = pair16(sub(5), sub(7));
  }

  // Tokens x[0 .. RN) x the 16 rows of group grp (nb super-blocks), results to y[j][0 .. 16)
  // where live.
  template <int RN>
  static void group(const uint8_t* grp, int64_t nb, const TokX* x, float* const* y, __mmask16 live, bool prefetch) {
    __m512 acc[RN];
    for (int j = 0; j < RN; ++j) acc[j] = _mm512_setzero_ps();
    const __m512i lo4 = _mm512_set1_epi8(0x0F), hi4 = _mm512_set1_epi8(static_cast<char>(0xF0));
    const __m512i k1 = _mm512_set1_epi32(0x3f3f3f3f), k2 = _mm512_set1_epi32(0x0f0f0f0f), k3 = _mm512_set1_epi32(0x03030303);
    const __m512i low_bytes = _mm512_set1_epi32(0x00FF00FF);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = grp + b * kBlockBytes;
      // q4k_scale_min on 16 rows: bytes j of sc03 / mn03 = sc_j / m_j (j < 4), of sc47 / mn47
      // = sc_{4 + j} / m_{4 + j}.
      const __m512i u0 = _mm512_load_si512(pb + kScales);
      const __m512i u1 = _mm512_load_si512(pb + kScales + 64);
      const __m512i u2 = _mm512_load_si512(pb + kScales + 128);
      const __m512i sc03 = _mm512_and_si512(u0, k1), mn03 = _mm512_and_si512(u1, k1);
      const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(u2, k2), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), k3), 4));
      const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), k2),
                                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), k3), 4));
      const __m512i sc[8] = {byte_of<0>(sc03), byte_of<1>(sc03), byte_of<2>(sc03), byte_of<3>(sc03),
                             byte_of<0>(sc47), byte_of<1>(sc47), byte_of<2>(sc47), byte_of<3>(sc47)};
      __m512i s_lo[RN], s_hi[RN];  // sum over the even sub-blocks of sc * dot; over the odd, of sc * 16 dot (Q5_K: dot)
      for (int j = 0; j < RN; ++j) s_lo[j] = s_hi[j] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        __m512i lo[RN], hi[RN];
        for (int j = 0; j < RN; ++j) lo[j] = hi[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          if (prefetch) prefetch_share<kBlockBytes / 64, 32>(pb, 8 * c + k);  // 1-2 of its 36 (Q5_K 44) lines
          const __m512i w = _mm512_load_si512(pb + (8 * c + k) * 64);
          __m512i wl, wh;
          if constexpr (kFifth) {  // bits 2c (low nibbles) and 2c + 1 (high) of qh vector k, to 0x10
            const __m512i qh = _mm512_load_si512(pb + kPackedQ5KQhOffset + 64 * k);
            const __m512i bl = c == 0 ? _mm512_slli_epi32(qh, 4) : c == 1 ? _mm512_slli_epi32(qh, 2) : c == 2 ? qh : _mm512_srli_epi32(qh, 2);
            const __m512i bh = c == 0 ? _mm512_slli_epi32(qh, 3) : c == 1 ? _mm512_slli_epi32(qh, 1) : c == 2 ? _mm512_srli_epi32(qh, 1) : _mm512_srli_epi32(qh, 3);
            const __m512i bit = _mm512_set1_epi8(0x10);
            wl = _mm512_ternarylogic_epi32(_mm512_and_si512(w, lo4), bl, bit, 0xF8);  // a | (b & c)
            wh = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(w, 4), lo4), bh, bit, 0xF8);
          } else {
            wl = _mm512_and_si512(w, lo4);
            wh = _mm512_and_si512(w, hi4);
          }
          for (int j = 0; j < RN; ++j) {
            const int8_t* xq = x[j].x[b].qs + 64 * c + 4 * k;
            lo[j] = _mm512_dpbusd_epi32(lo[j], wl, _mm512_set1_epi32(load_i32(xq)));
            hi[j] = _mm512_dpbusd_epi32(hi[j], wh, _mm512_set1_epi32(load_i32(xq + 32)));
          }
        }
        for (int j = 0; j < RN; ++j) {
          s_lo[j] = _mm512_add_epi32(s_lo[j], _mm512_mullo_epi32(lo[j], sc[2 * c]));
          s_hi[j] = _mm512_add_epi32(s_hi[j], _mm512_mullo_epi32(hi[j], sc[2 * c + 1]));
        }
      }
      // The mins as int16 pairs (m_0, m_2), (m_1, m_3), (m_4, m_6), (m_5, m_7) against the
      // token's sub-block sums in the same pairs.
      const __m512i mp[4] = {_mm512_and_si512(mn03, low_bytes), _mm512_and_si512(_mm512_srli_epi32(mn03, 8), low_bytes),
                             _mm512_and_si512(mn47, low_bytes), _mm512_and_si512(_mm512_srli_epi32(mn47, 8), low_bytes)};
      const __m512i dd = _mm512_load_si512(pb + kD);
      const __m512 dv = _mm512_cvtph_ps(_mm512_castsi512_si256(dd));
      const __m512 mv = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dd, 1));
      for (int j = 0; j < RN; ++j) {
        const int32_t* bs = x[j].bs + kAux * b;
        __m512i m = _mm512_setzero_si512();
        for (int i = 0; i < 4; ++i) m = _mm512_dpwssd_epi32(m, mp[i], _mm512_set1_epi32(bs[i]));
        const __m512i s = _mm512_add_epi32(s_lo[j], kFifth ? s_hi[j] : _mm512_srai_epi32(s_hi[j], 4));
        const __m512 dx = _mm512_set1_ps(x[j].x[b].d);
        acc[j] = finish_sub(finish_add(acc[j], dv, dx, s), mv, dx, m);
      }
    }
    for (int j = 0; j < RN; ++j) _mm512_mask_storeu_ps(y[j], live, acc[j]);
  }
};

struct Q6KPacked {
  static constexpr DType kType = DType::kQ6_K;
  static constexpr int64_t kBlockBytes = kPackedQ6KBlockBytes;
  // -32 x the 16 bsums: each scale group's accumulator starts there, so the -32 of every
  // 6-bit value is in the sum the group's scale multiplies (sum_g sc_g (dot_g - 32 bs_g) is
  // finish_q6_k's S - 32 offset exactly; |dot_g - 32 bs_g| <= 16 * 32 * 127, the sum < 2^28).
  static constexpr int kAux = 16;
  static void aux(const BlockQ8_K& x, int32_t* o) {
    for (int g = 0; g < 16; ++g) o[g] = -32 * x.bsums[g];
  }

  // Values 128h + 32k + 4q .. + 3 of the 16 rows (0..63, unsigned bytes).
  template <int k>
  static __m512i values(const uint8_t* pb, int h, int q) {
    const __m512i n = _mm512_load_si512(pb + (16 * h + 8 * (k % 2) + q) * 64);
    const __m512i qh = _mm512_load_si512(pb + kPackedQ6KQhOffset + (8 * h + q) * 64);
    const __m512i low = _mm512_and_si512(k < 2 ? n : _mm512_srli_epi32(n, 4), _mm512_set1_epi8(0x0F));
    const __m512i high = k == 0 ? _mm512_slli_epi32(qh, 4) : k == 1 ? _mm512_slli_epi32(qh, 2) : k == 2 ? qh : _mm512_srli_epi32(qh, 2);
    return _mm512_ternarylogic_epi32(low, high, _mm512_set1_epi8(0x30), 0xF8);  // low | (high & 0x30)
  }

  template <int RN, int k>
  static void sets(const uint8_t* pb, int64_t b, int h, const TokX* x, const __m512i* sc, __m512i* s, bool prefetch) {
#pragma GCC unroll 2
    for (int qq = 0; qq < 2; ++qq) {  // scale group 8h + 2k + qq: values 128h + 32k + 16qq .. + 15
      if (prefetch) prefetch_share<kBlockBytes / 64, 16>(pb, 8 * h + 2 * k + qq);  // 3-4 of its 53 lines
      __m512i a[RN];
      for (int j = 0; j < RN; ++j) a[j] = _mm512_set1_epi32(x[j].bs[kAux * b + 8 * h + 2 * k + qq]);
#pragma GCC unroll 4
      for (int q = 4 * qq; q < 4 * qq + 4; ++q) {
        const __m512i v = values<k>(pb, h, q);
        for (int j = 0; j < RN; ++j) {
          a[j] = _mm512_dpbusd_epi32(a[j], v, _mm512_set1_epi32(load_i32(x[j].x[b].qs + 128 * h + 32 * k + 4 * q)));
        }
      }
      for (int j = 0; j < RN; ++j) s[j] = _mm512_add_epi32(s[j], _mm512_mullo_epi32(a[j], sc[8 * h + 2 * k + qq]));
    }
  }

  template <int RN>
  static void group(const uint8_t* grp, int64_t nb, const TokX* x, float* const* y, __mmask16 live, bool prefetch) {
    __m512 acc[RN];
    for (int j = 0; j < RN; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb = grp + b * kBlockBytes;
      __m512i sc[16];  // sc[g]: int32 scale of group g
      for (int i = 0; i < 4; ++i) {
        const __m512i v = _mm512_load_si512(pb + kPackedQ6KScalesOffset + 64 * i);
        sc[4 * i] = _mm512_srai_epi32(_mm512_slli_epi32(v, 24), 24);
        sc[4 * i + 1] = _mm512_srai_epi32(_mm512_slli_epi32(v, 16), 24);
        sc[4 * i + 2] = _mm512_srai_epi32(_mm512_slli_epi32(v, 8), 24);
        sc[4 * i + 3] = _mm512_srai_epi32(v, 24);
      }
      __m512i s[RN];
      for (int j = 0; j < RN; ++j) s[j] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        sets<RN, 0>(pb, b, h, x, sc, s, prefetch);
        sets<RN, 1>(pb, b, h, x, sc, s, prefetch);
        sets<RN, 2>(pb, b, h, x, sc, s, prefetch);
        sets<RN, 3>(pb, b, h, x, sc, s, prefetch);
      }
      const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pb + kPackedQ6KDOffset)));
      for (int j = 0; j < RN; ++j) acc[j] = finish_add(acc[j], dv, _mm512_set1_ps(x[j].x[b].d), s[j]);
    }
    for (int j = 0; j < RN; ++j) _mm512_mask_storeu_ps(y[j], live, acc[j]);
  }
};

template <class F>
void gemm_packed(const QuantGemmJob& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  TS_CHECK(g.packed != nullptr && g.w_type == F::kType && g.packed->dtype() == F::kType && r0 % 16 == 0);
  const PackedWeights& p = *g.packed;
  const int64_t nb = g.cols / kQK_K, n = t1 - t0;
  thread_local std::vector<int32_t> bs;
  bs.resize(static_cast<size_t>(n * nb * F::kAux));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b < nb; ++b) F::aux(g.xk[(t0 + j) * nb + b], bs.data() + (j * nb + b) * F::kAux);
  }
  auto tok = [&](int64_t j) { return TokX{g.xk + (t0 + j) * nb, bs.data() + j * nb * F::kAux}; };
  TokX x[4];
  float* y[4];
  for (int64_t r = r0; r < r1; r += 16) {
    const uint8_t* grp = p.group(r / 16);
    const int64_t live_rows = std::min<int64_t>(16, std::min(r1, p.rows()) - r);
    const __mmask16 live = live_rows >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << live_rows) - 1u);
    for (int64_t t = 0; t < n;) {  // 4 tokens at a time share each weight vector
      const int64_t m = std::min<int64_t>(4, n - t);
      for (int j = 0; j < m; ++j) {
        x[j] = tok(t + j);
        y[j] = g.y + (t0 + t + j) * g.y_stride + r;
      }
      const bool pf = t == 0;
      switch (m) {
        case 4: F::template group<4>(grp, nb, x, y, live, pf); break;
        case 3: F::template group<3>(grp, nb, x, y, live, pf); break;
        case 2: F::template group<2>(grp, nb, x, y, live, pf); break;
        default: F::template group<1>(grp, nb, x, y, live, pf); break;
      }
      t += m;
    }
  }
}

}  // namespace

void gemm_q4_k_packed_avx512(const QuantGemmJob& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  gemm_packed<Q45KPacked<false>>(g, r0, r1, t0, t1);
}

void gemm_q5_k_packed_avx512(const QuantGemmJob& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  gemm_packed<Q45KPacked<true>>(g, r0, r1, t0, t1);
}

void gemm_q6_k_packed_avx512(const QuantGemmJob& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  gemm_packed<Q6KPacked>(g, r0, r1, t0, t1);
}

}  // namespace tessera::kernels::cpu
