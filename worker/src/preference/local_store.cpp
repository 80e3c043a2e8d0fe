// PreferenceStore over an in-process kvstore::Store (tests, single-process tools). Its own
// library (tessera_preference_local) so the worker never links the kvstore's server side.
#include <memory>

#include "tessera/kvstore/store.h"
#include "tessera/worker/preference_local.h"

namespace tessera::worker {
namespace {

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

std::unique_ptr<PreferenceStore> local_store(kvstore::Store& store) { return std::make_unique<LocalStore>(store); }

}  // namespace tessera::worker
