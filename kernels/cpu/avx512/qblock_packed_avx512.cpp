// AVX-512 VNNI matmul over PackedWeights (qblock_packed.h) for Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL.
// Every row of a 16-row group is a lane: per block, the 4 stored vectors give the 8 unsigned
// weight dword vectors (low / high nibbles, Q5 fifth bits or'ed in, IQ4_NL through its table
// + 128), and vpdpbusd with each token's signed activation dwords broadcast from memory sums the
// block for 16 rows at once, starting from -kOffset * (the block's activation sum), which makes
// it the signed block dot. The float part is per block per 16 rows, in the scalar oracle's
// order (quant_gemm.h: block i into accumulator i % 8 by fma(s_i, d_i * xd_i), Q4_1 / Q5_1 then
// fma(xsum_i, m_i * xd_i); fixed final reduction): bit-identical to the scalar path. No
// horizontal reductions and no gathers: the stream is one sequential read, software prefetched.
#include <immintrin.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <vector>

#include "qblock_packed.h"
#include "tessera/common/check.h"
#include "tessera/common/quants.h"
#include "tessera/kernels/packed_weights.h"

namespace tessera::kernels::cpu {
namespace {

// Software prefetch, the lines of each 8-block chunk spread over its blocks (a few before each
// block: a burst of 36+ prefetches per chunk stalls on the L1 fill buffers). Rows of up to
// kShortRowBlocks blocks (the 135M-shaped models, mostly cache-resident): into L1, 2 KiB ahead
// (SmolLM2-135M Q4_0 decode at 1 thread, load 9-14: none 165 tok per CPU-s, 512 B 223, 1 KiB
// 232, 2 KiB 237-281, 4 KiB 256). Longer rows (streamed from memory): into L2, 3 KiB ahead.
// Measured on this kernel's loop over a 640 MiB buffer of 2048-column groups (1 thread, load
// 5, GB of weights per CPU-second, medians of 15-21 passes): the former burst into L1 512 B
// ahead 14.7-16.0, the same burst 2 KiB ahead 13.5, into L2 2-8 KiB ahead 12.6-14.4; spread
// into L1 512 B-2 KiB ahead 15.4-15.7, spread into L2 2 KiB 16.4-17.4, 3 KiB 16.0-17.7, 4 KiB
// 15.1-15.5, 6 KiB 14.7 (a plain read loop: 18.8). Llama-3.2-1B Q4_0 decode at 1 thread, tok
// per CPU-s in alternation: spread into L2 1 / 2 / 3 / 4 KiB ahead 21.1-21.7 / 21.6-22.1 /
// 22.0-22.5 / 20.8-21.3. (Those figures: Intel Sapphire Rapids.) On AMD Zen 5 the longer rows
// go into L1 8 KiB ahead instead: Llama-3.2-1B Q4_0 decode, tok/s, paired runs at load 1.5-1.8,
// L2 3 KiB vs L1 8 KiB ahead: 1 thread 39.2 / 38.8 vs 45.7 / 45.7, 2 threads 72.9 / 70.8 / 72.0
// vs 82.5 / 82.7 / 84.3 (L2 6 / 12 KiB: 76.3 / 72.0; L1 3 KiB: 74.8); SmolLM2's short rows:
// unchanged (their path is the same on both).
constexpr int64_t kPrefetchShort = 2048, kShortRowBlocks = 32;
struct LongRowPrefetch {
  int64_t ahead;
  bool to_l1;
};
const LongRowPrefetch& long_row_prefetch() {
  static const LongRowPrefetch p = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") ? LongRowPrefetch{8192, true} : LongRowPrefetch{3072, false};
  }();
  return p;
}

// Before block i (0..7) of a chunk of kLines lines starting at pf (already `ahead` bytes on):
// that block's share of the lines.
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

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

struct FQ4_0 {
  static constexpr int kOffset = 8, kMeta = 32;
  static constexpr bool kMin = false, kFifth = false, kTable = false;
};
struct FIQ4_NL {
  static constexpr int kOffset = 128, kMeta = 32;
  static constexpr bool kMin = false, kFifth = false, kTable = true;
};
struct FQ4_1 {
  static constexpr int kOffset = 0, kMeta = 64;
  static constexpr bool kMin = true, kFifth = false, kTable = false;
};
struct FQ5_0 {
  static constexpr int kOffset = 16, kMeta = 96;
  static constexpr bool kMin = false, kFifth = true, kTable = false;
};
struct FQ5_1 {
  static constexpr int kOffset = 0, kMeta = 128;
  static constexpr bool kMin = true, kFifth = true, kTable = false;
};

// One token's activations: signed bytes, and per block -kOffset * sum, the scale, the sum (as float).
struct TokX {
  const int8_t* q;
  const int32_t* neg_off;
  const float* d;
  const float* xsum;
};

// The per-format constants of a group walk.
template <class F>
struct Consts {
  __m512i low4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10), table = _mm512_setzero_si512();
  Consts() {
    if constexpr (F::kTable) {
      alignas(16) uint8_t t[16];
      for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(kIQ4NLValues[i] + 128);
      table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
    }
  }
};

