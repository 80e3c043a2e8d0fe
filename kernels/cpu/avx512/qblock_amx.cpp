// AMX-INT8 tiles for the 32-value block formats' batched GEMM (qblock_tiles.h qblock_amx_gemm):
// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and Q8_0 weights, 16 weight rows x 16 or 32 tokens per step.
// The design of the K-quant AMX tiles (kquant_amx.cpp), with one TDPBSSD per 32-value block:
//
// - A (16 rows x 32 bytes): one block of 16 weight rows as signed bytes. Q8_0 loads it straight
//   from the weights (row stride w_row_bytes); the others unpack 8 blocks of the 16 rows
//   (nibble - 8, | fifth bit, the IQ4_NL table: qblock_formats.h) into a 16 x 256-byte buffer.
// - B (8 rows x 64 bytes): the block's activations of 16 tokens in AMX's layout (row d = dword d
//   of each token), made signed (the Q8_0 path's activations are stored + 128), built once per
//   call for every block and token half; missing tokens are zeros.
// - C = the 16 x 16 exact int32 block dots; AVX-512 then runs the scalar oracle's float
//   arithmetic per weight row with the 16 tokens in one vector: for Q4_0 .. IQ4_NL block b into
//   lane b % 8 by fma(s, d_w * d_x) (Q4_1 / Q5_1 then fma(sum x, m_w * d_x)) and the lanes
//   reduced as reduce_lanes() (quant_gemm.h) — bit-identical to the scalar path; for Q8_0
//   acc = fma(s, d_w * d_x, acc) in block order, bit-identical to its VNNI batch tiles
//   (qblock_tiles_avx512.cpp), so a Q8_0 token's result does not depend on its batch.
//
// A software pipeline over steps s = (row tile, group of 8 blocks), each cut into chunks of 2
// blocks (32 tokens) or 4 (16): the tile ops run two chunks ahead of the float finish, and a
// step is unpacked two steps ahead, so a tile load never waits on the vector stores that
// unpacked its rows (not forwarded from the store buffer), the vector work runs while the tile
// unit computes, and the C tiles go through a 4-chunk ring that stays in L1 (a whole step's
// C tiles, 32 KiB, with the accumulators spilled out of L1: 1.25x slower). Each token's 16
// results are written as one vector.
#include <immintrin.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "amx_tile_config.h"
#include "qblock_formats.h"
#include "qblock_tiles.h"
#include "quant_gemm.h"
#include "tessera/common/check.h"

#pragma GCC target("amx-tile,amx-int8")

