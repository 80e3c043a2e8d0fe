// CacheBlend on the CPU backend (tessera/worker/blend.h): input checks, chunk K/V lookup or
// standalone computation, the reused K/V rotated into the sequence's slots, then the selective
// layer loop (blend_forward.cpp).
#include <algorithm>
#include <string>

#include "engine_impl.h"
#include "tessera/common/check.h"
#include "tessera/common/hash.h"
#include "tessera/kernels/ops.h"

namespace tessera::worker {
namespace {

Status bad(const std::string& what) { return make_error(ErrorCode::kInvalidArgument, "blend: " + what); }

Status check_input(const BlendInput& in, const KvPool& pool, int32_t vocab) {
  const auto n = static_cast<int64_t>(in.tokens.size());
  if (n == 0) return bad("tokens is empty");
  for (size_t i = 0; i < in.tokens.size(); ++i) {
    if (in.tokens[i] < 0 || in.tokens[i] >= vocab) {
      return bad("tokens[" + std::to_string(i) + "] = " + std::to_string(in.tokens[i]) + " is outside the vocabulary");
    }
  }
  const int64_t upto = in.end < 0 ? n : in.end;  // positions computed: [cached, upto)
  if (upto > n) return bad("end " + std::to_string(in.end) + " is past the " + std::to_string(n) + " tokens");
  if (in.cached < 0 || in.cached >= upto) return bad("cached " + std::to_string(in.cached) + " must be in [0, " + std::to_string(upto) + ")");
  const int64_t ps = pool.page_size();
  if (static_cast<int64_t>(in.block_table.size()) * ps < upto) {
    return bad("block_table covers " + std::to_string(in.block_table.size() * static_cast<size_t>(ps)) + " positions, the prompt has " +
               std::to_string(upto));
  }
  for (size_t p = 0; p < in.block_table.size(); ++p) {
    if (in.block_table[p] < 0 || in.block_table[p] >= pool.num_pages()) {
      return bad("block_table[" + std::to_string(p) + "] = " + std::to_string(in.block_table[p]) + " is outside the pool");
    }
  }
  int64_t end = 0;
  for (size_t c = 0; c < in.chunks.size(); ++c) {
    const ChunkSpan& s = in.chunks[c];
    if (s.length < 1 || s.begin < end || static_cast<int64_t>(s.begin) + s.length > n) {
      return bad("chunks[" + std::to_string(c) + "] = [" + std::to_string(s.begin) + ", +" + std::to_string(s.length) +
                 ") must be non-empty, after the previous chunk and inside the prompt");
    }
    end = static_cast<int64_t>(s.begin) + s.length;
  }
  if (in.recompute_ratio > 1.0f) return bad("recompute_ratio must be at most 1");
  return ok_status();
}

}  // namespace

void CpuBackend::set_blend_config(const BlendConfig& config) {
  blend_cfg_ = config;
  chunk_cache_ = ChunkKvCache(config.cache_bytes);
}

BlendStats CpuBackend::blend_stats() const {
  BlendStats s = blend_stats_;
  s.cached_chunks = chunk_cache_.size();
  s.cached_bytes = chunk_cache_.bytes();
  return s;
}

Result<std::shared_ptr<const ChunkKv>> CpuBackend::compute_chunk(std::span<const int32_t> anchor, uint64_t salt,
                                                                  std::span<const int32_t> chunk) {
  const int32_t ps = pool_.page_size();
  const auto a = static_cast<int32_t>(anchor.size()), len = static_cast<int32_t>(chunk.size());
  const int32_t pages = (a + len + ps - 1) / ps;
  if (!blend_pool_ || blend_pool_->num_pages() < pages) {
    TS_ASSIGN_OR_RETURN(KvPool p, KvPool::create(cfg_, {.num_pages = std::max(pages, 2 * (blend_pool_ ? blend_pool_->num_pages() : 0)),
                                                        .page_size = ps, .dtype = kernels::KvDtype::kF32}));
    blend_pool_.emplace(std::move(p));
    blend_pool_anchor_.reset();
  }
  std::vector<int32_t> table(static_cast<size_t>(blend_pool_->num_pages()));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  if (a > 0 && !(blend_pool_anchor_ && std::ranges::equal(*blend_pool_anchor_, anchor))) {  // tokens, not a hash
    const std::vector<BlendRole> roles(anchor.size(), BlendRole::kNew);
    blend_layers(*blend_pool_, {.tokens = anchor, .first = 0, .block_table = table, .role = roles}, nullptr);
    blend_pool_anchor_.emplace(anchor.begin(), anchor.end());
  }
  const std::vector<BlendRole> roles(chunk.size(), BlendRole::kNew);
  blend_layers(*blend_pool_, {.tokens = chunk, .first = a, .block_table = table, .role = roles}, nullptr);
  auto kv = std::make_shared<ChunkKv>();
  kv->tokens.assign(chunk.begin(), chunk.end());
  kv->anchor.assign(anchor.begin(), anchor.end());
  kv->salt = salt;
  kv->first_pos = a;
  kv->n_layers = cfg_.n_layers;
  kv->token_floats = pool_.token_floats();
  const auto floats = static_cast<size_t>(cfg_.n_layers) * chunk.size() * static_cast<size_t>(kv->token_floats);
  kv->k.resize(floats);
  kv->v.resize(floats);
  for (int32_t l = 0; l < cfg_.n_layers; ++l) {
    for (int32_t j = 0; j < len; ++j) {
      const auto at = static_cast<size_t>((static_cast<int64_t>(l) * len + j) * kv->token_floats);
      blend_pool_->load(l, a + j, 0, kv->k.data() + at);
      blend_pool_->load(l, a + j, 1, kv->v.data() + at);
    }
  }
  return std::shared_ptr<const ChunkKv>(std::move(kv));
}

Result<BlendOutcome> CpuBackend::blend_prefill(const BlendInput& in) {
  if (!capabilities().chunk_blend) {  // latent attention, YaRN, LongRoPE: re-rotation with the plain table would be wrong
    return make_error(ErrorCode::kUnsupported, "cpu backend: this model lacks capability chunk_blend (CacheBlend)");
  }
  TS_TRY(check_input(in, pool_, cfg_.vocab_size));
  const int32_t n = in.end < 0 ? static_cast<int32_t>(in.tokens.size()) : in.end;  // positions computed: [first, n)
  const int32_t ps = pool_.page_size();
  const float ratio = in.recompute_ratio >= 0.0f ? in.recompute_ratio : blend_cfg_.recompute_ratio;
  const int32_t first = in.cached;
  BlendOutcome out;
  std::vector<BlendRole> roles(static_cast<size_t>(n - first), BlendRole::kNew);

  if (!in.chunks.empty()) {
    const auto anchor = in.tokens.first(static_cast<size_t>(in.chunks[0].begin));
    const uint64_t anchor_hash = hash_tokens(anchor);
    const int64_t tf = pool_.token_floats();
    const bool interleaved = cfg_.rope_layout == RopeLayout::kInterleaved;
    std::vector<float> k(static_cast<size_t>(tf)), cs(static_cast<size_t>(cfg_.head_dim));
    for (size_t c = 0; c < in.chunks.size(); ++c) {
      const ChunkSpan& span = in.chunks[c];
      if (span.begin + span.length <= first) continue;  // inside the cached prefix / an earlier step: in the pages
      if (span.begin >= n) break;                       // a later step's
      const auto tokens = in.tokens.subspan(static_cast<size_t>(span.begin), static_cast<size_t>(span.length));
      const uint64_t key = chunk_key(model_.fingerprint, in.salt, anchor_hash, tokens);
      std::shared_ptr<const ChunkKv> kv = chunk_cache_.find(key, tokens, anchor, in.salt);
      const bool hit = kv != nullptr;
      if (hit && span.begin >= first) {  // a chunk continued from an earlier step was counted there, whole
        ++out.chunk_hits;
        out.hit_tokens += span.length;
      } else if (!hit) {
        TS_ASSIGN_OR_RETURN(kv, compute_chunk(anchor, in.salt, tokens));
        ++out.chunk_misses;
        blend_stats_.evictions += chunk_cache_.insert(key, kv);
      }
      // The chunk's K/V into the sequence's slots, K rotated from its standalone positions.
      const int32_t lo = std::max(span.begin, first);
      for (int32_t i = lo; i < std::min(span.begin + span.length, n); ++i) {
        const int32_t j = i - span.begin;
        const int32_t delta = i - (kv->first_pos + j);
        const int64_t slot = static_cast<int64_t>(in.block_table[static_cast<size_t>(i / ps)]) * ps + i % ps;
        if (delta != 0) {
          kernels::rope_table(&delta, 1, cfg_.head_dim, cfg_.rope_theta, cs.data(),
                              cfg_.rope_freq_factors.empty() ? nullptr : cfg_.rope_freq_factors.data(), cfg_.rope_freq_scale);
        }
        for (int32_t l = 0; l < cfg_.n_layers; ++l) {
          std::copy(kv->key(l, j), kv->key(l, j) + tf, k.begin());
          if (delta != 0) kernels::rope(k.data(), tf, 1, cfg_.n_kv_heads, cfg_.head_dim, cs.data(), interleaved);
          pool_.store(l, slot, 0, k.data());
          pool_.store(l, slot, 1, kv->value(l, j));
        }
        roles[static_cast<size_t>(i - first)] = c == 0 ? BlendRole::kExact : BlendRole::kReused;
        ++out.reused_tokens;
      }
    }
  }
  int32_t recomputed = 0;
  const std::span<float> logits =
      blend_layers(pool_, {.tokens = in.tokens.subspan(static_cast<size_t>(first), static_cast<size_t>(n - first)), .first = first,
                           .block_table = in.block_table,
                           .role = roles, .ratio = ratio, .check_layer = blend_cfg_.check_layer, .want_logits = in.want_logits},
                   &recomputed);
  out.logits = logits;
  out.recomputed_tokens = recomputed;
  out.computed_tokens = static_cast<int32_t>(std::count(roles.begin(), roles.end(), BlendRole::kNew));
  ++blend_stats_.prefills;
  blend_stats_.chunk_hits += out.chunk_hits;
  blend_stats_.chunk_misses += out.chunk_misses;
  blend_stats_.reused_tokens += out.reused_tokens;
  blend_stats_.hit_tokens += out.hit_tokens;
  blend_stats_.recomputed_tokens += out.recomputed_tokens;
  return out;
}

}  // namespace tessera::worker
