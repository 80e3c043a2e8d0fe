// Register-tiled AVX-512 VNNI GEMM for the K-quant formats Q4_K, Q5_K, Q6_K, Q2_K, Q3_K and
// IQ4_XS (quant_gemm.h,
// QuantGemmJob::tiles). Compiled with the AVX-512 flags of this folder; chosen only when
// isa_supported(Isa::kAvx512).
//
// A tile is RM weight rows x RN activation rows with RM * RN = 16 (16 x 1 for decode, 8 x 2,
// 4 x 4 for prefill and batched decode): each super-block of a weight row is unpacked once per
// tile (64 values per zmm: the low and high nibbles of 32 bytes are consecutive sub-blocks) and
// multiplied with every activation row of the tile by vpmaddubsw (u8 weight x s8 activation ->
// int16 pairs, no saturation: 63 * 128 * 2 < 32767) and vpdpwssd against the sub-block scales
// as int16 (-> int32, exact). At the end of a super-block the 16 (row, token) pairs' integer
// sums (and the min / offset sums against the activations' bsums) are reduced together by one
// 16 x 16 transpose-and-add, and the float part runs for the 16 pairs in one vector with the
// operations, in the order, of the scalar finish_q4_k / finish_q5_k / finish_q6_k
// (quant_dot.cpp: (d * dx) * S added, (dmin * dx) * M subtracted, no fma, explicit rounding
// intrinsics so nothing is contracted): so the results are bit-identical to the scalar oracle
// and to the row-at-a-time paths, which handle the rows and tokens a full tile does not cover.
#include <immintrin.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <array>
#include <cstring>

#include "quant_gemm.h"

namespace tessera::kernels::cpu {
namespace {

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// int16 lane l of chunk c's scale vector = element f(c, l) of the block's int16 scales.
template <int kPerScale>
struct ScaleIdx {
  alignas(64) std::array<std::array<int16_t, 32>, 4> idx{};
  constexpr ScaleIdx() {
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) idx[c][l] = static_cast<int16_t>((64 * c + 2 * l) / kPerScale);
    }
  }
  __m512i get(int c) const { return _mm512_load_si512(idx[c].data()); }
};
constexpr ScaleIdx<32> kIdx32;  // Q4_K / Q5_K: one scale per 32 values
constexpr ScaleIdx<16> kIdx16;  // Q6_K: one scale per 16 values

// The unsigned formats' two-chunk step: vpdpbusd gives chunk c's dword k = the dot of its values
// 64c + 4k .. + 3 (their scale group's), and vpackssdw of chunks c and c + 1 puts, per 128-bit
// lane L, dwords 4L .. 4L + 3 of chunk c in words 0..3 and of chunk c + 1 in words 4..7; int16
// lane l of this table is the scale index of the dword in word l, for chunks 2p and 2p + 1.
template <int kPerScale>
struct PackedScaleIdx {
  alignas(64) std::array<std::array<int16_t, 32>, 2> idx{};
  constexpr PackedScaleIdx() {
    for (int p = 0; p < 2; ++p) {
      for (int l = 0; l < 32; ++l) {
        const int lane = l / 8, w = l % 8, chunk = 2 * p + w / 4, dword = 4 * lane + w % 4;
        idx[p][l] = static_cast<int16_t>((64 * chunk + 4 * dword) / kPerScale);
      }
    }
  }
  __m512i get(int p) const { return _mm512_load_si512(idx[p].data()); }
};
constexpr PackedScaleIdx<32> kPackedIdx32;
constexpr PackedScaleIdx<16> kPackedIdx16;

// Q4_K / Q5_K: the 8 scales (int16 lanes 0..7) and 8 mins (8..15) of a block, ggml's unpacking
// of the 12 packed bytes (q4k_scale_min).
inline __m512i q4k_scales_mins(const uint8_t* s) {
  uint32_t u[4];
  std::memcpy(u, s, 12);
  constexpr uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
  u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
  const uint32_t aux = u[1] & k1;
  u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
  u[2] = aux;
  u[0] &= k1;
  return _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u))));
}

