// AMX-INT8 tiles over packed Q8_0 weights (qblock_packed_q8.h), for batches of kQBlockAmxMinN
// tokens or more: C (16 tokens x 16 weight rows, int32) = A (16 tokens x the block's 32
// activations, signed, straight from the activation rows: stride = cols) x B (a packed block:
// 8 rows x 64 bytes, row k = dword k of the 16 weight rows, unsigned: value + 128), one TDPBSUD
// per block and 16 x 16. C + (-128 * the token's block sum) is the exact integer block dot.
// Then per token, its 16 rows in one vector: acc = fma(s, d_w * d_x, acc) in block order — the
// VNNI batch tiles' order (and the file-layout AMX tiles'), so results are bit-identical to
// those and no token's result depends on its batch. Each token's 16 results are one masked store.
//
// Against the file-layout AMX tiles (qblock_amx.cpp), which read 16 rows x 34-byte blocks as 16
// short strided streams and gather the scales: the weights are one sequential stream, the
// scales one aligned load, and the activations need no transposed copy.
// Software pipeline: the tile ops of block pair p run before the float finish of pair p - 1
// (C tiles in a 2-slot ring), so the vector work overlaps the tile unit.
#include <immintrin.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <vector>

#include "amx_tile_config.h"
#include "qblock_packed_q8.h"
#include "qblock_tiles.h"
#include "tessera/common/check.h"
#include "tessera/kernels/packed_weights.h"

#pragma GCC target("amx-tile,amx-int8")

namespace tessera::kernels::cpu {
namespace {

// Bytes ahead of the block pair being read that each row tile prefetches (one per line).
constexpr int64_t kPrefetch = 4096;

// The call's activations: signed rows (32 zero rows past the last, so every A tile load stays
// inside), -128 * each block's sum, each block's scale.
struct Act {
  std::vector<int8_t> xs;
  std::vector<int32_t> neg;
  std::vector<float> xd;
};

void build_act(const GemmQ8Job& g, int64_t t0, int64_t n, Act* a) {
  const int64_t nb = g.cols / 32;
  a->xs.assign(static_cast<size_t>((n + 32) * g.cols), 0);
  a->neg.resize(static_cast<size_t>(n * nb));
  a->xd.resize(static_cast<size_t>(n * nb));
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi8(1);
  for (int64_t j = 0; j < n; ++j) {  // x is stored + 128
    const auto* xq = reinterpret_cast<const uint8_t*>(g.xq) + (t0 + j) * g.cols;
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32)), flip);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a->xs.data() + j * g.cols + b * 32), v);
      const __m256i s4 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, v);
      __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
      h = _mm_hadd_epi32(h, h);
      a->neg[static_cast<size_t>(j * nb + b)] = -128 * _mm_cvtsi128_si32(_mm_hadd_epi32(h, h));
      a->xd[static_cast<size_t>(j * nb + b)] = g.xd[((t0 + j) * nb + b) * 8];
    }
  }
}

