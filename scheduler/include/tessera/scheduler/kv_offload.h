// K/V offload to the kvstore, scheduler side (docs/kv.md "K/V offload to the kvstore").
//
// The scheduler owns every K/V placement decision, so it also decides what leaves a worker's pool
// for the kvstore and what comes back:
//   - spill: when a Batcher whose worker advertises "kv_offload" evicts a cached page from its
//     radix index (RadixIndex::set_evict_hook), the next plan carries a KvSpill (page, block hash);
//     the worker reads the page before anything of that plan writes, encodes it and puts it to the
//     kvstore in the background, and reports the hash in a later StepResult::offloaded;
//   - directory: this OffloadDirectory remembers the confirmed hashes (bounded, least recently
//     used out) — one per scheduler, shared by all its batchers, since any worker can reload a
//     blob that another one spilled (also after a request was rerouted on a membership change);
//   - reload: at admission, after the radix match, the batcher hashes the prompt's next full pages
//     (the chained block hash: model fingerprint + namespace/tenant salt + tokens) and, if at least
//     min_reload_pages of them are in the directory, allocates pages and plans a KvReload instead of
//     the first prefill chunk. The pages count as computed only when the worker's ReloadResult says
//     they were loaded (plan, then apply); whatever was not loaded is simply prefilled in the next
//     step, and the first missing hash leaves the directory.
// Consistency: the block hash names namespace and tokens, but only in 64 bits and invertibly
// (FNV-1a, mix64): prefixes can collide by chance or by construction. So a reloaded page is used
// only when the tag stored in its blob (KvSpill::tag, set at the spill) equals the tag the
// KvReload names for it: 96 bits of a SHA-256 chain over the namespace key and every token of the
// prefix (tessera/common/kv_digest.h), computed once per page when the radix index takes it in
// (RadixIndex "Tags"; the spill reads it, hashing nothing) and again at the reload. A
// colliding hash therefore costs a miss (the worker refuses the blob, counted), never another
// prefix's K/V. The worker's kvstore key adds the pool dtype and codec, and the blob header the
// model fingerprint and shape, so a blob from another model, dtype or codec is never used (a miss).
// A lost kvstore entry or Redis shard is a miss: recompute, never an error.
//
// Thread-safety: none; owned by the scheduler's event loop, used from its one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>

namespace tessera::scheduler {

struct OffloadConfig {
  int32_t min_reload_pages = 1;        // reload only continuations of at least this many pages
  size_t max_entries = size_t{1} << 20;  // directory bound (block hashes remembered)
};

// Counters since start. Definitions:
//   spilled_pages   KvSpill directives planned (evicted pages sent to the kvstore)
//   offloaded_pages spills the workers confirmed stored (entered the directory)
//   reloads         KvReload directives planned (admissions that reloaded instead of prefilling)
//   reload_pages    pages those asked for; reloaded_pages of them loaded, reload_missed_pages not
//   reloaded_tokens prompt tokens reloaded (not recomputed)
struct OffloadStats {
  int64_t spilled_pages = 0;
  int64_t offloaded_pages = 0;
  int64_t reloads = 0;
  int64_t reload_pages = 0;
  int64_t reloaded_pages = 0;
  int64_t reload_missed_pages = 0;
  int64_t reloaded_tokens = 0;
  int64_t reload_bytes = 0;
  double reload_ms = 0.0;  // sum of the workers' transfer_ms
};

class OffloadDirectory {
 public:
  explicit OffloadDirectory(OffloadConfig config = {});
  OffloadDirectory(const OffloadDirectory&) = delete;
  OffloadDirectory& operator=(const OffloadDirectory&) = delete;

  void add(uint64_t hash);                 // most recently used; the oldest leaves beyond max_entries
  bool contains(uint64_t hash) const;
  void touch(uint64_t hash);               // mark used (no-op when absent)
  void erase(uint64_t hash);
  size_t size() const { return map_.size(); }

  const OffloadConfig& config() const { return config_; }
  OffloadStats& stats() { return stats_; }
  const OffloadStats& stats() const { return stats_; }

 private:
  OffloadConfig config_;
  std::list<uint64_t> lru_;  // front = most recent
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> map_;
  OffloadStats stats_;
};

}  // namespace tessera::scheduler