// The mins, each twice (int16 lane g = min of sub-block g / 2), against the 16 bsums.
inline __m256i q4k_mins_dup(__m512i sm) {
  const __m256i idx = _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  return _mm256_permutexvar_epi16(idx, _mm512_castsi512_si256(sm));
}

// Chunk c (values 64c .. 64c + 63) of 32 packed nibble bytes: the low nibbles then the high.
inline __m512i nibbles64(const uint8_t* qs32) {
  const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs32)));
  const __m512i shift = _mm512_setr_epi64(0, 0, 0, 0, 0x0004000400040004LL, 0x0004000400040004LL,
                                          0x0004000400040004LL, 0x0004000400040004LL);
  return _mm512_and_si512(_mm512_srlv_epi16(raw, shift), _mm512_set1_epi8(0x0F));
}

struct Q4K {
  using Block = BlockQ4_K;
  static constexpr bool kMin = true;
  static __m512i scales(const Block& q) { return q4k_scales_mins(q.scales); }
  static __m256i mterm(__m512i sm) { return q4k_mins_dup(sm); }
  static __m512i chunk_scale(__m512i sm, int c) { return _mm512_permutexvar_epi16(kIdx32.get(c), sm); }
  static __m512i packed_scale(__m512i sm, int p) { return _mm512_permutexvar_epi16(kPackedIdx32.get(p), sm); }
  static __m512i unpack(const Block& q, int c) { return nibbles64(q.qs + 32 * c); }
  static constexpr int kScaleOffset = 0;  // dword at this block offset: d | dmin << 16
  static constexpr bool kDHigh = false;   // d in the dword's high half (no min)
  static constexpr bool kSigned = false;  // unpack() gives signed values (maddubs on |w|)
  static constexpr bool kAmx = true;      // kquant_amx_gemm has this format
};

struct Q5K : Q4K {
  using Block = BlockQ5_K;
  static __m512i scales(const Block& q) { return q4k_scales_mins(q.scales); }
  // Bit 2c (first 32 values) or 2c + 1 (next 32) of every qh byte is the fifth bit.
  static __m512i unpack(const Block& q, int c) {
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.qh)));
    const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(2 * c)),
                                             _mm256_set1_epi16(static_cast<int16_t>(2 * c + 1)), 1);
    const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(qh, shift), _mm512_set1_epi8(1));
    return _mm512_or_si512(nibbles64(q.qs + 32 * c), _mm512_slli_epi16(bit, 4));
  }
};

struct Q6K {
  using Block = BlockQ6_K;
  static constexpr bool kMin = false;
  static __m512i scales(const Block& q) {
    return _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q.scales))));
  }
  static __m256i mterm(__m512i sc) { return _mm512_castsi512_si256(sc); }  // offset = scales . bsums
  static __m512i chunk_scale(__m512i sc, int c) { return _mm512_permutexvar_epi16(kIdx16.get(c), sc); }
  static __m512i packed_scale(__m512i sc, int p) { return _mm512_permutexvar_epi16(kPackedIdx16.get(p), sc); }
  // Chunk c = 2h + k: ql[64h ..) low (k = 0) or high (k = 1) nibbles, two bits of qh[32h ..)
  // at 4..5 (shifted by 4 / 2 for k = 0, 0 / -2 for k = 1: quant_dot.cpp's layout).
  static __m512i unpack(const Block& q, int c) {
    const int h = c >> 1;
    const __m512i ql = _mm512_loadu_si512(q.ql + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.qh + 32 * h)));
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    if ((c & 1) == 0) {
      const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
      return _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_and_si512(_mm512_sllv_epi16(qh, sh), bits45));
    }
    const __m512i sh = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                           _mm512_and_si512(_mm512_srlv_epi16(qh, sh), bits45));
  }
  static constexpr int kScaleOffset = 206;  // dword at this block offset: d << 16
  static constexpr bool kDHigh = true;
  static constexpr int kOffsetShift = 5;   // total = S - 32 * (scales . bsums)
  static constexpr bool kSigned = false;
  static constexpr bool kAmx = true;
};

