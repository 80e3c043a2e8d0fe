// AVX2 matmul over PackedWeights (qblock_packed.h) for Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: the
// counterpart of avx512/qblock_packed_avx512.cpp for CPUs without AVX-512 VNNI. Compiled with
// -mavx2 -mfma -mf16c; run only when isa_supported(Isa::kAvx2).
//
// Same 16-row layout, read as two halves: bytes 32h..32h+31 of each 64-byte vector are rows
// 8h..8h+7 (one ymm, lane l = row 8h + l). AVX2 has 16 ymm registers, too few for 2 x 8 float
// accumulators, so each group is walked twice, half 0 then half 1 (the second walk reads the
// group from L1/L2; the weights still come from memory once). Per block and half: the values
// as unsigned bytes u (low / high nibbles, Q5 fifth bits or'ed in), maddubs with the token's
// signed activation bytes broadcast (int16 pair sums; Q4: 8 of them summed in int16, 8 x 2 x
// 15 x 127 < 32767; Q5: 4 at a time), one madd to int32, starting from -kOffset * (the block's
// activation sum): the block's exact integer dot. IQ4_NL's table values are signed: maddubs(|w|,
// sign(x, w)), one madd each. The float part per block per 8 rows is the scalar oracle's
// (quant_gemm.h: block i into lane i % 8 by fma(s_i, d_i * xd_i), Q4_1 / Q5_1 then
// fma(xsum_i, m_i * xd_i); the fixed final reduction): bit-identical to the scalar path.
// Activations: avx2_kernels().quantize_q8 (signed int8, scales repeated 8 times).
// Thread-safety: called concurrently for disjoint (rows, tokens) tiles; scratch is thread_local.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "qblock_packed.h"
#include "tessera/common/check.h"
#include "tessera/common/quants.h"
#include "tessera/kernels/packed_weights.h"

namespace tessera::kernels::cpu {
namespace {

// Software prefetch as in the AVX-512 kernel (its comment has the measurements): the lines of
// each 8-block chunk spread over its blocks, into L1 2 KiB ahead on short rows, into L2 3 KiB
// ahead on long ones; issued on the first walk of a group only.
constexpr int64_t kPrefetchShort = 2048, kPrefetchLong = 3072, kShortRowBlocks = 32;

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// kGroup: maddubs results summed in int16 before one madd (0: signed table values).
struct FQ4_0 {
  static constexpr int kOffset = 8, kMeta = 32, kGroup = 8;
  static constexpr bool kMin = false, kFifth = false;
};
struct FIQ4_NL {
  static constexpr int kOffset = 0, kMeta = 32, kGroup = 0;
  static constexpr bool kMin = false, kFifth = false;
};
struct FQ4_1 {
  static constexpr int kOffset = 0, kMeta = 64, kGroup = 8;
  static constexpr bool kMin = true, kFifth = false;
};
struct FQ5_0 {
  static constexpr int kOffset = 16, kMeta = 96, kGroup = 4;
  static constexpr bool kMin = false, kFifth = true;
};
struct FQ5_1 {
  static constexpr int kOffset = 0, kMeta = 128, kGroup = 4;
  static constexpr bool kMin = true, kFifth = true;
};

// One token's activations: signed bytes, and per block -kOffset * sum, the scale, the sum (as float).
struct TokX {
  const int8_t* q;
  const int32_t* neg_off;
  const float* d;
  const float* xsum;
};

struct Consts {
  __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10), ones16 = _mm256_set1_epi16(1);
  __m256i table = _mm256_setzero_si256();
  explicit Consts(bool iq4nl) {
    if (iq4nl) {
      alignas(16) int8_t t[16];
      for (int i = 0; i < 16; ++i) t[i] = kIQ4NLValues[i];
      table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
    }
  }
};

// The integer dot of block b's half h (8 rows) with one token.
template <class F>
__attribute__((always_inline)) inline __m256i block_int(const Consts& c, const uint8_t* grp, int64_t b, int h,
                                                        const TokX& x) {
  constexpr int64_t kPair = 2 * (kPackedQsBytes + F::kMeta);
  const uint8_t* pb = grp + (b >> 1) * kPair;
  const uint8_t* qs = pb + (b & 1) * kPackedQsBytes + 32 * h;
  const uint8_t* meta = pb + 2 * kPackedQsBytes + (b & 1) * F::kMeta;
  const int8_t* xb = x.q + b * 32;
  __m256i qh = _mm256_setzero_si256();
  if constexpr (F::kFifth) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(meta + (F::kMin ? 64 : 32) + 32 * h));
  __m256i s32 = _mm256_set1_epi32(x.neg_off[b]), s16 = _mm256_setzero_si256();
  for (int m = 0; m < 4; ++m) {
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(qs + 64 * m));
    __m256i lo = _mm256_and_si256(v, c.low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), c.low4);
    if constexpr (F::kFifth) {  // vector m's bits sit at bit m of each byte, vector 4 + m's at bit 4 + m
      lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi32(qh, 4 - m), c.bit4));
      hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srli_epi32(qh, m), c.bit4));
    }
    const __m256i xl = _mm256_set1_epi32(load_i32(xb + 4 * m)), xh = _mm256_set1_epi32(load_i32(xb + 16 + 4 * m));
    if constexpr (F::kGroup == 0) {  // signed values: |w| x sign(x, w)
      lo = _mm256_shuffle_epi8(c.table, lo);
      hi = _mm256_shuffle_epi8(c.table, hi);
      const __m256i pl = _mm256_maddubs_epi16(_mm256_sign_epi8(lo, lo), _mm256_sign_epi8(xl, lo));
      const __m256i ph = _mm256_maddubs_epi16(_mm256_sign_epi8(hi, hi), _mm256_sign_epi8(xh, hi));
      s32 = _mm256_add_epi32(s32, _mm256_add_epi32(_mm256_madd_epi16(pl, c.ones16), _mm256_madd_epi16(ph, c.ones16)));
    } else {
      s16 = _mm256_add_epi16(s16, _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_maddubs_epi16(hi, xh)));
      if (F::kGroup == 4 && m == 1) {
        s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(s16, c.ones16));
        s16 = _mm256_setzero_si256();
      }
    }
  }
  if constexpr (F::kGroup != 0) s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(s16, c.ones16));
  return s32;
}