namespace tessera::kernels::cpu {
namespace {

using qblock_avx512::transpose16x8;

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
constexpr int kStep = 8;  // blocks per pipeline step (the oracle's 8 lanes: one block each)

// The tokens' activations of every block in B layout, per token half h (NH halves of 16).
struct ActTiles {
  std::vector<int32_t> xb;  // [nb][NH][8 dwords][16 tokens]: signed bytes
  std::vector<float> dx;    // [nb][NH][16]: the block scales (0 for missing tokens)
  std::vector<float> xs;    // [nb][NH][16]: float(the block's sum of activations) (Q4_1, Q5_1)
  std::vector<uint8_t> pad;  // a missing token's row: 0x80 = 0 once signed
};

void build_act(const GemmQ8Job& g, int64_t t0, int n_tokens, int nh, bool sums, ActTiles* a) {
  const int64_t nb = g.cols / 32;
  a->xb.resize(static_cast<size_t>(nb * nh) * 8 * 16);
  a->dx.resize(static_cast<size_t>(nb * nh) * 16);
  if (sums) a->xs.resize(static_cast<size_t>(nb * nh) * 16);
  if (static_cast<int64_t>(a->pad.size()) < g.cols) a->pad.assign(static_cast<size_t>(g.cols), 0x80);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80)), ones = _mm512_set1_epi8(1);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int h = 0; h < nh; ++h) {
    const int live = std::min(16, n_tokens - 16 * h);
    const uint8_t* tok[16];
    for (int l = 0; l < 16; ++l) {
      tok[l] = l < live ? reinterpret_cast<const uint8_t*>(g.xq) + (t0 + 16 * h + l) * g.cols : a->pad.data();
    }
    const __mmask16 live_mask = static_cast<__mmask16>((1u << live) - 1u);
    // xd holds each block's scale 8 times (q8_scale_repeat): token l's block b at l * nb * 8 + b * 8.
    const __m512i didx = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int32_t>(nb * 8)));
    const float* xd0 = g.xd + t0 * nb * 8 + 16 * h * nb * 8;
    for (int64_t b = 0; b < nb; ++b) {
      __m512i r[8], out[8];
      for (int i = 0; i < 8; ++i) {
        r[i] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tok[i] + b * 32))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tok[i + 8] + b * 32)), 1);
      }
      transpose16x8(r, out);
      const int64_t bh = b * nh + h;
      __m512i s = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) {
        out[k] = _mm512_xor_si512(out[k], flip);
        _mm512_storeu_si512(&a->xb[static_cast<size_t>((bh * 8 + k) * 16)], out[k]);
        if (sums) s = _mm512_dpbusd_epi32(s, ones, out[k]);
      }
      if (sums) _mm512_storeu_ps(&a->xs[static_cast<size_t>(bh * 16)], _mm512_cvtepi32_ps(s));
      _mm512_storeu_ps(&a->dx[static_cast<size_t>(bh * 16)],
                       _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live_mask, didx, xd0 + b * 8, 4));
    }
  }
}

// C tiles cr = A tile ar x B tile br (block k of the step, token half h).
#define TS_AMX_BLOCK(k, h, cr, ar, br)                            \
  _tile_zero(cr);                                                 \
  _tile_loadd(br, xb + ((k) * NH + (h)) * 8 * 16, 64);            \
  _tile_dpbssd(cr, ar, br);

