#include "tessera/worker/kv_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace tessera::worker {

KvLayout kv_layout(const ModelConfig& model, bool mla_decompressed) {
  if (model.is_mla() && !mla_decompressed) return {.n_kv_heads = 1, .head_dim = model.kv_lora_rank + model.rope_dim, .planes = 1};
  return {.n_kv_heads = model.n_kv_heads, .head_dim = model.head_dim, .planes = 2};
}

size_t kv_page_bytes(const ModelConfig& model, int32_t page_size, kernels::KvDtype dtype, bool mla_decompressed) {
  const KvLayout lay = kv_layout(model, mla_decompressed);
  const size_t row = kernels::kv_row_format(dtype, lay.head_dim).row_bytes();
  return static_cast<size_t>(lay.planes) * static_cast<size_t>(page_size) * static_cast<size_t>(lay.n_kv_heads) * row *
         static_cast<size_t>(model.n_layers);
}

Result<KvPool> KvPool::create(const ModelConfig& model, const PoolConfig& config) {
  if (config.page_size <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "kv pool: page_size must be > 0 (got " + std::to_string(config.page_size) + ")");
  }
  if (model.n_layers <= 0 || model.n_kv_heads <= 0 || model.head_dim <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "kv pool: model has no layers, kv heads or head_dim");
  }
  KvPool p;
  p.config_ = config;
  const size_t page_bytes = kv_page_bytes(model, config.page_size, config.dtype, config.mla_decompressed);
  if (config.memory_mb < 0) {
    return make_error(ErrorCode::kInvalidArgument, "kv pool: memory budget must be >= 0 MiB (got " + std::to_string(config.memory_mb) + ")");
  }
  if (config.memory_mb > 0) {
    const double pages = static_cast<double>(config.memory_mb) * (1 << 20) / static_cast<double>(page_bytes);
    if (pages < 1.0) {
      return make_error(ErrorCode::kInvalidArgument, "kv pool: " + std::to_string(config.memory_mb) + " MiB holds no " +
                                                         std::string(kernels::kv_dtype_name(config.dtype)) + " page of " +
                                                         std::to_string(page_bytes) + " bytes");
    }
    p.config_.num_pages = static_cast<int32_t>(std::min(pages, double{1 << 24}));
  }
  if (p.config_.num_pages <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "kv pool: num_pages must be > 0 (got " + std::to_string(p.config_.num_pages) + ")");
  }
  const double total_bytes = static_cast<double>(page_bytes) * p.config_.num_pages;
  if (total_bytes > 64.0 * (1ull << 30)) {
    return make_error(ErrorCode::kResourceExhausted,
                      "kv pool: " + std::to_string(p.config_.num_pages) + " pages of " + std::to_string(config.page_size) +
                          " tokens need " + std::to_string(total_bytes / (1ull << 30)) + " GiB (limit 64 GiB)");
  }
  p.layout_ = kv_layout(model, config.mla_decompressed);
  p.fmt_ = kernels::kv_row_format(config.dtype, p.layout_.head_dim);
  p.n_layers_ = model.n_layers;
  p.token_floats_ = static_cast<int64_t>(p.layout_.n_kv_heads) * p.layout_.head_dim;
  p.token_bytes_ = static_cast<size_t>(p.layout_.n_kv_heads) * p.fmt_.row_bytes();
  p.layer_bytes_ = static_cast<size_t>(p.config_.num_pages) * static_cast<size_t>(p.layout_.planes) *
                   static_cast<size_t>(config.page_size) * p.token_bytes_;
  const size_t total = p.layer_bytes_ * static_cast<size_t>(model.n_layers);
  // A pool of a few MiB or more sits on 2 MiB boundaries and asks for transparent huge pages
  // (the usual THP setting is "madvise"): attention reads a sequence's pages scattered over the
  // whole pool, and with 4 KiB pages every 16-key block of K and V was a handful of TLB misses.
  const size_t align = total >= (size_t{4} << 20) ? size_t{2} << 20 : 64;
  const size_t alloc = (total + align - 1) / align * align;
  p.data_.reset(static_cast<uint8_t*>(std::aligned_alloc(align, alloc)));
  if (!p.data_) return make_error(ErrorCode::kResourceExhausted, "kv pool: cannot allocate " + std::to_string(alloc) + " bytes");
  if (align > 64) (void)madvise(p.data_.get(), alloc, MADV_HUGEPAGE);  // advisory: 4 KiB pages if refused
  std::memset(p.data_.get(), 0, alloc);
  return p;
}

size_t KvPool::slot_offset(int64_t slot, int kv) const {
  TS_DCHECK(slot >= 0 && slot < num_slots());
  const int64_t page = slot / config_.page_size, off = slot % config_.page_size;
  const int64_t plane = layout_.planes == 1 ? 0 : kv;  // one plane: V is the K row
  return static_cast<size_t>((page * layout_.planes + plane) * config_.page_size + off) * token_bytes_;
}

float* KvPool::as_f32(uint8_t* p) const {
  TS_CHECK(config_.dtype == kernels::KvDtype::kF32) << "float view of a " << kernels::kv_dtype_name(config_.dtype) << " pool";
  return reinterpret_cast<float*>(p);
}
const float* KvPool::as_f32(const uint8_t* p) const {
  TS_CHECK(config_.dtype == kernels::KvDtype::kF32) << "float view of a " << kernels::kv_dtype_name(config_.dtype) << " pool";
  return reinterpret_cast<const float*>(p);
}

void KvPool::store(int32_t l, int64_t slot, int kv, const float* values) {
  TS_CHECK(kv == 0 || layout_.planes == 2) << "store of V into a one-plane (latent) pool";
  uint8_t* dst = layer_data(l) + slot_offset(slot, kv);
  const size_t row = fmt_.row_bytes();
  for (int32_t h = 0; h < layout_.n_kv_heads; ++h) kernels::kv_encode_row(fmt_, values + static_cast<int64_t>(h) * fmt_.head_dim, dst + h * row);
}

void KvPool::load(int32_t l, int64_t slot, int kv, float* values) const {
  const uint8_t* src = layer_data(l) + slot_offset(slot, kv);
  const size_t row = fmt_.row_bytes();
  for (int32_t h = 0; h < layout_.n_kv_heads; ++h) kernels::kv_decode_row(fmt_, src + h * row, values + static_cast<int64_t>(h) * fmt_.head_dim);
}

void KvPool::copy_page(int32_t src, int32_t dst) {
  TS_CHECK(src >= 0 && src < config_.num_pages) << "copy_page src " << src;
  TS_CHECK(dst >= 0 && dst < config_.num_pages) << "copy_page dst " << dst;
  if (src == dst) return;
  const size_t page = static_cast<size_t>(layout_.planes) * static_cast<size_t>(config_.page_size) * token_bytes_;
  for (int32_t l = 0; l < n_layers_; ++l) {
    std::memcpy(layer_data(l) + static_cast<size_t>(dst) * page, layer_data(l) + static_cast<size_t>(src) * page, page);
  }
}

}  // namespace tessera::worker
