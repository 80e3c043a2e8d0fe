#include "tessera/frontend/stored_preferences.h"

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "tessera/common/hash.h"
#include "tessera/common/log.h"
#include "tessera/kvstore/blob.h"
#include "tessera/kvstore/client.h"

namespace tessera::frontend {
namespace {

using json = nlohmann::json;

// The stored preference of a user is a kvstore blob under this reserved key (no model computes
// with a fingerprint equal to "TESSPREF", and K/V blob hashes are 16 hex digits).
constexpr uint64_t kStoredPreferenceFingerprint = 0x5445535350524546ull;
constexpr std::string_view kStoredPreferenceHash = "stored-preference-v1";

// The kvstore only takes packed K/V blobs (blob.h), so the stored preference's JSON travels as
// the bytes of the K region of a one-layer, one-head, head_dim-1 f32 blob with codec "none"
// (bytes kept verbatim and checksummed), padded with JSON whitespace to whole elements.
Result<std::string> json_to_blob(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  text.resize((text.size() + 3) / 4 * 4, ' ');
  kvstore::PackedKv kv{.fingerprint = kStoredPreferenceFingerprint, .dtype = DType::kF32,
                       .shape = {.n_layers = 1, .n_tokens = static_cast<uint32_t>(text.size() / 4), .n_kv_heads = 1, .head_dim = 1}};
  kv.k.assign(text.begin(), text.end());
  kv.v.assign(text.size(), 0);
  return kvstore::encode_blob(kv, {.codec = kvstore::Codec::kNone});
}

Result<json> blob_to_json(std::string_view blob) {
  TS_ASSIGN_OR_RETURN(kvstore::PackedKv kv, kvstore::decode_blob(blob, {.expected_fingerprint = kStoredPreferenceFingerprint}));
  json j = json::parse(kv.k.begin(), kv.k.end(), nullptr, false);
  if (j.is_discarded()) return make_error(ErrorCode::kCorruptFile, "stored preference is not JSON");
  return j;
}

kvstore::BlobKey stored_key(const std::string& user) {
  return kvstore::BlobKey{.fingerprint = kStoredPreferenceFingerprint, .user = user, .hash = std::string(kStoredPreferenceHash)};
}

int64_t ticks(StoredPreferences::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

// A fixed pool of threads, each with its own kvstore client (a Client serves one call at a time).
struct StoredPreferences::Executor {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;  // GUARDED_BY(mu)
  bool stopping = false;  // GUARDED_BY(mu)
  std::vector<std::unique_ptr<kvstore::Client>> clients;  // one per thread, used only by it
  std::vector<std::thread> threads;

  void post(Job job) {
    {
      std::lock_guard<std::mutex> lock(mu);
      jobs.push_back(std::move(job));
    }
    cv.notify_one();
  }

  void run(kvstore::Client& kv) {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !jobs.empty(); });
        if (stopping) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      job(kv);
    }
  }

  ~Executor() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    cv.notify_all();
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }
};

StoredPreferences::StoredPreferences(StoredPreferencesConfig config, metrics::Registry& registry)
    : config_(std::move(config)),
      enabled_(!config_.endpoint.empty()),
      lookups_(registry.counter("tessera_frontend_stored_preference_lookups_total",
                                "stored-preference lookups sent to the kvstore (requests with a user and no preference, "
                                "admitted, outside the back-off after a kvstore failure)")),
      errors_(registry.counter("tessera_frontend_stored_preference_errors_total",
                               "stored-preference lookups that failed (kvstore unreachable or bad value); the request ran without it")),
      used_(registry.counter("tessera_frontend_stored_preference_used_total", "requests given their user's stored preference")) {}

Result<std::unique_ptr<StoredPreferences>> StoredPreferences::create(const StoredPreferencesConfig& config,
                                                                     metrics::Registry& registry) {
  std::unique_ptr<StoredPreferences> sp(new StoredPreferences(config, registry));
  if (!sp->enabled_) return sp;
  auto ex = std::make_unique<Executor>();
  for (int i = 0; i < std::max(1, config.threads); ++i) {
    TS_ASSIGN_OR_RETURN(auto client, kvstore::Client::connect({.endpoint = config.endpoint, .timeout_ms = config.timeout_ms, .curve = config.curve}));
    ex->clients.push_back(std::move(client));
  }
  // Threads last: they read only the executor, now whole.
  for (auto& c : ex->clients) ex->threads.emplace_back([e = ex.get(), kv = c.get()] { e->run(*kv); });
  sp->executor_ = std::move(ex);
  return sp;
}