// 2 bits of 32 bytes per value: chunk c = values 64c .. 64c + 63 = bits 4(c % 2) .. + 1 (first
// 32) and 4(c % 2) + 2 .. + 3 (next 32) of qs[32(c / 2) ..) (quant_dot.cpp's layout).
inline __m512i crumbs64(const uint8_t* qs, int c) {
  const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (c / 2))));
  const int k = 2 * (c % 2);
  const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(2 * k)),
                                           _mm256_set1_epi16(static_cast<int16_t>(2 * k + 2)), 1);
  return _mm512_and_si512(_mm512_srlv_epi16(raw, shift), _mm512_set1_epi8(0x03));
}

// Q2_K: scale (low nibble) and min (high nibble) per 16 values; finish_q2_k's float part is
// Q4_K's (d * dx * S added, dmin * dx * M subtracted).
struct Q2K {
  using Block = BlockQ2_K;
  static constexpr bool kMin = true;
  // int16 lanes 0..15: the scales, 16..31: the mins.
  static __m512i scales(const Block& q) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q.scales));
    const __m128i low4 = _mm_set1_epi8(0x0F);
    return _mm512_cvtepu8_epi16(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4)));
  }
  static __m256i mterm(__m512i sm) { return _mm512_extracti64x4_epi64(sm, 1); }
  static __m512i chunk_scale(__m512i sm, int c) { return _mm512_permutexvar_epi16(kIdx16.get(c), sm); }
  static __m512i packed_scale(__m512i sm, int p) { return _mm512_permutexvar_epi16(kPackedIdx16.get(p), sm); }
  static __m512i unpack(const Block& q, int c) { return crumbs64(q.qs, c); }
  static constexpr int kScaleOffset = 80;  // d | dmin << 16
  static constexpr bool kDHigh = false;
  static constexpr bool kSigned = false;
  static constexpr bool kAmx = false;
};

// Q3_K: v + 4 (0..7) = the two low bits | the hmask bit << 2, signed 6-bit scales per 16;
// finish_q3_k: d * dx * (S - 4 * (scales . bsums)).
struct Q3K {
  using Block = BlockQ3_K;
  static constexpr bool kMin = false;
  static __m512i scales(const Block& q) {
    alignas(16) int8_t sc[16];
    q3k_unpack_scales(q.scales, sc);
    return _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(sc))));
  }
  static __m256i mterm(__m512i sc) { return _mm512_castsi512_si256(sc); }
  static __m512i chunk_scale(__m512i sc, int c) { return _mm512_permutexvar_epi16(kIdx16.get(c), sc); }
  static __m512i packed_scale(__m512i sc, int p) { return _mm512_permutexvar_epi16(kPackedIdx16.get(p), sc); }
  // The hmask bit of value 128h + 32k + l is bit 4h + k of hmask[l]; chunk c = 2h + k / 2.
  static __m512i unpack(const Block& q, int c) {
    const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.hmask)));
    const int k = 2 * (c % 2), h = c / 2;
    const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(4 * h + k)),
                                             _mm256_set1_epi16(static_cast<int16_t>(4 * h + k + 1)), 1);
    const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(hm, shift), _mm512_set1_epi8(1));
    return _mm512_or_si512(crumbs64(q.qs, c), _mm512_slli_epi16(bit, 2));
  }
  static constexpr int kScaleOffset = 106;  // d << 16
  static constexpr bool kDHigh = true;
  static constexpr int kOffsetShift = 2;
  static constexpr bool kSigned = false;
  static constexpr bool kAmx = false;
};

