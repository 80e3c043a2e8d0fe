#include "range_coder.h"

namespace tessera::kvstore::rc {
void Encoder::shift_low() {
  if (static_cast<uint32_t>(low_) < 0xFF000000u || (low_ >> 32) != 0) {
    const auto carry = static_cast<uint8_t>(low_ >> 32);
    uint8_t temp = cache_;
    do {
      out_.push_back(static_cast<char>(static_cast<uint8_t>(temp + carry)));
      temp = 0xFF;
    } while (--cache_size_ != 0);
    cache_ = static_cast<uint8_t>(low_ >> 24);
  }
  ++cache_size_;
  low_ = (low_ & 0x00FFFFFFu) << 8;
}

void Encoder::encode_direct(uint32_t value, int bits) {
  if (bits == 0) return;
  range_ >>= bits;  // range_ >= 2^24 here, so >= 2^8 after
  low_ += uint64_t{value} * range_;
  while (range_ < kTop) {
    range_ <<= 8;
    shift_low();
  }
}

void Encoder::encode_int(IntModel& m, int32_t q, int k) {
  encode_bit(m.zero, q == 0 ? 0 : 1);
  if (q == 0) return;
  encode_bit(m.sign, q < 0 ? 1 : 0);
  const uint32_t u = (q < 0 ? static_cast<uint32_t>(-static_cast<int64_t>(q)) : static_cast<uint32_t>(q)) - 1;
  const uint32_t h = (u >> k) + 1;
  const int n = 31 - __builtin_clz(h);  // suffix bits below the leading one
  for (int i = 0; i < n; ++i) encode_bit(m.unary[static_cast<size_t>(i)], 1);
  encode_bit(m.unary[static_cast<size_t>(n)], 0);
  if (n > 0) {
    encode_bit(m.top[static_cast<size_t>(n)], (h >> (n - 1)) & 1u);
    if (n > 17) {
      encode_direct((h >> 16) & ((1u << (n - 17)) - 1), n - 17);
      encode_direct(h & 0xFFFFu, 16);
    } else {
      encode_direct(h & ((1u << (n - 1)) - 1), n - 1);
    }
  }
  encode_direct(u & ((1u << k) - 1), k);
}

void Encoder::finish() {
  for (int i = 0; i < 5; ++i) shift_low();
}

Decoder::Decoder(std::string_view in) : in_(in) {
  for (int i = 0; i < 5; ++i) code_ = (code_ << 8) | next_byte();
}

bool Decoder::decode_direct(int bits, uint32_t* value) {
  *value = 0;
  if (bits == 0) return true;
  range_ >>= bits;
  const uint32_t v = code_ / range_;
  if (v >> bits != 0) return false;
  code_ -= v * range_;
  while (range_ < kTop) {
    range_ <<= 8;
    code_ = (code_ << 8) | next_byte();
  }
  *value = v;
  return true;
}

bool Decoder::decode_int(IntModel& m, int k, int32_t* q) {
  if (decode_bit(m.zero) == 0) {
    *q = 0;
    return true;
  }
  const bool negative = decode_bit(m.sign) != 0;
  int n = 0;
  while (n < kMaxExpBits && decode_bit(m.unary[static_cast<size_t>(n)]) != 0) ++n;
  if (n == kMaxExpBits) return false;  // the encoder never writes h >= 2^30
  uint64_t h = 1;
  if (n > 0) {
    h = (h << 1) | decode_bit(m.top[static_cast<size_t>(n)]);
    uint32_t rest = 0;
    if (n > 17) {
      if (!decode_direct(n - 17, &rest)) return false;
      h = (h << (n - 17)) | rest;
      if (!decode_direct(16, &rest)) return false;
      h = (h << 16) | rest;
    } else {
      if (!decode_direct(n - 1, &rest)) return false;
      h = (h << (n - 1)) | rest;
    }
  }
  uint32_t lo = 0;
  if (!decode_direct(k, &lo)) return false;
  const uint64_t mag = (((h - 1) << k) | lo) + 1;
  if (mag >= (uint64_t{1} << 30)) return false;
  *q = negative ? -static_cast<int32_t>(mag) : static_cast<int32_t>(mag);
  return true;
}

}  // namespace tessera::kvstore::rc
