// PreferenceInjector: executes KvFill directives (preference.h has the contract).
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "tessera/common/log.h"
#include "tessera/worker/preference.h"

namespace tessera::worker {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct PendingPut {
  kvstore::BlobKey key;
  kvstore::PackedKv kv;
};

// Slot of position p in a fill's pages.
int64_t slot_of(std::span<const int32_t> pages, int32_t page_size, int32_t p) {
  return static_cast<int64_t>(pages[static_cast<size_t>(p / page_size)]) * page_size + p % page_size;
}

// Slots of positions [0, n) in a fill's pages.
std::vector<int64_t> fill_slots(std::span<const int32_t> pages, int32_t page_size, int32_t n) {
  std::vector<int64_t> slots(static_cast<size_t>(n));
  for (int32_t p = 0; p < n; ++p) slots[static_cast<size_t>(p)] = slot_of(pages, page_size, p);
  return slots;
}

}  // namespace

struct PreferenceInjector::Impl {
  PreferenceStore* store;
  InjectorConfig config;

  mutable std::mutex mu;
  std::condition_variable cv;       // queue not empty / stopping
  std::condition_variable idle_cv;  // queue drained and nothing in flight
  std::deque<PendingPut> queue;     // guarded by mu
  bool in_flight = false;           // guarded by mu
  bool stopping = false;            // guarded by mu
  InjectorStats stats;              // guarded by mu
  Clock::time_point store_retry_at{};  // compute thread only: no gets before this (backoff)
  std::thread put_thread;