template <class F, int NH>
void amx_gemm(const GemmQ8Job& g, int64_t r0, int64_t n_row_tiles, int64_t t0, int n_tokens) {
  constexpr bool kQ8 = std::is_same_v<F, qblock_avx512::Q8_0>;
  constexpr int kLanes = kQ8 ? 1 : 8;
  const int64_t nb = g.cols / 32, groups = (nb + kStep - 1) / kStep;
  const size_t rb = g.w_row_bytes;
  thread_local ActTiles act;
  build_act(g, t0, n_tokens, NH, F::kMin, &act);
  static const AmxTileConfig cfg = amx_tile_config(32);
  _tile_loadconfig(&cfg);
  alignas(64) uint8_t unp_buf[2][16 * 32 * kStep];   // not Q8_0: [row][block][32 values]
  alignas(64) float dw_buf[2][kStep][16];            // the 16 rows' scales per block
  alignas(64) float mw_buf[2][kStep][16];            // and mins (Q4_1, Q5_1)
  constexpr int kChunk = NH == 2 ? 2 : 4;             // blocks per chunk of tile ops
  constexpr int kFin = kQ8 ? 2 : 1;                    // chunks per finish call
  alignas(64) int32_t cbuf_buf[4 * kChunk][NH][16][16];  // a ring of 4 chunks' C tiles
  alignas(64) float acc[NH][kLanes][16][16];          // [half][lane][row][token]
  const int64_t steps = n_row_tiles * groups;
  const __m512i row_off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(static_cast<int32_t>(rb)));
  auto blocks_of = [&](int64_t st) { return static_cast<int>(std::min<int64_t>(kStep, nb - kStep * (st % groups))); };
  auto first_block = [&](int64_t st) { return g.w + (r0 + 16 * (st / groups)) * rb + kStep * (st % groups) * F::kBytes; };
  auto unpack = [&](int64_t st) {
    const uint8_t* w0 = first_block(st);
    const int nblk = blocks_of(st);
    for (int k = 0; k < nblk; ++k) {
      const __m512i raw = _mm512_i32gather_epi32(row_off, w0 + k * F::kBytes, 1);
      _mm512_store_ps(dw_buf[st & 1][k], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw)));
      if constexpr (F::kMin) {
        const __m512i rawm = _mm512_i32gather_epi32(row_off, w0 + k * F::kBytes + 2, 1);
        _mm512_store_ps(mw_buf[st & 1][k], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(rawm)));
      }
    }
    uint8_t* unp = unp_buf[st & 1];
    for (int i = 0; i < 16; ++i) {
      const uint8_t* q = w0 + i * rb;
      // The same blocks of the next row tile (16 rows on): 16 rows read a step at a time are
      // 16 short streams, which the hardware prefetcher follows poorly.
      const char* ahead = reinterpret_cast<const char*>(q) + 16 * rb;
      for (int l = 0; l < nblk * F::kBytes; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
      if constexpr (!kQ8) {
        int k = 0;
        for (; k + 2 <= nblk; k += 2) {
          _mm512_store_si512(unp + i * 32 * kStep + 32 * k, F::values(q + k * F::kBytes, q + (k + 1) * F::kBytes));
        }
        if (k < nblk) {  // the row's last block (not past the row's end)
          _mm256_store_si256(reinterpret_cast<__m256i*>(unp + i * 32 * kStep + 32 * k),
                             _mm512_castsi512_si256(F::values(q + k * F::kBytes, q + k * F::kBytes)));
        }
      }
    }
  };
  // Blocks [k0, k0 + kChunk) of step st: tile ops (C tiles 0..3, stored to cbuf) ...
  auto tile_chunk = [&](int64_t st, int k0, int32_t (*cbuf)[NH][16][16]) {
    const int nblk = blocks_of(st);
    if (k0 >= nblk) return;
    const uint8_t* w0 = first_block(st);
    const uint8_t* unp = unp_buf[st & 1];
    const int32_t* xb = &act.xb[static_cast<size_t>(kStep * (st % groups) * NH * 8 * 16)];
    auto a_tile = [&](int k) { return kQ8 ? w0 + k * F::kBytes + 2 : unp + 32 * k; };
    const size_t a_stride = kQ8 ? rb : 32 * kStep;
    // _tile_loadd's asm names no memory operand: keep the stores it reads (unpacked weights,
    // the B layout) before it.
    asm volatile("" ::: "memory");
    const int k = k0;
    if constexpr (NH == 2) {
      _tile_loadd(4, a_tile(k), a_stride);
      TS_AMX_BLOCK(k, 0, 0, 4, 6)
      TS_AMX_BLOCK(k, 1, 1, 4, 7)
      if (k + 1 < nblk) {
        _tile_loadd(5, a_tile(k + 1), a_stride);
        TS_AMX_BLOCK(k + 1, 0, 2, 5, 6)
        TS_AMX_BLOCK(k + 1, 1, 3, 5, 7)
      }
      _tile_stored(0, cbuf[0][0], 64);
      _tile_stored(1, cbuf[0][1], 64);
      if (k + 1 < nblk) {
        _tile_stored(2, cbuf[1][0], 64);
        _tile_stored(3, cbuf[1][1], 64);
      }
    } else {
      _tile_loadd(4, a_tile(k), a_stride);
      TS_AMX_BLOCK(k, 0, 0, 4, 6)
      if (k + 1 < nblk) {
        _tile_loadd(5, a_tile(k + 1), a_stride);
        TS_AMX_BLOCK(k + 1, 0, 1, 5, 7)
      }
      if (k + 2 < nblk) {
        _tile_loadd(4, a_tile(k + 2), a_stride);
        TS_AMX_BLOCK(k + 2, 0, 2, 4, 6)
      }
      if (k + 3 < nblk) {
        _tile_loadd(5, a_tile(k + 3), a_stride);
        TS_AMX_BLOCK(k + 3, 0, 3, 5, 7)
      }
      _tile_stored(0, cbuf[0][0], 64);
      if (k + 1 < nblk) _tile_stored(1, cbuf[1][0], 64);
      if (k + 2 < nblk) _tile_stored(2, cbuf[2][0], 64);
      if (k + 3 < nblk) _tile_stored(3, cbuf[3][0], 64);
    }
  };
  // ... and the scalar oracle's float arithmetic for blocks [k0, k0 + kFin * kChunk) (their C
  // tiles consecutive from cbuf), per row, 16 tokens per vector.
  auto finish_chunk = [&](int64_t st, int k0, const int32_t (*cbuf)[NH][16][16]) {
    constexpr int kBlocks = kFin * kChunk;
    const int nblk = std::min(blocks_of(st), k0 + kBlocks);
    if (k0 >= nblk) return;
    const int64_t b0 = kStep * (st % groups);
    const auto& dw = dw_buf[st & 1];
    const auto& mw = mw_buf[st & 1];
    for (int h = 0; h < NH; ++h) {
      // Loops to the constant kBlocks with a break: unrolled, so dxv / xsv stay in registers.
      __m512 dxv[kBlocks], xsv[kBlocks];
      for (int j = 0; j < kBlocks; ++j) {
        if (k0 + j >= nblk) break;
        dxv[j] = _mm512_loadu_ps(&act.dx[static_cast<size_t>(((b0 + k0 + j) * NH + h) * 16)]);
        if constexpr (F::kMin) xsv[j] = _mm512_loadu_ps(&act.xs[static_cast<size_t>(((b0 + k0 + j) * NH + h) * 16)]);
      }
      for (int i = 0; i < 16; ++i) {
        if constexpr (kQ8) {  // fma(s, d_w * d_x, acc) in block order, as the VNNI Q8_0 tiles
          __m512 a = _mm512_load_ps(acc[h][0][i]);
          for (int j = 0; j < kBlocks; ++j) {
            if (k0 + j >= nblk) break;
            const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(cbuf[j][h][i]));
            a = _mm512_fmadd_ps(s, _mm512_mul_ps(_mm512_set1_ps(dw[k0 + j][i]), dxv[j]), a);
          }
          _mm512_store_ps(acc[h][0][i], a);
        } else {  // block b0 + k into lane (b0 + k) % 8
          for (int j = 0; j < kBlocks; ++j) {
            const int k = k0 + j;
            if (k >= nblk) break;
            float* lane = acc[h][(b0 + k) & 7][i];
            __m512 l = _mm512_load_ps(lane);
            const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(cbuf[j][h][i]));
            l = _mm512_fmadd_ps(s, _mm512_mul_ps(_mm512_set1_ps(dw[k][i]), dxv[j]), l);
            if constexpr (F::kMin) l = _mm512_fmadd_ps(xsv[j], _mm512_mul_ps(_mm512_set1_ps(mw[k][i]), dxv[j]), l);
            _mm512_store_ps(lane, l);
          }
        }
      }
    }
  };
  // Row tile r's results: per token, its 16 rows as one vector (a column of res): 16 stores
  // rather than 256 scalar ones at the output's row stride (all in one L1 set).
  auto write = [&](int64_t r) {
    const __m512i col = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(16));
    alignas(64) float res[16][16];
    for (int h = 0; h < NH; ++h) {
      for (int i = 0; i < 16; ++i) {
        __m512 y = _mm512_load_ps(acc[h][0][i]);
        if constexpr (!kQ8) {
          const auto& l = acc[h];
          const __m512 a = _mm512_add_round_ps(_mm512_add_round_ps(_mm512_load_ps(l[0][i]), _mm512_load_ps(l[4][i]), kRound),
                                               _mm512_add_round_ps(_mm512_load_ps(l[2][i]), _mm512_load_ps(l[6][i]), kRound), kRound);
          const __m512 b = _mm512_add_round_ps(_mm512_add_round_ps(_mm512_load_ps(l[1][i]), _mm512_load_ps(l[5][i]), kRound),
                                               _mm512_add_round_ps(_mm512_load_ps(l[3][i]), _mm512_load_ps(l[7][i]), kRound), kRound);
          y = _mm512_add_round_ps(a, b, kRound);
        }
        _mm512_store_ps(res[i], y);
      }
      const int live = std::min(16, n_tokens - 16 * h);
      for (int j = 0; j < live; ++j) {
        _mm512_storeu_ps(g.y + (t0 + 16 * h + j) * g.y_stride + r, _mm512_i32gather_ps(col, &res[0][j], 4));
      }
    }
  };
  // Chunk q = (step q / cps, blocks from (q % cps) * kChunk), its C tiles in ring slot q % 4:
  // the tile ops of chunk q + 2, then the finish of chunk q (Q8_0: of chunks q - 1 and q, so
  // its one accumulator per row is loaded and stored half as often).
  constexpr int cps = kStep / kChunk;
  const int64_t n_chunks = steps * cps;
  auto tile_q = [&](int64_t q) { tile_chunk(q / cps, static_cast<int>(q % cps) * kChunk, cbuf_buf + (q & 3) * kChunk); };
  unpack(0);
  if (steps > 1) unpack(1);
  tile_q(0);
  if (n_chunks > 1) tile_q(1);
  for (int64_t st = 0; st < steps; ++st) {
    if (st % groups == 0) {
      for (auto& half : acc) {
        for (auto& lane : half) {
          for (auto& row : lane) _mm512_store_ps(row, _mm512_setzero_ps());
        }
      }
    }
    for (int c = 0; c < cps; ++c) {
      const int64_t q = st * cps + c;
      if (q + 2 < n_chunks) tile_q(q + 2);
      if ((c + 1) % kFin == 0) finish_chunk(st, (c + 1 - kFin) * kChunk, cbuf_buf + ((q + 1 - kFin) & 3) * kChunk);
    }
    if (st + 2 < steps) unpack(st + 2);
    if (st % groups == groups - 1) write(r0 + 16 * (st / groups));
  }
  _tile_release();
}
#undef TS_AMX_BLOCK

