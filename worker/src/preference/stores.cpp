// PreferenceStore over tessera-kvstore (ZeroMQ). The in-process one is in local_store.cpp.
#include <atomic>
#include <memory>
#include <mutex>

#include "tessera/kvstore/client.h"
#include "tessera/worker/preference.h"

namespace tessera::worker {
namespace {

// Two clients: Client serializes its calls, so a big put on the put thread would otherwise
// hold up the compute thread's get.
class ClientStore final : public PreferenceStore {
 public:
  ClientStore(std::unique_ptr<kvstore::Client> getter, std::unique_ptr<kvstore::Client> putter)
      : getter_(std::move(getter)), putter_(std::move(putter)) {}

  Result<StoreGet> get(const kvstore::BlobKey& key) override {
    TS_ASSIGN_OR_RETURN(kvstore::ClientGet g, getter_->get(key));
    return StoreGet{.found = g.found, .tier = g.tier, .blob = std::move(g.blob)};
  }
  // One round trip; a kvstore older than get_many gets get() per hash from then on.
  Result<std::vector<StoreGet>> get_many(uint64_t fingerprint, const std::string& user,
                                         const std::vector<std::string>& hashes) override {
    if (!no_get_many_.load()) {
      auto many = getter_->get_many(fingerprint, user, hashes);
      if (many.ok()) {
        std::vector<StoreGet> out;
        out.reserve(many->size());
        for (auto& g : *many) out.push_back(StoreGet{.found = g.found, .tier = g.tier, .blob = std::move(g.blob)});
        return out;
      }
      if (!kvstore::Client::is_unknown_get_many(many.error())) return many.error();
      no_get_many_.store(true);
    }
    return PreferenceStore::get_many(fingerprint, user, hashes);
  }
  Status put(const kvstore::BlobKey& key, std::string blob) override {
    TS_ASSIGN_OR_RETURN(kvstore::ClientPut p, putter_->put(key, blob));
    (void)p;
    return ok_status();
  }

 private:
  std::unique_ptr<kvstore::Client> getter_;
  std::unique_ptr<kvstore::Client> putter_;
  std::atomic<bool> no_get_many_{false};  // the kvstore answered get_many "unknown type"
};

}  // namespace

Result<std::vector<StoreGet>> PreferenceStore::get_many(uint64_t fingerprint, const std::string& user,
                                                        const std::vector<std::string>& hashes) {
  std::vector<StoreGet> out;
  out.reserve(hashes.size());
  for (const auto& h : hashes) {
    TS_ASSIGN_OR_RETURN(StoreGet g, get(kvstore::BlobKey{.fingerprint = fingerprint, .user = user, .hash = h}));
    out.push_back(std::move(g));
  }
  return out;
}

Result<std::unique_ptr<PreferenceStore>> connect_kvstore(const kvstore::ClientConfig& config) {
  TS_ASSIGN_OR_RETURN(auto getter, kvstore::Client::connect(config));
  TS_ASSIGN_OR_RETURN(auto putter, kvstore::Client::connect(config));
  return std::unique_ptr<PreferenceStore>(new ClientStore(std::move(getter), std::move(putter)));
}

}  // namespace tessera::worker
