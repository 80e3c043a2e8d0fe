// AMX-INT8 tiles for the K-quant GEMM (Q4_K, Q5_K, Q6_K; quant_gemm.h kquant_amx_gemm): 16
// weight rows x 16 activation rows per step. Used by the AVX-512 tiled path
// (kquant_tiles_avx512.cpp) for every full 16 x 16 piece when the CPU has AMX-TILE and
// AMX-INT8 and the kernel grants the tile state (arch_prctl ARCH_REQ_XCOMP_PERM).
//
// Per super-block the 16 rows' values are unpacked to bytes (256 per row); the activations are
// laid out once per call in AMX's B format (row d of the block = dword d of each of the 16
// tokens). Q4_K / Q5_K fold their 6-bit group scales into the weight operand (s = 8 hi + lo:
// the bytes q * lo and q * hi, see Q4K below), so two C tiles per super-block, accumulated over
// all 8 groups by TDPBUSD with K = 64, give S = C_lo + 8 C_hi exactly; Q6_K (signed 8-bit scales
// per 16 values) takes one TDPBSSD on q - 32 per group and applies the scales in int32
// (vpmulld). AVX-512 then applies the Q4_K / Q5_K mins through the activations' bsums
// (vpdpwssd) and the float part per weight row with the 16 tokens in one vector, in the order
// of the scalar finish_* (quant_dot.cpp), so the results stay bit-identical to the scalar oracle.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

// GCC 12 flags its own intrinsic headers (self-initialized "undefined" vectors, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "amx_tile_config.h"
#include "quant_gemm.h"

#pragma GCC target("amx-tile,amx-int8")

namespace tessera::kernels::cpu {
namespace {

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

bool amx_granted() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if ((d & (1u << 24)) == 0 || (d & (1u << 25)) == 0) return false;  // AMX-TILE, AMX-INT8
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

inline __m512i nibbles64(const uint8_t* qs32) {
  const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs32)));
  const __m512i shift = _mm512_setr_epi64(0, 0, 0, 0, 0x0004000400040004LL, 0x0004000400040004LL,
                                          0x0004000400040004LL, 0x0004000400040004LL);
  return _mm512_and_si512(_mm512_srlv_epi16(raw, shift), _mm512_set1_epi8(0x0F));
}

// The 8 scales (bytes 0..7) and mins (8..15) of a Q4_K / Q5_K block (q4k_scale_min).
inline void q4k_scales_mins(const uint8_t* s, uint8_t out[16]) {
  uint32_t u[4];
  std::memcpy(u, s, 12);
  constexpr uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
  u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
  const uint32_t aux = u[1] & k1;
  u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
  u[2] = aux;
  u[0] &= k1;
  std::memcpy(out, u, 16);
}

// Word lanes 0..15 = element 2c of a word vector, 16..31 = element 2c + 1 (chunk c's two
// scale groups of 32 values).
struct PairIdx {
  alignas(64) int16_t idx[4][32] = {};
  constexpr PairIdx() {
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) idx[c][l] = static_cast<int16_t>(2 * c + l / 16);
    }
  }
};
constexpr PairIdx kPairIdx;

// Q4_K / Q5_K fold the 6-bit group scales into the tile operand ("split scales"): with
// s = 8 * hi + lo (hi, lo in 0..7), the bytes q * lo and q * hi (q <= 31: at most 217) are two
// u8 operands, and per super-block one C tile each accumulates all 8 groups (K = 64 per
// TDPBUSD): S = C_lo + 8 * C_hi, the exact sum of scale x group dot, with no per-group work in
// the finish. The byte products come from one vpmullw per 32 words: both bytes of a word
// belong to one group and the low byte's product is below 256, so nothing carries.
struct Q4K {
  using Block = BlockQ4_K;
  static constexpr int kGroup = 32;
  static constexpr bool kMin = true;
  static constexpr bool kSplit = true;
  static __m512i chunk(const Block& q, int c) { return nibbles64(q.qs + 32 * c); }
  static uint16_t dmin(const Block& q) { return q.dmin; }
};