// IQ4_XS: table values (signed, |v| <= 127: maddubs on |w| with x negated where w < 0), one
// 6-bit scale (ls - 32) per 32 values, no min: finish_iq4_xs = d * dx * S.
struct IQ4XS {
  using Block = BlockIQ4_XS;
  static constexpr bool kMin = false;
  static __m512i scales(const Block& q) {
    alignas(32) int16_t ls[16] = {};
    for (int ib = 0; ib < 8; ++ib) {
      ls[ib] = static_cast<int16_t>((((q.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((q.scales_h >> (2 * ib)) & 3) << 4)) - 32);
    }
    return _mm512_zextsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(ls)));
  }
  static __m256i mterm(__m512i) { return _mm256_setzero_si256(); }
  static __m512i chunk_scale(__m512i sc, int c) { return _mm512_permutexvar_epi16(kIdx32.get(c), sc); }
  // Chunk c = sub-blocks 2c, 2c + 1: each 16 bytes, low nibbles (values 0..15) then high.
  static __m512i unpack(const Block& q, int c) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.qs + 32 * c));
    const __m512i z = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(raw));
    const __m512i n = _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFF00FF00u, z, 4), _mm512_set1_epi8(0x0F));
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
    return _mm512_shuffle_epi8(table, n);
  }
  static constexpr int kScaleOffset = 0;  // d | scales_h << 16
  static constexpr bool kDHigh = false;
  static constexpr int kOffsetShift = 0;  // no offset
  static constexpr bool kSigned = true;
  static constexpr bool kAmx = false;
};

// v[p] = [8 int32 partials of S | 8 of M] for pair p -> s, m: lane p = the pair's total.
inline void reduce_pairs(const __m512i v[16], __m512i* s, __m512i* m) {
  __m512i t[8], u[4];
  for (int i = 0; i < 8; ++i) {
    t[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  }
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane L: element c = the lane-L sum of v[4i + c]
    u[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * i], t[2 * i + 1]), _mm512_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
  }
  // 128-bit lanes 0, 1 hold S partials, 2, 3 M partials.
  const __m512i w01 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x88), _mm512_shuffle_i32x4(u[0], u[1], 0xDD));
  const __m512i w23 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], 0x88), _mm512_shuffle_i32x4(u[2], u[3], 0xDD));
  *s = _mm512_shuffle_i32x4(w01, w23, 0x88);
  *m = _mm512_shuffle_i32x4(w01, w23, 0xDD);
}

