// The tiered codec's per-token step exponents (EncodeOptions::tiered_decay, kvstore/src/blob_tiered.h):
// blobs written before them decode exactly as before, and decay 0 still writes their bytes; with
// a decay every element is within half its token's step; corrupt exponents, flags and truncated
// streams are clean errors; extreme magnitudes never overflow a step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "synthetic_kv.h"
#include "tessera/common/half.h"
#include "tessera/kvstore/blob.h"

namespace tessera::kvstore {
namespace {

using testing::synthetic_kv;

constexpr uint64_t kFp = 0x1234abcd5678ef01ULL;

void reseal(std::string& blob) {
  const uint64_t payload = blob.size() - kBlobHeaderBytes;
  std::memcpy(blob.data() + 40, &payload, 8);
  std::string h = blob.substr(0, kBlobHeaderBytes);
  std::memset(h.data() + 48, 0, 8);
  const uint64_t sum = xxh64(blob.data() + kBlobHeaderBytes, payload, xxh64(h.data(), h.size(), 0));
  std::memcpy(blob.data() + 48, &sum, 8);
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// A tiered blob written by the build before the step exponents existed (synthetic_kv f16
// {2, 6, 1, 8} seed 13, step 0.1, recent 2), with the XXH64 of the regions it decoded to then.
const char* const kOldTieredBlob =
    "544b56310100010501ef7856cdab34120200000006000000010000000800000000000000000000003d01000000000000173ab2a8373a8e730000000000000000020000000403070105000000ef4c383c7e1db63cac2f1a35dcaf74b884ba3144533df92f44bbbbb378c294b5322e9a38f437b23c6ed71f3d13f9583d76b23e30c0a3bf31d6315ba0f53445b1c431052766a37eaf5ab29cb4c6b2583400bcc6a383ea3cdfd7e6a0b12b542b7f4f1a9d27fa1c3d9a791d0f35f4e5e480b78004fc5f85460324eb9c62c74f28364c119313f005f7ed18c41768f5f70021536e663e9c5a4f3c8838e550016aa18521ce69eac913942119cd7de1a141a5e7eb42279bc8da0a9aa77753b46503b538f7ced960fd1027d1caf7e46e359ebe83bca04db0e40b2b63ffb54071c895ef2b746b91eba30c17d470b8f35fc8f9d79d5a34dec6324e0156f4b55e9b81693b4f5d87c4d770765da1cd2a2c8482b0bf944642877f9c1fc621d9771d6ed925d567b1cfd3110c5cc09e65dd1ba00d14aada00";

TEST(TieredDecay, BlobsWrittenBeforeDecodeAsBeforeAndDecayZeroKeepsTheirBytes) {
  const std::string old = from_hex(kOldTieredBlob);
  auto back = decode_blob(old);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(xxh64(back->k.data(), back->k.size()), 0xf4fe7161ebf3098eULL);
  EXPECT_EQ(xxh64(back->v.data(), back->v.size()), 0x753d2aa95a3c318cULL);
  const PackedKv kv = synthetic_kv(DType::kF16, {2, 6, 1, 8}, kFp, 13);
  EXPECT_EQ(encode_blob(kv, {.codec = Codec::kTiered, .tiered_recent = 2, .tiered_decay = 0.0f}).value(), old);
  // With a decay the format differs (flags byte 1) and the blob is smaller.
  const std::string decayed = encode_blob(kv, {.codec = Codec::kTiered, .tiered_recent = 2, .tiered_decay = 2.0f}).value();
  EXPECT_EQ(decayed[kBlobHeaderBytes + 9], 1);
  EXPECT_EQ(decayed[kBlobHeaderBytes + 10], 32);  // decay x 16
  EXPECT_TRUE(decode_blob(decayed).ok());
}

// The exponent the encoder gives token t of n (blob_tiered.h): round(2 decay log2(1 + dist/32)),
// at most 12 (64x).
uint32_t exponent(uint64_t t, uint64_t n, double decay) {
  const double x = 2.0 * decay * std::log2(1.0 + static_cast<double>(n - 1 - t) / 32.0);
  return static_cast<uint32_t>(std::min(12L, std::max(0L, std::lround(x))));
}

// Every element within half its token's step: the head's base step (tiered_step x its RMS
// deviation from fp16 channel means; K 0.15 of that) x 2^(e_t / 2), / 16 in the recent tier.
TEST(TieredDecay, EveryElementWithinHalfItsTokensStep) {
  const KvShape shapes[] = {{2, 150, 2, 16}, {1, 40, 3, 8}, {1, 1, 1, 8}};
  for (DType t : {DType::kF32, DType::kF16}) {
    for (float decay : {0.5f, 1.5f, 4.0f}) {
      for (uint32_t recent : {0u, 4u}) {
        for (const KvShape& s : shapes) {
          const PackedKv kv = synthetic_kv(t, s, kFp, 17);
          const float frac = 0.02f;
          auto blob = encode_blob(kv, {.codec = Codec::kTiered, .tiered_step = frac, .tiered_recent = recent, .tiered_decay = decay});
          ASSERT_TRUE(blob.ok()) << blob.error().to_string();
          auto back = decode_blob(*blob);
          ASSERT_TRUE(back.ok()) << back.error().to_string();
          const size_t eb = element_bytes(t);
          const uint64_t W = uint64_t{s.n_kv_heads} * s.head_dim;
          const double dtype_rel = t == DType::kF32 ? 1e-6 : 1.0 / 2048;
          for (int r = 0; r < 2; ++r) {
            const auto& x = r == 0 ? kv.k : kv.v;
            const auto& y = r == 0 ? back->k : back->v;
            auto at = [&](const std::vector<uint8_t>& v, uint64_t l, uint64_t tok, uint64_t c) {
              return static_cast<double>(element_to_float(t, v.data() + ((l * s.n_tokens + tok) * W + c) * eb));
            };
            for (uint64_t l = 0; l < s.n_layers; ++l) {
              for (uint64_t h = 0; h < s.n_kv_heads; ++h) {
                double sq = 0;
                for (uint64_t d = 0; d < s.head_dim; ++d) {
                  double m = 0;
                  for (uint64_t tok = 0; tok < s.n_tokens; ++tok) m += at(x, l, tok, h * s.head_dim + d);
                  const double mean = fp16_to_f32(f32_to_fp16(static_cast<float>(m / s.n_tokens)));
                  for (uint64_t tok = 0; tok < s.n_tokens; ++tok) sq += std::pow(at(x, l, tok, h * s.head_dim + d) - mean, 2);
                }
                const double rms = std::sqrt(sq / static_cast<double>(s.n_tokens * s.head_dim));
                const double base = rms > 0 ? (r == 0 ? frac * 0.15 : frac) * rms : 1.0;
                for (uint64_t tok = 0; tok < s.n_tokens; ++tok) {
                  double st = base * std::pow(2.0, exponent(tok, s.n_tokens, decay) / 2.0);
                  if (tok + recent >= s.n_tokens) st /= 16;
                  for (uint64_t d = 0; d < s.head_dim; ++d) {
                    const double a = at(x, l, tok, h * s.head_dim + d), b = at(y, l, tok, h * s.head_dim + d);
                    ASSERT_LE(std::fabs(a - b), st / 2 * (1 + 1e-5) + std::fabs(b) * dtype_rel + 1e-6)
                        << dtype_name(t) << " decay " << decay << " recent " << recent << " region " << r << " token " << tok;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// A larger decay gives smaller blobs at the same step (the far tokens are coarser).
TEST(TieredDecay, LargerDecaySmallerBlobs) {
  const PackedKv kv = synthetic_kv(DType::kF16, {2, 300, 2, 64}, kFp, 5);
  size_t last = SIZE_MAX;
  for (float decay : {0.0f, 0.5f, 1.0f, 2.0f}) {
    const size_t n = encode_blob(kv, {.codec = Codec::kTiered, .tiered_step = 0.05f, .tiered_decay = decay}).value().size();
    EXPECT_LT(n, last) << decay;
    last = n;
  }
}

TEST(TieredDecay, CorruptExponentsFlagsAndTruncationAreCleanErrors) {
  const PackedKv kv = synthetic_kv(DType::kF16, {2, 40, 2, 8}, kFp, 6);
  const std::string blob = encode_blob(kv, {.codec = Codec::kTiered, .tiered_recent = 0, .tiered_decay = 1.5f}).value();
  ASSERT_TRUE(decode_blob(blob).ok());
  std::string bad_flags = blob;
  bad_flags[kBlobHeaderBytes + 9] = 3;
  reseal(bad_flags);
  EXPECT_NE(decode_blob(bad_flags).error().message.find("flags 3"), std::string::npos) << decode_blob(bad_flags).error().message;
  std::string no_flags = blob;  // a decay byte without the flag
  no_flags[kBlobHeaderBytes + 9] = 0;
  reseal(no_flags);
  EXPECT_NE(decode_blob(no_flags).error().message.find("tiered prefix is invalid"), std::string::npos);
  std::string big_decay = blob;
  big_decay[kBlobHeaderBytes + 10] = 65;
  reseal(big_decay);
  EXPECT_EQ(decode_blob(big_decay).error().code, ErrorCode::kCorruptFile);
  for (size_t len = kBlobHeaderBytes; len < blob.size(); ++len) {
    std::string cut = blob.substr(0, len);
    reseal(cut);
    auto r = decode_blob(cut);
    ASSERT_FALSE(r.ok()) << "len " << len;
    EXPECT_TRUE(r.error().code == ErrorCode::kTruncatedFile || r.error().code == ErrorCode::kCorruptFile) << r.error().to_string();
  }
  // Random code streams after valid parameters: exponents out of range, overflowing steps or
  // corrupt codes are errors, never crashes; a decoded blob has the declared shape.
  const size_t params = 12 + 2 * (4 * 4 + 4 * 8 * 2);
  std::mt19937 rng(12);
  int exponent_errors = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bad = blob.substr(0, kBlobHeaderBytes + params);
    const size_t n = rng() % 600;
    for (size_t j = 0; j < n; ++j) bad.push_back(static_cast<char>(rng() & 0xFF));
    reseal(bad);
    auto r = decode_blob(bad);
    if (r.ok()) {
      EXPECT_EQ(r->k.size(), kv.k.size());
      continue;
    }
    EXPECT_TRUE(r.error().code == ErrorCode::kTruncatedFile || r.error().code == ErrorCode::kCorruptFile) << r.error().to_string();
    exponent_errors += r.error().message.find("step exponent of token") != std::string::npos ? 1 : 0;
  }
  EXPECT_GT(exponent_errors, 0);
  for (size_t i = kBlobHeaderBytes; i < blob.size(); ++i) {
    std::string bad = blob;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    reseal(bad);
    auto r = decode_blob(bad);
    if (r.ok()) {
      EXPECT_EQ(r->v.size(), kv.v.size());
    }
  }
}

// Values near FLT_MAX with the largest decay: the encoder lowers exponents that would overflow a
// step; everything decodes finite and close in relative terms.
TEST(TieredDecay, ExtremeMagnitudesNeverOverflowAStep) {
  PackedKv kv = synthetic_kv(DType::kF32, {1, 200, 1, 8}, kFp, 4);
  for (auto* region : {&kv.k, &kv.v}) {
    for (size_t i = 0; i < region->size(); i += 4) {
      const float x = element_to_float(DType::kF32, region->data() + i);
      float_to_element(DType::kF32, 3e38f * std::tanh(x), region->data() + i);
    }
  }
  auto blob = encode_blob(kv, {.codec = Codec::kTiered, .tiered_step = 0.5f, .tiered_recent = 0, .tiered_decay = 4.0f});
  ASSERT_TRUE(blob.ok()) << blob.error().to_string();
  auto back = decode_blob(*blob);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  for (size_t i = 0; i < back->k.size(); i += 4) {
    ASSERT_TRUE(std::isfinite(element_to_float(DType::kF32, back->k.data() + i))) << i;
    ASSERT_TRUE(std::isfinite(element_to_float(DType::kF32, back->v.data() + i))) << i;
  }
}

TEST(TieredDecay, OptionRange) {
  const PackedKv kv = synthetic_kv(DType::kF32, {1, 3, 1, 8}, kFp, 2);
  for (float bad : {-0.5f, 4.5f, std::numeric_limits<float>::quiet_NaN()}) {
    auto r = encode_blob(kv, {.codec = Codec::kTiered, .tiered_decay = bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kOutOfRange);
    EXPECT_NE(r.error().message.find("tiered_decay"), std::string::npos);
  }
  EXPECT_TRUE(encode_blob(kv, {.codec = Codec::kInt8, .tiered_decay = 9.0f}).ok());  // only tiered reads it
}

}  // namespace
}  // namespace tessera::kvstore