// Block b of a group for RN tokens, into their float accumulators acc[j] (the block's oracle lane).
template <class F, int RN>
__attribute__((always_inline)) inline void block(const Consts<F>& c, const uint8_t* grp, int64_t b, const TokX* x,
                                                 __m512* const* acc) {
  constexpr int64_t kPair = 2 * (kPackedQsBytes + F::kMeta);
  const uint8_t* pb = grp + (b >> 1) * kPair;
  const uint8_t* qs = pb + (b & 1) * kPackedQsBytes;
  const uint8_t* meta = pb + 2 * kPackedQsBytes + (b & 1) * F::kMeta;
  __m512i s0[RN], s1[RN];
  for (int j = 0; j < RN; ++j) {
    s0[j] = _mm512_set1_epi32(x[j].neg_off[b]);
    s1[j] = _mm512_setzero_si512();
  }
  __m512i qh = _mm512_setzero_si512();
  // Q5_0: qh sits at 32 mod 64 within the block pair (meta = 32 bytes of scales + 64 of qh), so unaligned.
  if constexpr (F::kFifth) qh = _mm512_loadu_si512(meta + (F::kMin ? 64 : 32));
  for (int m = 0; m < 4; ++m) {
    const __m512i v = _mm512_load_si512(qs + 64 * m);
    __m512i lo = _mm512_and_si512(v, c.low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), c.low4);
    if constexpr (F::kFifth) {  // vector m's bits sit at bit m of each byte, vector 4 + m's at bit 4 + m
      lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi32(qh, 4 - m), c.bit4));
      hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_srli_epi32(qh, m), c.bit4));
    }
    if constexpr (F::kTable) {
      lo = _mm512_shuffle_epi8(c.table, lo);
      hi = _mm512_shuffle_epi8(c.table, hi);
    }
    for (int j = 0; j < RN; ++j) {
      const int8_t* xb = x[j].q + b * 32;
      s0[j] = _mm512_dpbusd_epi32(s0[j], lo, _mm512_set1_epi32(load_i32(xb + 4 * m)));
      s1[j] = _mm512_dpbusd_epi32(s1[j], hi, _mm512_set1_epi32(load_i32(xb + 16 + 4 * m)));
    }
  }
  const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(meta)));
  __m512 mins = _mm512_setzero_ps();
  if constexpr (F::kMin) mins = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(meta + 32)));
  for (int j = 0; j < RN; ++j) {
    const __m512 xdv = _mm512_set1_ps(x[j].d[b]);
    __m512& l = *acc[j];
    l = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0[j], s1[j])), _mm512_mul_ps(d, xdv), l);
    if constexpr (F::kMin) l = _mm512_fmadd_ps(_mm512_set1_ps(x[j].xsum[b]), _mm512_mul_ps(mins, xdv), l);
  }
}

// Tokens x[0 .. RN) x the 16 rows of one group (live lanes); y[j] = token j's output at the group's first row.
template <class F, int RN>
void group_tokens(const uint8_t* grp, int64_t nb, const TokX* x, float* const* y, __mmask16 live, bool prefetch) {
  constexpr int64_t kChunk = 4 * 2 * (kPackedQsBytes + F::kMeta);  // 8 blocks
  const Consts<F> c;
  __m512 acc[RN][8];
  for (int j = 0; j < RN; ++j) {
    for (int a = 0; a < 8; ++a) acc[j][a] = _mm512_setzero_ps();
  }
  const bool short_rows = nb <= kShortRowBlocks;
  const LongRowPrefetch& lr = long_row_prefetch();
  const int64_t ahead = short_rows ? kPrefetchShort : lr.ahead;
  const bool to_l1 = short_rows || lr.to_l1;
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    const char* pf = reinterpret_cast<const char*>(grp) + (b >> 1) * (kChunk / 4) + ahead;
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      if (prefetch) prefetch_share<static_cast<int>(kChunk / 64)>(pf, i, to_l1);
      __m512* a[RN];
      for (int j = 0; j < RN; ++j) a[j] = &acc[j][i];
      block<F, RN>(c, grp, b + i, x, a);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // the tail (< 8 blocks)
    if (b + i < nb) {
      __m512* a[RN];
      for (int j = 0; j < RN; ++j) a[j] = &acc[j][i];
      block<F, RN>(c, grp, b + i, x, a);
    }
  }
  for (int j = 0; j < RN; ++j) {
    const __m512* l = acc[j];
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(l[0], l[4]), _mm512_add_ps(l[2], l[6])),
                                     _mm512_add_ps(_mm512_add_ps(l[1], l[5]), _mm512_add_ps(l[3], l[7])));
    _mm512_mask_storeu_ps(y[j], live, sum);
  }
}

