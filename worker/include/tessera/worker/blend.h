// CacheBlend: reuse of a document's K/V wherever it appears in a prompt (not only as a prefix),
// after Yao et al., "CacheBlend: Fast Large Language Model Serving for RAG with Cached Knowledge
// Fusion" (EuroSys 2025). docs/kv.md "CacheBlend" says when to use it.
//
// A prompt is [anchor][chunk 1][chunk 2]...[chunk k][rest]: the chunks are the reusable
// documents the caller marks (spans of the prompt, in order, disjoint), the anchor is whatever
// precedes the first chunk (a system prompt, a template header; possibly empty).
//
// - Chunk K/V. Each chunk's K/V is computed standalone, right after the anchor (positions
//   anchor_len .. anchor_len + len - 1), and cached under hash(model fingerprint, salt, anchor
//   tokens, chunk tokens): the same document reused after the same anchor at any position and
//   in any order hits. A hit compares the entry's chunk tokens, anchor tokens and salt, never
//   only the 64-bit key. On reuse every layer's K is rotated by RoPE to its new position (RoPE is a
//   rotation linear in the position: R(p + d) = R(d) R(p), exact to f32 rounding for every rope
//   layout, frequency factors and linear scaling the kernels support) and V is copied.
// - The first chunk, computed after the very anchor it follows, is exact: no recompute.
// - Selective recompute (HKVD). Layers [0, check_layer] are computed for every token past the
//   first chunk (reused ones included). On the check layer the deviation |V - V'|^2 between
//   the freshly computed and the reused V (vllm_blend's measure; K and V together select
//   slightly worse on stories260K) picks the recompute_ratio share of
//   the reused tokens with the highest deviation; from the next layer on only those and the
//   non-reused tokens (the question, text between documents, the last token) are computed, their
//   K/V overwriting the reused ones in the sequence's pages ("fusion"), every other reused token
//   keeping its cached K/V. Ratio 0: no check layer at all, every reused token keeps its cached
//   K/V in every layer (full K/V reuse, the paper's naive baseline). Ratio 1: every token is
//   computed in every layer: exactly a full prefill.
// - Determinism: a chunk not in the cache is computed standalone and then used exactly as a hit
//   would be, so the result depends only on the prompt and its chunks, never on the cache state.
//
// Ownership and threads: a ChunkKvCache belongs to one backend and is driven by its one caller
// (the executor's thread); entries are shared_ptr so an entry evicted during a prefill stays
// valid for it. Not thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

