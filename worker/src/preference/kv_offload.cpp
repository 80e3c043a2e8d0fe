// KvOffloader: spills and reloads of K/V pages through the kvstore (kv_offload.h has the contract).
#include "tessera/worker/kv_offload.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "tessera/common/dki.h"
#include "tessera/common/log.h"

namespace tessera::worker {
namespace {

// Pages asked for per `get_many` on a reload (the kvstore takes up to 256). Large pages need not
// fit one message: the kvstore answers a prefix that does and Client::get_many asks for the rest.
constexpr size_t kReloadBatch = 64;

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct PendingSpill {
  kvstore::BlobKey key;
  uint64_t hash = 0;
  kvstore::PackedKv kv;  // f32, one page, its tag set
};

}  // namespace

struct KvOffloader::Impl {
  PreferenceStore* store;
  OffloadOptions options;

  mutable std::mutex mu;
  std::condition_variable cv;       // queue not empty / stopping
  std::condition_variable idle_cv;  // queue drained and nothing in flight
  std::deque<PendingSpill> queue;   // guarded by mu
  size_t queued_bytes = 0;          // guarded by mu
  bool in_flight = false;           // guarded by mu
  bool stopping = false;            // guarded by mu
  std::vector<uint64_t> stored;     // guarded by mu: hashes put since take_offloaded()
  OffloadWorkerStats stats;         // guarded by mu
  Clock::time_point store_retry_at{};  // compute thread only
  std::thread put_thread;

  Impl(PreferenceStore* s, OffloadOptions o) : store(s), options(std::move(o)) {
    put_thread = std::thread([this] { put_loop(); });
  }
  ~Impl() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
    put_thread.join();
  }

  void put_loop() {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping and drained
      PendingSpill job = std::move(queue.front());
      queue.pop_front();
      const size_t raw = job.kv.k.size() + job.kv.v.size();
      in_flight = true;
      lock.unlock();
      kvstore::PackedKv kv = kvstore::with_dtype(std::move(job.kv), options.blob_dtype);
      const uint64_t stored_raw = kv.k.size() + kv.v.size();
      uint64_t bytes = 0;
      Status st = ok_status();
      auto blob = kvstore::encode_blob(kv, options.codec);
      if (!blob.ok()) {
        st = blob.take_error();
      } else {
        bytes = blob->size();
        st = store->put(job.key, std::move(blob).value());
      }
      if (!st.ok()) {
        TS_LOG(kWarn) << "kv-offload: put of block " << job.key.hash << " failed: " << st.error().message;
      }
      lock.lock();
      in_flight = false;
      queued_bytes -= raw;
      if (st.ok()) {
        ++stats.offloaded_pages;
        stats.offloaded_bytes += bytes;
        stats.offloaded_raw_bytes += stored_raw;
        stored.push_back(job.hash);
      } else {
        ++stats.spill_failed;
      }
      if (queue.empty()) idle_cv.notify_all();
    }
  }

  // Writes one decoded page blob into `page`; false when it does not fit this model/pool.
  static Result<bool> write_page(Backend& backend, int32_t page, const kvstore::PackedKv& kv) {
    const Model& model = backend.model();
    const ModelConfig& c = model.config();
    const PoolGeometry pool = backend.geometry();
    const kvstore::KvShape want{static_cast<uint32_t>(c.n_layers), static_cast<uint32_t>(pool.page_size),
                                static_cast<uint32_t>(pool.n_kv_heads), static_cast<uint32_t>(pool.head_dim)};
    if (kv.shape != want || kv.fingerprint != model.fingerprint || kv.dtype != DType::kF32) return false;
    const auto row = static_cast<size_t>(pool.token_floats());
    std::vector<int64_t> slots(static_cast<size_t>(pool.page_size));
    for (int32_t p = 0; p < pool.page_size; ++p) slots[static_cast<size_t>(p)] = static_cast<int64_t>(page) * pool.page_size + p;
    std::vector<float> k(slots.size() * row), v(slots.size() * row);
    for (int32_t l = 0; l < c.n_layers; ++l) {
      const size_t off = kv.row_offset(static_cast<uint32_t>(l), 0);  // a layer's rows are consecutive
      std::memcpy(k.data(), kv.k.data() + off, k.size() * sizeof(float));
      std::memcpy(v.data(), kv.v.data() + off, v.size() * sizeof(float));
      TS_TRY(backend.write_kv(l, slots, k, v));
    }
    return true;
  }
};

KvOffloader::KvOffloader(PreferenceStore* store, OffloadOptions options)
    : impl_(std::make_unique<Impl>(store, std::move(options))) {
  TS_CHECK(store != nullptr) << "KvOffloader needs a store";
}
KvOffloader::~KvOffloader() = default;

kvstore::BlobKey KvOffloader::key_for(uint64_t fingerprint, uint64_t ns_hash, uint64_t block_hash) const {
  const OffloadOptions& o = impl_->options;
  return kvstore::BlobKey{.fingerprint = fingerprint,
                          .user = "kv-offload/" + dki::hex16(ns_hash),
                          .hash = dki::hex16(block_hash) + "/" + kvstore::codec_name(o.codec.codec) + "-g" +
                                  std::to_string(o.codec.group_size) + "/pool-" + o.pool_dtype + "/" +
                                  std::string(dtype_name(o.blob_dtype))};
}