// RM * RN is 16, or 15 for the 5 x 3 tile (its lane 15 repeats pair 0's weights and is dropped).
template <class F, int RM, int RN>
void tile(const QuantGemmJob& g, int64_t r, int64_t t) {
  static_assert(RM * RN == 16 || (RM == 5 && RN == 3));
  constexpr int kPairs = RM * RN;
  using Block = typename F::Block;
  const int64_t nb = g.cols / kQK_K;
  const Block* w[RM];
  const BlockQ8_K* x[RN];
  for (int i = 0; i < RM; ++i) w[i] = reinterpret_cast<const Block*>(g.w + (r + i) * g.w_row_bytes);
  for (int j = 0; j < RN; ++j) x[j] = g.xk + (t + j) * nb;
  __m512i row_of, tok_of;  // pair p = i * RN + j
  {
    alignas(64) int32_t ro[16], to[16];
    for (int p = 0; p < 16; ++p) {
      ro[p] = p < kPairs ? p / RN : 0;
      to[p] = p < kPairs ? p % RN : 0;
    }
    row_of = _mm512_load_si512(ro);
    tok_of = _mm512_load_si512(to);
  }
  // Lane p's block scales are gathered from its row (no scalar stores: they would stall the
  // vector loads on store forwarding).
  const __m512i row_off = _mm512_mullo_epi32(row_of, _mm512_set1_epi32(static_cast<int32_t>(g.w_row_bytes)));
  const auto* w0 = reinterpret_cast<const uint8_t*>(w[0]);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i comb[16];
    if constexpr (kPairs < 16) comb[15] = _mm512_setzero_si512();
    for (int i = 0; i < RM; ++i) {
      const Block& q = w[i][b];
      // The same block of the next tile's row (RM rows on): the tiles of a row chunk stream
      // RM rows at once, which the hardware prefetcher alone follows poorly.
      const char* ahead = reinterpret_cast<const char*>(&q) + RM * g.w_row_bytes;
      for (size_t l = 0; l < sizeof(Block); l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
      const __m512i sm = F::scales(q);
      __m512i s[RN];
      for (int j = 0; j < RN; ++j) s[j] = _mm512_setzero_si512();
      if constexpr (!F::kSigned) {
        // Two chunks per step: vpdpbusd (4 values per dword, |dot| <= 4 * 63 * 128 < 2^15),
        // vpackssdw (exact), then vpdpwssd against the scales: the same integers as vpmaddubsw
        // + vpdpwssd per chunk, one multiply uop fewer per token and chunk pair.
        for (int p = 0; p < 2; ++p) {
          const __m512i v0 = F::unpack(q, 2 * p), v1 = F::unpack(q, 2 * p + 1);
          const __m512i sc = F::packed_scale(sm, p);
          for (int j = 0; j < RN; ++j) {
            const __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v0, _mm512_loadu_si512(x[j][b].qs + 128 * p));
            const __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v1, _mm512_loadu_si512(x[j][b].qs + 128 * p + 64));
            s[j] = _mm512_dpwssd_epi32(s[j], _mm512_packs_epi32(d0, d1), sc);
          }
        }
      }
      for (int c = 0; c < 4 && F::kSigned; ++c) {
        const __m512i wv = F::unpack(q, c);
        const __m512i sc = F::chunk_scale(sm, c);
        if constexpr (F::kSigned) {
          const __m512i wa = _mm512_abs_epi8(wv);
          const __mmask64 neg = _mm512_movepi8_mask(wv);
          for (int j = 0; j < RN; ++j) {
            const __m512i xv = _mm512_loadu_si512(x[j][b].qs + 64 * c);
            const __m512i xs = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
            s[j] = _mm512_dpwssd_epi32(s[j], _mm512_maddubs_epi16(wa, xs), sc);
          }
        } else {
          for (int j = 0; j < RN; ++j) {
            const __m512i xv = _mm512_loadu_si512(x[j][b].qs + 64 * c);
            s[j] = _mm512_dpwssd_epi32(s[j], _mm512_maddubs_epi16(wv, xv), sc);
          }
        }
      }
      const __m256i mt = F::mterm(sm);
      for (int j = 0; j < RN; ++j) {
        const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(s[j]), _mm512_extracti64x4_epi64(s[j], 1));
        const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[j][b].bsums));
        const __m256i m8 = _mm256_dpwssd_epi32(_mm256_setzero_si256(), mt, bs);
        comb[i * RN + j] = _mm512_inserti64x4(_mm512_castsi256_si512(s8), m8, 1);
      }
    }
    __m512i sv, mv;
    reduce_pairs(comb, &sv, &mv);
    __m512 dxv;
    if constexpr (RN == 1) {
      dxv = _mm512_set1_ps(x[0][b].d);
    } else {
      const __m128 d4 = _mm_setr_ps(x[0][b].d, x[RN > 1 ? 1 : 0][b].d, x[RN > 2 ? 2 : 0][b].d, x[RN > 3 ? 3 : 0][b].d);
      dxv = _mm512_permutexvar_ps(tok_of, _mm512_castps128_ps512(d4));
    }
    const __m512i dd = _mm512_i32gather_epi32(
        _mm512_add_epi32(row_off, _mm512_set1_epi32(static_cast<int32_t>(b * sizeof(Block) + F::kScaleOffset))), w0, 1);
    const __m512 dv = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(F::kDHigh ? _mm512_srli_epi32(dd, 16) : dd));
    if constexpr (F::kMin) {
      const __m512 mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
      const __m512 plus = _mm512_mul_round_ps(_mm512_mul_round_ps(dv, dxv, kRound), _mm512_cvt_roundepi32_ps(sv, kRound), kRound);
      acc = _mm512_add_round_ps(acc, plus, kRound);
      const __m512 minus = _mm512_mul_round_ps(_mm512_mul_round_ps(mw, dxv, kRound), _mm512_cvt_roundepi32_ps(mv, kRound), kRound);
      acc = _mm512_sub_round_ps(acc, minus, kRound);
    } else {
      __m512i total = sv;  // Q6_K: the -32 of every 6-bit value; Q3_K: the -4
      if constexpr (F::kOffsetShift > 0) total = _mm512_sub_epi32(sv, _mm512_slli_epi32(mv, F::kOffsetShift));
      const __m512 plus = _mm512_mul_round_ps(_mm512_mul_round_ps(dv, dxv, kRound), _mm512_cvt_roundepi32_ps(total, kRound), kRound);
      acc = _mm512_add_round_ps(acc, plus, kRound);
    }
  }
  alignas(64) float out[16];
  _mm512_store_ps(out, acc);
  for (int i = 0; i < RM; ++i) {
    for (int j = 0; j < RN; ++j) g.y[(t + j) * g.y_stride + r + i] = out[i * RN + j];
  }
}

