// AVX-512 VNNI matmul over packed Q8_0 weights (qblock_packed_q8.h). Every row of a 16-row group
// is a lane; a block's 8 stored vectors are the rows' dwords 0..7 as unsigned bytes (value +
// 128), and vpdpbusd with a token's signed activation dword broadcast from memory, started from
// -128 * (those activations' sum), gives the exact integer dot for 16 rows at once. No per-call
// unpacking or interleaving (the VNNI batch tiles' pack16 of the file layout), no horizontal sums.
//
// Two float orders, each bit-identical to the unpacked AVX-512 path it stands in for:
// - decode (a task of fewer than kQBlockBatchMinN tokens), as gemm_q8_0's tile_q8: per row 16
//   float lanes, lane 8h + k = dword k of the blocks 2p + h, each dword's exact integer sum
//   converted on its own and added by fma(s, d_w * d_x, lane) in block-pair order (an odd last
//   block: lane + s * (d_w * d_x), lanes 8..15 + 0); then hsum's tree ((lane i + lane i+8) then
//   + 4, + 2, + 1). Here lane j of row l is accumulator vector j's lane l.
// - batches, as the VNNI batch tiles gemm_packed<Q8_0> (and the AMX tiles, bit-identical to
//   them): the block's exact integer dot (the 8 dwords summed as integers: any order is exact),
//   one accumulator per row in block order, fma(s, d_w * d_x, acc).
#include <immintrin.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <vector>

#include "qblock_packed_q8.h"
#include "qblock_tiles.h"
#include "quant_gemm.h"
#include "tessera/common/check.h"
#include "tessera/kernels/packed_weights.h"

namespace tessera::kernels::cpu {
namespace {

// Bytes ahead of the block pair being read that the decode GEMV prefetches into L2, one per
// line, the pair's 17 lines spread over its two blocks (a burst stalls on the L1 fill buffers).
// Tokens per CPU-s at 1 thread, paired rounds at load 2-3: Llama-1B Q8_0 tg32, burst of 17 into
// L1 2 KiB ahead 10.7, spread into L2 4 KiB ahead 11.8, 6 KiB 12.0; SmolLM2 Q8_0 tg64 (rows of
// 18 and 48 blocks) 127 with its short rows into L1 2 KiB ahead, 135 with every row into L2.
constexpr int64_t kPrefetch = 6144;

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline __m512 load_scales(const uint8_t* meta) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(meta)));
}

// One token's activations, made signed, with the per-dword (decode) or per-block (batch)
// -128 * sums and the block scales.
struct TokX {
  const int8_t* q;
  const int32_t* neg;  // decode: [nb][8]; batch: [nb]
  const float* d;      // [nb]
};

// Dword k of block b for 16 rows: the exact integer dot of that dword, as float.
__attribute__((always_inline)) inline __m512 dword_dot(const uint8_t* qs, int k, const TokX& x, int64_t b) {
  const __m512i s = _mm512_dpbusd_epi32(_mm512_set1_epi32(x.neg[b * 8 + k]), _mm512_load_si512(qs + 64 * k),
                                        _mm512_set1_epi32(load_i32(x.q + b * 32 + 4 * k)));
  return _mm512_cvtepi32_ps(s);
}

// Decode: one token x the 16 rows of one group, in tile_q8's order.
void gemv_group(const uint8_t* grp, int64_t nb, const TokX& x, float* y, __mmask16 live, bool prefetch) {
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* pb = grp + (b / 2) * kPackedQ8PairBytes;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      if (prefetch) {  // lines 0..8, then 9..16
        const char* pf = reinterpret_cast<const char*>(pb) + kPrefetch + 64 * 9 * h;
#pragma GCC unroll 9
        for (int l = 0; l < 9 - h; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T1);
      }
      const uint8_t* qs = pb + h * kPackedQ8QsBytes;
      const __m512 dx = _mm512_mul_ps(load_scales(pb + 2 * kPackedQ8QsBytes + h * kPackedQ8MetaBytes), _mm512_set1_ps(x.d[b + h]));
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) acc[8 * h + k] = _mm512_fmadd_ps(dword_dot(qs, k, x, b + h), dx, acc[8 * h + k]);
    }
  }
  if (b < nb) {  // an odd last block: tile_q8's 256-bit tail (multiply, then add; the upper lanes + 0)
    const uint8_t* pb = grp + (b / 2) * kPackedQ8PairBytes;
    const __m512 dx = _mm512_mul_ps(load_scales(pb + 2 * kPackedQ8QsBytes), _mm512_set1_ps(x.d[b]));
    // add_round: a plain add after a multiply may be contracted into an fma (not tile_q8's order).
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    for (int k = 0; k < 8; ++k) {
      acc[k] = _mm512_add_round_ps(acc[k], _mm512_mul_ps(dword_dot(pb, k, x, b), dx), kRound);
      acc[8 + k] = _mm512_add_round_ps(acc[8 + k], _mm512_setzero_ps(), kRound);
    }
  }
  __m512 a[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm512_add_ps(acc[i], acc[i + 8]);
  for (int i = 0; i < 4; ++i) a[i] = _mm512_add_ps(a[i], a[i + 4]);
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
  _mm512_mask_storeu_ps(y, live, sum);
}

