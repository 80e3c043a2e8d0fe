#include "tessera/kernels/kv_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessera/common/check.h"
#include "tessera/common/half.h"

namespace tessera::kernels {

const char* kv_dtype_name(KvDtype d) {
  switch (d) {
    case KvDtype::kF32: return "f32";
    case KvDtype::kF16: return "f16";
    case KvDtype::kInt8: return "int8";
  }
  return "unknown";
}

std::optional<KvDtype> parse_kv_dtype(std::string_view name) {
  for (KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kInt8}) {
    if (name == kv_dtype_name(d)) return d;
  }
  return std::nullopt;
}

KvRowFormat kv_row_format(KvDtype dtype, int32_t head_dim) {
  TS_CHECK_GT(head_dim, 0);
  KvRowFormat f{.dtype = dtype, .head_dim = head_dim, .group = 0};
  if (dtype == KvDtype::kInt8) {
    f.group = head_dim;
    for (int32_t g : {32, 16, 8}) {
      if (head_dim % g == 0) {
        f.group = g;
        break;
      }
    }
  }
  return f;
}

void kv_encode_row(const KvRowFormat& f, const float* x, uint8_t* dst) {
  const int32_t hd = f.head_dim;
  switch (f.dtype) {
    case KvDtype::kF32: std::memcpy(dst, x, 4 * static_cast<size_t>(hd)); return;
    case KvDtype::kF16:
      for (int32_t i = 0; i < hd; ++i) {
        const uint16_t h = f32_to_fp16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvDtype::kInt8: {
      const int32_t ng = f.n_groups();
      int8_t* q = reinterpret_cast<int8_t*>(dst + 2 * ng);
      for (int32_t g = 0; g < ng; ++g) {
        float amax = 0.0f;
        for (int32_t i = g * f.group; i < (g + 1) * f.group; ++i) {
          if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
        }
        const uint16_t hs = f32_to_fp16(amax / 127.0f);
        std::memcpy(dst + 2 * g, &hs, 2);
        const float d = fp16_to_f32(hs);
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        for (int32_t i = g * f.group; i < (g + 1) * f.group; ++i) {
          const float v = std::isfinite(x[i]) ? std::nearbyint(x[i] * id) : 0.0f;
          q[i] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
        }
      }
      return;
    }
  }
}

void kv_decode_row(const KvRowFormat& f, const uint8_t* src, float* x) {
  const int32_t hd = f.head_dim;
  switch (f.dtype) {
    case KvDtype::kF32: std::memcpy(x, src, 4 * static_cast<size_t>(hd)); return;
    case KvDtype::kF16:
      for (int32_t i = 0; i < hd; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        x[i] = fp16_to_f32(h);
      }
      return;
    case KvDtype::kInt8: {
      const int32_t ng = f.n_groups();
      const int8_t* q = reinterpret_cast<const int8_t*>(src + 2 * ng);
      for (int32_t g = 0; g < ng; ++g) {
        uint16_t hs;
        std::memcpy(&hs, src + 2 * g, 2);
        const float d = fp16_to_f32(hs);
        for (int32_t i = g * f.group; i < (g + 1) * f.group; ++i) x[i] = static_cast<float>(q[i]) * d;
      }
      return;
    }
  }
}

}  // namespace tessera::kernels
