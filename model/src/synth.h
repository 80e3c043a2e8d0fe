// Internals of model synth (tessera/worker/model_synth.h) exposed for tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/model/model_synth.h"

namespace tessera::loaders {

// The f32 values synth writes for tensor `name` (n elements). `kind`: 0 matrix, 1 norm, 2 bias.
void synth_values(uint64_t seed, const std::string& name, int kind, size_t n, float* out);
// ggml quantize_row_q8_0_ref: n must be a multiple of 32; writes n / 32 * 34 bytes.
void quantize_q8_0(const float* x, int64_t n, uint8_t* out);

}  // namespace tessera::loaders
