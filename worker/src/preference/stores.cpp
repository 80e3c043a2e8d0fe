// PreferenceStore over tessera-kvstore (ZeroMQ). The in-process one is in local_store.cpp.
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
  Status put(const kvstore::BlobKey& key, std::string blob) override {
    TS_ASSIGN_OR_RETURN(kvstore::ClientPut p, putter_->put(key, blob));
    (void)p;
    return ok_status();
  }

 private:
  std::unique_ptr<kvstore::Client> getter_;
  std::unique_ptr<kvstore::Client> putter_;
};

}  // namespace

Result<std::unique_ptr<PreferenceStore>> connect_kvstore(const kvstore::ClientConfig& config) {
  TS_ASSIGN_OR_RETURN(auto getter, kvstore::Client::connect(config));
  TS_ASSIGN_OR_RETURN(auto putter, kvstore::Client::connect(config));
  return std::unique_ptr<PreferenceStore>(new ClientStore(std::move(getter), std::move(putter)));
}

}  // namespace tessera::worker