struct Q5K : Q4K {
  using Block = BlockQ5_K;
  static __m512i chunk(const Block& q, int c) {
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.qh)));
    const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(2 * c)),
                                             _mm256_set1_epi16(static_cast<int16_t>(2 * c + 1)), 1);
    const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(qh, shift), _mm512_set1_epi8(1));
    return _mm512_or_si512(nibbles64(q.qs + 32 * c), _mm512_slli_epi16(bit, 4));
  }
  static uint16_t dmin(const Block& q) { return q.dmin; }
};

// One row's super-block as the split operands (256 bytes each); sm = its scales and mins. The
// mins go to mw as int16 (8 words), so the finish broadcasts their pairs from memory.
template <class F>
inline void unpack_split(const typename F::Block& q, const uint8_t sm[16], uint8_t* lo, uint8_t* hi, int16_t* mw) {
  const __m256i sw256 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm)));
  _mm_store_si128(reinterpret_cast<__m128i*>(mw), _mm256_extracti128_si256(sw256, 1));
  const __m512i sw = _mm512_castsi256_si512(sw256);
  const __m512i slo = _mm512_and_si512(sw, _mm512_set1_epi16(7)), shi = _mm512_srli_epi16(sw, 3);
  for (int c = 0; c < 4; ++c) {
    const __m512i v = F::chunk(q, c);
    const __m512i idx = _mm512_load_si512(kPairIdx.idx[c]);
    _mm512_storeu_si512(lo + 64 * c, _mm512_mullo_epi16(v, _mm512_permutexvar_epi16(idx, slo)));
    _mm512_storeu_si512(hi + 64 * c, _mm512_mullo_epi16(v, _mm512_permutexvar_epi16(idx, shi)));
  }
}

struct Q6K {
  using Block = BlockQ6_K;
  static constexpr int kGroup = 16;
  static constexpr bool kMin = false;
  static constexpr bool kSplit = false;  // signed 8-bit scales per 16 values: one C tile per group
  static void unpack(const Block& q, uint8_t* out) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    const __m512i sh0 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i sh1 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(q.ql + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.qh + 32 * h)));
      // Signed values q - 32 (TDPBSSD), so the dots need no offset term through the bsums.
      const __m512i v0 = _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_and_si512(_mm512_sllv_epi16(qh, sh0), bits45));
      const __m512i v1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                         _mm512_and_si512(_mm512_srlv_epi16(qh, sh1), bits45));
      _mm512_storeu_si512(out + 128 * h, _mm512_sub_epi8(v0, _mm512_set1_epi8(32)));
      _mm512_storeu_si512(out + 128 * h + 64, _mm512_sub_epi8(v1, _mm512_set1_epi8(32)));
    }
  }
  static uint16_t dmin(const Block&) { return 0; }
};

// The 16 tokens' activations of every super-block in AMX's B layout, with their scales and
// bsums per token lane: built once per call, read by every 16-row step. Tokens in halves of
// 16 (h): one B tile per half and scale group.
struct ActTile {
  std::vector<int32_t> xb;   // [nb][h][64 dwords][16 tokens]
  std::vector<float> dx;     // [nb][h][16]
  std::vector<int32_t> bw;   // [nb][h][8][16]: bsums dword g (bs[2g] | bs[2g + 1] << 16)
};

void build_act(const BlockQ8_K* x0, int64_t nb, int nh, ActTile* a) {
  a->xb.resize(static_cast<size_t>(nb * nh) * 64 * 16);
  a->dx.resize(static_cast<size_t>(nb * nh) * 16);
  a->bw.resize(static_cast<size_t>(nb * nh) * 8 * 16);
  const __m512i tok = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(static_cast<int32_t>(nb * sizeof(BlockQ8_K))));
  for (int64_t b = 0; b < nb; ++b) {
    for (int h = 0; h < nh; ++h) {
      const auto* base = reinterpret_cast<const uint8_t*>(x0 + 16 * h * nb + b);
      const int64_t bh = b * nh + h;
      for (int d = 0; d < 64; ++d) {
        _mm512_storeu_si512(&a->xb[(bh * 64 + d) * 16], _mm512_i32gather_epi32(tok, base + offsetof(BlockQ8_K, qs) + 4 * d, 1));
      }
      _mm512_storeu_ps(&a->dx[bh * 16], _mm512_i32gather_ps(tok, base + offsetof(BlockQ8_K, d), 1));
      for (int g = 0; g < 8; ++g) {
        _mm512_storeu_si512(&a->bw[(bh * 8 + g) * 16], _mm512_i32gather_epi32(tok, base + offsetof(BlockQ8_K, bsums) + 4 * g, 1));
      }
    }
  }
}