// One 16-row group x tokens [tc, tc + nt) (call-local indices, nt <= 16 * NH).
template <int NH>
void row_tile(const uint8_t* grp, int64_t nb, int64_t cols, const Act& a, int64_t tc, int nt, float* y, int64_t y_stride,
              __mmask16 live) {
  alignas(64) int32_t cbuf[2][2][NH][16][16];  // [ring slot][block of the pair][token half][token][row]
  alignas(64) float acc[16 * NH][16];
  for (auto& v : acc) _mm512_store_ps(v, _mm512_setzero_ps());
  const int64_t np = (nb + 1) / 2;
  const int8_t* x0 = a.xs.data() + tc * cols;
  auto tiles = [&](int64_t p) {
    const uint8_t* pb = grp + p * kPackedQ8PairBytes;
    const bool two = 2 * p + 1 < nb;
    const char* pf = reinterpret_cast<const char*>(pb) + kPrefetch;
    for (int64_t l = 0; l < kPackedQ8PairBytes; l += 64) _mm_prefetch(pf + l, _MM_HINT_T0);
    const int8_t* xa = x0 + 2 * p * 32;
    auto& cb = cbuf[p & 1];
    _tile_loadd(6, pb, 64);
    _tile_loadd(4, xa, cols);
    _tile_zero(0);
    _tile_dpbsud(0, 4, 6);
    if constexpr (NH == 2) {
      _tile_loadd(5, xa + 16 * cols, cols);
      _tile_zero(1);
      _tile_dpbsud(1, 5, 6);
    }
    if (two) {
      _tile_loadd(7, pb + kPackedQ8QsBytes, 64);
      _tile_loadd(4, xa + 32, cols);
      _tile_zero(2);
      _tile_dpbsud(2, 4, 7);
      if constexpr (NH == 2) {
        _tile_loadd(5, xa + 16 * cols + 32, cols);
        _tile_zero(3);
        _tile_dpbsud(3, 5, 7);
      }
    }
    _tile_stored(0, cb[0][0], 64);
    if constexpr (NH == 2) _tile_stored(1, cb[0][1], 64);
    if (two) {
      _tile_stored(2, cb[1][0], 64);
      if constexpr (NH == 2) _tile_stored(3, cb[1][1], 64);
    }
    // The tile asm names no memory operand: keep the vector loads of cbuf after the stores.
    asm volatile("" ::: "memory");
  };
  auto finish = [&](int64_t p) {
    const uint8_t* meta = grp + p * kPackedQ8PairBytes + 2 * kPackedQ8QsBytes;
    const int nblk = 2 * p + 1 < nb ? 2 : 1;
    const auto& cb = cbuf[p & 1];
    __m512 d[2];
    for (int j = 0; j < nblk; ++j) d[j] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(meta + 32 * j)));
    for (int m = 0; m < nt; ++m) {
      const int h = m / 16, i = m % 16;
      const size_t k = static_cast<size_t>((tc + m) * nb + 2 * p);
      __m512 l = _mm512_load_ps(acc[m]);
      for (int j = 0; j < nblk; ++j) {
        const __m512i c = _mm512_add_epi32(_mm512_load_si512(cb[j][h][i]), _mm512_set1_epi32(a.neg[k + j]));
        l = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), _mm512_mul_ps(d[j], _mm512_set1_ps(a.xd[k + j])), l);
      }
      _mm512_store_ps(acc[m], l);
    }
  };
  tiles(0);
  for (int64_t p = 1; p < np; ++p) {
    tiles(p);
    finish(p - 1);
  }
  finish(np - 1);
  for (int m = 0; m < nt; ++m) _mm512_mask_storeu_ps(y + m * y_stride, live, _mm512_load_ps(acc[m]));
}

}  // namespace

void gemm_q8_0_packed_amx(const GemmQ8Job& g, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  TS_CHECK(g.packed != nullptr && g.w_type == DType::kQ8_0 && r0 % 16 == 0);
  const PackedWeights& p = *g.packed;
  const int64_t nb = g.cols / 32, n = t1 - t0;
  thread_local Act act;
  build_act(g, t0, n, &act);
  static const AmxTileConfig cfg = amx_tile_config(32);
  _tile_loadconfig(&cfg);
  int64_t amx_end = 0;  // tokens [0, amx_end) in AMX chunks, the rest below
  for (int c; (c = qblock_amx_chunk(n - amx_end)) > 0;) amx_end += c;
  for (int64_t r = r0; r < r1; r += 16) {
    const uint8_t* grp = p.group(r / 16);
    const int64_t live_rows = std::min<int64_t>(16, std::min(r1, p.rows()) - r);
    const __mmask16 live = live_rows >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << live_rows) - 1u);
    for (int64_t t = 0, c; (c = qblock_amx_chunk(n - t)) > 0; t += c) {
      float* y = g.y + (t0 + t) * g.y_stride + r;
      if (c > 16) {
        row_tile<2>(grp, nb, g.cols, act, t, static_cast<int>(c), y, g.y_stride, live);
      } else {
        row_tile<1>(grp, nb, g.cols, act, t, static_cast<int>(c), y, g.y_stride, live);
      }
    }
  }
  _tile_release();
  if (amx_end < n) gemm_q8_0_packed_tiles_avx512(g, r0, r1, t0 + amx_end, t1);  // the token tail, same order
}

}  // namespace tessera::kernels::cpu