// Batches: tokens x[0 .. RN) x the 16 rows of one group, in gemm_packed<Q8_0>'s order.
template <int RN>
void batch_group(const uint8_t* grp, int64_t nb, const TokX* x, float* const* y, __mmask16 live) {
  __m512 acc[RN];
  for (int j = 0; j < RN; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = grp + (b / 2) * kPackedQ8PairBytes;
    const uint8_t* qs = pb + (b % 2) * kPackedQ8QsBytes;
    const __m512 d = load_scales(pb + 2 * kPackedQ8QsBytes + (b % 2) * kPackedQ8MetaBytes);
    __m512i s0[RN], s1[RN];  // dwords 0..3 and 4..7: two shorter dependency chains
    for (int j = 0; j < RN; ++j) {
      s0[j] = _mm512_set1_epi32(x[j].neg[b]);
      s1[j] = _mm512_setzero_si512();
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512i w0 = _mm512_load_si512(qs + 64 * k), w1 = _mm512_load_si512(qs + 64 * (k + 4));
      for (int j = 0; j < RN; ++j) {
        const int8_t* xb = x[j].q + b * 32;
        s0[j] = _mm512_dpbusd_epi32(s0[j], w0, _mm512_set1_epi32(load_i32(xb + 4 * k)));
        s1[j] = _mm512_dpbusd_epi32(s1[j], w1, _mm512_set1_epi32(load_i32(xb + 16 + 4 * k)));
      }
    }
    for (int j = 0; j < RN; ++j) {
      const __m512 s = _mm512_cvtepi32_ps(_mm512_add_epi32(s0[j], s1[j]));
      acc[j] = _mm512_fmadd_ps(s, _mm512_mul_ps(d, _mm512_set1_ps(x[j].d[b])), acc[j]);
    }
  }
  for (int j = 0; j < RN; ++j) _mm512_mask_storeu_ps(y[j], live, acc[j]);
}

void gemm(const GemmQ8Job& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1, bool decode) {
  TS_CHECK(g.packed != nullptr && g.w_type == DType::kQ8_0 && r0 % 16 == 0);
  const PackedWeights& p = *g.packed;
  const int64_t nb = g.cols / 32, n = t1 - t0;
  const int64_t per_tok = decode ? nb * 8 : nb;
  thread_local std::vector<int8_t> xs;
  thread_local std::vector<int32_t> neg;
  thread_local std::vector<float> xd;
  xs.resize(static_cast<size_t>(n * g.cols));
  neg.resize(static_cast<size_t>(n * per_tok));
  xd.resize(static_cast<size_t>(n * nb));
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi8(1);
  for (int64_t j = 0; j < n; ++j) {  // x is stored + 128
    const auto* xq = reinterpret_cast<const uint8_t*>(g.xq) + (t0 + j) * g.cols;
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32)), flip);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xs.data() + j * g.cols + b * 32), v);
      const __m256i s4 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, v);  // the 8 dword sums
      const __m256i neg4 = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s4, 7));
      if (decode) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(neg.data() + j * per_tok + b * 8), neg4);
      } else {
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(neg4), _mm256_extracti128_si256(neg4, 1));
        h = _mm_hadd_epi32(h, h);
        neg[static_cast<size_t>(j * per_tok + b)] = _mm_cvtsi128_si32(_mm_hadd_epi32(h, h));
      }
      xd[static_cast<size_t>(j * nb + b)] = g.xd[((t0 + j) * nb + b) * 8];
    }
  }
  TokX x[4];
  float* y[4];
  auto tok = [&](int64_t j) {
    return TokX{xs.data() + j * g.cols, neg.data() + j * per_tok, xd.data() + j * nb};
  };
  for (int64_t r = r0; r < r1; r += 16) {
    const uint8_t* grp = p.group(r / 16);
    const int64_t live_rows = std::min<int64_t>(16, std::min(r1, p.rows()) - r);
    const __mmask16 live = live_rows >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << live_rows) - 1u);
    if (decode) {
      for (int64_t j = 0; j < n; ++j) gemv_group(grp, nb, tok(j), g.y + (t0 + j) * g.y_stride + r, live, j == 0);
      continue;
    }
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
      for (int j = 0; j < 4; ++j) {
        x[j] = tok(t + j);
        y[j] = g.y + (t0 + t + j) * g.y_stride + r;
      }
      batch_group<4>(grp, nb, x, y, live);
    }
    for (; t < n; ++t) {
      x[0] = tok(t);
      y[0] = g.y + (t0 + t) * g.y_stride + r;
      batch_group<1>(grp, nb, x, y, live);
    }
  }
}

}  // namespace

void gemm_q8_0_packed_avx512(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  if (t1 - t0 >= kQBlockAmxMinN && kquant_amx_available()) {
    gemm_q8_0_packed_amx(job, r0, r1, t0, t1);
    return;
  }
  gemm(job, r0, r1, t0, t1, t1 - t0 < kQBlockBatchMinN);
}

void gemm_q8_0_packed_tiles_avx512(const GemmQ8Job& job, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  gemm(job, r0, r1, t0, t1, false);
}

}  // namespace tessera::kernels::cpu
