// libFuzzer target: the kvstore's msgpack messages (kvstore/src/messages.h) — requests as the
// tessera-kvstore service reads them from any peer, replies as the kvstore client reads them.
// Decoding must never throw or abort; an accepted request must survive encode + decode.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::kvstore::wire;
  const std::string body(reinterpret_cast<const char*>(data), size);
  volatile uint64_t id = peek_id(body);
  (void)id;
  auto req = decode_request(body);
  if (req.ok()) {
    const std::string once = encode_request(*req);
    auto back = decode_request(once);
    if (!back.ok() || back->op != req->op || back->id != req->id || !(back->key == req->key) || back->blob != req->blob ||
        back->ttl_s != req->ttl_s) {
      std::fprintf(stderr, "kvstore_messages_fuzz: a '%s' request changed in an encode/decode round trip%s%s\n",
                   op_name(req->op), back.ok() ? "" : ": ", back.ok() ? "" : back.error().to_string().c_str());
      std::abort();
    }
  }
  auto reply = decode_reply(body);
  if (reply.ok()) {
    volatile size_t n = reply->blob.size() + reply->message.size() + reply->metrics.size();
    (void)n;
  }
  return 0;
}
