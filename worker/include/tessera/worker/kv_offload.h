// K/V offload to the kvstore, worker side (docs/kv.md "K/V offload to the kvstore"; the
// scheduler side and the design are in tessera/scheduler/kv_offload.h).
//
// KvOffloader is the StepExecutor's OffloadHandler:
//   spill(): each KvSpill's page (every layer, page_size positions) is read from the pool at once,
//     on the compute thread, before the plan writes anything; a background thread converts it to
//     the blob dtype (f16 by default), encodes it with the configured codec and puts it to the
//     kvstore; each stored block hash is reported once through take_offloaded(). The queue is
//     bounded in raw bytes: a spill beyond it is dropped (counted; the page is then recomputed
//     when needed, as without offload).
//   reload(): the pages' blobs are fetched in order, decoded and written into the pool; it stops
//     at the first page it cannot use — a miss (evicted from L1, expired, lost with a Redis
//     shard), a blob of another model or shape, an undecodable blob, a blob whose tag is not the
//     one the KvReload names for that page (another prefix under a colliding block hash; counted
//     in mismatched_blobs and logged), the kvstore down (gets are then skipped for
//     store_backoff_ms) — and reports how many leading pages it loaded. Never an error for those:
//     the scheduler recomputes the rest. A KvReload without tags (a scheduler that predates them)
//     loads nothing, and a KvSpill without a tag is dropped (counted in spill_dropped).
//
// Keys: BlobKey{model fingerprint, user = "kv-offload/" + hex16(namespace hash),
// hash = hex16(block hash) + "/" + codec + "-g" + group + "/pool-" + pool dtype + "/" + blob dtype}.
// The block hash names model, namespace (tenant salt, preference) and every token of the prefix;
// the suffix makes blobs written with another codec, pool dtype or blob dtype invisible (a miss),
// so reloaded K/V always went through exactly this worker's configuration; the blob header's
// fingerprint and shape are checked again on decode. The block hash is only a 64-bit name:
// what proves a blob holds this prefix's K/V is the tag in its header (the KvSpill's, 96 bits of
// a SHA-256 chain over the namespace key and the prefix's tokens, tessera/common/kv_digest.h),
// compared with the KvReload's before anything is written into the pool. The namespace partition keeps one tenant's
// offload from pushing another's out of the kvstore's per-user L1 quota.
//
// Thread-safety: spill() / reload() / take_offloaded() from the one compute thread (as
// StepExecutor::execute); stats() and flush() from any thread. Ownership: borrows the
// PreferenceStore (must outlive it; get and put may run concurrently, as it allows); the
// destructor drains the put queue and joins its thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/common/step_plan.h"
#include "tessera/kvstore/blob.h"
#include "tessera/kvstore/key.h"
#include "tessera/worker/backend.h"
#include "tessera/worker/preference.h"
#include "tessera/worker/step_executor.h"

namespace tessera::worker {

struct OffloadOptions {
  // Codec of the spilled pages (any kvstore codec: none/zstd exact, int8, int4, kivi; docs/kv.md).
  kvstore::EncodeOptions codec{.codec = kvstore::Codec::kInt8, .group_size = 64, .zstd_level = 3};
  DType blob_dtype = DType::kF16;  // stored from f16 (f32: bit-exact round trips through an f32 pool)
  std::string pool_dtype = "f32";  // the pool's --kv-dtype, part of the key
  size_t max_pending_bytes = size_t{64} << 20;  // raw f32 K/V waiting to be put; beyond: dropped
  uint32_t ttl_s = 0;              // 0 = the kvstore's default
  int store_backoff_ms = 5000;     // after a failed get, reloads skip the kvstore this long
};

// Counters since construction.
struct OffloadWorkerStats {
  uint64_t spilled_pages = 0;      // pages read for a spill
  uint64_t offloaded_pages = 0;    // of those, stored in the kvstore
  uint64_t spill_failed = 0;       // read, encode or put failed
  uint64_t spill_dropped = 0;      // queue full
  uint64_t offloaded_bytes = 0;    // encoded blob bytes put
  uint64_t offloaded_raw_bytes = 0;// the same pages' K/V in the blob dtype (ratio = raw / encoded)
  uint64_t reloads = 0;            // KvReload directives
  uint64_t reloaded_pages = 0;
  uint64_t reload_missed_pages = 0;// the page where a reload stopped (not the ones after it)
  uint64_t bad_blobs = 0;          // fetched blobs refused (corrupt, other model or shape)
  uint64_t mismatched_blobs = 0;   // fetched blobs refused: their tag names another prefix
  uint64_t reload_bytes = 0;       // encoded bytes fetched
  double reload_ms = 0.0;          // time in reload(), summed
};

class KvOffloader final : public StepExecutor::OffloadHandler {
 public:
  KvOffloader(PreferenceStore* store, OffloadOptions options);  // store: not null
  ~KvOffloader() override;
  KvOffloader(const KvOffloader&) = delete;
  KvOffloader& operator=(const KvOffloader&) = delete;

  void spill(Backend& backend, std::span<const KvSpill> spills) override;
  Result<ReloadResult> reload(Backend& backend, const KvReload& reload) override;
  std::vector<uint64_t> take_offloaded() override;

  // Waits until every queued spill has been attempted, up to timeout_ms; false on timeout.
  bool flush(int timeout_ms);
  OffloadWorkerStats stats() const;
  kvstore::BlobKey key_for(uint64_t fingerprint, uint64_t ns_hash, uint64_t block_hash) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::worker
