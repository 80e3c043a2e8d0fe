// Softmax terms for samplers: exp(x[i] * scale - shift) over a row of logits, summed.
//
// exp_affine_sum(x, n, scale, shift, out, isa) returns the sum over i in [0, n) of
// e_i = exp(x[i] * scale - shift) (x[i] * scale rounded to float first, then shift subtracted:
// the argument a sampler forms with shift = the row's largest x * scale, so every argument is
// <= 0 and the largest term is exactly 1). Terms whose argument is below -87 (including -inf:
// masked tokens) are exactly 0. When `out` is not null, e_i is also written to out[i].
// The terms are floats: on Isa::kAvx512 a polynomial over 16 lanes (relative error under 1e-6), otherwise std::exp in
// float; the sum is accumulated in float lanes per 16 terms and in double across them, so the
// same call gives the same bits every time (a walk over `out` for one row piece reproduces it
// only up to rounding; see worker/src/sampling/sampler.cpp). Pure function; thread-safe.
#pragma once

#include <cstdint>

#include "tessera/kernels/isa.h"

namespace tessera::kernels {

double exp_affine_sum(const float* x, int64_t n, float scale, float shift, float* out, Isa isa);

// The greedy choice: the lowest i in [0, n) holding the row's largest value, i.e. what the walk
// `best = 0; for i: if (x[i] > x[best]) best = i` returns — for every row, NaNs included (the
// vector paths take that walk for a row that has one). n >= 1. Pure function; thread-safe.
int64_t argmax(const float* x, int64_t n, Isa isa);

}  // namespace tessera::kernels
