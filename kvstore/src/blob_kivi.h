// Private: the "kivi" codec of blob.cpp — per-channel entropy-coded quantization of K/V.
//
// Each region ([n_layers][n_tokens][n_kv_heads][head_dim]) is cut into blocks of one channel
// (layer, kv head, dim) over `group` consecutive tokens (KIVI's per-channel grouping; the last
// block may be shorter). Per block: mean m, step s = max(step_frac * std, max|x - m| / 127) (so
// codes fit a byte; an all-equal block gets s = 1), both stored as fp16 and used rounded;
// codes q = clamp(round_half_even((x - m) / s), -127, 127) as int8, x' = m + q * s. The
// quantized payload (every block's {fp16 m, fp16 s}, then every code) is then zstd-compressed:
// zstd's Huffman stage entropy-codes the small, peaked codes (CacheGen's idea, with zstd as the
// entropy coder), so the rate follows step_frac, not a fixed bit width.
// Error per element: |x - x'| <= s / 2 (+ the fp16 rounding of m when |x - m| / s is clamped).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/common/result.h"
#include "tessera/kvstore/blob.h"

namespace tessera::kvstore::kivi {

// K's step is this fraction of V's: attention is about twice as sensitive to an error in K (it
// moves every score) as to the same error in V (averaged by the weights) on real K/V, and equal
// error contributions minimize the total for a given rate.
inline constexpr float kKeyStepRatio = 0.5f;

// Bytes of the quantized (pre-zstd) payload of both regions.
uint64_t payload_bytes(const KvShape& s, uint32_t group);

// Appends one region's params and codes to out. x: elements_per_region() floats.
Status quantize_region(const KvShape& s, uint32_t group, float step_frac, const float* x, const char* region,
                       std::string& out);

// Reads one region at *pos of in (advanced) into x.
Status dequantize_region(const KvShape& s, uint32_t group, std::string_view in, size_t* pos, float* x);

}  // namespace tessera::kvstore::kivi