  Impl(PreferenceStore* s, InjectorConfig c) : store(s), config(std::move(c)) {
    if (store) put_thread = std::thread([this] { put_loop(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
    if (put_thread.joinable()) put_thread.join();
  }

  void put_loop() {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping and drained
      PendingPut job = std::move(queue.front());
      queue.pop_front();
      in_flight = true;
      lock.unlock();
      uint64_t bytes = 0;
      Status st = ok_status();
      job.kv = kvstore::with_dtype(std::move(job.kv), config.blob_dtype);
      auto blob = kvstore::encode_blob(job.kv, config.codec);
      if (!blob.ok()) {
        st = blob.take_error();
      } else {
        bytes = blob->size();
        st = store->put(job.key, std::move(blob).value());
      }
      if (!st.ok()) {
        TS_LOG(kWarn) << "preference: kvstore put for user of " << job.key.user.size() << " bytes, hash " << job.key.hash
                      << " failed: " << st.error().message;
      }
      lock.lock();
      in_flight = false;
      if (st.ok()) {
        ++stats.puts_done;
        stats.kv_bytes_put += bytes;
      } else {
        ++stats.puts_failed;
      }
      if (queue.empty()) idle_cv.notify_all();
    }
  }

  void enqueue(PendingPut job) {
    {
      std::lock_guard lock(mu);
      if (queue.size() >= config.max_pending_puts) {
        ++stats.puts_dropped;
        return;
      }
      queue.push_back(std::move(job));
    }
    cv.notify_one();
  }

  void count(uint64_t InjectorStats::*field, uint64_t n = 1) {
    std::lock_guard lock(mu);
    stats.*field += n;
  }

  Status validate(const Backend& backend, const KvFill& f, const ParsedBlobKey& key) const;
  // Writes a decoded blob into the fill's pages; false (nothing useful written) when it does not fit.
  static Result<bool> write_blob(Backend& backend, const KvFill& f, const kvstore::PackedKv& kv);
  Result<FillResult> apply(StepExecutor& exec, const KvFill& f);
};

Status PreferenceInjector::Impl::validate(const Backend& backend, const KvFill& f, const ParsedBlobKey& key) const {
  const std::string who = "preference fill for request " + std::to_string(f.request_id);
  if (!(f.alpha > kPreferenceAlphaFloor && f.alpha <= kPreferenceAlphaCap)) {
    return make_error(ErrorCode::kInvalidArgument, who + ": alpha " + std::to_string(f.alpha) +
                                                       " is outside (0.1, 0.7]; apply effective_alpha() where the request is built");
  }
  if (f.num_tokens < 1) return make_error(ErrorCode::kInvalidArgument, who + ": num_tokens must be >= 1");
  const PoolGeometry pool = backend.geometry();
  const int32_t ps = pool.page_size;
  const int64_t need = (static_cast<int64_t>(f.num_tokens) + ps - 1) / ps;
  if (static_cast<int64_t>(f.pages.size()) != need) {
    return make_error(ErrorCode::kInvalidArgument, who + ": " + std::to_string(f.pages.size()) + " pages for " +
                                                       std::to_string(f.num_tokens) + " tokens, need " + std::to_string(need));
  }
  for (int32_t page : f.pages) {
    if (page < 0 || page >= pool.num_pages) {
      return make_error(ErrorCode::kOutOfRange, who + ": page " + std::to_string(page) + " is outside the pool");
    }
  }
  if (!f.tokens.empty()) {
    if (static_cast<int64_t>(f.tokens.size()) != f.num_tokens) {
      return make_error(ErrorCode::kInvalidArgument, who + ": " + std::to_string(f.tokens.size()) + " tokens, num_tokens says " +
                                                         std::to_string(f.num_tokens));
    }
    const int32_t vocab = backend.model().config().vocab_size;
    for (int32_t t : f.tokens) {
      if (t < 0 || t >= vocab) {
        return make_error(ErrorCode::kOutOfRange, who + ": token " + std::to_string(t) + " is outside the vocabulary");
      }
    }
    const uint64_t h = preference_hash(f.tokens, backend.model().fingerprint);
    if (h != key.content_hash) {
      return make_error(ErrorCode::kInvalidArgument, who + ": the tokens hash to " + hex16(h) + " but blob_key names " +
                                                         hex16(key.content_hash));
    }
  }
  return ok_status();
}

Result<bool> PreferenceInjector::Impl::write_blob(Backend& backend, const KvFill& f, const kvstore::PackedKv& kv) {
  const Model& model = backend.model();
  const ModelConfig& c = model.config();
  const kvstore::KvShape want{static_cast<uint32_t>(c.n_layers), static_cast<uint32_t>(f.num_tokens),
                              static_cast<uint32_t>(c.n_kv_heads), static_cast<uint32_t>(c.head_dim)};
  if (kv.shape != want || kv.fingerprint != model.fingerprint) return false;
  const PoolGeometry pool = backend.geometry();
  const auto row = static_cast<size_t>(pool.token_floats());
  const size_t esz = kvstore::element_bytes(kv.dtype);
  const std::vector<int64_t> slots = fill_slots(f.pages, pool.page_size, f.num_tokens);
  std::vector<float> k(slots.size() * row), v(slots.size() * row);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    for (int32_t p = 0; p < f.num_tokens; ++p) {
      const size_t off = kv.row_offset(static_cast<uint32_t>(l), static_cast<uint32_t>(p));
      float* kd = k.data() + static_cast<size_t>(p) * row;
      float* vd = v.data() + static_cast<size_t>(p) * row;
      if (kv.dtype == DType::kF32) {
        std::memcpy(kd, kv.k.data() + off, row * sizeof(float));
        std::memcpy(vd, kv.v.data() + off, row * sizeof(float));
      } else {
        for (size_t i = 0; i < row; ++i) {
          kd[i] = kvstore::element_to_float(kv.dtype, kv.k.data() + off + i * esz);
          vd[i] = kvstore::element_to_float(kv.dtype, kv.v.data() + off + i * esz);
        }
      }
    }
    TS_TRY(backend.write_kv(l, slots, k, v));
  }
  return true;
}

Result<FillResult> PreferenceInjector::Impl::apply(StepExecutor& exec, const KvFill& f) {
  Backend& backend = exec.backend();
  if (!backend.capabilities().kv_fill) {
    return make_error(ErrorCode::kUnsupported, "preference fill for request " + std::to_string(f.request_id) + ": the " +
                                                   std::string(backend.name()) + " backend lacks capability kv_fill");
  }
  TS_ASSIGN_OR_RETURN(ParsedBlobKey key, parse_blob_key(f.blob_key));
  TS_TRY(validate(backend, f, key));
  const Model& model = backend.model();
  const PoolGeometry pool = backend.geometry();
  const std::vector<int64_t> slots = fill_slots(f.pages, pool.page_size, f.num_tokens);
  FillResult out;
  out.request_id = f.request_id;
  const kvstore::BlobKey bkey{.fingerprint = model.fingerprint, .user = key.user, .hash = hex16(key.content_hash)};
  const bool cacheable = store != nullptr && !key.user.empty();
  count(&InjectorStats::fills);

  // 1. The kvstore, under this fill's user only.
  bool filled = false;
  if (cacheable && Clock::now() < store_retry_at) {
    count(&InjectorStats::store_skipped);
  } else if (cacheable) {
    const auto t0 = Clock::now();
    auto got = store->get(bkey);
    if (!got.ok()) {
      store_retry_at = Clock::now() + std::chrono::milliseconds(config.store_backoff_ms);
      count(&InjectorStats::store_errors);
      TS_LOG(kWarn) << "preference: kvstore get for request " << f.request_id << " failed (" << got.error().message
                    << "); computing the preference";
    } else if (got->found) {
      auto kv = kvstore::decode_blob(got->blob, {.expected_fingerprint = model.fingerprint});
      bool written = false;
      if (kv.ok()) {
        TS_ASSIGN_OR_RETURN(written, write_blob(backend, f, *kv));
      }
      if (written) {
        filled = true;
        const bool l2 = got->tier == kvstore::Tier::kL2;
        out.source = l2 ? "redis" : "kvstore";
        out.kv_bytes = static_cast<int64_t>(got->blob.size());
        out.transfer_ms = ms_since(t0);
        count(l2 ? &InjectorStats::hits_l2 : &InjectorStats::hits_l1);
        count(&InjectorStats::kv_bytes_fetched, got->blob.size());
      } else {
        count(&InjectorStats::bad_blobs);
        TS_LOG(kWarn) << "preference: kvstore blob for request " << f.request_id << " refused ("
                      << (kv.ok() ? std::string("shape or model differs") : kv.error().message) << "); computing the preference";
      }
    }
  }

  // 2. Compute: prefill the preference alone at positions [0, P).
  if (!filled) {
    if (f.tokens.empty()) {
      return make_error(ErrorCode::kNotFound, "preference fill for request " + std::to_string(f.request_id) +
                                                  ": not in the kvstore and the fill carries no tokens to compute it from");
    }
    const auto t0 = Clock::now();
    const SeqInput in{.tokens = f.tokens, .start_pos = 0, .block_table = f.pages, .slot_mapping = slots, .want_logits = false};
    TS_TRY(exec.forward(std::span<const SeqInput>(&in, 1)));
    out.source = "compute";
    out.compute_ms = ms_since(t0);
    out.kv_bytes = static_cast<int64_t>(2 * sizeof(float) * static_cast<size_t>(pool.token_floats()) *
                                        static_cast<size_t>(pool.n_layers) * static_cast<size_t>(f.num_tokens));
    count(&InjectorStats::computed);
    // Unscaled copy for the kvstore, taken before V is scaled; packed on the put thread.
    if (cacheable) {
      TS_ASSIGN_OR_RETURN(kvstore::PackedKv unscaled, read_pages(backend, f.pages, f.num_tokens));
      enqueue({bkey, std::move(unscaled)});
    }
  }

  // 3. Scale V (never K) of positions [0, P) by alpha, in every layer.
  const auto row = static_cast<size_t>(pool.token_floats());
  std::vector<float> k(slots.size() * row), v(slots.size() * row);
  for (int32_t l = 0; l < pool.n_layers; ++l) {
    TS_TRY(backend.read_kv(l, slots, k, v));
    for (float& x : v) x *= f.alpha;
    TS_TRY(backend.write_kv(l, slots, k, v));
  }
  return out;
}

PreferenceInjector::PreferenceInjector(PreferenceStore* store, InjectorConfig config)
    : impl_(std::make_unique<Impl>(store, std::move(config))) {}
PreferenceInjector::~PreferenceInjector() = default;

Result<FillResult> PreferenceInjector::apply(StepExecutor& executor, const KvFill& fill) {
  return impl_->apply(executor, fill);
}
Result<FillResult> PreferenceInjector::apply(Engine& engine, const KvFill& fill) { return impl_->apply(engine.executor(), fill); }

void PreferenceInjector::attach(StepExecutor& executor) {
  executor.set_fill_handler([this, &executor](const KvFill& f) { return apply(executor, f); });
}
void PreferenceInjector::attach(Engine& engine) { attach(engine.executor()); }

bool PreferenceInjector::flush(int timeout_ms) {
  std::unique_lock lock(impl_->mu);
  return impl_->idle_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                 [&] { return impl_->queue.empty() && !impl_->in_flight; });
}

