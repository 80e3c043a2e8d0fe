// IEEE half and bfloat16 <-> float conversions for the loaders (scalar, exact,
// round-to-nearest-even, equal to ggml's GGML_FP32_TO_FP16 / GGML_FP16_TO_FP32 on every
// non-NaN value), and an unaligned 16-bit load.
#pragma once

#include <cstdint>
#include <cstring>

#include "tessera/kernels/ops.h"

namespace tessera::worker::loaders {

// The conversions are the kernels' (round-to-nearest-even, exact); the loaders use them unqualified.
using kernels::bf16_to_f32;
using kernels::f32_to_bf16;
using kernels::f32_to_fp16;
using kernels::fp16_to_f32;

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace tessera::worker::loaders
