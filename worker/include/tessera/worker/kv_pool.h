// The worker's physical K/V page pool (DESIGN.md, K/V data model).
//
// Layout: per layer one array [num_pages, 2, page_size, n_kv_heads, row] (index 0 = K, 1 = V),
// a row being one kv head's head_dim values in the pool's page dtype (kernels/kv_format.h: f32,
// f16, or int8 with per-group fp16 scales). A page id names the same slot in every layer. A
// slot is page_id * page_size + offset and holds one token's K and V for every layer.
// paged_attention reads the rows in that format directly; store()/load() convert one token's
// K or V (all heads) from/to f32 for the forward pass and the preference injector.
//
// Ownership: KvPool owns all page memory (allocated once, zeroed, never resized). It does not
// track which pages are in use: the scheduler owns placement; the worker writes and reads
// exactly the pages a step plan names. Not thread-safe: one Engine drives it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "tessera/common/result.h"
#include "tessera/kernels/kv_format.h"
#include "tessera/model/model.h"

namespace tessera::worker {

struct PoolConfig {
  int32_t num_pages = 0;   // > 0 (ignored when memory_mb > 0)
  int32_t page_size = 16;  // tokens per page, > 0
  kernels::KvDtype dtype = kernels::KvDtype::kF32;  // page dtype
  int64_t memory_mb = 0;   // > 0: as many pages as fit in this many MiB (replaces num_pages)
};

// Bytes of one page (K and V of page_size tokens in every layer) of `model` in `dtype`.
size_t kv_page_bytes(const ModelConfig& model, int32_t page_size, kernels::KvDtype dtype);

class KvPool {
 public:
  // Errors: kInvalidArgument for non-positive sizes or a memory budget smaller than one page,
  // kResourceExhausted when the pool would exceed 64 GiB (a likely typo, not a wish).
  static Result<KvPool> create(const ModelConfig& model, const PoolConfig& config);

  int32_t num_pages() const { return config_.num_pages; }
  int32_t page_size() const { return config_.page_size; }
  kernels::KvDtype dtype() const { return config_.dtype; }
  const kernels::KvRowFormat& row_format() const { return fmt_; }
  int64_t num_slots() const { return static_cast<int64_t>(config_.num_pages) * config_.page_size; }
  int32_t num_layers() const { return n_layers_; }
  int64_t token_floats() const { return token_floats_; }  // n_kv_heads * head_dim (values per K or V)
  size_t token_bytes() const { return token_bytes_; }     // bytes of one slot's K (or V), one layer
  size_t bytes() const { return layer_bytes_ * static_cast<size_t>(n_layers_); }

  // This layer's [num_pages, 2, page_size, n_kv_heads, row] array, in the page dtype.
  const uint8_t* layer_data(int32_t l) const { return data_.get() + static_cast<size_t>(l) * layer_bytes_; }
  uint8_t* layer_data(int32_t l) { return data_.get() + static_cast<size_t>(l) * layer_bytes_; }

  // One slot's K (kv 0) or V (kv 1) of layer l, token_floats() values: encoded into the page
  // dtype / decoded from it. slot in [0, num_slots()).
  void store(int32_t l, int64_t slot, int kv, const float* values);
  void load(int32_t l, int64_t slot, int kv, float* values) const;

  // f32 pools only (TS_CHECK): the float views the f32 format allows.
  float* layer(int32_t l) { return as_f32(layer_data(l)); }
  const float* layer(int32_t l) const { return as_f32(layer_data(l)); }
  float* key(int32_t l, int64_t slot) { return as_f32(layer_data(l) + slot_offset(slot, 0)); }
  float* value(int32_t l, int64_t slot) { return as_f32(layer_data(l) + slot_offset(slot, 1)); }
  const float* key(int32_t l, int64_t slot) const { return as_f32(layer_data(l) + slot_offset(slot, 0)); }
  const float* value(int32_t l, int64_t slot) const { return as_f32(layer_data(l) + slot_offset(slot, 1)); }

  // Copies page src to page dst in every layer. Both must be in range (TS_CHECK).
  void copy_page(int32_t src, int32_t dst);

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  KvPool() = default;
  size_t slot_offset(int64_t slot, int kv) const;  // bytes into a layer
  float* as_f32(uint8_t* p) const;
  const float* as_f32(const uint8_t* p) const;

  PoolConfig config_;
  kernels::KvRowFormat fmt_;
  int32_t n_layers_ = 0;
  int32_t n_kv_heads_ = 0;
  int64_t token_floats_ = 0;
  size_t token_bytes_ = 0;
  size_t layer_bytes_ = 0;
  std::unique_ptr<uint8_t[], Free> data_;  // 64-byte aligned
};

}  // namespace tessera::worker
