// Preference K/V injection on the worker (DESIGN.md "Preference K/V injection (DKI)", seed 000).
//
// A KvFill directive of a step plan asks the worker to put a user's preference K/V into pages
// at positions [0, P) before the plan's forward; the request's own tokens then start at P.
// PreferenceInjector::apply executes one fill over the StepExecutor's backend (backend.h: it
// needs capability kv_fill, i.e. Backend::read_kv/write_kv):
//   1. kvstore hit (L1 "kvstore" or Redis L2 "redis"): the packed blob is decoded (dequantized)
//      straight into the fill's pages;
//   2. miss (or an undecodable blob): the preference tokens alone are prefilled at positions
//      [0, P) into those pages with StepExecutor::forward; the UNSCALED K/V of all layers is copied
//      out, and a background thread packs it (codec configurable) and puts it to the kvstore —
//      the request never waits for that; failures are counted, never fatal. An empty user means
//      "compute, do not cache": nothing is put.
//   3. in both cases V of positions [0, P) is then multiplied by alpha in every layer. K is
//      never scaled (attention addressing stays exact).
//
// Alpha: the effective alpha is min(alpha, 0.7); at or below 0.1 the request runs without any
// injection. That decision belongs where the request is built (scheduler process / frontend),
// with effective_alpha() below; the injector itself refuses alpha outside (0.1, 0.7].
//
// Keys and isolation: a fill names its blob by blob_key = make_blob_key(user, content hash);
// the kvstore key is (model fingerprint, user, hex16(content hash)), so a blob is only ever
// looked up under the user that the fill names — never another user's, in any tier. The
// content hash is preference_hash(tokens, fingerprint). When a fill carries tokens their hash
// must match the key's (kInvalidArgument otherwise), and a fetched blob must match the model
// fingerprint and the fill's shape, or it is ignored (counted) and the preference recomputed.
//
// Thread-safety: apply() is called by the one thread that drives the StepExecutor (as
// StepExecutor::execute is). The background put queue has its own thread; stats() may be called from any thread.
// Ownership: the injector borrows the PreferenceStore (must outlive it); the destructor drains
// the put queue (bounded by the store's own timeouts) and joins its thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/dki.h"
#include "tessera/common/result.h"
#include "tessera/common/step_plan.h"
#include "tessera/kvstore/blob.h"
#include "tessera/kvstore/client.h"
#include "tessera/kvstore/key.h"
#include "tessera/worker/backend.h"
#include "tessera/worker/engine.h"
#include "tessera/worker/step_executor.h"