InjectorStats PreferenceInjector::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

kvstore::PackedKv read_pages(const KvPool& pool, const Model& model, std::span<const int32_t> pages, int32_t num_tokens) {
  const ModelConfig& c = model.config();
  TS_CHECK(pool.planes() == 2 && pool.n_kv_heads() == c.n_kv_heads && pool.head_dim() == c.head_dim)
      << "read_pages: a per-head K/V pool of the model's shape (not a latent cache)";
  kvstore::PackedKv kv;
  kv.fingerprint = model.fingerprint;
  kv.dtype = DType::kF32;
  kv.shape = {static_cast<uint32_t>(c.n_layers), static_cast<uint32_t>(num_tokens), static_cast<uint32_t>(c.n_kv_heads),
              static_cast<uint32_t>(c.head_dim)};
  kv.k.resize(kv.region_bytes());
  kv.v.resize(kv.region_bytes());
  const size_t row = static_cast<size_t>(pool.token_floats()) * sizeof(float);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    for (int32_t p = 0; p < num_tokens; ++p) {
      const int64_t slot = slot_of(pages, pool.page_size(), p);
      const size_t off = kv.row_offset(static_cast<uint32_t>(l), static_cast<uint32_t>(p));
      std::memcpy(kv.k.data() + off, pool.key(l, slot), row);
      std::memcpy(kv.v.data() + off, pool.value(l, slot), row);
    }
  }
  return kv;
}

}  // namespace tessera::worker

