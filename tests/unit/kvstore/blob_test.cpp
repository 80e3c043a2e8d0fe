// Packed K/V blob: codecs round-trip, error bounds, and every corruption is a clean error.
#include "tessera/kvstore/blob.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "kv_error.h"
#include "synthetic_kv.h"

namespace tessera::kvstore {
namespace {

using testing::attention_output_rel_error;
using testing::synthetic_kv;

constexpr uint64_t kFp = 0x1234abcd5678ef01ULL;

TEST(Xxh64, KnownVectors) {
  EXPECT_EQ(xxh64("", 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(xxh64("abc", 3), 0x44BC2CF5AD770999ULL);
  const char* s = "Nobody inspects the spammish repetition";  // 39 bytes: stripes + tail
  EXPECT_EQ(xxh64(s, std::strlen(s)), 0xFBCEA83C8A378BF1ULL);
}

uint16_t to_half_bits(DType t, float x) {
  uint8_t b[2];
  float_to_element(t, x, b);
  uint16_t h;
  std::memcpy(&h, b, 2);
  return h;
}

TEST(ElementConversion, HalfKnownValues) {
  EXPECT_EQ(to_half_bits(DType::kF16, 1.0f), 0x3C00);
  EXPECT_EQ(to_half_bits(DType::kF16, -2.0f), 0xC000);
  EXPECT_EQ(to_half_bits(DType::kF16, 65504.0f), 0x7BFF);
  EXPECT_EQ(to_half_bits(DType::kF16, 65520.0f), 0x7C00);  // rounds to inf
  EXPECT_EQ(to_half_bits(DType::kF16, std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(to_half_bits(DType::kF16, 1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie -> even
  EXPECT_EQ(to_half_bits(DType::kF16, 1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(to_half_bits(DType::kBF16, 1.0f), 0x3F80);
  EXPECT_EQ(to_half_bits(DType::kBF16, 1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie -> even
  EXPECT_EQ(to_half_bits(DType::kBF16, 1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
}

TEST(ElementConversion, EveryFiniteHalfRoundTrips) {
  for (DType t : {DType::kF16, DType::kBF16}) {
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      uint8_t b[2] = {static_cast<uint8_t>(bits), static_cast<uint8_t>(bits >> 8)};
      const float f = element_to_float(t, b);
      if (std::isnan(f)) continue;
      ASSERT_EQ(to_half_bits(t, f), bits) << dtype_name(t) << " bits " << bits;
    }
  }
}

// none/zstd keep every bit, bf16 included, even for arbitrary bit patterns (NaN payloads too).
TEST(BlobCodec, LosslessCodecsAreBitExact) {
  std::mt19937 rng(7);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (Codec c : {Codec::kNone, Codec::kZstd}) {
      PackedKv kv;
      kv.fingerprint = kFp;
      kv.dtype = t;
      kv.shape = {3, 13, 2, 24};
      kv.k.resize(kv.region_bytes());
      kv.v.resize(kv.region_bytes());
      for (auto& b : kv.k) b = static_cast<uint8_t>(rng());
      for (auto& b : kv.v) b = static_cast<uint8_t>(rng() % 7);  // compressible
      auto blob = encode_blob(kv, {.codec = c});
      ASSERT_TRUE(blob.ok()) << blob.error().to_string();
      auto back = decode_blob(*blob, {.expected_fingerprint = kFp});
      ASSERT_TRUE(back.ok()) << back.error().to_string();
      EXPECT_EQ(back->dtype, t);
      EXPECT_EQ(back->shape, kv.shape);
      EXPECT_EQ(back->k, kv.k) << codec_name(c) << " " << dtype_name(t);
      EXPECT_EQ(back->v, kv.v) << codec_name(c) << " " << dtype_name(t);
      auto h = verify_blob(*blob);
      ASSERT_TRUE(h.ok());
      EXPECT_EQ(h->codec, c);
      EXPECT_EQ(h->fingerprint, kFp);
    }
  }
}

// The header's 12-byte tag (bytes 36-39 and 56-63, zero in blobs that predate it) comes back
// from peek, verify and decode (also to f32 and through with_dtype), is covered by the
// checksum, and an untagged blob still reads as tag zero.
TEST(BlobCodec, TagRoundTripsInTheHeader) {
  PackedKv kv;
  kv.fingerprint = kFp;
  kv.dtype = DType::kF16;
  kv.shape = {2, 4, 1, 8};
  kv.k.assign(kv.region_bytes(), 1);
  kv.v.assign(kv.region_bytes(), 2);
  auto plain = encode_blob(kv, {.codec = Codec::kInt8});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->substr(36, 4), std::string(4, '\0'));
  EXPECT_EQ(plain->substr(56, 8), std::string(8, '\0'));
  ASSERT_TRUE(verify_blob(*plain).ok());
  EXPECT_EQ(verify_blob(*plain)->tag, PackedKv::Tag{});
  kv.tag = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  auto tagged = encode_blob(with_dtype(kv, DType::kF32), {.codec = Codec::kInt8});
  ASSERT_TRUE(tagged.ok());
  EXPECT_EQ(tagged->substr(36, 4), std::string("\x01\x02\x03\x04"));
  EXPECT_EQ(tagged->substr(56, 8), std::string("\x05\x06\x07\x08\x09\x0a\x0b\x0c"));
  auto h = verify_blob(*tagged);
  ASSERT_TRUE(h.ok()) << h.error().to_string();
  EXPECT_EQ(h->tag, kv.tag);
  auto back = decode_blob(*tagged, {.to_f32 = true});
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->tag, kv.tag);
  std::string forged = *tagged;
  forged[60] = static_cast<char>(forged[60] ^ 1);  // another tag without re-checksumming
  EXPECT_FALSE(verify_blob(forged).ok());
}

// to_f32 gives exact f32 for f16/bf16 blobs and the unrounded dequantized values.
TEST(BlobCodec, DecodeToF32) {
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32}) {
    const PackedKv kv = synthetic_kv(t, {2, 9, 2, 16}, kFp, 4);
    for (Codec c : {Codec::kNone, Codec::kZstd, Codec::kInt8, Codec::kInt4, Codec::kKivi, Codec::kTiered}) {
      const std::string blob = encode_blob(kv, {.codec = c, .group_size = 32}).value();
      auto native = decode_blob(blob).value();
      auto f32 = decode_blob(blob, {.to_f32 = true});
      ASSERT_TRUE(f32.ok()) << f32.error().to_string();
      ASSERT_EQ(f32->dtype, DType::kF32);
      ASSERT_EQ(f32->k.size(), kv.shape.elements_per_region() * 4);
      const size_t eb = element_bytes(t);
      for (uint64_t i = 0; i < kv.shape.elements_per_region(); ++i) {
        const float got = element_to_float(DType::kF32, f32->k.data() + 4 * i);
        const float want = element_to_float(t, native.k.data() + eb * i);
        if (c == Codec::kNone || c == Codec::kZstd || t == DType::kF32) {
          ASSERT_EQ(got, want) << codec_name(c) << " " << dtype_name(t) << " " << i;
        } else {  // rounding the f32 value to the blob dtype gives the native decode
          uint8_t b[2];
          float_to_element(t, got, b);
          ASSERT_EQ(element_to_float(t, b), want) << codec_name(c) << " " << dtype_name(t) << " " << i;
        }
      }
    }
  }
}

// Every dequantized element is within half a quantization step of its group
// ((max - min) / 510 for int8, / 30 for int4), plus the output dtype's rounding.
TEST(BlobCodec, QuantizedWithinPerGroupBound) {
  const KvShape shapes[] = {{2, 7, 3, 48}, {1, 200, 1, 64}, {3, 5, 2, 33}};
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (Codec c : {Codec::kInt8, Codec::kInt4}) {
      for (uint32_t group : {32u, 50u, 64u, 128u}) {
        for (const KvShape& shape : shapes) {
          const PackedKv kv = synthetic_kv(t, shape, kFp, 11);
          auto blob = encode_blob(kv, {.codec = c, .group_size = group});
          ASSERT_TRUE(blob.ok()) << blob.error().to_string();
          auto back = decode_blob(*blob);
          ASSERT_TRUE(back.ok()) << back.error().to_string();
          const uint64_t n = shape.elements_per_region();
          const size_t eb = element_bytes(t);
          const double half_levels = c == Codec::kInt8 ? 510.0 : 30.0;
          // Relative rounding of the output dtype (half an ulp).
          const double dtype_rel = t == DType::kF32 ? 1e-6 : (t == DType::kF16 ? 1.0 / 2048 : 1.0 / 256);
          for (int r = 0; r < 2; ++r) {
            const auto& x = r == 0 ? kv.k : kv.v;
            const auto& y = r == 0 ? back->k : back->v;
            for (uint64_t g0 = 0; g0 < n; g0 += group) {
              const uint64_t g1 = std::min<uint64_t>(n, g0 + group);
              double lo = 1e30, hi = -1e30;
              for (uint64_t i = g0; i < g1; ++i) {
                lo = std::min<double>(lo, element_to_float(t, x.data() + i * eb));
                hi = std::max<double>(hi, element_to_float(t, x.data() + i * eb));
              }
              const double step_bound = (hi - lo) / half_levels;
              for (uint64_t i = g0; i < g1; ++i) {
                const double a = element_to_float(t, x.data() + i * eb);
                const double b = element_to_float(t, y.data() + i * eb);
                const double bound = step_bound * (1 + 1e-5) + std::fabs(b) * dtype_rel + 1e-7;
                ASSERT_LE(std::fabs(a - b), bound) << codec_name(c) << " " << dtype_name(t) << " group " << group
                                                   << " element " << i << " region " << r;
              }
            }
          }
        }
      }
    }
  }
}

// A constant group (scale 0) comes back exactly.
TEST(BlobCodec, ConstantGroupIsExact) {
  PackedKv kv = synthetic_kv(DType::kF32, {1, 4, 1, 32}, kFp, 3);
  for (size_t i = 0; i < kv.k.size() / 4; ++i) float_to_element(DType::kF32, 0.375f, kv.k.data() + 4 * i);
  auto blob = encode_blob(kv, {.codec = Codec::kInt4, .group_size = 32});
  ASSERT_TRUE(blob.ok());
  auto back = decode_blob(*blob);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->k, kv.k);
}

// Documented tolerances (docs/kvstore.md) on K/V with realistic statistics (synthetic; see
// synthetic_kv.h), 135M-shaped (30 layers, 3 KV heads, head_dim 64), 200 tokens, f16, group 64.
TEST(BlobCodec, RelativeErrorAndRatioOnRealisticKv) {
  const PackedKv kv = synthetic_kv(DType::kF16, {30, 200, 3, 64}, kFp, 5);
  struct Want {
    Codec codec;
    double max_rel, min_ratio;
  };
  for (const Want& w : {Want{Codec::kNone, 0.0, 0.99}, Want{Codec::kZstd, 0.0, 1.0},
                        Want{Codec::kInt8, 0.01, 1.7}, Want{Codec::kInt4, 0.15, 3.0}}) {
    auto r = measure_codec(kv, {.codec = w.codec, .group_size = 64});
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_LE(r->relative_error, w.max_rel) << codec_name(w.codec);
    EXPECT_GE(r->ratio, w.min_ratio) << codec_name(w.codec);
    if (w.max_rel == 0.0) {
      EXPECT_EQ(r->max_abs_error, 0.0);
    } else {
      EXPECT_GT(r->relative_error, 0.0) << "a lossy codec that reports no error is suspicious";
    }
    std::printf("%s: ratio %.3f rel %.5f max_abs %.5f rms %.6f\n", codec_name(w.codec), r->ratio,
                r->relative_error, r->max_abs_error, r->rms_error);
  }
}

TEST(BlobCodec, AttentionOutputErrorOnRealisticKv) {
  const PackedKv kv = synthetic_kv(DType::kF16, {6, 200, 3, 64}, kFp, 9);
  for (auto [codec, bound] : {std::pair{Codec::kInt8, 0.02}, std::pair{Codec::kInt4, 0.25}}) {
    auto blob = encode_blob(kv, {.codec = codec, .group_size = 64});
    ASSERT_TRUE(blob.ok());
    auto back = decode_blob(*blob);
    ASSERT_TRUE(back.ok());
    const double rel = attention_output_rel_error(kv, *back, 1);
    std::printf("%s attention output relative error %.5f\n", codec_name(codec), rel);
    EXPECT_LE(rel, bound) << codec_name(codec);
    EXPECT_GT(rel, 0.0);
  }
}

// ---- Validation: bad blobs are errors, never crashes. ----

std::string small_blob(Codec c) {
  const PackedKv kv = synthetic_kv(DType::kBF16, {2, 5, 2, 16}, kFp, 1);
  return encode_blob(kv, {.codec = c, .group_size = 32}).value();
}

void reseal(std::string& blob) {  // recompute the checksum after a deliberate edit
  std::string h = blob.substr(0, kBlobHeaderBytes);
  std::memset(h.data() + 48, 0, 8);
  const uint64_t sum = xxh64(blob.data() + kBlobHeaderBytes, blob.size() - kBlobHeaderBytes,
                             xxh64(h.data(), h.size(), 0));
  std::memcpy(blob.data() + 48, &sum, 8);
}

// kivi: every element within half a step of its block, the step being at most
// max(kivi_step (K: half) x the RMS deviation of the head's channels, max deviation / 127), rounded
// up to fp16; plus the fp16 rounding of the channel mean and the output dtype's rounding.
TEST(BlobCodec, KiviWithinPerBlockBound) {
  const KvShape shapes[] = {{2, 7, 3, 48}, {1, 200, 1, 64}, {3, 70, 2, 33}};
  for (DType t : {DType::kF32, DType::kF16}) {
    for (float frac : {0.125f, 0.5f, 2.0f}) {
      for (uint32_t group : {16u, 64u}) {
        for (const KvShape& s : shapes) {
          const PackedKv kv = synthetic_kv(t, s, kFp, 13);
          auto blob = encode_blob(kv, {.codec = Codec::kKivi, .group_size = group, .kivi_step = frac});
          ASSERT_TRUE(blob.ok()) << blob.error().to_string();
          auto back = decode_blob(*blob);
          ASSERT_TRUE(back.ok()) << back.error().to_string();
          const size_t eb = element_bytes(t);
          const uint64_t W = uint64_t{s.n_kv_heads} * s.head_dim;
          const double dtype_rel = t == DType::kF32 ? 1e-6 : 1.0 / 2048;
          for (int r = 0; r < 2; ++r) {
            const auto& x = r == 0 ? kv.k : kv.v;
            const auto& y = r == 0 ? back->k : back->v;
            const double f = r == 0 ? frac * 0.5 : frac;
            auto at = [&](const std::vector<uint8_t>& v, uint64_t l, uint64_t tok, uint64_t c) {
              return static_cast<double>(element_to_float(t, v.data() + ((l * s.n_tokens + tok) * W + c) * eb));
            };
            for (uint64_t l = 0; l < s.n_layers; ++l) {
              for (uint64_t t0 = 0; t0 < s.n_tokens; t0 += group) {
                const uint64_t t1 = std::min<uint64_t>(s.n_tokens, t0 + group);
                for (uint64_t h = 0; h < s.n_kv_heads; ++h) {
                  double sq = 0, dev = 0, mabs = 0;
                  for (uint64_t c = h * s.head_dim; c < (h + 1) * s.head_dim; ++c) {
                    double m = 0;
                    for (uint64_t tok = t0; tok < t1; ++tok) m += at(x, l, tok, c);
                    m /= static_cast<double>(t1 - t0);
                    mabs = std::max(mabs, std::fabs(m));
                    for (uint64_t tok = t0; tok < t1; ++tok) {
                      const double e = at(x, l, tok, c) - m;
                      sq += e * e;
                      dev = std::max(dev, std::fabs(e));
                    }
                  }
                  const double rms = std::sqrt(sq / static_cast<double>((t1 - t0) * s.head_dim));
                  const double step = std::max(f * rms, dev / 127.0) * (1 + 1.0 / 1024) + 1e-7;
                  for (uint64_t c = h * s.head_dim; c < (h + 1) * s.head_dim; ++c) {
                    for (uint64_t tok = t0; tok < t1; ++tok) {
                      const double a = at(x, l, tok, c), b = at(y, l, tok, c);
                      // Half a step, plus the mean's fp16 rounding (which may push a clamped code
                      // half a rounding further), plus the output dtype.
                      const double bound = step / 2 + 2 * mabs / 2048 + std::fabs(b) * dtype_rel + 1e-6;
                      ASSERT_LE(std::fabs(a - b), bound) << dtype_name(t) << " frac " << frac << " group " << group
                                                         << " region " << r << " layer " << l << " token " << tok
                                                         << " channel " << c;
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
}

TEST(BlobValidation, EveryTruncationIsAnError) {
  for (Codec c : {Codec::kNone, Codec::kZstd, Codec::kInt8, Codec::kInt4, Codec::kKivi, Codec::kTiered}) {
    const std::string blob = small_blob(c);
    for (size_t len = 0; len < blob.size(); ++len) {
      auto r = decode_blob(std::string_view(blob).substr(0, len));
      ASSERT_FALSE(r.ok()) << codec_name(c) << " len " << len;
      EXPECT_TRUE(r.error().code == ErrorCode::kTruncatedFile || r.error().code == ErrorCode::kCorruptFile)
          << r.error().to_string();
    }
  }
}

TEST(BlobValidation, EveryFlippedByteIsAnError) {
  for (Codec c : {Codec::kNone, Codec::kZstd, Codec::kInt8, Codec::kInt4, Codec::kKivi, Codec::kTiered}) {
    const std::string blob = small_blob(c);
    for (size_t i = 0; i < blob.size(); ++i) {
      std::string bad = blob;
      bad[i] = static_cast<char>(bad[i] ^ 0x5A);
      auto r = decode_blob(bad);
      ASSERT_FALSE(r.ok()) << codec_name(c) << " byte " << i;
    }
  }
}

TEST(BlobValidation, ClearMessages) {
  std::string blob = small_blob(Codec::kZstd);
  auto wrong_model = decode_blob(blob, {.expected_fingerprint = kFp + 1});
  ASSERT_FALSE(wrong_model.ok());
  EXPECT_EQ(wrong_model.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(wrong_model.error().message.find("fingerprint"), std::string::npos);

  auto trailing = decode_blob(blob + "x");
  ASSERT_FALSE(trailing.ok());
  EXPECT_NE(trailing.error().message.find("trailing"), std::string::npos);

  std::string bad_magic = blob;
  bad_magic[0] = 'X';
  EXPECT_NE(decode_blob(bad_magic).error().message.find("magic"), std::string::npos);

  std::string flipped = blob;
  flipped.back() = static_cast<char>(flipped.back() ^ 1);
  EXPECT_NE(decode_blob(flipped).error().message.find("checksum"), std::string::npos);

  // A well-checksummed header that lies about the shape: caught by the zstd size check.
  std::string lying = blob;
  const uint32_t tokens = 6;
  std::memcpy(lying.data() + 20, &tokens, 4);
  reseal(lying);
  auto r = decode_blob(lying);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kCorruptFile) << r.error().to_string();

  // An absurd shape is refused before any allocation.
  std::string huge = blob;
  const uint32_t big = 1u << 30;
  std::memcpy(huge.data() + 20, &big, 4);
  reseal(huge);
  r = decode_blob(huge);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kTooLarge) << r.error().to_string();
}

TEST(BlobValidation, EncodeRejectsBadInput) {
  PackedKv kv = synthetic_kv(DType::kF32, {1, 3, 1, 8}, kFp, 2);
  EXPECT_EQ(encode_blob(kv, {.codec = Codec::kInt8, .group_size = 0}).error().code, ErrorCode::kOutOfRange);
  EXPECT_EQ(encode_blob(kv, {.codec = Codec::kZstd, .zstd_level = 40}).error().code, ErrorCode::kOutOfRange);
  PackedKv short_kv = kv;
  short_kv.v.pop_back();
  EXPECT_EQ(encode_blob(short_kv, {}).error().code, ErrorCode::kInvalidArgument);
  PackedKv q8 = kv;
  q8.dtype = DType::kQ8_0;
  EXPECT_EQ(encode_blob(q8, {}).error().code, ErrorCode::kUnsupported);
  PackedKv nan_kv = kv;
  float_to_element(DType::kF32, std::nanf(""), nan_kv.v.data() + 8);
  auto r = encode_blob(nan_kv, {.codec = Codec::kInt8});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("non-finite value in V"), std::string::npos);
  auto rk = encode_blob(nan_kv, {.codec = Codec::kKivi});
  ASSERT_FALSE(rk.ok());
  EXPECT_NE(rk.error().message.find("non-finite value in V"), std::string::npos);
  EXPECT_EQ(encode_blob(kv, {.codec = Codec::kKivi, .kivi_step = 0.0f}).error().code, ErrorCode::kOutOfRange);
  EXPECT_EQ(encode_blob(kv, {.codec = Codec::kKivi, .kivi_step = 5.0f}).error().code, ErrorCode::kOutOfRange);
  EXPECT_EQ(parse_codec("int4").value(), Codec::kInt4);
  EXPECT_EQ(parse_codec("kivi").value(), Codec::kKivi);
  EXPECT_FALSE(parse_codec("lz4").ok());
}

}  // namespace
}  // namespace tessera::kvstore
