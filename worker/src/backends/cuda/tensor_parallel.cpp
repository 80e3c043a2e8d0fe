// Sharding plan, weight slicing and the in-process all-reduce; see tensor_parallel.h.
#include "tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/engine_impl.h"  // check_plain_llama
#include "tessera/common/check.h"

namespace tessera::worker::tp {
namespace {

int64_t block_of(const Model& m) {
  int64_t b = 1;
  auto visit = [&](const Tensor& t) {
    if (!t.empty()) b = std::max(b, dtype_block_size(t.dtype));
  };
  for (const LayerWeights& w : m.layers) {
    visit(w.w_gate);
    visit(w.w_up);
    visit(w.w_down);
    visit(w.wo);
  }
  return b;
}

}  // namespace

Result<std::vector<RankShard>> plan_shards(const Model& model, int32_t world) {
  const ModelConfig& c = model.config();
  if (world < 1 || world > 64) {
    return make_error(ErrorCode::kInvalidArgument, "tensor parallel: world size must be in [1, 64] (got " + std::to_string(world) + ")");
  }
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0 || c.hidden_dim <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "tensor parallel: model config has bad head counts or hidden_dim");
  }
  TS_TRY(check_plain_llama(c, "tensor parallel"));
  // Heads: either whole KV heads per rank (n_kv_heads % world == 0), or each KV head
  // replicated on `rep` = world / n_kv_heads ranks that split its query heads.
  const int32_t group = c.n_heads / c.n_kv_heads;
  const bool whole = c.n_kv_heads % world == 0;
  const int32_t rep = whole ? 1 : world / c.n_kv_heads;
  if (!whole && (world % c.n_kv_heads != 0 || group % rep != 0)) {
    return make_error(ErrorCode::kUnsupported, "not implemented yet: tensor parallelism over " + std::to_string(world) +
                                                   " ranks with n_kv_heads " + std::to_string(c.n_kv_heads) + " and " +
                                                   std::to_string(group) + " query heads per KV head (needs n_kv_heads % world == 0, "
                                                   "or world % n_kv_heads == 0 with the query heads dividing evenly)");
  }
  const int32_t kv_per_rank = whole ? c.n_kv_heads / world : 1;
  const int32_t q_per_rank = whole ? kv_per_rank * group : group / rep;
  const int64_t align = block_of(model);
  if ((static_cast<int64_t>(q_per_rank) * c.head_dim) % align != 0) {
    return make_error(ErrorCode::kUnsupported, "tensor parallel: a rank's " + std::to_string(q_per_rank) +
                                                   " query heads x head_dim " + std::to_string(c.head_dim) +
                                                   " are not a multiple of the weight block size " + std::to_string(align) +
                                                   " (wo is cut along its columns)");
  }
  // Hidden slices: whole blocks of `align` units spread evenly (rank r gets blocks
  // [r * nb / world, (r + 1) * nb / world)); a ragged tail (align 1 only) goes to the last rank.
  const int64_t nb = c.hidden_dim / align;
  std::vector<RankShard> out;
  for (int32_t r = 0; r < world; ++r) {
    RankShard s;
    s.rank = r;
    s.world = world;
    s.kv_head_begin = whole ? r * kv_per_rank : r / rep;
    s.n_kv_heads = kv_per_rank;
    s.head_begin = s.kv_head_begin * group + (whole ? 0 : (r % rep) * q_per_rank);
    s.n_heads = q_per_rank;
    s.hidden_begin = nb * r / world * align;
    const int64_t end = r + 1 == world ? c.hidden_dim : nb * (r + 1) / world * align;
    s.hidden_size = end - s.hidden_begin;
    if (s.hidden_size <= 0 || s.hidden_size % align != 0) {
      return make_error(ErrorCode::kUnsupported, "tensor parallel: hidden_dim " + std::to_string(c.hidden_dim) + " cannot be cut into " +
                                                     std::to_string(world) + " non-empty slices aligned to " + std::to_string(align));
    }
    out.push_back(s);
  }
  return out;
}

