// The radix prefix index (RadixAttention) of one worker's K/V, at page granularity.
//
// Keys are (namespace, token ids); values are the pages that hold those tokens' K/V. Each
// namespace has its own root, so nothing is ever shared across namespaces. Every edge holds a
// whole number of full pages (tokens.size() == pages.size() * page_size): a partial last page is
// never indexed. Children are found by the hash of their first page's tokens (verified token by
// token; on a 64-bit hash collision the index declines to match or insert past that point,
// which costs a cache miss, never a wrong answer).
//
// Ownership and states. Indexed pages are owned by the index; the PageAllocator records them as
// indexed. A node is locked while its lock count is > 0; lock() counts a node and all its
// ancestors, so a locked node's whole path stays. Only unlocked leaves are evicted, least
// recently used first, from their last page backwards; evicted pages go back to the allocator
// as free. A node is split when a match or insert ends inside it (the deeper half keeps the
// original node and its handles), and a parent left with one child by an eviction is merged
// with it when both are unlocked.
//
// Invariants (check() audits them all):
//  1. every indexed page appears in exactly one node, once, and the allocator marks it indexed;
//  2. a node's lock count is >= each child's; every page of an unlocked node is cached
//     (reference count 0): whoever holds an indexed page holds a lock on a node covering it;
//  3. the LRU set holds exactly the unlocked non-root leaves; evictable_pages() is the number
//     of pages in unlocked nodes;
//  4. while an evict hook is set, every node keeps one tag-chain state per page, else none.
// Invariant 2 is the caller's contract: insert() takes pages the caller holds, and the caller
// must lock the returned handle before anything can evict (the batcher does both in one step).
//
// Handles. match() and insert() return a RadixHandle {node, generation}. A node's generation
// changes whenever its content or identity changes (evicted, trimmed, merged, slot reused), so a
// stale handle is detected and rejected with kInvalidArgument, never used. A locked node is never
// changed that way, so a handle stays valid while it is locked.
//
// Block hashes and events. Every indexed page has a block hash naming its whole path: for the
// i-th page of a namespace's path, block_hash(i) = hash_combine(block_hash(i - 1),
// hash_tokens(page i's tokens)), with block_hash(-1) = namespace_hash(ns_key) =
// kv_name_hash("tessera-kv-namespace-v1", ns_key): keyed with the cluster's secret
// (tessera/common/kv_digest.h), so no client can compute a namespace's hash nor, from it, a block
// hash. An optional RadixObserver hears every page stored into the index and every page evicted
// from it, in order, synchronously (docs/protocol.md, "K/V events").
//
// Tags (K/V offload). While an evict hook is set, every indexed page also keeps the state of its
// KvPrefixDigest chain (tessera/common/kv_digest.h: 32 bytes; its tag is the first 12), computed
// once when the page is indexed — or, for pages indexed before the hook was set, when it is set —
// and split, merged and trimmed with its node like the block hashes. An eviction hands the hook
// its pages' tags without hashing anything, however long the path (evictions take one page at a
// time when a sequence needs one more page). Without a hook nothing is hashed or kept.
//
// Thread-safety: none. One index per worker, driven by that worker's batcher thread; peek() and
// the other const members may run concurrently with each other only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tessera/common/kv_digest.h"
#include "tessera/common/result.h"
#include "tessera/scheduler/kv_namespace.h"
#include "tessera/scheduler/page_allocator.h"

