#include "blob_kivi.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tessera/common/half.h"

namespace tessera::kvstore::kivi {
namespace {

struct Geometry {
  uint64_t width, tokens, layers, blocks_per_channel;
  uint64_t blocks() const { return layers * width * blocks_per_channel; }
};

Geometry geometry(const KvShape& s, uint32_t group) {
  return {.width = uint64_t{s.n_kv_heads} * s.head_dim, .tokens = s.n_tokens, .layers = s.n_layers,
          .blocks_per_channel = (uint64_t{s.n_tokens} + group - 1) / group};
}

}  // namespace

uint64_t payload_bytes(const KvShape& s, uint32_t group) {
  const Geometry g = geometry(s, group);
  return 2 * (g.blocks() * 4 + s.elements_per_region());
}

Status quantize_region(const KvShape& s, uint32_t group, float step_frac, const float* x, const char* region,
                       std::string& out) {
  const Geometry g = geometry(s, group);
  const uint64_t n = s.elements_per_region();
  for (uint64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      return make_error(ErrorCode::kInvalidArgument, std::string("non-finite value in ") + region + " at element " + std::to_string(i));
    }
  }
  const size_t params_at = out.size();
  out.resize(out.size() + g.blocks() * 4);
  const size_t codes_at = out.size();
  out.resize(out.size() + n);
  auto* params = reinterpret_cast<uint8_t*>(out.data() + params_at);
  auto* codes = reinterpret_cast<int8_t*>(out.data() + codes_at);
  const uint64_t hd = s.head_dim;
  std::vector<float> mean(hd);
  for (uint64_t l = 0; l < g.layers; ++l) {
    const float* xl = x + l * g.tokens * g.width;
    int8_t* ql = codes + l * g.tokens * g.width;
    for (uint64_t b = 0; b < g.blocks_per_channel; ++b) {
      const uint64_t t0 = b * group, t1 = std::min<uint64_t>(g.tokens, t0 + group);
      const auto nt = static_cast<double>(t1 - t0);
      for (uint64_t h = 0; h < s.n_kv_heads; ++h) {
        // Per channel: its mean; per head: one step for all its channels (equal distortion on
        // every channel minimizes the error of q.k and of sum p.v for a given rate).
        double sq = 0.0, dev = 0.0;
        for (uint64_t d = 0; d < hd; ++d) {
          const uint64_t c = h * hd + d;
          double sum = 0.0;
          for (uint64_t t = t0; t < t1; ++t) sum += xl[t * g.width + c];
          mean[d] = fp16_to_f32(f32_to_fp16(static_cast<float>(sum / nt)));
          for (uint64_t t = t0; t < t1; ++t) {
            const double e = static_cast<double>(xl[t * g.width + c]) - mean[d];
            sq += e * e;
            dev = std::max(dev, std::fabs(e));
          }
        }
        double step = std::max(static_cast<double>(step_frac) * std::sqrt(sq / (nt * static_cast<double>(hd))), dev / 127.0);
        if (!(step > 0.0)) step = 1.0;
        uint16_t hs = f32_to_fp16(static_cast<float>(step));
        if (fp16_to_f32(hs) < step) ++hs;  // round the step up: codes stay within +-127 (positive fp16)
        const float st = fp16_to_f32(hs), inv = 1.0f / st;
        for (uint64_t d = 0; d < hd; ++d) {
          const uint64_t c = h * hd + d, block = (l * g.width + c) * g.blocks_per_channel + b;
          const uint16_t hm = f32_to_fp16(mean[d]);
          std::memcpy(params + block * 4, &hm, 2);
          std::memcpy(params + block * 4 + 2, &hs, 2);
          for (uint64_t t = t0; t < t1; ++t) {
            const float q = std::nearbyint((xl[t * g.width + c] - mean[d]) * inv);
            ql[t * g.width + c] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
          }
        }
      }
    }
  }
  return ok_status();
}

Status dequantize_region(const KvShape& s, uint32_t group, std::string_view in, size_t* pos, float* x) {
  const Geometry g = geometry(s, group);
  const auto* params = reinterpret_cast<const uint8_t*>(in.data() + *pos);
  const auto* codes = reinterpret_cast<const int8_t*>(params + g.blocks() * 4);
  uint64_t block = 0;
  for (uint64_t l = 0; l < g.layers; ++l) {
    float* xl = x + l * g.tokens * g.width;
    const int8_t* ql = codes + l * g.tokens * g.width;
    for (uint64_t c = 0; c < g.width; ++c) {
      for (uint64_t b = 0; b < g.blocks_per_channel; ++b, ++block) {
        uint16_t hm, hs;
        std::memcpy(&hm, params + block * 4, 2);
        std::memcpy(&hs, params + block * 4 + 2, 2);
        const float m = fp16_to_f32(hm), st = fp16_to_f32(hs);
        if (!std::isfinite(m) || !std::isfinite(st) || st <= 0.0f) {
          return make_error(ErrorCode::kCorruptFile, "kv blob: kivi block " + std::to_string(block) + " has a bad mean/step");
        }
        const uint64_t t0 = b * group, t1 = std::min<uint64_t>(g.tokens, t0 + group);
        for (uint64_t t = t0; t < t1; ++t) {
          const int8_t q = ql[t * g.width + c];
          if (q == -128) return make_error(ErrorCode::kCorruptFile, "kv blob: kivi code -128 is not produced by the encoder");
          xl[t * g.width + c] = m + static_cast<float>(q) * st;
        }
      }
    }
  }
  *pos += g.blocks() * 4 + s.elements_per_region();
  return ok_status();
}

}  // namespace tessera::kvstore::kivi
