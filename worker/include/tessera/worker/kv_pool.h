// The worker's physical K/V page pool (DESIGN.md, K/V data model).
//
// Layout: per layer one array [num_pages, 2, page_size, n_kv_heads, head_dim] of f32
// (index 0 = K, 1 = V). A page id names the same slot in every layer. A slot is
// page_id * page_size + offset and holds one token's K and V for every layer.
//
// Ownership: KvPool owns all page memory (allocated once, zeroed, never resized). It does not
// track which pages are in use: the scheduler owns placement; the worker writes and reads
// exactly the pages a step plan names. Not thread-safe: one Engine drives it.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/model/model.h"

namespace tessera::worker {

struct PoolConfig {
  int32_t num_pages = 0;   // > 0
  int32_t page_size = 16;  // tokens per page, > 0
};

class KvPool {
 public:
  // Errors: kInvalidArgument for non-positive sizes, kResourceExhausted when the pool would
  // exceed 64 GiB (a likely typo, not a wish).
  static Result<KvPool> create(const ModelConfig& model, const PoolConfig& config);

  int32_t num_pages() const { return config_.num_pages; }
  int32_t page_size() const { return config_.page_size; }
  int64_t num_slots() const { return static_cast<int64_t>(config_.num_pages) * config_.page_size; }
  int32_t num_layers() const { return n_layers_; }
  int64_t token_floats() const { return token_floats_; }  // n_kv_heads * head_dim
  size_t bytes() const { return data_.size() * sizeof(float); }

  // This layer's [num_pages, 2, page_size, n_kv_heads, head_dim] array.
  float* layer(int32_t l) { return data_.data() + static_cast<size_t>(l) * layer_floats_; }
  const float* layer(int32_t l) const { return data_.data() + static_cast<size_t>(l) * layer_floats_; }
  // The token_floats() K (or V) values of `slot` in layer l. slot in [0, num_slots()).
  float* key(int32_t l, int64_t slot) { return layer(l) + slot_offset(slot, 0); }
  float* value(int32_t l, int64_t slot) { return layer(l) + slot_offset(slot, 1); }
  const float* key(int32_t l, int64_t slot) const { return layer(l) + slot_offset(slot, 0); }
  const float* value(int32_t l, int64_t slot) const { return layer(l) + slot_offset(slot, 1); }

  // Copies page src to page dst in every layer. Both must be in range (TS_CHECK).
  void copy_page(int32_t src, int32_t dst);

 private:
  KvPool() = default;
  size_t slot_offset(int64_t slot, int kv) const;

  PoolConfig config_;
  int32_t n_layers_ = 0;
  int64_t token_floats_ = 0;
  size_t layer_floats_ = 0;
  std::vector<float> data_;
};

}  // namespace tessera::worker
