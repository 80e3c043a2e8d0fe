#include "blob_tiered.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "range_coder.h"
#include "tessera/common/half.h"

namespace tessera::kvstore::tiered {
namespace {

// u32 recent, u8 fine shift, u8 rice k per (region, tier), u8 flags, u8 decay x 16, u8 0.
constexpr size_t kPrefixBytes = 12;
constexpr uint32_t kCtxDims = 8;  // models per (region, tier): dim mod 8
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

// The per-stream layout both sides derive from the prefix (and the token exponents).
struct Layout {
  uint32_t recent = 0, shift = 0;
  uint8_t rice[4] = {0, 0, 0, 0};
  uint8_t flags = 0;
  std::vector<uint8_t> exps;  // per token, half-octaves (all 0 without kFlagTokenExp)
  uint32_t tier(const Geometry& g, uint64_t t) const { return t + recent >= g.tokens ? 1u : 0u; }
  // Token t's step for a head whose base step is `base`: base x 2^(e/2), / 2^shift in the
  // recent tier. The same expression on both sides (the decoder checks it is finite).
  float step(const Geometry& g, float base, uint64_t t) const {
    constexpr float kSqrt2 = 1.41421356f;
    const uint32_t e = exps[t];
    const float mult = std::ldexp(e % 2 == 1 ? kSqrt2 : 1.0f, static_cast<int>(e / 2));
    return std::ldexp(base * mult, tier(g, t) == 1 ? -static_cast<int>(shift) : 0);
  }
};

// The adaptive model of a code (one per region, tier and dim mod 8) and its Golomb-Rice k: the
// (region, tier)'s stored k for step-exponent-0 codes, less half the exponent (a token whose
// step is 2^(e/2) coarser has codes that much smaller).
struct Ctx {
  size_t model;
  int k;
};
Ctx context(const Layout& lay, int region, uint32_t tier, uint64_t d, uint32_t e) {
  return {(static_cast<size_t>(region) * 2 + tier) * kCtxDims + d % kCtxDims,
          std::max(0, static_cast<int>(lay.rice[region * 2 + static_cast<int>(tier)]) - static_cast<int>(e / 2))};
}
constexpr size_t kModels = 2 * 2 * kCtxDims;

// Encoder side: token t's exponent, (1 + distance from the end / kDecayTokens)^decay in
// half-octaves, at most kMaxDecayExp; lowered where a head's step would overflow.
std::vector<uint8_t> decay_exponents(const Geometry& g, float decay, float max_base) {
  std::vector<uint8_t> e(g.tokens, 0);
  if (decay <= 0.0f) return e;
  for (uint64_t t = 0; t < g.tokens; ++t) {
    const double dist = static_cast<double>(g.tokens - 1 - t);
    const double x = 2.0 * decay * std::log2(1.0 + dist / kDecayTokens);
    auto v = static_cast<uint32_t>(std::clamp(std::lround(x), 0L, static_cast<long>(kMaxDecayExp)));
    while (v > 0 && !std::isfinite(max_base * std::ldexp(1.5f, static_cast<int>(v / 2)))) --v;
    e[t] = static_cast<uint8_t>(v);
  }
  return e;
}

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
  const RegionParams kp = fit(g, k, p.step * kKeyStepRatio), vp = fit(g, v, p.step);
  Layout lay;
  lay.recent = static_cast<uint32_t>(std::min<uint64_t>(p.recent, g.tokens));
  lay.shift = p.fine_shift;
  float max_base = 0.0f;
  for (const RegionParams* rp : {&kp, &vp}) max_base = std::max(max_base, *std::max_element(rp->step.begin(), rp->step.end()));
  lay.exps = decay_exponents(g, p.decay, max_base);
  if (std::any_of(lay.exps.begin(), lay.exps.end(), [](uint8_t e) { return e != 0; })) lay.flags |= kFlagTokenExp;
  // The codes, K then V in [layer][token][head][dim] order, and each (region, tier)'s mean |q|.
  std::vector<int32_t> codes(2 * n);
  double abs_sum[4] = {0, 0, 0, 0}, count[4] = {0, 0, 0, 0};
  const uint64_t row = g.heads * g.dim;
  int region = 0;
  for (const auto& [x, rp] : {std::pair{k, &kp}, std::pair{v, &vp}}) {
    for (uint64_t l = 0; l < g.layers; ++l) {
      for (uint64_t t = 0; t < g.tokens; ++t) {
        const uint32_t tier = lay.tier(g, t);
        for (uint64_t h = 0; h < g.heads; ++h) {
          const float inv = 1.0f / lay.step(g, rp->step[l * g.heads + h], t);
          for (uint64_t d = 0; d < g.dim; ++d) {
            const uint64_t i = (l * g.tokens + t) * row + h * g.dim + d;
            const float m = fp16_to_f32(rp->mean[(l * g.heads + h) * g.dim + d]);
            const double q = std::clamp<double>(std::nearbyint((x[i] - m) * inv), -kMaxCode, kMaxCode);
            codes[static_cast<uint64_t>(region) * n + i] = static_cast<int32_t>(q);
            abs_sum[region * 2 + tier] += std::ldexp(std::fabs(q), static_cast<int>(lay.exps[t] / 2));
            count[region * 2 + tier] += 1;
          }
        }
      }
    }
    ++region;
  }
  // Golomb-Rice split per (region, tier): the low bits below a quarter of the mean |q| (of
  // exponent-0 codes) go uncoded (they are close to uniform), so a value costs a few adaptive
  // decisions, not ~log2|q|.
  for (int c = 0; c < 4; ++c) {
    const double mean = count[c] > 0 ? abs_sum[c] / count[c] : 0.0;
    lay.rice[c] = static_cast<uint8_t>(mean >= 8.0 ? std::min(16, static_cast<int>(std::floor(std::log2(mean))) - 2) : 0);
  }
  append(out, lay.recent);
  append(out, static_cast<uint8_t>(lay.shift));
  out.append(reinterpret_cast<const char*>(lay.rice), 4);
  append(out, lay.flags);
  append(out, static_cast<uint8_t>(lay.flags != 0 ? std::lround(std::clamp(p.decay, 0.0f, 4.0f) * 16.0f) : 0));
  out.push_back('\0');
  append_params(kp, out);
  append_params(vp, out);
  rc::Encoder enc(out);
  if ((lay.flags & kFlagTokenExp) != 0) {
    rc::IntModel exp_model;
    for (uint8_t e : lay.exps) enc.encode_int(exp_model, e, 0);
  }
  std::vector<rc::IntModel> models(kModels);
  for (region = 0; region < 2; ++region) {
    for (uint64_t l = 0; l < g.layers; ++l) {
      for (uint64_t t = 0; t < g.tokens; ++t) {
        const uint32_t tier = lay.tier(g, t);
        const int32_t* q = codes.data() + static_cast<uint64_t>(region) * n + (l * g.tokens + t) * row;
        for (uint64_t c = 0; c < row; ++c) {
          const Ctx ctx = context(lay, region, tier, c % g.dim, lay.exps[t]);
          enc.encode_int(models[ctx.model], q[c], ctx.k);
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
  Layout lay;
  std::memcpy(&lay.recent, payload.data(), 4);
  lay.shift = static_cast<uint8_t>(payload[4]);
  std::memcpy(lay.rice, payload.data() + 5, 4);
  lay.flags = static_cast<uint8_t>(payload[9]);
  const auto decay16 = static_cast<uint8_t>(payload[10]);
  const uint8_t max_rice = std::max({lay.rice[0], lay.rice[1], lay.rice[2], lay.rice[3]});
  if (lay.recent > g.tokens || lay.shift > 24 || max_rice > 16 || (lay.flags & ~kFlagTokenExp) != 0 ||
      decay16 > 64 || (lay.flags == 0 && decay16 != 0) || payload[11] != 0) {
    return make_error(ErrorCode::kCorruptFile, "kv blob: tiered prefix is invalid (recent " + std::to_string(lay.recent) +
                                                   ", fine shift " + std::to_string(lay.shift) + ", rice " +
                                                   std::to_string(max_rice) + ", flags " + std::to_string(lay.flags) +
                                                   ", decay " + std::to_string(decay16) + "/16)");
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
  lay.exps.assign(g.tokens, 0);
  if ((lay.flags & kFlagTokenExp) != 0) {
    rc::IntModel exp_model;
    for (uint64_t t = 0; t < g.tokens; ++t) {
      int32_t e = 0;
      if (!dec.decode_int(exp_model, 0, &e) || e < 0 || e > static_cast<int32_t>(kMaxTokenExp)) {
        return make_error(ErrorCode::kCorruptFile, "kv blob: tiered step exponent of token " + std::to_string(t) +
                                                       " is out of range (at most " + std::to_string(kMaxTokenExp) + ")");
      }
      if (dec.overrun()) return make_error(ErrorCode::kTruncatedFile, "kv blob: tiered code stream ends early");
      lay.exps[t] = static_cast<uint8_t>(e);
    }
  }
  std::vector<rc::IntModel> models(kModels);
  const uint64_t row = g.heads * g.dim;
  for (int region = 0; region < 2; ++region) {
    uint8_t* x = region == 0 ? k : v;
    const RegionParams& r = rp[region];
    for (uint64_t l = 0; l < g.layers; ++l) {
      for (uint64_t t = 0; t < g.tokens; ++t) {
        const uint32_t tier = lay.tier(g, t);
        for (uint64_t h = 0; h < g.heads; ++h) {
          const float step = lay.step(g, r.step[l * g.heads + h], t);
          if (!std::isfinite(step)) {
            return make_error(ErrorCode::kCorruptFile, "kv blob: tiered step of layer " + std::to_string(l) + " token " +
                                                           std::to_string(t) + " overflows");
          }
          for (uint64_t d = 0; d < g.dim; ++d) {
            const Ctx ctx = context(lay, region, tier, d, lay.exps[t]);
            int32_t q = 0;
            if (!dec.decode_int(models[ctx.model], ctx.k, &q)) {
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