// Tokens in steps of 4 (4 x 4 tiles), then 3 (5 x 3), 2 (8 x 2), 1 (16 x 1); in each step the rows
// a full tile does not cover go row by row (quant_gemm_rowwise: the same results).
// With AMX, 32 or 16 tokens at a time go to kquant_amx_gemm for every 16 rows first.
template <class F>
void gemm_tiles(const QuantGemmJob& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  int64_t t = t0;
  auto rows = [&]<int RM, int RN>(int64_t r, int64_t tt) {
    for (; r + RM <= r1; r += RM) tile<F, RM, RN>(g, r, tt);
    if (r < r1) quant_gemm_rowwise(g, r, r1, tt, tt + RN);
  };
  auto step = [&]<int RM, int RN>() {
    rows.template operator()<RM, RN>(r0, t);
    t += RN;
  };
  if (F::kAmx && t1 - t >= 16 && kquant_amx_available()) {
    const int64_t n16 = (r1 - r0) / 16;
    while (t1 - t >= 16) {
      const int nt = t1 - t >= 32 ? 32 : 16;
      if (n16 > 0) kquant_amx_gemm(g, r0, n16, t, nt);
      if (r0 + 16 * n16 < r1) {
        for (int64_t tt = t; tt < t + nt; tt += 4) rows.template operator()<4, 4>(r0 + 16 * n16, tt);
      }
      t += nt;
    }
  }
  while (t1 - t >= 4) step.template operator()<4, 4>();
  // Three tokens (an expert's share of a batched decode step, often): one pass over the rows
  // with 5 x 3 tiles rather than 8 x 2 and then 16 x 1.
  if (t1 - t == 3) step.template operator()<5, 3>();
  if (t1 - t >= 2) step.template operator()<8, 2>();
  if (t1 - t >= 1) step.template operator()<16, 1>();
}

}  // namespace

// quantize_row_q8_K (common/src/quants_kquant.cpp) in vectors, with its exact arithmetic: the
// first value of largest magnitude sets iscale = -127 / max, q = min(127, round-half-even
// (iscale * x)) (ggml's nearest_int rounds so for |v| < 2^22), bsums of every 16, d = 1 / iscale.
void quantize_row_q8_K_avx512(const float* x, BlockQ8_K* y, int64_t cols) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t i = 0; i < cols / kQK_K; ++i, x += kQK_K) {
    __m512 m = _mm512_setzero_ps();
    for (int v = 0; v < 16; ++v) m = _mm512_max_ps(m, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + 16 * v)));
    const float amax = _mm512_reduce_max_ps(m);
    BlockQ8_K& out = y[i];
    if (amax == 0.f) {
      out.d = 0;
      std::memset(out.qs, 0, kQK_K);
      std::memset(out.bsums, 0, sizeof(out.bsums));
      continue;
    }
    float max = 0;
    const __m512 am = _mm512_set1_ps(amax);
    for (int v = 0; v < 16; ++v) {
      const __mmask16 k = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + 16 * v)), am, _CMP_EQ_OQ);
      if (k != 0) {
        max = x[16 * v + __builtin_ctz(k)];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m512 is = _mm512_set1_ps(iscale);
    const __m512i top = _mm512_set1_epi32(127);
    for (int v = 0; v < 16; ++v) {
      const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_round_ps(is, _mm512_loadu_ps(x + 16 * v), kRound)), top);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.qs + 16 * v), _mm512_cvtepi32_epi8(q));
      out.bsums[v] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
    out.d = 1 / iscale;
  }
}

QuantTileFn kquant_tiles_avx512(DType t) {
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
