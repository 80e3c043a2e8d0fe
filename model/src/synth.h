// Internals of model synth (tessera/worker/model_synth.h) exposed for tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/model/model_synth.h"

namespace tessera::loaders {

// The f32 values synth writes for tensor `name` (n elements). `kind`: 0 matrix (uniform with
// standard deviation std_dev), 1 norm, 2 bias.
void synth_values(uint64_t seed, const std::string& name, int kind, size_t n, float* out, float std_dev = 0.02f);
// The Llama 3 RoPE frequency factors convert_hf_to_gguf.py writes as rope_freqs.weight for
// rope_scaling {rope_type: llama3, factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings} (defaults: Llama 3.1's 1, 4, 8192): head_dim / 2 values,
// each the divisor of its frequency. The Hugging Face loader computes them the same way.
std::vector<float> llama3_rope_factors(float theta, int32_t head_dim, float factor, double low_freq_factor = 1.0,
                                       double high_freq_factor = 4.0, double old_context = 8192.0);
// ggml quantize_row_q8_0_ref: n must be a multiple of 32; writes n / 32 * 34 bytes.
void quantize_q8_0(const float* x, int64_t n, uint8_t* out);

}  // namespace tessera::loaders
