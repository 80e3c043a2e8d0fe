#include "tessera/worker/kv_pool.h"

#include <algorithm>
#include <string>

namespace tessera::worker {

Result<KvPool> KvPool::create(const ModelConfig& model, const PoolConfig& config) {
  if (config.num_pages <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "kv pool: num_pages must be > 0 (got " + std::to_string(config.num_pages) + ")");
  }
  if (config.page_size <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "kv pool: page_size must be > 0 (got " + std::to_string(config.page_size) + ")");
  }
  if (model.n_layers <= 0 || model.n_kv_heads <= 0 || model.head_dim <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "kv pool: model has no layers, kv heads or head_dim");
  }
  KvPool p;
  p.config_ = config;
  p.n_layers_ = model.n_layers;
  p.token_floats_ = static_cast<int64_t>(model.n_kv_heads) * model.head_dim;
  const double total_bytes = 4.0 * model.n_layers * config.num_pages * 2.0 * config.page_size * static_cast<double>(p.token_floats_);
  if (total_bytes > 64.0 * (1ull << 30)) {
    return make_error(ErrorCode::kResourceExhausted,
                      "kv pool: " + std::to_string(config.num_pages) + " pages of " + std::to_string(config.page_size) +
                          " tokens need " + std::to_string(total_bytes / (1ull << 30)) + " GiB (limit 64 GiB)");
  }
  p.layer_floats_ = static_cast<size_t>(config.num_pages) * 2 * static_cast<size_t>(config.page_size) *
                    static_cast<size_t>(p.token_floats_);
  p.data_.assign(p.layer_floats_ * static_cast<size_t>(model.n_layers), 0.0f);
  return p;
}

size_t KvPool::slot_offset(int64_t slot, int kv) const {
  TS_DCHECK(slot >= 0 && slot < num_slots());
  const int64_t page = slot / config_.page_size, off = slot % config_.page_size;
  return static_cast<size_t>(((page * 2 + kv) * config_.page_size + off) * token_floats_);
}

void KvPool::copy_page(int32_t src, int32_t dst) {
  TS_CHECK(src >= 0 && src < config_.num_pages) << "copy_page src " << src;
  TS_CHECK(dst >= 0 && dst < config_.num_pages) << "copy_page dst " << dst;
  if (src == dst) return;
  const size_t page_floats = 2 * static_cast<size_t>(config_.page_size) * static_cast<size_t>(token_floats_);
  for (int32_t l = 0; l < n_layers_; ++l) {
    const float* s = layer(l) + static_cast<size_t>(src) * page_floats;
    std::copy(s, s + page_floats, layer(l) + static_cast<size_t>(dst) * page_floats);
  }
}

}  // namespace tessera::worker
