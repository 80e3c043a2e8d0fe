// Private to the ggml-format codecs (quants_*.cpp): ggml's rounding and scale searches.
#pragma once

#include <cstdint>
#include <cstring>

#include "tessera/common/dtype.h"
#include "tessera/common/quants.h"

namespace tessera::quants {

inline constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest (ties to even) through the float mantissa, as ggml does; |f| <= 4194303.
inline int nearest_int(float f) {
  const float v = f + 12582912.f;
  int i;
  std::memcpy(&i, &v, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

// ggml's scale searches (quants_search.cpp). L gets levels offset to be non-negative.
// Symmetric levels in [-nmax, nmax) with weights by rmse_type (1: x^2), no importance matrix.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, int rmse_type);
// Q3_K sub-block levels with iterative refinement (do_rmse = true).
float make_q3_quants(int n, int nmax, const float* x, int8_t* L);
// Asymmetric levels in [0, nmax]: returns the scale, *the_min gets -min (>= 0).
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad);

// One super-block (256 values) / block (IQ4_NL: 32) each (quants_kquant.cpp).
void quantize_q2_k(const float* x, BlockQ2_K* y);
void quantize_q3_k(const float* x, BlockQ3_K* y);
void quantize_q4_k(const float* x, BlockQ4_K* y);
void quantize_q5_k(const float* x, BlockQ5_K* y);
void quantize_q6_k(const float* x, BlockQ6_K* y);
void quantize_iq4_nl(const float* x, BlockIQ4_NL* y);
void quantize_iq4_xs(const float* x, BlockIQ4_XS* y);

}  // namespace tessera::quants
