// Private: an adaptive binary range coder (LZMA's: 11-bit probabilities, adaptation shift 5,
// carry propagation through a cached byte) and a signed-integer model on top of it, the entropy
// coder of the "tiered" codec (blob_tiered.h).
//
// Integers are binarized as: zero? (context), sign (context), then u = |q| - 1 split at a
// caller-chosen bit k (Golomb-Rice): h = (u >> k) + 1 in order-0 Exp-Golomb — the bit length n
// of h in unary (one context per position, n < 30), the most significant of the n suffix bits
// with a context per n, the rest at probability 1/2 — then the k low bits of u at probability
// 1/2 (coded in one step: they are nearly uniform when k is below the codes' scale).
// Each IntModel is one set of contexts; a coder keeps as many as the caller has statistics.
//
// Not thread-safe (state per object). The decoder never reads out of bounds: past the end it
// reads zeros and remembers it, and the caller checks overrun() (a valid stream never
// overruns); decode_int reports a unary prefix longer than 30 as an error.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::kvstore::rc {

inline constexpr int kMaxExpBits = 30;
inline constexpr uint32_t kTop = 1u << 24;
inline constexpr int kProbBits = 11;
inline constexpr int kMoveBits = 5;

struct IntModel {
  uint16_t zero = 1024, sign = 1024;
  std::array<uint16_t, kMaxExpBits + 1> unary{}, top{};
  IntModel() {
    unary.fill(1024);
    top.fill(1024);
  }
};

class Encoder {
 public:
  explicit Encoder(std::string& out) : out_(out) {}
  void encode_bit(uint16_t& prob, uint32_t bit) {  // inline: the hot path
    const uint32_t bound = (range_ >> kProbBits) * prob;
    if (bit == 0) {
      range_ = bound;
      prob = static_cast<uint16_t>(prob + (((1u << kProbBits) - prob) >> kMoveBits));
    } else {
      low_ += bound;
      range_ -= bound;
      prob = static_cast<uint16_t>(prob - (prob >> kMoveBits));
    }
    while (range_ < kTop) {
      range_ <<= 8;
      shift_low();
    }
  }
  void encode_direct(uint32_t value, int bits);  // bits <= 16 at probability 1/2, no adaptation
  void encode_int(IntModel& m, int32_t q, int k);  // |q| < 2^30, 0 <= k <= 16
  void finish();  // flushes; the stream is complete after this

 private:
  void shift_low();
  std::string& out_;
  uint64_t low_ = 0;
  uint32_t range_ = 0xFFFFFFFFu;
  uint8_t cache_ = 0;
  uint64_t cache_size_ = 1;
};

class Decoder {
 public:
  explicit Decoder(std::string_view in);
  uint32_t decode_bit(uint16_t& prob) {  // inline: the hot path
    const uint32_t bound = (range_ >> kProbBits) * prob;
    uint32_t bit;
    if (code_ < bound) {
      range_ = bound;
      prob = static_cast<uint16_t>(prob + (((1u << kProbBits) - prob) >> kMoveBits));
      bit = 0;
    } else {
      code_ -= bound;
      range_ -= bound;
      prob = static_cast<uint16_t>(prob - (prob >> kMoveBits));
      bit = 1;
    }
    while (range_ < kTop) {
      range_ <<= 8;
      code_ = (code_ << 8) | next_byte();
    }
    return bit;
  }
  // false: a value out of range (corrupt stream).
  bool decode_direct(int bits, uint32_t* value);
  // false: a unary prefix longer than kMaxExpBits or |q| >= 2^30 (corrupt stream).
  bool decode_int(IntModel& m, int k, int32_t* q);
  bool overrun() const { return overrun_; }
  size_t consumed() const { return pos_; }

 private:
  uint8_t next_byte() {
    if (pos_ >= in_.size()) {
      overrun_ = true;
      return 0;
    }
    return static_cast<uint8_t>(in_[pos_++]);
  }
  std::string_view in_;
  size_t pos_ = 0;
  uint32_t range_ = 0xFFFFFFFFu, code_ = 0;
  bool overrun_ = false;
};

}  // namespace tessera::kvstore::rc