namespace {
bool is_store_failure(ErrorCode c) {
  return c == ErrorCode::kUnavailable || c == ErrorCode::kDeadlineExceeded || c == ErrorCode::kMalformedMessage ||
         c == ErrorCode::kInternal || c == ErrorCode::kIoError;
}
}  // namespace

StoredPreferences::~StoredPreferences() = default;

bool StoredPreferences::wants_lookup(const protocol::GenerateRequest& r) const {
  return enabled_ && !r.user.empty() && r.preference.empty();
}

StoredPreferences::Clock::time_point StoredPreferences::deadline_from(Clock::time_point now) const {
  return now + std::chrono::milliseconds(config_.timeout_ms);
}

void StoredPreferences::lookup(std::string user, Clock::time_point deadline, LookupDone done) {
  TS_CHECK(executor_ != nullptr) << "lookup without a kvstore";
  executor_->post([this, user = std::move(user), deadline, done = std::move(done)](kvstore::Client& kv) {
    done(run_lookup(kv, user, deadline));
  });
}

std::optional<StoredPreference> StoredPreferences::run_lookup(kvstore::Client& kv, const std::string& user,
                                                              Clock::time_point deadline) {
  const auto now = Clock::now();
  if (now >= deadline || ticks(now) < backoff_until_ns_.load()) return std::nullopt;
  lookups_.inc();
  auto stored = load(kv, user);
  if (!stored.ok()) {
    // The log names the user by a short hash: ids are client input (any bytes, any length).
    char tag[24];
    std::snprintf(tag, sizeof tag, "%016llx", static_cast<unsigned long long>(fnv1a64(user)));
    TS_LOG(kWarn) << "user#" << tag << " | stored preference lookup failed: " << stored.error().to_string();
    errors_.inc();
    // Back off only when the kvstore itself failed (down, slow, broken answer): a request the
    // kvstore refuses (e.g. a user id over its limit) must not disable preferences for everyone.
    if (is_store_failure(stored.error().code)) backoff_until_ns_.store(ticks(Clock::now() + config_.backoff));
    return std::nullopt;
  }
  return *stored;
}

void StoredPreferences::apply(protocol::GenerateRequest& r, const std::optional<StoredPreference>& stored) {
  if (!stored) return;
  r.preference = stored->preference;
  r.preference_alpha = stored->alpha;
  used_.inc();
}

void StoredPreferences::post(Job job) {
  TS_CHECK(executor_ != nullptr) << "kvstore job without a kvstore";
  executor_->post(std::move(job));
}

Result<std::optional<StoredPreference>> StoredPreferences::load(kvstore::Client& kv, const std::string& user) {
  TS_ASSIGN_OR_RETURN(kvstore::ClientGet got, kv.get(stored_key(user)));
  if (!got.found) return std::optional<StoredPreference>{};
  TS_ASSIGN_OR_RETURN(json j, blob_to_json(got.blob));
  if (!j.is_object() || !j.contains("preference") || !j["preference"].is_string() || !j.contains("alpha") ||
      !j["alpha"].is_number())
    return make_error(ErrorCode::kCorruptFile, "stored preference of user '" + user + "' is not {preference, alpha} JSON");
  return std::optional<StoredPreference>{StoredPreference{j["preference"].get<std::string>(), j["alpha"].get<float>()}};
}

Result<kvstore::ClientPut> StoredPreferences::store(kvstore::Client& kv, const std::string& user, const StoredPreference& value) {
  TS_ASSIGN_OR_RETURN(std::string blob, json_to_blob({{"preference", value.preference}, {"alpha", value.alpha}}));
  return kv.put(stored_key(user), blob);
}

Result<bool> StoredPreferences::remove(kvstore::Client& kv, const std::string& user) { return kv.remove(stored_key(user)); }

}  // namespace tessera::frontend