Tensor slice_rows(const Tensor& t, int64_t begin, int64_t count) {
  TS_CHECK(begin >= 0 && count >= 0 && begin + count <= t.rows) << begin << "+" << count << " > " << t.rows;
  const size_t rb = dtype_row_bytes(t.dtype, t.cols);
  return Tensor{.dtype = t.dtype, .rows = count, .cols = t.cols,
                .data = static_cast<const uint8_t*>(t.data) + static_cast<size_t>(begin) * rb};
}

Tensor ShardModel::slice_cols(const Tensor& t, int64_t begin, int64_t count) {
  const int64_t bs = dtype_block_size(t.dtype);
  TS_CHECK(begin % bs == 0 && count % bs == 0 && begin + count <= t.cols);
  const size_t src_rb = dtype_row_bytes(t.dtype, t.cols), dst_rb = dtype_row_bytes(t.dtype, count);
  const size_t offset = static_cast<size_t>(begin / bs) * dtype_block_bytes(t.dtype);
  auto& buf = storage_.emplace_back(dst_rb * static_cast<size_t>(t.rows));
  for (int64_t r = 0; r < t.rows; ++r) {
    std::memcpy(buf.data() + static_cast<size_t>(r) * dst_rb,
                static_cast<const uint8_t*>(t.data) + static_cast<size_t>(r) * src_rb + offset, dst_rb);
  }
  return Tensor{.dtype = t.dtype, .rows = t.rows, .cols = count, .data = buf.data()};
}

Result<std::unique_ptr<ShardModel>> shard_model(const Model& full, const RankShard& s) {
  const ModelConfig& c = full.config();
  if (s.world < 1 || s.rank < 0 || s.rank >= s.world || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.hidden_size <= 0 ||
      s.head_begin + s.n_heads > c.n_heads || s.kv_head_begin + s.n_kv_heads > c.n_kv_heads ||
      s.hidden_begin + s.hidden_size > c.hidden_dim) {
    return make_error(ErrorCode::kInvalidArgument, "tensor parallel: shard of rank " + std::to_string(s.rank) +
                                                       " does not fit the model (use plan_shards)");
  }
  if (static_cast<int32_t>(full.layers.size()) != c.n_layers) {
    return make_error(ErrorCode::kInvalidArgument, "tensor parallel: model has " + std::to_string(full.layers.size()) +
                                                       " layers, config says " + std::to_string(c.n_layers));
  }
  std::unique_ptr<ShardModel> m(new ShardModel());
  m->shard_ = s;
  m->config_ = c;
  m->config_.n_heads = s.n_heads;
  m->config_.n_kv_heads = s.n_kv_heads;
  m->config_.hidden_dim = static_cast<int32_t>(s.hidden_size);
  m->format_ = full.format();
  m->path_ = full.path() + " [tp rank " + std::to_string(s.rank) + "/" + std::to_string(s.world) + "]";
  m->fingerprint = full.fingerprint;
  m->tok_embeddings = full.tok_embeddings;
  m->final_norm = full.final_norm;
  m->output = full.output;
  m->vocab = full.vocab;
  const int64_t hd = c.head_dim;
  const int64_t q0 = s.head_begin * hd, qn = s.n_heads * hd, k0 = s.kv_head_begin * hd, kn = s.n_kv_heads * hd;
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = full.layers[static_cast<size_t>(l)];
    const std::string name = "blk." + std::to_string(l);
    if (w.wq.rows != c.n_heads * hd || w.wk.rows != c.n_kv_heads * hd || w.wv.rows != c.n_kv_heads * hd ||
        w.wo.cols != c.n_heads * hd || w.w_gate.rows != c.hidden_dim || w.w_up.rows != c.hidden_dim ||
        w.w_down.cols != c.hidden_dim) {
      return make_error(ErrorCode::kInvalidArgument, "tensor parallel: " + name + " has tensor shapes that contradict the config");
    }
    LayerWeights o;
    o.attn_norm = w.attn_norm;
    o.ffn_norm = w.ffn_norm;
    o.wq = slice_rows(w.wq, q0, qn);
    o.wk = slice_rows(w.wk, k0, kn);
    o.wv = slice_rows(w.wv, k0, kn);
    if (c.attn_bias) {
      auto bias = [](const Tensor& b, int64_t begin, int64_t count) {
        Tensor t = b;
        t.cols = count;
        t.data = b.f32() + begin;
        return t;
      };
      o.bq = bias(w.bq, q0, qn);
      o.bk = bias(w.bk, k0, kn);
      o.bv = bias(w.bv, k0, kn);
    }
    o.wo = m->slice_cols(w.wo, q0, qn);
    o.w_gate = slice_rows(w.w_gate, s.hidden_begin, s.hidden_size);
    o.w_up = slice_rows(w.w_up, s.hidden_begin, s.hidden_size);
    o.w_down = m->slice_cols(w.w_down, s.hidden_begin, s.hidden_size);
    m->layers.push_back(o);
  }
  return m;
}

