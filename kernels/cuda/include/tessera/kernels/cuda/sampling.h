// Token sampling on the device, one block per logits row (see types.h for conventions).
//
// Per row, in the order of the CPU Sampler (worker/sampler.h) minus penalties and logprobs
// (the worker applies those on the host when a request asks for them):
//   temperature == 0 or top_k == 1: greedy argmax, lowest id on ties;
//   otherwise z = logits / temperature -> top-k -> softmax -> min-p -> top-p -> one draw.
// Thresholds are found exactly by bisection over the 32-bit ordering of floats, so ties at a
// threshold are all kept (the CPU keeps exactly k). The draw walks the survivors in id order
// and picks the first id whose cumulative probability exceeds uniform[row] (the CPU walks them
// most-likely-first): same distribution, not the same token for the same random number.
// The caller draws uniform[row] from the request's own RNG, so sampling stays reproducible.
#pragma once

#include "tessera/kernels/cuda/types.h"

namespace tessera::kernels::cuda {

struct SampleArgs {
  const float* logits = nullptr;   // [n_rows, vocab] f32, row stride `stride` (not modified)
  int64_t stride = 0;
  int32_t vocab = 0;
  int32_t n_rows = 0;
  const float* temperature = nullptr;  // [n_rows] >= 0
  const int32_t* top_k = nullptr;      // [n_rows] 0 = off
  const float* top_p = nullptr;        // [n_rows] in (0, 1]
  const float* min_p = nullptr;        // [n_rows] in [0, 1]
  const float* uniform = nullptr;      // [n_rows] in [0, 1)
  int32_t* out_tokens = nullptr;       // [n_rows]
};

cudaError_t sample_tokens(const SampleArgs& args, cudaStream_t stream);

// Greedy only: out_tokens[r] = argmax of row r (lowest id on ties).
cudaError_t argmax_rows(const float* logits, int64_t stride, int32_t vocab, int32_t n_rows, int32_t* out_tokens,
                        cudaStream_t stream);

}  // namespace tessera::kernels::cuda
