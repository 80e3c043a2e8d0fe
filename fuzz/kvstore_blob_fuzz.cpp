// libFuzzer target: the kvstore's packed K/V blob (kvstore/include/tessera/kvstore/blob.h) —
// what a worker decodes from whatever the kvstore returns. The input is decoded as is, then
// re-sealed (payload size and checksum recomputed over the mutated bytes) so mutations reach
// every codec's decoder (zstd, int8/int4, kivi, tiered's range coder and its per-token step exponents) instead of stopping at the
// checksum. Decoding must never crash, read out of bounds or abort: an error, or K/V of exactly
// the declared shape.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tessera/kvstore/blob.h"

namespace {

void check(const std::string& blob) {
  using namespace tessera::kvstore;
  for (bool to_f32 : {false, true}) {
    auto kv = decode_blob(blob, {.max_decoded_bytes = uint64_t{1} << 20, .to_f32 = to_f32});
    if (!kv.ok()) continue;
    const size_t eb = element_bytes(kv->dtype);
    if (kv->k.size() != kv->shape.elements_per_region() * eb || kv->v.size() != kv->k.size()) {
      std::fprintf(stderr, "kvstore_blob_fuzz: a decoded blob's regions do not match its shape\n");
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::kvstore;
  std::string blob(reinterpret_cast<const char*>(data), size);
  check(blob);
  if (blob.size() < kBlobHeaderBytes) return 0;
  const uint64_t payload = blob.size() - kBlobHeaderBytes;
  std::memcpy(blob.data() + 40, &payload, 8);
  std::string header = blob.substr(0, kBlobHeaderBytes);
  std::memset(header.data() + 48, 0, 8);
  const uint64_t sum = xxh64(blob.data() + kBlobHeaderBytes, payload, xxh64(header.data(), header.size(), 0));
  std::memcpy(blob.data() + 48, &sum, 8);
  check(blob);
  return 0;
}