// Q4_K / Q5_K mins: bsums dwords 2w and 2w + 1 -> per token the int16 pair (sum of sub-block
// 2w's 32 values, sum of sub-block 2w + 1's), against the row's mins (m_{2w}, m_{2w+1}).
inline __m512i pair_sums(__m512i bw0, __m512i bw1) {
  const __m512i ones = _mm512_set1_epi16(1);
  const __m512i lo = _mm512_madd_epi16(bw0, ones), hi = _mm512_madd_epi16(bw1, ones);  // int32, |v| <= 4096
  return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(hi, 16));
}

// One token half: C tile cr = A tile ar (group k's weights) x B tile br (group k, half h).
#define TS_AMX_GROUP(k, h, cr, ar, br)                                                   \
  _tile_zero(cr);                                                                        \
  _tile_loadd(br, xb + ((h) * 64 + (k) * (F::kGroup / 4)) * 16, 64);                     \
  if constexpr (F::kMin) {                                                               \
    _tile_dpbusd(cr, ar, br);                                                            \
  } else {                                                                               \
    _tile_dpbssd(cr, ar, br);                                                            \
  }

// NH token halves (16 or 32 tokens) x 16-row steps.
template <class F, int NH>
void amx_gemm(const QuantGemmJob& g, int64_t r0, int64_t n_row_tiles, int64_t t0) {
  using Block = typename F::Block;
  constexpr bool kSplit = F::kSplit;
  static_assert(kSplit == F::kMin, "the split-scale finish reads the mins unpacked with the scales");
  constexpr int kGroups = kQK_K / F::kGroup;  // 8 or 16
  constexpr int kOps = kSplit ? 2 : 1;        // operand buffers per row: lo and hi, or the values
  constexpr int kC = kSplit ? 2 : kGroups;    // C results per (token half, row): lo and hi, or one per group
  const int64_t nb = g.cols / kQK_K;
  thread_local ActTile act;
  build_act(g.xk + t0 * nb, nb, NH, &act);
  static const AmxTileConfig cfg = amx_tile_config(kSplit ? 64 : F::kGroup);
  _tile_loadconfig(&cfg);
  // A software pipeline over the steps s = (row tile, block): each iteration unpacks step
  // s + 2, issues the tile ops of step s + 1 and finishes step s, so a whole iteration lies
  // between a step's unpacking stores and its tile loads (tile loads are not forwarded from the
  // store buffer; with the unpacking last in the iteration, next to the tile loads that read
  // it, a 16-token Q4_K step took ~6 % longer) and between its tile stores and the vector
  // loads of its finish. The scales / mins buffers are three deep: step s + 2's unpacking
  // comes before step s's finish.
  alignas(64) uint8_t unp_buf[2][kOps][16 * 256];
  alignas(64) uint8_t sm_buf[3][16][16];  // split: each row's scales (0..7) and mins (8..15)
  alignas(64) int16_t mw_buf[3][16][8];   // split: each row's mins as int16
  alignas(64) int32_t cbuf_buf[2][kC][NH][16][16];
  alignas(64) float acc[NH][16][16];
  const int64_t steps = n_row_tiles * nb;
  auto unpack = [&](int64_t st) {
    const int64_t r = r0 + 16 * (st / nb), b = st % nb;
    auto& unp = unp_buf[st & 1];
    for (int i = 0; i < 16; ++i) {
      const Block& q = reinterpret_cast<const Block*>(g.w + (r + i) * g.w_row_bytes)[b];
      // The same block of the next row tile (16 rows on): 16 rows read a block at a time
      // are 16 short streams, which the hardware prefetcher follows poorly.
      const char* ahead = reinterpret_cast<const char*>(&q) + 16 * g.w_row_bytes;
      for (size_t l = 0; l < sizeof(Block); l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
      if constexpr (kSplit) {
        q4k_scales_mins(q.scales, sm_buf[st % 3][i]);
        unpack_split<F>(q, sm_buf[st % 3][i], unp[0] + 256 * i, unp[1] + 256 * i, mw_buf[st % 3][i]);
      } else {
        F::unpack(q, unp[0] + 256 * i);
      }
    }
  };
  auto tile_ops = [&](int64_t st) {
    const int64_t b = st % nb;
    const uint8_t* unp = unp_buf[st & 1][0];
    auto& cbuf = cbuf_buf[st & 1];
    const int32_t* xb = &act.xb[b * NH * 64 * 16];
    if constexpr (kSplit) {
      const uint8_t* hi = unp_buf[st & 1][1];
      _tile_zero(0);
      _tile_zero(1);
      if constexpr (NH == 2) {
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int c = 0; c < 4; ++c) {  // K = 64 values (two scale groups) per TDPBUSD
        _tile_loadd(4, unp + 64 * c, 256);
        _tile_loadd(5, hi + 64 * c, 256);
        _tile_loadd(6, xb + 16 * c * 16, 64);
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 5, 6);
        if constexpr (NH == 2) {
          _tile_loadd(7, xb + (64 + 16 * c) * 16, 64);
          _tile_dpbusd(2, 4, 7);
          _tile_dpbusd(3, 5, 7);
        }
      }
      _tile_stored(0, cbuf[0][0], 64);
      _tile_stored(1, cbuf[1][0], 64);
      if constexpr (NH == 2) {
        _tile_stored(2, cbuf[0][NH - 1], 64);
        _tile_stored(3, cbuf[1][NH - 1], 64);
      }
    } else if constexpr (NH == 1) {
      for (int k = 0; k < kGroups; k += 4) {
        _tile_loadd(4, unp + F::kGroup * k, 256);
        TS_AMX_GROUP(k, 0, 0, 4, 6)
        _tile_loadd(5, unp + F::kGroup * (k + 1), 256);
        TS_AMX_GROUP(k + 1, 0, 1, 5, 7)
        _tile_loadd(4, unp + F::kGroup * (k + 2), 256);
        TS_AMX_GROUP(k + 2, 0, 2, 4, 6)
        _tile_loadd(5, unp + F::kGroup * (k + 3), 256);
        TS_AMX_GROUP(k + 3, 0, 3, 5, 7)
        _tile_stored(0, cbuf[k][0], 64);
        _tile_stored(1, cbuf[k + 1][0], 64);
        _tile_stored(2, cbuf[k + 2][0], 64);
        _tile_stored(3, cbuf[k + 3][0], 64);
      }
    } else {
      for (int k = 0; k < kGroups; k += 2) {
        _tile_loadd(4, unp + F::kGroup * k, 256);
        _tile_loadd(5, unp + F::kGroup * (k + 1), 256);
        TS_AMX_GROUP(k, 0, 0, 4, 6)
        TS_AMX_GROUP(k, 1, 1, 4, 7)
        TS_AMX_GROUP(k + 1, 0, 2, 5, 6)
        TS_AMX_GROUP(k + 1, 1, 3, 5, 7)
        _tile_stored(0, cbuf[k][0], 64);
        _tile_stored(1, cbuf[k][NH - 1], 64);
        _tile_stored(2, cbuf[k + 1][0], 64);
        _tile_stored(3, cbuf[k + 1][NH - 1], 64);
      }
    }
  };
  unpack(0);
  if (steps > 1) unpack(1);
  tile_ops(0);
  for (int64_t st = 0; st < steps; ++st) {
    const int64_t r = r0 + 16 * (st / nb), b = st % nb;
    if (b == 0) {
      for (auto& half : acc) {
        for (auto& row : half) _mm512_store_ps(row, _mm512_setzero_ps());
      }
    }
    if (st + 2 < steps) unpack(st + 2);
    if (st + 1 < steps) tile_ops(st + 1);
    {
      auto& cbuf = cbuf_buf[st & 1];
      __m512 dxv[NH];
      __m512i bp[NH][4];  // Q4_K / Q5_K: the tokens' sub-block sums, as int16 pairs
      const int32_t* bw[NH];
      for (int h = 0; h < NH; ++h) {
        dxv[h] = _mm512_loadu_ps(&act.dx[(b * NH + h) * 16]);
        bw[h] = &act.bw[(b * NH + h) * 8 * 16];
        if constexpr (F::kMin) {
          for (int w2 = 0; w2 < 4; ++w2) bp[h][w2] = pair_sums(_mm512_loadu_si512(bw[h] + (2 * w2) * 16), _mm512_loadu_si512(bw[h] + (2 * w2 + 1) * 16));
        }
      }
      for (int i = 0; i < 16; ++i) {
        const Block& q = reinterpret_cast<const Block*>(g.w + (r + i) * g.w_row_bytes)[b];
        uint16_t dh;
        std::memcpy(&dh, &q.d, 2);
        const __m512 dv = _mm512_set1_ps(_cvtsh_ss(dh));
        const int16_t* mw = mw_buf[st % 3][i];
        for (int h = 0; h < NH; ++h) {
          __m512i s = _mm512_setzero_si512();
          [[maybe_unused]] __m512i m = _mm512_setzero_si512();
          if constexpr (kSplit) {  // S = C_lo + 8 * C_hi
            s = _mm512_add_epi32(_mm512_load_si512(cbuf[0][h][i]), _mm512_slli_epi32(_mm512_load_si512(cbuf[1][h][i]), 3));
          } else {
            // The group dots are of q - 32 already (signed tiles): the same integer as the
            // scalar path's raw dots minus 32 x the scales . bsums.
            for (int k = 0; k < kGroups; ++k) s = _mm512_add_epi32(s, _mm512_mullo_epi32(_mm512_load_si512(cbuf[k][h][i]), _mm512_set1_epi32(q.scales[k])));
          }
          if constexpr (F::kMin) {
            for (int w2 = 0; w2 < 4; ++w2) {
              int32_t pair;
              std::memcpy(&pair, mw + 2 * w2, 4);
              m = _mm512_dpwssd_epi32(m, _mm512_set1_epi32(pair), bp[h][w2]);
            }
          }
          __m512 a = _mm512_load_ps(acc[h][i]);
          a = _mm512_add_round_ps(a, _mm512_mul_round_ps(_mm512_mul_round_ps(dv, dxv[h], kRound), _mm512_cvt_roundepi32_ps(s, kRound), kRound), kRound);
          if constexpr (F::kMin) {
            const __m512 mv = _mm512_set1_ps(_cvtsh_ss(F::dmin(q)));
            a = _mm512_sub_round_ps(a, _mm512_mul_round_ps(_mm512_mul_round_ps(mv, dxv[h], kRound), _mm512_cvt_roundepi32_ps(m, kRound), kRound), kRound);
          }
          _mm512_store_ps(acc[h][i], a);
        }
      }
    }
    if (b + 1 < nb) continue;
    // Token by token, the 16 rows' results as one vector (a column of acc): 16 stores rather
    // than 256 scalar ones, which with the output's row stride all fall in one L1 set.
    const __m512i col = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(16));
    for (int h = 0; h < NH; ++h) {
      for (int j = 0; j < 16; ++j) {
        _mm512_storeu_ps(g.y + (t0 + 16 * h + j) * g.y_stride + r, _mm512_i32gather_ps(col, &acc[h][0][j], 4));
      }
    }
  }
  _tile_release();
}
#undef TS_AMX_GROUP

template <class F>
void amx_gemm_n(const QuantGemmJob& g, int64_t r0, int64_t n_row_tiles, int64_t t0, int n_tokens) {
  if (n_tokens == 32) {
    amx_gemm<F, 2>(g, r0, n_row_tiles, t0);
  } else {
    amx_gemm<F, 1>(g, r0, n_row_tiles, t0);
  }
}

}  // namespace

bool kquant_amx_available() {
  static const bool on = [] {
    const char* e = std::getenv("TESSERA_KQUANT_AMX");
    return (e == nullptr || std::strcmp(e, "0") != 0) && amx_granted();
  }();
  return on;
}

void kquant_amx_gemm(const QuantGemmJob& job, int64_t r0, int64_t n_row_tiles, int64_t t0, int n_tokens) {
  switch (job.w_type) {
    case DType::kQ4_K: amx_gemm_n<Q4K>(job, r0, n_row_tiles, t0, n_tokens); return;
    case DType::kQ5_K: amx_gemm_n<Q5K>(job, r0, n_row_tiles, t0, n_tokens); return;
    case DType::kQ6_K: amx_gemm_n<Q6K>(job, r0, n_row_tiles, t0, n_tokens); return;
    default: return;
  }
}

}  // namespace tessera::kernels::cpu