namespace tessera::worker {

Result<kvstore::PackedKv> read_pages(Backend& backend, std::span<const int32_t> pages, int32_t num_tokens) {
  const Model& model = backend.model();
  const ModelConfig& c = model.config();
  const PoolGeometry pool = backend.geometry();
  // One plane (the MLA latent cache): read_kv gives v as a copy of k; the blob keeps V zero. The
  // pool decides, not the model: an MLA model on a decompressed pool has per-head K and V.
  const bool latent = pool.planes == 1;
  kvstore::PackedKv kv;
  kv.fingerprint = model.fingerprint;
  kv.dtype = DType::kF32;
  kv.shape = {static_cast<uint32_t>(c.n_layers), static_cast<uint32_t>(num_tokens), static_cast<uint32_t>(pool.n_kv_heads),
              static_cast<uint32_t>(pool.head_dim)};
  kv.k.resize(kv.region_bytes());
  kv.v.resize(kv.region_bytes());
  const auto row = static_cast<size_t>(pool.token_floats());
  const std::vector<int64_t> slots = fill_slots(pages, pool.page_size, num_tokens);
  std::vector<float> k(slots.size() * row), v(slots.size() * row);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    TS_TRY(backend.read_kv(l, slots, k, v));
    for (int32_t p = 0; p < num_tokens; ++p) {
      const size_t off = kv.row_offset(static_cast<uint32_t>(l), static_cast<uint32_t>(p));
      std::memcpy(kv.k.data() + off, k.data() + static_cast<size_t>(p) * row, row * sizeof(float));
      if (!latent) std::memcpy(kv.v.data() + off, v.data() + static_cast<size_t>(p) * row, row * sizeof(float));
    }
  }
  return kv;
}

}  // namespace tessera::worker