// ---- In-process all-reduce ----

class InProcessGroup::Member final : public Communicator {
 public:
  Member(InProcessGroup& g, int32_t r) : g_(g), rank_(r) {}
  int32_t rank() const override { return rank_; }
  int32_t world() const override { return g_.world_; }

  Status all_reduce_sum(std::span<float> data) override {
    g_.buffers_[static_cast<size_t>(rank_)] = data;
    if (rank_ == 0) g_.result_.resize(data.size());
    if (!g_.arrive_and_wait()) return timeout();
    for (const auto& b : g_.buffers_) {
      if (b.size() != data.size()) {
        // Every rank sees the mismatch; all return the error after the next barrier.
        g_.arrive_and_wait();
        return make_error(ErrorCode::kInvalidArgument, "all_reduce_sum: ranks passed different sizes");
      }
    }
    // Rank r sums its share of the elements, in rank order.
    const size_t n = data.size(), w = static_cast<size_t>(g_.world_), r = static_cast<size_t>(rank_);
    const size_t begin = n * r / w, end = n * (r + 1) / w;
    for (size_t i = begin; i < end; ++i) {
      float acc = g_.buffers_[0][i];
      for (size_t k = 1; k < w; ++k) acc += g_.buffers_[k][i];
      g_.result_[i] = acc;
    }
    if (!g_.arrive_and_wait()) return timeout();
    std::copy(g_.result_.begin(), g_.result_.end(), data.begin());
    if (!g_.arrive_and_wait()) return timeout();  // nobody reuses result_ before all have copied
    return ok_status();
  }

 private:
  Status timeout() const {
    return make_error(ErrorCode::kDeadlineExceeded, "all_reduce_sum: rank " + std::to_string(rank_) +
                                                        " waited too long for its peers");
  }
  InProcessGroup& g_;
  int32_t rank_;
};

InProcessGroup::InProcessGroup(int32_t world, std::chrono::milliseconds timeout)
    : world_(world), timeout_(timeout), buffers_(static_cast<size_t>(world)) {
  TS_CHECK(world >= 1);
  for (int32_t r = 0; r < world; ++r) members_.push_back(std::make_unique<Member>(*this, r));
}

InProcessGroup::~InProcessGroup() = default;

Communicator& InProcessGroup::rank(int32_t r) {
  TS_CHECK(r >= 0 && r < world_);
  return *members_[static_cast<size_t>(r)];
}

bool InProcessGroup::arrive_and_wait() {
  std::unique_lock<std::mutex> lock(mu_);
  if (broken_) return false;
  const uint64_t gen = generation_;
  if (++arrived_ == world_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return true;
  }
  if (!cv_.wait_for(lock, timeout_, [&] { return generation_ != gen || broken_; })) {
    broken_ = true;
    cv_.notify_all();
    return false;
  }
  return !broken_ || generation_ != gen;
}

}  // namespace tessera::worker::tp
