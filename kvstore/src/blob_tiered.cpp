#include "blob_tiered.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "range_coder.h"
#include "tessera/common/half.h"

namespace tessera::kvstore::tiered {
namespace {

constexpr size_t kPrefixBytes = 12;  // u32 recent, u8 fine shift, u8 rice k per (region, tier), 3 zero
constexpr uint32_t kCtxDims = 8;  // models per tier: dim mod 8
constexpr double kMaxCode = 1073741823.0;  // 2^30 - 1

struct Geometry {
  uint64_t layers, tokens, heads, dim;
  uint64_t heads_total() const { return layers * heads; }
  uint64_t params_bytes() const { return heads_total() * 4 + heads_total() * dim * 2; }  // one region
};

Geometry geometry(const KvShape& s) { return {s.n_layers, s.n_tokens, s.n_kv_heads, s.head_dim}; }

template <class T>
void append(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

// Means (fp16, as stored) and steps of one region.
struct RegionParams {
  std::vector<uint16_t> mean;  // [layer][head][dim]
  std::vector<float> step;     // [layer][head]
};

RegionParams fit(const Geometry& g, const float* x, float frac) {
  RegionParams r{std::vector<uint16_t>(g.heads_total() * g.dim), std::vector<float>(g.heads_total())};
  const uint64_t row = g.heads * g.dim;
  for (uint64_t l = 0; l < g.layers; ++l) {
    const float* xl = x + l * g.tokens * row;
    for (uint64_t h = 0; h < g.heads; ++h) {
      double sq = 0.0;
      for (uint64_t d = 0; d < g.dim; ++d) {
        const uint64_t c = h * g.dim + d;
        double sum = 0.0;
        for (uint64_t t = 0; t < g.tokens; ++t) sum += xl[t * row + c];
        uint16_t hm = f32_to_fp16(static_cast<float>(sum / static_cast<double>(g.tokens)));
        if (!std::isfinite(fp16_to_f32(hm))) hm = 0;  // |mean| beyond fp16: code around 0 instead
        r.mean[(l * g.heads + h) * g.dim + d] = hm;
        const double m = fp16_to_f32(hm);
        for (uint64_t t = 0; t < g.tokens; ++t) {
          const double e = xl[t * row + c] - m;
          sq += e * e;
        }
      }
      const double rms = std::sqrt(sq / static_cast<double>(g.tokens * g.dim));
      // Codes stay below 2^30 whatever the spread (rms > 0 here bounds |x - m| / rms by sqrt(n)).
      // At least 1e-30 (a tiny but non-zero spread): the fine tier's step / 2^24 stays a normal
      // float, so 1 / step is finite and (x - mean) / step is never 0 * inf.
      const auto step = static_cast<float>(std::max(static_cast<double>(frac) * rms, 1e-30));
      r.step[l * g.heads + h] = rms > 0.0 && std::isfinite(step) ? step : 1.0f;
    }
  }
  return r;
}

void append_params(const RegionParams& r, std::string& out) {
  for (float s : r.step) append(out, s);
  for (uint16_t m : r.mean) append(out, m);
}

uint32_t tier_of(const Geometry& g, uint64_t t, uint32_t recent) { return t + recent >= g.tokens ? 1u : 0u; }

}  // namespace

Status encode(const KvShape& s, const float* k, const float* v, const Params& p, std::string& out) {
  const Geometry g = geometry(s);
  const uint64_t n = s.elements_per_region();
  for (const auto& [x, region] : {std::pair{k, "K"}, std::pair{v, "V"}}) {
    for (uint64_t i = 0; i < n; ++i) {
      if (!std::isfinite(x[i])) {
        return make_error(ErrorCode::kInvalidArgument, std::string("non-finite value in ") + region + " at element " + std::to_string(i));
      }
    }
  }
  const uint32_t recent = static_cast<uint32_t>(std::min<uint64_t>(p.recent, g.tokens));
  const RegionParams kp = fit(g, k, p.step * kKeyStepRatio), vp = fit(g, v, p.step);
  // The codes, K then V in [layer][token][head][dim] order, and each (region, tier)'s mean |q|.
  std::vector<int32_t> codes(2 * n);
  double abs_sum[4] = {0, 0, 0, 0}, count[4] = {0, 0, 0, 0};
  const uint64_t row = g.heads * g.dim;
  int region = 0;
  for (const auto& [x, rp] : {std::pair{k, &kp}, std::pair{v, &vp}}) {
    for (uint64_t l = 0; l < g.layers; ++l) {
      for (uint64_t t = 0; t < g.tokens; ++t) {
        const uint32_t tier = tier_of(g, t, recent);
        for (uint64_t h = 0; h < g.heads; ++h) {
          const float step = std::ldexp(rp->step[l * g.heads + h], tier == 1 ? -static_cast<int>(p.fine_shift) : 0);
          const float inv = 1.0f / step;
          for (uint64_t d = 0; d < g.dim; ++d) {
            const uint64_t i = (l * g.tokens + t) * row + h * g.dim + d;
            const float m = fp16_to_f32(rp->mean[(l * g.heads + h) * g.dim + d]);
            const double q = std::clamp<double>(std::nearbyint((x[i] - m) * inv), -kMaxCode, kMaxCode);
            codes[static_cast<uint64_t>(region) * n + i] = static_cast<int32_t>(q);
            abs_sum[region * 2 + tier] += std::fabs(q);
            count[region * 2 + tier] += 1;
          }
        }
      }
    }
    ++region;
  }
  // Golomb-Rice split per (region, tier): the low bits below a quarter of the mean |q| go
  // uncoded (they are close to uniform), so a value costs a few adaptive decisions, not ~log2|q|.
  uint8_t rice[4];
  for (int c = 0; c < 4; ++c) {
    const double mean = count[c] > 0 ? abs_sum[c] / count[c] : 0.0;
    rice[c] = static_cast<uint8_t>(mean >= 8.0 ? std::min(16, static_cast<int>(std::floor(std::log2(mean))) - 2) : 0);
  }
  append(out, recent);
  append(out, static_cast<uint8_t>(p.fine_shift));
  out.append(reinterpret_cast<const char*>(rice), 4);
  out.append(3, '\0');
  append_params(kp, out);
  append_params(vp, out);
  rc::Encoder enc(out);
  std::vector<rc::IntModel> models(2 * 2 * kCtxDims);
  for (region = 0; region < 2; ++region) {
    for (uint64_t l = 0; l < g.layers; ++l) {
      for (uint64_t t = 0; t < g.tokens; ++t) {
        const uint32_t tier = tier_of(g, t, recent);
        const int kb = rice[region * 2 + static_cast<int>(tier)];
        const int32_t* q = codes.data() + static_cast<uint64_t>(region) * n + (l * g.tokens + t) * row;
        for (uint64_t c = 0; c < row; ++c) {
          enc.encode_int(models[(static_cast<size_t>(region) * 2 + tier) * kCtxDims + (c % g.dim) % kCtxDims], q[c], kb);
        }
      }
    }
  }
  enc.finish();
  return ok_status();
}

uint64_t min_payload_bytes(const KvShape& s) {
  return kPrefixBytes + 2 * geometry(s).params_bytes() + s.elements_per_region() / 256;
}

Status decode(const KvShape& s, std::string_view payload, DType dtype, uint8_t* k, uint8_t* v) {
  const Geometry g = geometry(s);
  if (payload.size() < min_payload_bytes(s)) {
    return make_error(ErrorCode::kTruncatedFile, "kv blob: tiered payload of " + std::to_string(payload.size()) +
                                                     " bytes is shorter than its shape allows (at least " +
                                                     std::to_string(min_payload_bytes(s)) + ")");
  }
  const size_t eb = element_bytes(dtype);
  uint32_t recent;
  std::memcpy(&recent, payload.data(), 4);
  const auto shift = static_cast<uint8_t>(payload[4]);
  uint8_t rice[4];
  std::memcpy(rice, payload.data() + 5, 4);
  if (recent > g.tokens || shift > 24 || std::max({rice[0], rice[1], rice[2], rice[3]}) > 16 || payload[9] != 0 ||
      payload[10] != 0 || payload[11] != 0) {
    return make_error(ErrorCode::kCorruptFile, "kv blob: tiered prefix is invalid (recent " + std::to_string(recent) +
                                                   ", fine shift " + std::to_string(shift) + ", rice " +
                                                   std::to_string(std::max({rice[0], rice[1], rice[2], rice[3]})) + ")");
  }
  size_t pos = kPrefixBytes;
  RegionParams rp[2];
  for (auto& r : rp) {
    r.step.resize(g.heads_total());
    r.mean.resize(g.heads_total() * g.dim);
    std::memcpy(r.step.data(), payload.data() + pos, r.step.size() * 4);
    pos += r.step.size() * 4;
    std::memcpy(r.mean.data(), payload.data() + pos, r.mean.size() * 2);
    pos += r.mean.size() * 2;
    for (size_t i = 0; i < r.step.size(); ++i) {
      if (!(std::isfinite(r.step[i]) && r.step[i] > 0.0f)) {
        return make_error(ErrorCode::kCorruptFile, "kv blob: tiered step " + std::to_string(i) + " is not a positive finite number");
      }
    }
    for (size_t i = 0; i < r.mean.size(); ++i) {
      if (!std::isfinite(fp16_to_f32(r.mean[i]))) {
        return make_error(ErrorCode::kCorruptFile, "kv blob: tiered mean " + std::to_string(i) + " is not finite");
      }
    }
  }
  rc::Decoder dec(payload.substr(pos));
  std::vector<rc::IntModel> models(2 * 2 * kCtxDims);
  const uint64_t row = g.heads * g.dim;
  for (int region = 0; region < 2; ++region) {
    uint8_t* x = region == 0 ? k : v;
    const RegionParams& r = rp[region];
    for (uint64_t l = 0; l < g.layers; ++l) {
      for (uint64_t t = 0; t < g.tokens; ++t) {
        const uint32_t tier = tier_of(g, t, recent);
        for (uint64_t h = 0; h < g.heads; ++h) {
          const float step = std::ldexp(r.step[l * g.heads + h], tier == 1 ? -static_cast<int>(shift) : 0);
          for (uint64_t d = 0; d < g.dim; ++d) {
            int32_t q = 0;
            if (!dec.decode_int(models[(static_cast<size_t>(region) * 2 + tier) * kCtxDims + d % kCtxDims],
                                rice[region * 2 + static_cast<int>(tier)], &q)) {
              return make_error(ErrorCode::kCorruptFile, "kv blob: tiered code stream is corrupt (a code beyond 2^30)");
            }
            if (dec.overrun()) {
              return make_error(ErrorCode::kTruncatedFile, "kv blob: tiered code stream ends early");
            }
            float_to_element(dtype, fp16_to_f32(r.mean[(l * g.heads + h) * g.dim + d]) + static_cast<float>(q) * step,
                             x + ((l * g.tokens + t) * row + h * g.dim + d) * eb);
          }
        }
      }
    }
  }
  if (dec.consumed() != payload.size() - pos) {
    return make_error(ErrorCode::kCorruptFile, "kv blob: tiered code stream has " +
                                                   std::to_string(payload.size() - pos - dec.consumed()) + " trailing bytes");
  }
  return ok_status();
}

}  // namespace tessera::kvstore::tiered
