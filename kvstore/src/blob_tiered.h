// Private: the "tiered" codec of blob.cpp — K/V quantized with per-token steps and entropy-coded
// with an adaptive range coder (range_coder.h).
//
// Per region (K, then V) and per (layer, kv head): every channel's mean over the blob's tokens
// (fp16; for K a constant error per channel is harmless: it moves every score of a query by the
// same amount, which the softmax cancels), and one base step Δ = frac × the RMS deviation from
// those means over the head (f32), frac = EncodeOptions::tiered_step for V and kKeyStepRatio ×
// that for K. Token t's step is Δ_t = Δ × 2^(e_t / 2), e_t its step exponent in half-octaves
// (the encoder's choice, stored: (1 + distance from the end / kDecayTokens)^decay, at most
// 2^(kMaxDecayExp / 2) — later queries attend mostly to the last tokens), and / 2^fine_shift for
// the last `recent` tokens (KIVI's full-precision residual). Codes q = round_half_even((x -
// mean) / Δ_t), x' = mean + q·Δ_t; |x - x'| <= Δ_t / 2 (before rounding to the blob's dtype).
//
// Payload (little-endian): u32 recent, u8 fine_shift, u8 Golomb-Rice k per (K coarse, K fine,
// V coarse, V fine) (range_coder.h; chosen from the codes' mean magnitude), u8 flags, u8 decay ×
// 16 (informational), 1 zero byte; then for K and for V: n_layers × n_kv_heads f32 steps, then
// n_layers × n_kv_heads × head_dim fp16 means; then the range-coded stream: with kFlagTokenExp,
// n_tokens exponents e_t (one adaptive model; without it every e_t is 0); then the codes, K then
// V, each in [layer][token][kv head][dim] order, one adaptive model per (region, tier, dim mod
// 8), Golomb-Rice k = the stored k - floor(e_t / 2). Blobs written before the flags existed have
// flags 0 and decode exactly as before; a blob encoded with decay 0 is byte-identical to theirs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/common/result.h"
#include "tessera/kvstore/blob.h"

namespace tessera::kvstore::tiered {

// K's step relative to V's (K errors move every score; attention is more sensitive to them).
inline constexpr float kKeyStepRatio = 0.15f;
// The recent tier's steps are 2^-kFineShift of the others.
inline constexpr uint32_t kFineShift = 4;
// Step exponents: the decay's distance scale (tokens), the encoder's largest exponent (64x), and
// the largest a decoder accepts.
inline constexpr double kDecayTokens = 32.0;
inline constexpr uint32_t kMaxDecayExp = 12;
inline constexpr uint32_t kMaxTokenExp = 24;
// Prefix flags.
inline constexpr uint8_t kFlagTokenExp = 1;  // per-token step exponents precede the codes

struct Params {
  float step = 0.1f;         // V's step / the head's RMS deviation, (0, 4]
  uint32_t recent = 8;       // tokens at the end in the fine tier (clamped to n_tokens)
  uint32_t fine_shift = kFineShift;
  float decay = 0.0f;        // step growth with the distance from the end, [0, 4]; 0 = uniform
};

// Appends the payload for k and v (elements_per_region() floats each). Non-finite values are
// refused (kInvalidArgument naming the region and element).
Status encode(const KvShape& s, const float* k, const float* v, const Params& p, std::string& out);

// The least payload a valid encoding of shape s has: the prefix, the parameters, and the code
// stream's entropy floor — every code costs at least one adaptive decision, and an 11-bit
// probability saturates at 2017/2048 (>= 0.022 bit), so 2n codes take >= n/182 bytes; n/256 is
// required. Checked against the header (peek_blob_header) before anything the size of the shape
// is allocated, so a few hostile bytes cannot claim gigabytes of K/V.
uint64_t min_payload_bytes(const KvShape& s);

// Decodes a payload into k and v (elements_per_region() elements of `dtype` each, written as
// decoded: no f32 staging copy). Corrupt or short payloads give kCorruptFile / kTruncatedFile;
// never reads out of bounds.
Status decode(const KvShape& s, std::string_view payload, DType dtype, uint8_t* k, uint8_t* v);

}  // namespace tessera::kvstore::tiered