// Tokens per walk of a group's weights (batches): each block's weights are unpacked once for
// that many tokens; the 8 float accumulators per token (the oracle's lanes) limit it. AMD Zen 5,
// 2 threads, tok/s in alternation: SmolLM2-135M Q4_0 32-sequence decode 2 tokens 1445-1468, 3
// tokens 1504-1518, 4 tokens 1421-1465 (24 + 8 accumulators: spills); Llama-1B Q4_0 339-343 vs
// 358-363 (3).
constexpr int kMaxRN = 3;

template <class F>
void gemm(const GemmQ8Job& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const PackedWeights& p = *g.packed;
  const int64_t nb = g.cols / 32, n = t1 - t0;
  thread_local std::vector<int8_t> xs;
  thread_local std::vector<int32_t> neg_off;
  thread_local std::vector<float> xd, xsum;
  xs.resize(static_cast<size_t>(n * g.cols));
  neg_off.resize(static_cast<size_t>(n * nb));
  xd.resize(static_cast<size_t>(n * nb));
  xsum.resize(static_cast<size_t>(n * nb));
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t j = 0; j < n; ++j) {  // x is stored + 128
    const auto* xq = reinterpret_cast<const uint8_t*>(g.xq) + (t0 + j) * g.cols;
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xs.data() + j * g.cols + b * 32), _mm256_xor_si256(v, flip));
      const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
      const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      const int32_t sum = static_cast<int32_t>(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 128 * 32;
      const size_t k = static_cast<size_t>(j * nb + b);
      neg_off[k] = -F::kOffset * sum;
      xd[k] = g.xd[((t0 + j) * nb + b) * 8];
      xsum[k] = static_cast<float>(sum);
    }
  }
  TokX x[kMaxRN];
  float* y[kMaxRN];
  for (int64_t r = r0; r < r1; r += 16) {
    const uint8_t* grp = p.group(r / 16);
    const int64_t live_rows = std::min<int64_t>(16, std::min(r1, p.rows()) - r);
    const __mmask16 live = live_rows >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << live_rows) - 1u);
    for (int64_t t = 0; t < n;) {
      const int rn = n - t >= kMaxRN ? kMaxRN : n - t >= 2 ? 2 : 1;
      for (int j = 0; j < rn; ++j) {
        const size_t k = static_cast<size_t>((t + j) * nb);
        x[j] = {xs.data() + (t + j) * g.cols, neg_off.data() + k, xd.data() + k, xsum.data() + k};
        y[j] = g.y + (t0 + t + j) * g.y_stride + r;
      }
      if (rn == kMaxRN) {
        group_tokens<F, kMaxRN>(grp, nb, x, y, live, t == 0);
      } else if (rn == 2) {
        group_tokens<F, 2>(grp, nb, x, y, live, t == 0);
      } else {
        group_tokens<F, 1>(grp, nb, x, y, live, t == 0);
      }
      t += rn;
    }
  }
}

}  // namespace

void gemm_qblock_packed_avx512(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  TS_CHECK(job.packed != nullptr && r0 % 16 == 0);
  switch (job.w_type) {
    case DType::kQ4_0: gemm<FQ4_0>(job, r0, r1, t0, t1); return;
    case DType::kIQ4_NL: gemm<FIQ4_NL>(job, r0, r1, t0, t1); return;
    case DType::kQ4_1: gemm<FQ4_1>(job, r0, r1, t0, t1); return;
    case DType::kQ5_0: gemm<FQ5_0>(job, r0, r1, t0, t1); return;
    case DType::kQ5_1: gemm<FQ5_1>(job, r0, r1, t0, t1); return;
    default: break;
  }
  TS_CHECK(false) << "gemm_qblock_packed_avx512: no packed path for " << dtype_name(job.w_type);
}

}  // namespace tessera::kernels::cpu
