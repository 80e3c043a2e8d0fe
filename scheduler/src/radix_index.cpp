#include "tessera/scheduler/radix_index.h"

#include <algorithm>
#include <unordered_set>

#include "tessera/common/check.h"
#include "tessera/common/hash.h"
#include "tessera/common/kv_digest.h"

namespace tessera::scheduler {

namespace {
constexpr uint32_t kNone = RadixHandle::kNone;

bool same_page(std::span<const int32_t> a, std::span<const int32_t> b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
}  // namespace

RadixIndex::RadixIndex(PageAllocator& pages, int32_t page_size) : alloc_(pages), page_size_(page_size) {
  TS_CHECK_GE(page_size, 1);
}

// ---- node storage ----

uint32_t RadixIndex::new_node() {
  uint32_t id;
  if (!free_slots_.empty()) {
    id = free_slots_.back();
    free_slots_.pop_back();
  } else {
    id = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[id];
  n.in_use = true;
  n.lock_ref = 0;
  n.parent = kNone;
  n.in_lru = false;
  return id;
}

void RadixIndex::free_node(uint32_t id) {
  Node& n = nodes_[id];
  TS_CHECK(!n.in_lru);
  const uint32_t gen = n.generation + 1;
  n = Node{};
  n.generation = gen;  // every handle to this slot is stale from now on
  free_slots_.push_back(id);
}

uint64_t RadixIndex::namespace_hash(const std::string& ns_key) { return kv_name_hash("tessera-kv-namespace-v1", ns_key); }

uint64_t RadixIndex::block_hash(uint64_t parent_hash, std::span<const int32_t> page_tokens) {
  return hash_combine(parent_hash, hash_tokens(page_tokens));
}

uint64_t RadixIndex::last_hash(uint32_t id) const {
  const Node& n = nodes_[id];
  return n.ns_key.empty() ? n.hashes.back() : namespace_hash(n.ns_key);
}

KvPrefixDigest RadixIndex::last_digest(uint32_t id) const {
  const Node& n = nodes_[id];
  return n.ns_key.empty() ? n.digests.back() : KvPrefixDigest(n.ns_key);
}

void RadixIndex::tag_pages(uint32_t id) {
  const auto ps = static_cast<size_t>(page_size_);
  Node& n = nodes_[id];
  KvPrefixDigest d = last_digest(n.parent);
  n.digests.clear();
  n.digests.reserve(n.pages.size());
  for (size_t i = 0; i < n.pages.size(); ++i) {
    d.add_page(std::span(n.tokens).subspan(i * ps, ps));
    n.digests.push_back(d);
  }
}

void RadixIndex::set_evict_hook(EvictHook hook) {
  const bool had = static_cast<bool>(evict_hook_);
  evict_hook_ = std::move(hook);
  if (had == static_cast<bool>(evict_hook_)) return;
  std::vector<uint32_t> stack;  // parents before children: a child's chain starts at its parent's end
  for (const auto& [key, root] : roots_) stack.insert(stack.end(), nodes_[root].children.begin(), nodes_[root].children.end());
  while (!stack.empty()) {
    const uint32_t id = stack.back();
    stack.pop_back();
    if (evict_hook_) {
      tag_pages(id);
    } else {
      nodes_[id].digests = {};
    }
    stack.insert(stack.end(), nodes_[id].children.begin(), nodes_[id].children.end());
  }
}

uint64_t RadixIndex::page_hash(std::span<const int32_t> page) const { return hash_tokens(page, 0x7261646978ULL); }

uint64_t RadixIndex::child_key(uint32_t parent, uint64_t page_hash) { return hash_combine(parent, page_hash); }

uint32_t RadixIndex::find_root(const std::string& ns_key) const {
  auto it = roots_.find(ns_key);
  return it == roots_.end() ? kNone : it->second;
}

uint32_t RadixIndex::find_child(uint32_t parent, std::span<const int32_t> page) const {
  auto it = children_.find(child_key(parent, page_hash(page)));
  if (it == children_.end()) return kNone;
  const Node& c = nodes_[it->second];
  if (c.parent != parent || !same_page(std::span(c.tokens).first(static_cast<size_t>(page_size_)), page)) {
    return kNone;  // 64-bit collision: behave as a miss
  }
  return it->second;
}

bool RadixIndex::child_slot_taken(uint32_t parent, std::span<const int32_t> page) const {
  return children_.count(child_key(parent, page_hash(page))) != 0;
}

// ---- LRU of evictable leaves ----

void RadixIndex::sync_lru(uint32_t id) {
  Node& n = nodes_[id];
  const bool want = n.in_use && n.ns_key.empty() && n.lock_ref == 0 && n.children.empty();
  if (want == n.in_lru) return;
  if (want) {
    lru_.emplace(n.last_access, id);
  } else {
    lru_.erase({n.last_access, id});
  }
  n.in_lru = want;
}

void RadixIndex::touch(uint32_t id) {
  Node& n = nodes_[id];
  if (n.in_lru) lru_.erase({n.last_access, id});
  n.last_access = ++clock_;
  if (n.in_lru) lru_.emplace(n.last_access, id);
}

// ---- walking ----

RadixIndex::Walk RadixIndex::walk(uint32_t root, std::span<const int32_t> tokens) const {
  Walk w;
  w.node = root;
  const auto ps = static_cast<size_t>(page_size_);
  size_t pos = 0;
  while (pos + ps <= tokens.size()) {
    const uint32_t c = find_child(w.node, tokens.subspan(pos, ps));
    if (c == kNone) break;
    const Node& cn = nodes_[c];
    const size_t n_pages = cn.pages.size();
    size_t k = 1;
    while (k < n_pages && pos + (k + 1) * ps <= tokens.size() &&
           same_page(std::span(cn.tokens).subspan(k * ps, ps), tokens.subspan(pos + k * ps, ps))) {
      ++k;
    }
    if (k < n_pages) {
      w.partial_child = c;
      w.partial_pages = static_cast<int32_t>(k);
      break;
    }
    w.node = c;
    pos += k * ps;
  }
  w.pos = static_cast<int32_t>(pos);
  return w;
}

uint32_t RadixIndex::split(uint32_t id, int32_t keep_pages) {
  const auto ps = static_cast<size_t>(page_size_);
  const auto keep = static_cast<size_t>(keep_pages);
  TS_CHECK(keep_pages > 0 && keep < nodes_[id].pages.size());
  const uint32_t y = new_node();  // may grow the deque; references taken after this are stable
  Node& yn = nodes_[y];
  Node& cn = nodes_[id];
  yn.tokens.assign(cn.tokens.begin(), cn.tokens.begin() + static_cast<ptrdiff_t>(keep * ps));
  yn.pages.assign(cn.pages.begin(), cn.pages.begin() + static_cast<ptrdiff_t>(keep));
  yn.hashes.assign(cn.hashes.begin(), cn.hashes.begin() + static_cast<ptrdiff_t>(keep));
  cn.tokens.erase(cn.tokens.begin(), cn.tokens.begin() + static_cast<ptrdiff_t>(keep * ps));
  cn.pages.erase(cn.pages.begin(), cn.pages.begin() + static_cast<ptrdiff_t>(keep));
  cn.hashes.erase(cn.hashes.begin(), cn.hashes.begin() + static_cast<ptrdiff_t>(keep));
  if (!cn.digests.empty()) {  // tags kept: the upper half's chain states are the first `keep`
    yn.digests.assign(cn.digests.begin(), cn.digests.begin() + static_cast<ptrdiff_t>(keep));
    cn.digests.erase(cn.digests.begin(), cn.digests.begin() + static_cast<ptrdiff_t>(keep));
  }
  yn.parent = cn.parent;
  yn.lock_ref = cn.lock_ref;
  yn.last_access = cn.last_access;
  yn.hits = cn.hits;
  yn.end = cn.end - static_cast<int32_t>(cn.tokens.size());
  yn.first_page_hash = cn.first_page_hash;
  children_[child_key(yn.parent, yn.first_page_hash)] = y;
  Node& parent = nodes_[yn.parent];
  std::replace(parent.children.begin(), parent.children.end(), id, y);
  yn.children.push_back(id);
  cn.parent = y;
  cn.first_page_hash = page_hash(std::span(cn.tokens).first(ps));
  children_[child_key(y, cn.first_page_hash)] = id;
  return y;
}

uint32_t RadixIndex::walk_and_split(uint32_t root, std::span<const int32_t> tokens, int32_t* pos,
                                    std::vector<int32_t>* pages) {
  const Walk w = walk(root, tokens);
  // Touch the path root -> deepest so that leaves stay more recent than their ancestors.
  std::vector<uint32_t> path;
  for (uint32_t n = w.node; n != kNone; n = nodes_[n].parent) path.push_back(n);
  uint32_t node = w.node;
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    touch(*it);
    if (pages != nullptr) pages->insert(pages->end(), nodes_[*it].pages.begin(), nodes_[*it].pages.end());
  }
  *pos = w.pos;
  if (w.partial_child != kNone) {
    node = split(w.partial_child, w.partial_pages);
    touch(node);
    if (pages != nullptr) pages->insert(pages->end(), nodes_[node].pages.begin(), nodes_[node].pages.end());
    *pos += w.partial_pages * page_size_;
  }
  return node;
}

// ---- queries ----

MatchResult RadixIndex::match(const KvNamespace& ns, std::span<const int32_t> tokens) {
  MatchResult r;
  ++stats_.matches;
  stats_.queried_tokens += static_cast<int64_t>(tokens.size());
  const uint32_t root = find_root(ns.canonical());
  if (root == kNone) return r;
  int32_t pos = 0;
  const uint32_t node = walk_and_split(root, tokens, &pos, &r.pages);
  r.matched_tokens = pos;
  if (pos > 0) r.handle = RadixHandle{node, nodes_[node].generation};
  for (uint32_t n = pos > 0 ? node : kNone; n != kNone && n != root; n = nodes_[n].parent) ++nodes_[n].hits;
  stats_.hit_tokens += pos;
  return r;
}

int32_t RadixIndex::peek(const KvNamespace& ns, std::span<const int32_t> tokens) const {
  const uint32_t root = find_root(ns.canonical());
  if (root == kNone) return 0;
  const Walk w = walk(root, tokens);
  return w.pos + w.partial_pages * page_size_;
}

Result<InsertResult> RadixIndex::insert(const KvNamespace& ns, std::span<const int32_t> tokens,
                                        std::span<const int32_t> pages) {
  const auto ps = static_cast<size_t>(page_size_);
  if (tokens.size() != pages.size() * ps) {
    return make_error(ErrorCode::kInvalidArgument, "radix insert: " + std::to_string(tokens.size()) +
                                                       " tokens do not fill " + std::to_string(pages.size()) +
                                                       " pages of " + std::to_string(page_size_));
  }
  // Plan: validate every page before changing anything.
  std::string ns_key = ns.canonical();
  uint32_t root = find_root(ns_key);
  const int32_t known = root == kNone ? 0 : [&] { const Walk w = walk(root, tokens); return w.pos + w.partial_pages * page_size_; }();
  std::unordered_set<int32_t> seen;
  for (size_t i = 0; i < pages.size(); ++i) {
    const int32_t p = pages[i];
    if (!alloc_.valid(p)) return make_error(ErrorCode::kInvalidArgument, "radix insert: invalid page " + std::to_string(p));
    if (alloc_.ref_count(p) == 0) {
      return make_error(ErrorCode::kInvalidArgument, "radix insert: page " + std::to_string(p) + " is not held by the caller");
    }
    if (!seen.insert(p).second) {
      return make_error(ErrorCode::kInvalidArgument, "radix insert: page " + std::to_string(p) + " listed twice");
    }
    if (static_cast<int32_t>(i * ps) >= known && alloc_.indexed(p)) {
      return make_error(ErrorCode::kInvalidArgument, "radix insert: page " + std::to_string(p) + " is already indexed elsewhere");
    }
  }
  // Apply.
  ++stats_.inserts;
  InsertResult r;
  if (root == kNone) {
    if (pages.empty()) return r;
    root = new_node();
    nodes_[root].ns_key = ns_key;
    roots_.emplace(std::move(ns_key), root);
  }
  int32_t pos = 0;
  uint32_t node = walk_and_split(root, tokens, &pos, &r.pages);
  const auto upos = static_cast<size_t>(pos);
  if (upos < tokens.size() && !child_slot_taken(node, tokens.subspan(upos, ps))) {
    const uint32_t leaf = new_node();
    Node& ln = nodes_[leaf];
    ln.tokens.assign(tokens.begin() + pos, tokens.end());
    ln.pages.assign(pages.begin() + static_cast<ptrdiff_t>(upos / ps), pages.end());
    std::vector<RadixBlock> stored;
    stored.reserve(ln.pages.size());
    uint64_t h = last_hash(node);
    for (size_t i = 0; i < ln.pages.size(); ++i) {
      const uint64_t parent = h;
      h = block_hash(parent, tokens.subspan(upos + i * ps, ps));
      ln.hashes.push_back(h);
      stored.push_back({.hash = h, .parent_hash = parent, .page = ln.pages[i]});
    }
    if (observer_ != nullptr) observer_->on_stored(namespace_hash(nodes_[root].ns_key), stored, tokens.subspan(upos));
    ln.parent = node;
    if (evict_hook_) tag_pages(leaf);  // each page hashed once, here; evictions read the tags
    ln.end = static_cast<int32_t>(tokens.size());
    ln.first_page_hash = page_hash(tokens.subspan(upos, ps));
    ln.last_access = ++clock_;
    children_[child_key(node, ln.first_page_hash)] = leaf;
    nodes_[node].children.push_back(leaf);
    sync_lru(node);  // the parent is no longer a leaf
    for (int32_t p : ln.pages) alloc_.mark_indexed(p);
    const auto added = static_cast<int32_t>(ln.pages.size());
    indexed_pages_ += added;
    // The new leaf is unlocked until the caller locks it; its pages count as evictable (the
    // caller's contract is to lock before anything evicts).
    evictable_pages_ += added;
    r.pages.insert(r.pages.end(), ln.pages.begin(), ln.pages.end());
    r.new_tokens = static_cast<int32_t>(tokens.size()) - pos;
    stats_.inserted_tokens += r.new_tokens;
    sync_lru(leaf);
    node = leaf;
    pos = static_cast<int32_t>(tokens.size());
  }
  if (pos > 0) r.handle = RadixHandle{node, nodes_[node].generation};
  if (nodes_[root].children.empty() && nodes_[root].lock_ref == 0) {  // nothing was added
    roots_.erase(nodes_[root].ns_key);
    free_node(root);
  }
  return r;
}

// ---- locks ----

Status RadixIndex::check_handle(RadixHandle h) const {
  if (h.node >= nodes_.size() || !nodes_[h.node].in_use || nodes_[h.node].generation != h.generation) {
    return make_error(ErrorCode::kInvalidArgument, "stale radix handle (node " + std::to_string(h.node) +
                                                       ", generation " + std::to_string(h.generation) + ")");
  }
  return ok_status();
}

bool RadixIndex::is_stale(RadixHandle h) const { return !h.empty() && !check_handle(h).ok(); }

Status RadixIndex::lock(RadixHandle h) {
  if (h.empty()) return ok_status();
  TS_TRY(check_handle(h));
  for (uint32_t n = h.node; n != kNone; n = nodes_[n].parent) {
    Node& nn = nodes_[n];
    if (nn.lock_ref++ == 0) {
      evictable_pages_ -= static_cast<int32_t>(nn.pages.size());
      sync_lru(n);
    }
  }
  return ok_status();
}

Status RadixIndex::unlock(RadixHandle h) {
  if (h.empty()) return ok_status();
  TS_TRY(check_handle(h));
  if (nodes_[h.node].lock_ref <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "unlock of radix node " + std::to_string(h.node) + " that is not locked");
  }
  for (uint32_t n = h.node; n != kNone; n = nodes_[n].parent) {
    Node& nn = nodes_[n];
    TS_CHECK_GT(nn.lock_ref, 0) << "ancestor lock count below descendant's";
    if (--nn.lock_ref == 0) {
      evictable_pages_ += static_cast<int32_t>(nn.pages.size());
      sync_lru(n);
    }
  }
  return ok_status();
}

Result<RadixNodeInfo> RadixIndex::inspect(RadixHandle h) const {
  if (h.empty()) return make_error(ErrorCode::kInvalidArgument, "inspect of an empty radix handle");
  TS_TRY(check_handle(h));
  const Node& n = nodes_[h.node];
  return RadixNodeInfo{n.end, static_cast<int32_t>(n.tokens.size()), static_cast<int32_t>(n.children.size()), n.lock_ref,
                       last_hash(h.node), n.hits};
}

// ---- eviction ----

void RadixIndex::merge_into_parent(uint32_t parent, uint32_t child) {
  Node& p = nodes_[parent];
  Node& c = nodes_[child];
  TS_CHECK_EQ(c.lock_ref, 0);
  TS_CHECK_EQ(p.lock_ref, 0);
  children_.erase(child_key(parent, c.first_page_hash));
  for (uint32_t g : c.children) {
    children_.erase(child_key(child, nodes_[g].first_page_hash));
    children_[child_key(parent, nodes_[g].first_page_hash)] = g;
    nodes_[g].parent = parent;
  }
  p.tokens.insert(p.tokens.end(), c.tokens.begin(), c.tokens.end());
  p.pages.insert(p.pages.end(), c.pages.begin(), c.pages.end());
  p.hashes.insert(p.hashes.end(), c.hashes.begin(), c.hashes.end());
  p.digests.insert(p.digests.end(), c.digests.begin(), c.digests.end());
  p.children = std::move(c.children);
  c.children.clear();
  p.end = c.end;
  p.last_access = std::max(p.last_access, c.last_access);
  p.hits = c.hits;  // the merged node ends where the child did
  ++p.generation;  // the node now stands for a longer prefix
  if (c.in_lru) {
    lru_.erase({c.last_access, child});
    c.in_lru = false;
  }
  free_node(child);
  sync_lru(parent);
}

void RadixIndex::remove_leaf(uint32_t id) {
  Node& n = nodes_[id];
  TS_CHECK(n.children.empty() && n.lock_ref == 0 && n.pages.empty());
  if (n.in_lru) {
    lru_.erase({n.last_access, id});
    n.in_lru = false;
  }
  const uint32_t parent = n.parent;
  children_.erase(child_key(parent, n.first_page_hash));
  auto& siblings = nodes_[parent].children;
  siblings.erase(std::find(siblings.begin(), siblings.end(), id));
  free_node(id);
  Node& p = nodes_[parent];
  if (!p.ns_key.empty()) {  // a namespace root
    if (p.children.empty() && p.lock_ref == 0) {
      roots_.erase(p.ns_key);
      free_node(parent);
    }
    return;
  }
  if (p.lock_ref == 0 && p.children.size() == 1) {
    merge_into_parent(parent, p.children.front());
  } else {
    sync_lru(parent);
  }
}

int32_t RadixIndex::evict(int32_t num_pages) {
  int32_t freed = 0;
  while (freed < num_pages && !lru_.empty()) {
    const uint32_t id = lru_.begin()->second;
    Node& n = nodes_[id];
    const int32_t take = std::min<int32_t>(num_pages - freed, static_cast<int32_t>(n.pages.size()));
    std::vector<RadixBlock> removed;
    std::vector<KvTag> tags;  // parallel to removed, while tags are kept
    for (int32_t i = 0; i < take; ++i) {
      alloc_.evict(n.pages.back());  // TS_CHECKs the page is cached (reference count 0)
      const uint64_t parent = n.hashes.size() > 1 ? n.hashes[n.hashes.size() - 2] : last_hash(n.parent);
      removed.push_back({.hash = n.hashes.back(), .parent_hash = parent, .page = n.pages.back()});
      n.pages.pop_back();
      n.hashes.pop_back();
      if (!n.digests.empty()) {
        tags.push_back(n.digests.back().tag());
        n.digests.pop_back();
      }
    }
    if (observer_ != nullptr) observer_->on_removed(removed);
    if (evict_hook_) {
      uint32_t root = n.parent;
      while (nodes_[root].ns_key.empty()) root = nodes_[root].parent;
      TS_CHECK_EQ(tags.size(), removed.size());
      evict_hook_(namespace_hash(nodes_[root].ns_key), removed, tags);
    }
    n.tokens.resize(n.pages.size() * static_cast<size_t>(page_size_));
    n.end -= take * page_size_;
    ++n.generation;  // trimmed: handles to it no longer describe it
    freed += take;
    evictable_pages_ -= take;
    indexed_pages_ -= take;
    stats_.evicted_tokens += static_cast<int64_t>(take) * page_size_;
    if (n.pages.empty()) remove_leaf(id);
  }
  return freed;
}

std::vector<RadixPrefixInfo> RadixIndex::prefixes(size_t limit) const {
  std::vector<RadixPrefixInfo> out;
  for (const auto& [key, root] : roots_) {
    const uint64_t ns = namespace_hash(key);
    std::vector<uint32_t> stack(nodes_[root].children.begin(), nodes_[root].children.end());
    while (!stack.empty()) {
      const uint32_t id = stack.back();
      stack.pop_back();
      const Node& n = nodes_[id];
      out.push_back(RadixPrefixInfo{.ns_hash = ns, .hash = n.hashes.back(), .end_tokens = n.end,
                                    .own_pages = static_cast<int32_t>(n.pages.size()), .hits = n.hits,
                                    .lock_count = n.lock_ref});
      stack.insert(stack.end(), n.children.begin(), n.children.end());
    }
  }
  std::sort(out.begin(), out.end(), [](const RadixPrefixInfo& a, const RadixPrefixInfo& b) {
    return a.hits != b.hits ? a.hits > b.hits : a.hash < b.hash;
  });
  if (out.size() > limit) out.resize(limit);
  return out;
}

void RadixIndex::for_each_block(
    const std::function<void(uint64_t ns_hash, const RadixBlock&, std::span<const int32_t> tokens)>& fn) const {
  const auto ps = static_cast<size_t>(page_size_);
  std::vector<std::pair<uint32_t, uint64_t>> stack;  // (node, its namespace hash)
  for (const auto& [key, root] : roots_) stack.emplace_back(root, namespace_hash(key));
  while (!stack.empty()) {
    const auto [id, ns] = stack.back();
    stack.pop_back();
    const Node& n = nodes_[id];
    for (size_t i = 0; i < n.pages.size(); ++i) {
      const uint64_t parent = i > 0 ? n.hashes[i - 1] : last_hash(n.parent);
      fn(ns, RadixBlock{.hash = n.hashes[i], .parent_hash = parent, .page = n.pages[i]}, std::span(n.tokens).subspan(i * ps, ps));
    }
    for (uint32_t c : n.children) stack.emplace_back(c, ns);
  }
}

// ---- audit ----

Status RadixIndex::check() const {
  auto fail = [](std::string msg) { return make_error(ErrorCode::kInternal, "radix index: " + std::move(msg)); };
  const auto ps = static_cast<size_t>(page_size_);
  std::unordered_set<int32_t> pages_seen;
  int32_t evictable = 0, in_lru = 0;
  for (uint32_t id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (!n.in_use) continue;
    const std::string where = "node " + std::to_string(id);
    const bool is_root = !n.ns_key.empty();
    if (is_root != (n.parent == kNone)) return fail(where + ": root flag and parent disagree");
    if (is_root && find_root(n.ns_key) != id) return fail(where + ": root not registered");
    if (n.tokens.size() != n.pages.size() * ps) return fail(where + ": tokens do not fill its pages");
    if (n.hashes.size() != n.pages.size()) return fail(where + ": block hashes do not match its pages");
    if (n.digests.size() != (evict_hook_ && !is_root ? n.pages.size() : 0)) {
      return fail(where + ": " + std::to_string(n.digests.size()) + " tag chain states for " + std::to_string(n.pages.size()) +
                  " pages");
    }
    for (size_t i = 0; i < n.hashes.size(); ++i) {
      const uint64_t parent = i > 0 ? n.hashes[i - 1] : last_hash(n.parent);
      if (n.hashes[i] != block_hash(parent, std::span(n.tokens).subspan(i * ps, ps)))
        return fail(where + ": block hash " + std::to_string(i) + " does not chain from its parent");
    }
    if (!is_root && n.pages.empty()) return fail(where + ": empty non-root node");
    if (!is_root) {
      const Node& p = nodes_[n.parent];
      if (!p.in_use || std::find(p.children.begin(), p.children.end(), id) == p.children.end()) {
        return fail(where + ": not among its parent's children");
      }
      if (p.lock_ref < n.lock_ref) return fail(where + ": lock count above its parent's");
      if (p.end + static_cast<int32_t>(n.tokens.size()) != n.end) return fail(where + ": end position inconsistent");
      auto it = children_.find(child_key(n.parent, n.first_page_hash));
      if (it == children_.end() || it->second != id) return fail(where + ": missing from the child map");
    }
    for (int32_t p : n.pages) {
      if (!pages_seen.insert(p).second) return fail("page " + std::to_string(p) + " indexed twice");
      if (!alloc_.indexed(p)) return fail("page " + std::to_string(p) + " in " + where + " not marked indexed");
      if (n.lock_ref == 0 && alloc_.ref_count(p) != 0) {
        return fail("page " + std::to_string(p) + " of unlocked " + where + " is held by a sequence");
      }
    }
    if (n.lock_ref == 0) evictable += static_cast<int32_t>(n.pages.size());
    const bool want_lru = !is_root && n.lock_ref == 0 && n.children.empty();
    if (want_lru != n.in_lru) return fail(where + ": LRU membership wrong");
    if (n.in_lru) ++in_lru;
  }
  if (in_lru != static_cast<int32_t>(lru_.size())) return fail("LRU set size disagrees with nodes");
  if (evictable != evictable_pages_) {
    return fail("evictable pages " + std::to_string(evictable_pages_) + " != " + std::to_string(evictable));
  }
  if (static_cast<int32_t>(pages_seen.size()) != indexed_pages_) return fail("indexed page count disagrees");
  int32_t allocator_indexed = 0;
  for (int32_t p = 0; p < alloc_.num_pages(); ++p) allocator_indexed += alloc_.indexed(p) ? 1 : 0;
  if (allocator_indexed != indexed_pages_) {
    return fail("allocator marks " + std::to_string(allocator_indexed) + " pages indexed, index holds " +
                std::to_string(indexed_pages_));
  }
  return ok_status();
}

}  // namespace tessera::scheduler