namespace tessera::worker {

struct BlendConfig {
  int32_t check_layer = 1;          // the layer whose K/V deviation selects the tokens to recompute
  float recompute_ratio = 0.15f;    // share of reused tokens recomputed past the check layer, in [0, 1]
  int64_t cache_bytes = 64ll << 20; // chunk cache budget (host memory, f32 K/V); 0: nothing is kept
};

// Tokens [begin, begin + length) of a prompt.
struct ChunkSpan {
  int32_t begin = 0;
  int32_t length = 0;
};

// One blended prefill of one sequence, or one step of it. Spans must stay valid during the call.
//
// Several steps (a prompt longer than a step's token budget): each call computes positions
// [cached, end) over the K/V the earlier calls left in the pages (exact or fused), as a chunked
// prefill does; `tokens` then runs past `end` to the end of the last chunk that `end` cuts, so the
// chunk is looked up whole (its cache key is its full content). The first chunk stays exact and
// every other reused token is reused; HKVD selects the recompute_ratio share among the reused
// tokens of each call (a single call selects among all of them), so the result is the one-call
// blend with a per-call selection — identical at ratios 0 and 1.
struct BlendInput {
  std::span<const int32_t> tokens;       // the prompt from cache index 0, at least to `end`
  int32_t cached = 0;                    // tokens [0, cached) already hold K/V in the pages (a radix hit, earlier steps)
  std::span<const ChunkSpan> chunks;     // the reusable documents: in order, disjoint, non-empty, inside tokens;
                                         // from the prompt's first document on (its anchor is what precedes it)
  std::span<const int32_t> block_table;  // pages covering positions [0, end)
  uint64_t salt = 0;                     // the request's K/V namespace (tenant, cache_salt): a keyed hash
                                         // no client can compute (the scheduler's kv_name_hash)
  float recompute_ratio = -1.0f;         // < 0: the backend's BlendConfig::recompute_ratio
  bool want_logits = true;               // the logits of position end - 1
  int32_t end = -1;                      // positions [cached, end) are computed; -1: tokens.size()
};

struct BlendOutcome {
  std::span<float> logits;        // [vocab] of the last token (want_logits), valid until the backend's next call
  int32_t reused_tokens = 0;      // positions of [cached, end) whose K/V came from chunk K/V (hits and this call's misses)
  int32_t hit_tokens = 0;         // tokens of the chunks found in the cache that start in [cached, end), whole
                                  // (a chunk continued from an earlier call counted there; usage reused_tokens)
  int32_t recomputed_tokens = 0;  // reused tokens selected for recompute past the check layer
  int32_t computed_tokens = 0;    // tokens computed in every layer (not reused), cached prefix excluded
  int32_t chunk_hits = 0, chunk_misses = 0;  // lookups; a chunk continued from an earlier call counts only if it misses
};

// Cumulative counters (worker metrics).
struct BlendStats {
  int64_t prefills = 0;
  int64_t chunk_hits = 0, chunk_misses = 0, evictions = 0;
  int64_t reused_tokens = 0, hit_tokens = 0, recomputed_tokens = 0;
  int64_t cached_chunks = 0, cached_bytes = 0;  // now
};

// One chunk's K/V as computed standalone: [n_layers][length][token_floats] for K and for V, f32,
// K rotated for positions first_pos .. first_pos + length - 1.
struct ChunkKv {
  // What the K/V are of, all compared on a hit: the 64-bit key can collide (by chance, or built
  // on purpose: FNV-1a and mix64 are invertible), and a hit must never hand out K/V computed for
  // other tokens, after another anchor or for another namespace.
  std::vector<int32_t> tokens;  // the chunk's tokens
  std::vector<int32_t> anchor;  // the anchor's tokens it was computed after
  uint64_t salt = 0;            // BlendInput::salt of the namespace that computed it
  int32_t first_pos = 0;
  int32_t n_layers = 0;
  int64_t token_floats = 0;
  std::vector<float> k, v;
  size_t bytes() const { return (k.size() + v.size()) * sizeof(float); }
  const float* key(int32_t layer, int32_t j) const { return k.data() + (static_cast<int64_t>(layer) * static_cast<int64_t>(tokens.size()) + j) * token_floats; }
  const float* value(int32_t layer, int32_t j) const { return v.data() + (static_cast<int64_t>(layer) * static_cast<int64_t>(tokens.size()) + j) * token_floats; }
};

// Least-recently-used chunk K/V under a byte budget. Invariant: bytes() <= budget after every
// insert (an entry larger than the budget is not kept).
class ChunkKvCache {
 public:
  explicit ChunkKvCache(int64_t budget_bytes) : budget_(budget_bytes) {}

  // The entry under `key` whose tokens, anchor and salt all match (nullptr otherwise: a key
  // collision is a miss); a hit becomes the most recently used.
  std::shared_ptr<const ChunkKv> find(uint64_t key, std::span<const int32_t> tokens, std::span<const int32_t> anchor,
                                      uint64_t salt);
  // Keeps `kv` under `key` (replacing an entry there), evicting least recently used entries to
  // stay within the budget. Returns the number of entries evicted.
  int64_t insert(uint64_t key, std::shared_ptr<const ChunkKv> kv);
  void clear();

  int64_t bytes() const { return bytes_; }
  int64_t size() const { return static_cast<int64_t>(map_.size()); }
  int64_t budget() const { return budget_; }

 private:
  struct Entry {
    uint64_t key = 0;
    std::shared_ptr<const ChunkKv> kv;
  };
  int64_t budget_;
  int64_t bytes_ = 0;
  std::list<Entry> lru_;  // front = most recently used
  std::unordered_map<uint64_t, std::list<Entry>::iterator> map_;
};

// The cache key of a chunk: hash of the model fingerprint, the salt, the anchor's hash and the
// chunk's tokens. anchor_hash = hash_tokens(anchor tokens).
uint64_t chunk_key(uint64_t model_fingerprint, uint64_t salt, uint64_t anchor_hash, std::span<const int32_t> chunk);

}  // namespace tessera::worker