void KvOffloader::spill(Backend& backend, std::span<const KvSpill> spills) {
  const int32_t ps = backend.geometry().page_size;
  for (const KvSpill& s : spills) {
    auto kv = read_pages(backend, std::span<const int32_t>(&s.page, 1), ps);
    std::lock_guard lock(impl_->mu);
    ++impl_->stats.spilled_pages;
    if (!kv.ok()) {
      ++impl_->stats.spill_failed;
      TS_LOG(kWarn) << "kv-offload: reading page " << s.page << " failed: " << kv.error().message;
      continue;
    }
    if (s.tag == KvTag{}) {  // a scheduler that predates tags: such a blob could never be reloaded
      ++impl_->stats.spill_dropped;
      continue;
    }
    kv->tag = s.tag;
    const size_t raw = kv->k.size() + kv->v.size();
    if (impl_->queued_bytes + raw > impl_->options.max_pending_bytes) {
      ++impl_->stats.spill_dropped;
      continue;
    }
    impl_->queued_bytes += raw;
    impl_->queue.push_back({key_for(backend.model().fingerprint, s.ns_hash, s.hash), s.hash, std::move(kv).value()});
    impl_->cv.notify_one();
  }
}

Result<ReloadResult> KvOffloader::reload(Backend& backend, const KvReload& r) {
  const auto t0 = Clock::now();
  Impl& im = *impl_;
  ReloadResult out{.request_id = r.request_id};
  uint64_t bad = 0, missed = 0, mismatched = 0;
  if (r.tags.size() != r.pages.size()) {  // a scheduler that predates tags: nothing is provably these tokens'
    missed = r.pages.empty() ? 0 : 1;
  } else if (Clock::now() < im.store_retry_at) {
    missed = r.pages.empty() ? 0 : 1;  // kvstore recently down: recompute without waiting on it
  } else {
    const uint64_t fp = backend.model().fingerprint;
    const std::string user = key_for(fp, r.ns_hash, 0).user;
    std::vector<StoreGet> batch;  // the blobs of pages [batch_begin, batch_begin + batch.size())
    size_t batch_begin = 0;
    for (size_t i = 0; i < r.pages.size(); ++i) {
      if (i == batch_begin + batch.size()) {  // one kvstore round trip for up to kReloadBatch pages
        std::vector<std::string> hashes;
        for (size_t j = i; j < std::min(r.pages.size(), i + kReloadBatch); ++j)
          hashes.push_back(key_for(fp, r.ns_hash, r.hashes[j]).hash);
        auto got = im.store->get_many(fp, user, hashes);
        if (!got.ok()) {
          im.store_retry_at = Clock::now() + std::chrono::milliseconds(im.options.store_backoff_ms);
          TS_LOG(kWarn) << "kv-offload: kvstore get failed (" << got.error().message << "); recomputing";
          ++missed;
          break;
        }
        batch = std::move(got).value();
        batch_begin = i;
      }
      StoreGet* got = &batch[i - batch_begin];
      if (!got->found) {
        ++missed;
        break;
      }
      auto kv = kvstore::decode_blob(got->blob, {.expected_fingerprint = fp, .to_f32 = true});
      if (kv.ok() && kv->tag != r.tags[i]) {
        // Same block hash, other prefix (a 64-bit collision, by chance or crafted): never use it.
        ++mismatched;
        ++missed;
        TS_LOG(kWarn) << "kv-offload: blob for block " << dki::hex16(r.hashes[i])
                      << " holds the K/V of another prefix (tag differs); refused, recomputing";
        break;
      }
      bool written = false;
      if (kv.ok()) {
        TS_ASSIGN_OR_RETURN(written, Impl::write_page(backend, r.pages[i], *kv));
      }
      if (!written) {
        ++bad;
        ++missed;
        TS_LOG(kWarn) << "kv-offload: blob for block " << dki::hex16(r.hashes[i]) << " refused ("
                      << (kv.ok() ? std::string("shape or model differs") : kv.error().message) << "); recomputing";
        break;
      }
      ++out.pages;
      out.kv_bytes += static_cast<int64_t>(got->blob.size());
    }
  }
  out.transfer_ms = ms_since(t0);
  std::lock_guard lock(im.mu);
  ++im.stats.reloads;
  im.stats.reloaded_pages += static_cast<uint64_t>(out.pages);
  im.stats.reload_missed_pages += missed;
  im.stats.bad_blobs += bad;
  im.stats.mismatched_blobs += mismatched;
  im.stats.reload_bytes += static_cast<uint64_t>(out.kv_bytes);
  im.stats.reload_ms += out.transfer_ms;
  return out;
}

std::vector<uint64_t> KvOffloader::take_offloaded() {
  std::lock_guard lock(impl_->mu);
  return std::exchange(impl_->stored, {});
}

bool KvOffloader::flush(int timeout_ms) {
  std::unique_lock lock(impl_->mu);
  return impl_->idle_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                 [&] { return impl_->queue.empty() && !impl_->in_flight; });
}

OffloadWorkerStats KvOffloader::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

}  // namespace tessera::worker