template <class F>
void amx_gemm_n(const GemmQ8Job& g, int64_t r0, int64_t n_row_tiles, int64_t t0, int n_tokens) {
  if (n_tokens > 16) {
    amx_gemm<F, 2>(g, r0, n_row_tiles, t0, n_tokens);
  } else {
    amx_gemm<F, 1>(g, r0, n_row_tiles, t0, n_tokens);
  }
}

}  // namespace

void qblock_amx_gemm(const GemmQ8Job& job, int64_t r0, int64_t n_row_tiles, int64_t t0, int n_tokens) {
  TS_CHECK(n_tokens >= 1 && n_tokens <= 32) << "qblock_amx_gemm: " << n_tokens << " tokens";
  switch (job.w_type) {
    case DType::kQ4_0: amx_gemm_n<qblock_avx512::Q4_0>(job, r0, n_row_tiles, t0, n_tokens); return;
    case DType::kQ4_1: amx_gemm_n<qblock_avx512::Q4_1>(job, r0, n_row_tiles, t0, n_tokens); return;
    case DType::kQ5_0: amx_gemm_n<qblock_avx512::Q5_0>(job, r0, n_row_tiles, t0, n_tokens); return;
    case DType::kQ5_1: amx_gemm_n<qblock_avx512::Q5_1>(job, r0, n_row_tiles, t0, n_tokens); return;
    case DType::kIQ4_NL: amx_gemm_n<qblock_avx512::IQ4_NL>(job, r0, n_row_tiles, t0, n_tokens); return;
    case DType::kQ8_0: amx_gemm_n<qblock_avx512::Q8_0>(job, r0, n_row_tiles, t0, n_tokens); return;
    default: break;
  }
  TS_CHECK(false) << "qblock_amx_gemm: no AMX path for " << dtype_name(job.w_type);
}

}  // namespace tessera::kernels::cpu
