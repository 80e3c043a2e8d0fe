// The worker's physical K/V page pool (DESIGN.md, K/V data model).
//
// Layout: per layer one array [num_pages, planes, page_size, n_kv_heads, row], a row being one
// kv head's head_dim values in the pool's page dtype (kernels/kv_format.h: f32, f16, or int8
// with per-group fp16 scales). Two planes (index 0 = K, 1 = V) for every model but multi-head
// latent attention, whose cache (kv_layout) is by default one plane of one "head": the latent
// row [c (kv_lora_rank), k_pe (rope_dim)] per token, read as both K and V (the absorbed
// attention of mla.cpp). A page id names the same slot in every layer. A slot is
// page_id * page_size + offset and holds one token's K and V (or latent) for every layer.
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
  // Multi-head latent attention models only: cache the per-head decompressed K and V (V
  // zero-padded to head_dim) instead of the latent — the older layout, kept for comparison.
  bool mla_decompressed = false;
};

// What one token of one layer holds: `planes` arrays (2: K and V; 1: a row read as both) of
// n_kv_heads rows of head_dim values. The model's K/V heads, or for multi-head latent attention
// (unless mla_decompressed) planes 1, one head of kv_lora_rank + rope_dim.
struct KvLayout {
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t planes = 2;
};
KvLayout kv_layout(const ModelConfig& model, bool mla_decompressed = false);

// Bytes of one page (K and V, or the latent, of page_size tokens in every layer) of `model` in `dtype`.
size_t kv_page_bytes(const ModelConfig& model, int32_t page_size, kernels::KvDtype dtype, bool mla_decompressed = false);

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
  int32_t n_kv_heads() const { return layout_.n_kv_heads; }
  int32_t head_dim() const { return layout_.head_dim; }
  int32_t planes() const { return layout_.planes; }  // 1: the MLA latent cache (V is the K row)
  int64_t token_floats() const { return token_floats_; }  // n_kv_heads * head_dim (values per K or V)
  size_t token_bytes() const { return token_bytes_; }     // bytes of one slot's K (or V), one layer
  size_t bytes() const { return layer_bytes_ * static_cast<size_t>(n_layers_); }

  // This layer's [num_pages, planes, page_size, n_kv_heads, row] array, in the page dtype.
  const uint8_t* layer_data(int32_t l) const { return data_.get() + static_cast<size_t>(l) * layer_bytes_; }
  uint8_t* layer_data(int32_t l) { return data_.get() + static_cast<size_t>(l) * layer_bytes_; }

  // One slot's K (kv 0) or V (kv 1) of layer l, token_floats() values: encoded into the page
  // dtype / decoded from it. slot in [0, num_slots()). With one plane, V is the K row: load and
  // value() of kv 1 read it, store of kv 1 is a bug (TS_CHECK).
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
  KvLayout layout_;
  int64_t token_floats_ = 0;
  size_t token_bytes_ = 0;
  size_t layer_bytes_ = 0;
  std::unique_ptr<uint8_t[], Free> data_;  // 64-byte aligned (2 MiB, huge pages advised, from 4 MiB)
};

}  // namespace tessera::worker