// Block b's half h into its oracle lane `acc`.
template <class F>
__attribute__((always_inline)) inline void block(const Consts& c, const uint8_t* grp, int64_t b, int h, const TokX& x,
                                                 __m256& acc) {
  constexpr int64_t kPair = 2 * (kPackedQsBytes + F::kMeta);
  const uint8_t* meta = grp + (b >> 1) * kPair + 2 * kPackedQsBytes + (b & 1) * F::kMeta;
  const __m256i s = block_int<F>(c, grp, b, h, x);
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(meta + 16 * h)));
  const __m256 xdv = _mm256_set1_ps(x.d[b]);
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, xdv), acc);
  if constexpr (F::kMin) {
    const __m256 mins = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(meta + 32 + 16 * h)));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(x.xsum[b]), _mm256_mul_ps(mins, xdv), acc);
  }
}

template <int kLines>
__attribute__((always_inline)) inline void prefetch_share(const char* pf, int i, bool to_l1) {
#pragma GCC unroll 8
  for (int l = i * kLines / 8; l < (i + 1) * kLines / 8; ++l) {
    if (to_l1) {
      _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
    } else {
      _mm_prefetch(pf + 64 * l, _MM_HINT_T1);
    }
  }
}

// One token x rows 8h..8h+7 of a group: y = the token's output at row 8h of the group; `live`
// of those 8 rows are real.
template <class F>
void group_half(const Consts& c, const uint8_t* grp, int64_t nb, int h, const TokX& x, float* y, int live, bool prefetch) {
  constexpr int64_t kChunk = 4 * 2 * (kPackedQsBytes + F::kMeta);  // 8 blocks
  __m256 acc[8];
  for (int a = 0; a < 8; ++a) acc[a] = _mm256_setzero_ps();
  const bool short_rows = nb <= kShortRowBlocks;
  const int64_t ahead = short_rows ? kPrefetchShort : kPrefetchLong;
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    const char* pf = reinterpret_cast<const char*>(grp) + (b >> 1) * (kChunk / 4) + ahead;
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      if (prefetch) prefetch_share<static_cast<int>(kChunk / 64)>(pf, i, short_rows);
      block<F>(c, grp, b + i, h, x, acc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // the tail (< 8 blocks)
    if (b + i < nb) block<F>(c, grp, b + i, h, x, acc[i]);
  }
  const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6])),
                                   _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7])));
  if (live >= 8) {
    _mm256_storeu_ps(y, sum);
  } else {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32(live), lane), sum);
  }
}

template <class F>
void gemm(const GemmQ8Job& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const PackedWeights& p = *g.packed;
  const int64_t nb = g.cols / 32, n = t1 - t0;
  thread_local std::vector<int32_t> neg_off;
  thread_local std::vector<float> xd, xsum;
  neg_off.resize(static_cast<size_t>(n * nb));
  xd.resize(static_cast<size_t>(n * nb));
  xsum.resize(static_cast<size_t>(n * nb));
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t j = 0; j < n; ++j) {  // per block: the activation sum (signed bytes)
    const int8_t* xq = g.xq + (t0 + j) * g.cols;
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32));
      const __m256i s8 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, v), ones16);
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
      const int32_t sum = _mm_cvtsi128_si32(s);
      const size_t k = static_cast<size_t>(j * nb + b);
      neg_off[k] = -F::kOffset * sum;
      xd[k] = g.xd[((t0 + j) * nb + b) * 8];
      xsum[k] = static_cast<float>(sum);
    }
  }
  const Consts c(F::kGroup == 0);
  for (int64_t r = r0; r < r1; r += 16) {
    const uint8_t* grp = p.group(r / 16);
    const int64_t live_rows = std::min<int64_t>(16, std::min(r1, p.rows()) - r);
    for (int64_t j = 0; j < n; ++j) {
      const size_t k = static_cast<size_t>(j * nb);
      const TokX x{g.xq + (t0 + j) * g.cols, neg_off.data() + k, xd.data() + k, xsum.data() + k};
      float* y = g.y + (t0 + j) * g.y_stride + r;
      for (int h = 0; h < 2 && 8 * h < live_rows; ++h) {
        group_half<F>(c, grp, nb, h, x, y + 8 * h, static_cast<int>(live_rows - 8 * h), j == 0 && h == 0);
      }
    }
  }
}

}  // namespace

void gemm_qblock_packed_avx2(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  TS_CHECK(job.packed != nullptr && r0 % 16 == 0);
  switch (job.w_type) {
    case DType::kQ4_0: gemm<FQ4_0>(job, r0, r1, t0, t1); return;
    case DType::kIQ4_NL: gemm<FIQ4_NL>(job, r0, r1, t0, t1); return;
    case DType::kQ4_1: gemm<FQ4_1>(job, r0, r1, t0, t1); return;
    case DType::kQ5_0: gemm<FQ5_0>(job, r0, r1, t0, t1); return;
    case DType::kQ5_1: gemm<FQ5_1>(job, r0, r1, t0, t1); return;
    default: break;
  }
  TS_CHECK(false) << "gemm_qblock_packed_avx2: no packed path for " << dtype_name(job.w_type);
}

}  // namespace tessera::kernels::cpu
