// An in-process PreferenceStore over a kvstore::Store (tests, single-process tools), in library
// tessera_preference_local, which links the kvstore's server side; tessera-worker does not.
#pragma once

#include <memory>

#include "tessera/worker/preference.h"

namespace tessera::kvstore {
class Store;
}

namespace tessera::worker {

// Borrows `store` (must outlive the result); thread-safe as Store is.
std::unique_ptr<PreferenceStore> local_store(kvstore::Store& store);

}  // namespace tessera::worker
