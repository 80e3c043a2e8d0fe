// The K/V policy directives of a SeqPlan (kv_directives.h).
#include "kv_directives.h"

#include <algorithm>
#include <numeric>
#include <unordered_set>

#include "tessera/kernels/ops.h"
#include "tessera/model/model.h"

namespace tessera::worker {
namespace {

constexpr int32_t kMaxRopeDelta = 1 << 24;

int64_t slot_of(const SeqPlan& s, int32_t index, int32_t ps) {
  return static_cast<int64_t>(s.block_table[static_cast<size_t>(index / ps)]) * ps + index % ps;
}

}  // namespace

bool uses_kv_policy(const SeqPlan& s) { return s.rope_offset != 0 || !s.moves.empty() || s.h2o_recent >= 0; }

Status validate_kv_directives(const SeqPlan& s, const PoolGeometry& pool) {
  const std::string who = "request " + std::to_string(s.request_id) + ": ";
  const int64_t covered = static_cast<int64_t>(s.block_table.size()) * pool.page_size;
  std::unordered_set<int32_t> dsts;
  for (size_t i = 0; i < s.moves.size(); ++i) {
    const KvMove& m = s.moves[i];
    const std::string at = who + "moves[" + std::to_string(i) + "]";
    if (m.src < 0 || m.dst < 0 || m.src >= covered || m.dst >= covered) {
      return make_error(ErrorCode::kOutOfRange, at + " (" + std::to_string(m.src) + " -> " + std::to_string(m.dst) +
                                                    ") is outside the block table's " + std::to_string(covered) + " positions");
    }
    if (m.rope_delta < -kMaxRopeDelta || m.rope_delta > kMaxRopeDelta) {
      return make_error(ErrorCode::kOutOfRange, at + ": rope_delta " + std::to_string(m.rope_delta) + " out of range");
    }
    if (!dsts.insert(m.dst).second) {
      return make_error(ErrorCode::kInvalidArgument, at + ": destination " + std::to_string(m.dst) + " is written twice");
    }
  }
  for (int32_t page : s.block_table) {
    if (!s.moves.empty() && (page < 0 || page >= pool.num_pages)) {
      return make_error(ErrorCode::kOutOfRange, who + "block_table holds page " + std::to_string(page) + " outside the pool");
    }
  }
  if (s.h2o_recent >= 0 && !s.sample && s.h2o_victims > 0) {
    return make_error(ErrorCode::kInvalidArgument, who + "h2o_victims needs a sampled sequence (victims come with its result)");
  }
  return ok_status();
}

void H2oState::begin_step(const SeqPlan& s) {
  const auto extent = static_cast<size_t>(s.start_pos) + s.tokens.size();
  mass.resize(extent, 0.0f);
  pos.resize(extent, 0);
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    const size_t c = static_cast<size_t>(s.start_pos) + i;
    mass[c] = 0.0f;
    pos[c] = s.start_pos + static_cast<int32_t>(i) + s.rope_offset;
  }
}

std::vector<int32_t> H2oState::victims(const SeqPlan& s) const {
  const auto extent = static_cast<int32_t>(static_cast<size_t>(s.start_pos) + s.tokens.size());
  if (s.h2o_victims <= 0 || extent == 0) return {};
  const int32_t newest = *std::max_element(pos.begin(), pos.begin() + extent);
  std::vector<int32_t> cand;
  cand.reserve(static_cast<size_t>(extent));
  for (int32_t c = 0; c < extent; ++c) {
    if (pos[static_cast<size_t>(c)] <= newest - s.h2o_recent) cand.push_back(c);
  }
  const size_t n = std::min(cand.size(), static_cast<size_t>(s.h2o_victims));
  std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(n), cand.end(), [&](int32_t a, int32_t b) {
    const float ma = mass[static_cast<size_t>(a)], mb = mass[static_cast<size_t>(b)];
    return ma != mb ? ma < mb : pos[static_cast<size_t>(a)] < pos[static_cast<size_t>(b)];
  });
  cand.resize(n);
  return cand;
}

Status apply_moves(Backend& backend, const ModelConfig& cfg, const SeqPlan& s, H2oState* h2o) {
  if (s.moves.empty()) return ok_status();
  const PoolGeometry g = backend.geometry();
  const size_t n = s.moves.size();
  const int64_t tf = g.token_floats();
  std::vector<int64_t> src(n), dst(n);
  std::vector<float> cos_sin(n * static_cast<size_t>(g.head_dim));
  for (size_t i = 0; i < n; ++i) {
    src[i] = slot_of(s, s.moves[i].src, g.page_size);
    dst[i] = slot_of(s, s.moves[i].dst, g.page_size);
    kernels::rope_table(&s.moves[i].rope_delta, 1, g.head_dim, cfg.rope_theta, cos_sin.data() + i * static_cast<size_t>(g.head_dim),
                        cfg.rope_freq_factors.empty() ? nullptr : cfg.rope_freq_factors.data(), cfg.rope_freq_scale);
  }
  const bool interleaved = cfg.rope_layout == RopeLayout::kInterleaved;
  std::vector<float> k(n * static_cast<size_t>(tf)), v(k.size());
  for (int32_t l = 0; l < g.n_layers; ++l) {
    TS_TRY(backend.read_kv(l, src, k, v));
    for (size_t i = 0; i < n; ++i) {
      if (s.moves[i].rope_delta == 0) continue;
      kernels::rope(k.data() + i * static_cast<size_t>(tf), tf, 1, g.n_kv_heads, g.head_dim,
                    cos_sin.data() + i * static_cast<size_t>(g.head_dim), interleaved);
    }
    TS_TRY(backend.write_kv(l, dst, k, v));
  }
  if (h2o != nullptr) {
    size_t need = 0;
    for (const KvMove& m : s.moves) need = std::max(need, static_cast<size_t>(std::max(m.src, m.dst)) + 1);
    if (h2o->mass.size() < need) {
      h2o->mass.resize(need, 0.0f);
      h2o->pos.resize(need, 0);
    }
    const std::vector<float> mass = h2o->mass;
    const std::vector<int32_t> pos = h2o->pos;
    for (const KvMove& m : s.moves) {
      h2o->mass[static_cast<size_t>(m.dst)] = mass[static_cast<size_t>(m.src)];
      h2o->pos[static_cast<size_t>(m.dst)] = pos[static_cast<size_t>(m.src)] + m.rope_delta;
    }
  }
  return ok_status();
}

}  // namespace tessera::worker