namespace tessera::scheduler {

struct RadixHandle {
  static constexpr uint32_t kNone = 0xffffffffu;
  uint32_t node = kNone;
  uint32_t generation = 0;
  bool empty() const { return node == kNone; }  // "nothing matched"; lock/unlock are no-ops
  bool operator==(const RadixHandle&) const = default;
};

struct MatchResult {
  std::vector<int32_t> pages;  // pages holding tokens [0, matched_tokens), in order
  int32_t matched_tokens = 0;  // a multiple of page_size
  RadixHandle handle;          // the node ending at matched_tokens (empty when 0)
};

struct InsertResult {
  // The index's pages for the inserted prefix, in order: where the index already held a page for
  // a position, its page (the caller should switch to it and release its own duplicate);
  // elsewhere the caller's page, now indexed. Shorter than the input only after a hash collision.
  std::vector<int32_t> pages;
  int32_t new_tokens = 0;  // tokens that were not indexed before
  RadixHandle handle;      // the node ending at pages.size() * page_size (empty when 0)
};

// Counters since construction. Definitions:
//   queried_tokens  sum of the lengths of the token spans passed to match()
//   hit_tokens      sum of matched_tokens returned by match()  (hit rate = hit / queried)
//   inserted_tokens tokens newly indexed by insert()
//   evicted_tokens  pages evicted * page_size
struct RadixStats {
  int64_t matches = 0;
  int64_t inserts = 0;
  int64_t queried_tokens = 0;
  int64_t hit_tokens = 0;
  int64_t inserted_tokens = 0;
  int64_t evicted_tokens = 0;
};

struct RadixNodeInfo {
  int32_t end_tokens = 0;   // tokens from the namespace root to the end of this node
  int32_t own_tokens = 0;   // tokens on this node's edge
  int32_t num_children = 0;
  int32_t lock_count = 0;
  uint64_t hash = 0;        // block hash of the node's last page (names the whole prefix)
  int64_t hits = 0;         // match() calls whose matched prefix covered this node's end
};

// One node of the index as prefixes() lists it: the prefix from the namespace root to the end
// of the node's edge.
struct RadixPrefixInfo {
  uint64_t ns_hash = 0;     // namespace_hash of the node's namespace
  uint64_t hash = 0;        // block hash of the node's last page
  int32_t end_tokens = 0;   // tokens of the whole prefix
  int32_t own_pages = 0;    // pages on this node's edge (the rest belong to its ancestors)
  int64_t hits = 0;         // as RadixNodeInfo::hits
  int32_t lock_count = 0;   // > 0: held by running sequences or pins, not evictable
};

// One indexed page, as the observer and for_each_block() report it.
struct RadixBlock {
  uint64_t hash = 0;         // block hash (see above)
  uint64_t parent_hash = 0;  // of the page before it; namespace_hash(ns) for the first page
  int32_t page = 0;          // physical page id in the worker's pool
};

// Hears the index change. Called on the index's thread, inside insert() / evict(); must not
// call back into the index.
class RadixObserver {
 public:
  virtual ~RadixObserver() = default;
  // `blocks` were newly indexed under namespace `ns_hash`: consecutive pages of one path, the
  // first one's parent_hash naming where they hang; `tokens` are their tokens
  // (blocks.size() * page_size of them).
  virtual void on_stored(uint64_t ns_hash, std::span<const RadixBlock> blocks, std::span<const int32_t> tokens) = 0;
  // `blocks` were evicted (each is a leaf when removed, so descendants go first).
  virtual void on_removed(std::span<const RadixBlock> blocks) = 0;
};

class RadixIndex {
 public:
  static uint64_t namespace_hash(const std::string& ns_key);
  static uint64_t block_hash(uint64_t parent_hash, std::span<const int32_t> page_tokens);

  // `pages` must outlive the index. page_size >= 1 (TS_CHECK).
  RadixIndex(PageAllocator& pages, int32_t page_size);
  RadixIndex(const RadixIndex&) = delete;
  RadixIndex& operator=(const RadixIndex&) = delete;

  // Longest prefix of `tokens` held in `ns`, over full pages only. Marks the path as recently
  // used and splits the last node if the match ends inside it. The result is not locked.
  MatchResult match(const KvNamespace& ns, std::span<const int32_t> tokens);
  // Tokens match() would return, without touching anything (for routing).
  int32_t peek(const KvNamespace& ns, std::span<const int32_t> tokens) const;

  // Indexes tokens[0, pages.size() * page_size) with `pages`. Every page must be valid and held
  // by the caller; pages not yet indexed must not be indexed anywhere else. Errors
  // (kInvalidArgument, nothing changed): token count is not pages.size() * page_size; a page is
  // invalid, not held, listed twice, or already indexed elsewhere.
  Result<InsertResult> insert(const KvNamespace& ns, std::span<const int32_t> tokens, std::span<const int32_t> pages);

  // kInvalidArgument for a stale handle, or unlock() of a node that is not locked.
  Status lock(RadixHandle handle);
  Status unlock(RadixHandle handle);
  bool is_stale(RadixHandle handle) const;
  Result<RadixNodeInfo> inspect(RadixHandle handle) const;

  // Evicts up to `num_pages` pages from unlocked leaves, least recently used first; returns how
  // many were freed (fewer when not enough pages are evictable).
  int32_t evict(int32_t num_pages);

  int32_t page_size() const { return page_size_; }
  int32_t evictable_pages() const { return evictable_pages_; }
  int32_t indexed_pages() const { return indexed_pages_; }
  int32_t num_nodes() const { return static_cast<int32_t>(nodes_.size() - free_slots_.size()); }
  int32_t num_namespaces() const { return static_cast<int32_t>(roots_.size()); }
  const RadixStats& stats() const { return stats_; }

