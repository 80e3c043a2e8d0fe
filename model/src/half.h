// The loaders' view of the half conversions (the one implementation is common/half.h) and an
// unaligned little-endian u16 load.
#pragma once

#include <cstdint>
#include <cstring>

#include "tessera/common/half.h"

namespace tessera::loaders {

using tessera::bf16_to_f32;
using tessera::f32_to_bf16;
using tessera::f32_to_fp16;
using tessera::fp16_to_f32;

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace tessera::loaders
