// Shared by the fuzz targets: reads every byte of every tensor of a loaded Model, so that
// AddressSanitizer (under libFuzzer) catches a tensor whose claimed bytes lie outside the
// buffer the loader validated.
#pragma once

#include <cstdint>

#include "tessera/common/log.h"
#include "tessera/model/model.h"

namespace tessera::fuzz {

// Loader warnings (e.g. "RoPE scaling ignored") would flood the fuzzer's output.
inline bool quiet_logs() {
  tessera::log::set_level(tessera::log::kError);
  return true;
}

inline uint64_t touch(const Tensor& t) {
  if (t.empty()) return 0;
  const auto* p = static_cast<const uint8_t*>(t.data);
  const size_t n = static_cast<size_t>(t.rows) * dtype_row_bytes(t.dtype, t.cols);
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += p[i];
  return sum;
}

inline uint64_t touch_model(const Model& m) {
  uint64_t sum = touch(m.tok_embeddings) + touch(m.final_norm) + touch(m.output) +
                 static_cast<uint64_t>(m.parameter_count());
  for (const LayerWeights& w : m.layers) {
    for (const Tensor* t : {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.bq, &w.bk, &w.bv, &w.ffn_norm,
                                    &w.w_gate, &w.w_up, &w.w_down}) {
      sum += touch(*t);
    }
  }
  for (const auto& s : m.vocab.tokens) sum += s.size();
  return sum;
}

}  // namespace tessera::fuzz