namespace tessera::worker {

// The key policy lives in common (tessera/common/dki.h); these names are kept for the worker.
inline constexpr float kPreferenceAlphaCap = dki::kAlphaCap;
inline constexpr float kPreferenceAlphaFloor = dki::kAlphaFloor;
using dki::effective_alpha;
using dki::hex16;
using dki::make_blob_key;
using dki::parse_blob_key;
using dki::ParsedBlobKey;
using dki::preference_hash;

// Where blobs are fetched from and stored to. get/put may be called from two different threads
// at once (apply() and the put thread); implementations must allow that.
struct StoreGet {
  bool found = false;
  kvstore::Tier tier = kvstore::Tier::kNone;
  std::string blob;
};
class PreferenceStore {
 public:
  virtual ~PreferenceStore() = default;
  virtual Result<StoreGet> get(const kvstore::BlobKey& key) = 0;
  virtual Status put(const kvstore::BlobKey& key, std::string blob) = 0;
  // The blobs of `hashes` (1..256) of one (fingerprint, user), one StoreGet per hash in order.
  // Default: get() per hash; the kvstore client's does it in one round trip (`get_many`).
  virtual Result<std::vector<StoreGet>> get_many(uint64_t fingerprint, const std::string& user,
                                                 const std::vector<std::string>& hashes);
};
// tessera-kvstore over ZeroMQ: one Client for gets, another for puts, so a multi-megabyte put
// never delays a get. Connect errors as Client::connect.
Result<std::unique_ptr<PreferenceStore>> connect_kvstore(const kvstore::ClientConfig& config);
// An in-process kvstore::Store: local_store() in tessera/worker/preference_local.h.

struct InjectorConfig {
  // How computed K/V is packed for the kvstore. int8 / group 64 keeps the argmax on stories260K
  // and costs ~4x less than f32 (docs/preference.md has the measured errors).
  kvstore::EncodeOptions codec{.codec = kvstore::Codec::kInt8, .group_size = 64, .zstd_level = 3};
  // Element type the computed K/V is stored from: f16 (half of f32 before any codec; what
  // --kv-codec none/zstd keep exactly) or f32 (bit-exact round trips through an f32 pool).
  DType blob_dtype = DType::kF16;
  size_t max_pending_puts = 64;  // puts queued beyond this are dropped (counted)
  uint32_t ttl_s = 0;            // 0 = the kvstore's default
  // After a failed kvstore get (down, timed out), gets are skipped for this long: fills are
  // computed without waiting on the store's timeout each time (counted in store_skipped).
  int store_backoff_ms = 5000;
};

struct InjectorStats {
  uint64_t fills = 0;
  uint64_t hits_l1 = 0;          // served from the kvstore's memory (source "kvstore")
  uint64_t hits_l2 = 0;          // served from Redis through the kvstore (source "redis")
  uint64_t computed = 0;         // prefilled here (source "compute")
  uint64_t store_errors = 0;     // kvstore gets that failed (the preference was computed)
  uint64_t store_skipped = 0;    // gets skipped during the backoff after a failure
  uint64_t bad_blobs = 0;        // fetched blobs refused (corrupt, other model, other shape)
  uint64_t puts_done = 0;
  uint64_t puts_failed = 0;      // encode or kvstore put failed
  uint64_t puts_dropped = 0;     // queue full
  uint64_t kv_bytes_fetched = 0;
  uint64_t kv_bytes_put = 0;
};

class PreferenceInjector {
 public:
  // store may be nullptr: every fill is then computed and nothing is cached.
  PreferenceInjector(PreferenceStore* store, InjectorConfig config);
  ~PreferenceInjector();
  PreferenceInjector(const PreferenceInjector&) = delete;
  PreferenceInjector& operator=(const PreferenceInjector&) = delete;

  // Executes one fill into the executor's backend pool (see the top of this file). Errors, with
  // nothing scaled: kUnsupported (the backend lacks kv_fill), kInvalidArgument (alpha outside
  // (0.1, 0.7], num_tokens < 1, wrong page count, malformed blob_key, tokens of the wrong length
  // or hash), kOutOfRange (page id outside the pool, token id outside the vocabulary),
  // kNotFound (a miss and the fill carries no tokens).
  Result<FillResult> apply(StepExecutor& executor, const KvFill& fill);
  Result<FillResult> apply(Engine& engine, const KvFill& fill);  // apply(engine.executor(), fill)

  // Installs apply() as the executor's fill handler (StepExecutor::set_fill_handler). The
  // injector and the executor must outlive that use.
  void attach(StepExecutor& executor);
  void attach(Engine& engine);  // attach(engine.executor())

  // Waits until every queued put has been attempted, up to timeout_ms; false on timeout.
  bool flush(int timeout_ms);
  InjectorStats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Reads positions [0, num_tokens) of `pages` from the pool as unscaled-or-not f32 K/V, in the
// blob layout (kvstore::PackedKv, dtype f32). For the injector, tests and tools. The Backend
// form needs capability kv_pages (kUnsupported otherwise); its shape is the pool's
// (geometry()): over a multi-head latent attention cache one head of the latent row in K and a
// V region of zeros (the latent row has no V; every codec but `none` stores zeros in a few bytes).
kvstore::PackedKv read_pages(const KvPool& pool, const Model& model, std::span<const int32_t> pages, int32_t num_tokens);
Result<kvstore::PackedKv> read_pages(Backend& backend, std::span<const int32_t> pages, int32_t num_tokens);

// One sequence generated with a preference through Engine::execute: step 0 carries the KvFill
// (pages [0, ceil(P / page_size)) of the pool) and the prompt at positions [P, P + n); then one
// decode step per token. The engine must have a fill handler (PreferenceInjector::attach).
// Without a fill (fill == nullopt) this is worker::generate. Used by tests and benchmarks.
struct PreferenceGenerateRequest {
  std::optional<KvFill> fill;  // request_id, pages and the position offset are set here
  GenerateRequest base;
};
struct PreferenceGenerateResult {
  GenerateResult gen;
  std::optional<FillResult> fill;
};
Result<PreferenceGenerateResult> generate_with_preference(Engine& engine, PreferenceGenerateRequest request);

}  // namespace tessera::worker
