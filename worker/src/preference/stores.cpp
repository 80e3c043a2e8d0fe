// PreferenceStore implementations: tessera-kvstore over ZeroMQ, and an in-process Store.
#include <memory>
#include <mutex>

#include "tessera/kvstore/store.h"
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
  Status put(const kvstore::BlobKey& key, std::string blob) override {
    TS_ASSIGN_OR_RETURN(kvstore::ClientPut p, putter_->put(key, blob));
    (void)p;
    return ok_status();
  }

 private:
  std::unique_ptr<kvstore::Client> getter_;
  std::unique_ptr<kvstore::Client> putter_;
};

class LocalStore final : public PreferenceStore {
 public:
  explicit LocalStore(kvstore::Store& store) : store_(store) {}
  Result<StoreGet> get(const kvstore::BlobKey& key) override {
    TS_ASSIGN_OR_RETURN(kvstore::GetResult g, store_.get(key));
    StoreGet out;
    out.found = g.blob != nullptr;
    out.tier = g.tier;
    if (g.blob) out.blob = std::string(g.blob->begin(), g.blob->end());
    return out;
  }
  Status put(const kvstore::BlobKey& key, std::string blob) override {
    TS_ASSIGN_OR_RETURN(kvstore::PutResult p, store_.put(key, std::move(blob)));
    (void)p;
    return ok_status();
  }

 private:
  kvstore::Store& store_;  // thread-safe (store.h)
};

}  // namespace

Result<std::unique_ptr<PreferenceStore>> connect_kvstore(const kvstore::ClientConfig& config) {
  TS_ASSIGN_OR_RETURN(auto getter, kvstore::Client::connect(config));
  TS_ASSIGN_OR_RETURN(auto putter, kvstore::Client::connect(config));
  return std::unique_ptr<PreferenceStore>(new ClientStore(std::move(getter), std::move(putter)));
}

std::unique_ptr<PreferenceStore> local_store(kvstore::Store& store) { return std::make_unique<LocalStore>(store); }

}  // namespace tessera::worker