  // `observer` (may be null; not owned, must outlive the index or be replaced) hears every
  // later change.
  void set_observer(RadixObserver* observer) { observer_ = observer; }
  // K/V offload hook (docs/kv.md "K/V offload"): called inside evict(), after the observer, with
  // the evicted pages' namespace hash, blocks (as on_removed: one node's last pages, deepest
  // first) and their tags (tags[j] is blocks[j]'s: the KvPrefixDigest chain over the namespace
  // key and every token up to the end of that page), before anyone can reuse the pages. Must not
  // call back into the index. Setting a hook tags every page already indexed (O(indexed tokens),
  // once); an empty function = none, and drops the tags.
  using EvictHook = std::function<void(uint64_t ns_hash, std::span<const RadixBlock> blocks, std::span<const KvTag> tags)>;
  void set_evict_hook(EvictHook hook);
  // Every indexed block, parents before children; `tokens` are the block's page of tokens.
  void for_each_block(const std::function<void(uint64_t ns_hash, const RadixBlock&, std::span<const int32_t> tokens)>& fn) const;

  // Every non-root node (a prefix ending at a node boundary), most hit first; at most `limit`.
  std::vector<RadixPrefixInfo> prefixes(size_t limit) const;

  // Full audit of the invariants above (O(nodes + pages)); the error names the first problem.
  Status check() const;

 private:
  struct Node {
    std::vector<int32_t> tokens;  // this edge's tokens (a multiple of page_size; empty for roots)
    std::vector<int32_t> pages;   // tokens.size() / page_size pages
    std::vector<uint64_t> hashes; // block hash of each page (parallel to pages)
    // While an evict hook is set: the tag chain after each page (parallel to pages); else empty.
    std::vector<KvPrefixDigest> digests;
    std::vector<uint32_t> children;
    std::string ns_key;           // roots only
    uint64_t first_page_hash = 0; // key of this node under its parent
    uint64_t last_access = 0;
    int64_t hits = 0;             // see RadixNodeInfo::hits
    uint32_t parent = RadixHandle::kNone;
    uint32_t generation = 0;
    int32_t lock_ref = 0;
    int32_t end = 0;              // tokens from the root to the end of this edge
    bool in_use = false;
    bool in_lru = false;
  };
  struct Walk {
    uint32_t node = RadixHandle::kNone;  // deepest node fully matched
    int32_t pos = 0;                      // tokens matched
    uint32_t partial_child = RadixHandle::kNone;
    int32_t partial_pages = 0;            // pages matched inside partial_child (0 if none)
  };

  uint32_t find_root(const std::string& ns_key) const;
  uint32_t find_child(uint32_t parent, std::span<const int32_t> page) const;
  bool child_slot_taken(uint32_t parent, std::span<const int32_t> page) const;
  Walk walk(uint32_t root, std::span<const int32_t> tokens) const;
  // Walks like walk(), splitting a partially matched node and touching the path.
  uint32_t walk_and_split(uint32_t root, std::span<const int32_t> tokens, int32_t* pos, std::vector<int32_t>* pages);
  uint32_t split(uint32_t id, int32_t keep_pages);
  uint32_t new_node();
  void free_node(uint32_t id);
  void touch(uint32_t id);
  void sync_lru(uint32_t id);
  void remove_leaf(uint32_t id);
  void merge_into_parent(uint32_t parent, uint32_t child);
  uint64_t page_hash(std::span<const int32_t> page) const;
  uint64_t last_hash(uint32_t id) const;         // block hash ending at node `id` (a root: its namespace's)
  KvPrefixDigest last_digest(uint32_t id) const; // tag chain ending at node `id` (tags kept)
  void tag_pages(uint32_t id);                   // fills nodes_[id].digests from its parent's
  static uint64_t child_key(uint32_t parent, uint64_t page_hash);
  Status check_handle(RadixHandle h) const;

  PageAllocator& alloc_;
  int32_t page_size_;
  std::deque<Node> nodes_;  // stable addresses; slots reused through free_slots_
  std::vector<uint32_t> free_slots_;
  std::unordered_map<std::string, uint32_t> roots_;
  std::unordered_map<uint64_t, uint32_t> children_;  // child_key(parent, first page hash) -> child
  std::set<std::pair<uint64_t, uint32_t>> lru_;       // (last_access, node) of evictable leaves
  uint64_t clock_ = 0;
  int32_t evictable_pages_ = 0;
  int32_t indexed_pages_ = 0;
  RadixStats stats_;
  RadixObserver* observer_ = nullptr;
  EvictHook evict_hook_;
};

}  // namespace tessera::scheduler
