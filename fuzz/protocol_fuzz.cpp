// libFuzzer target: protocol v1 decoding (common/protocol.h), the code every process runs on
// bytes a peer sent — the frontend's client API (ZeroMQ) and the internal frontend <->
// scheduler <-> worker messages. decode() must never throw or abort; whatever it accepts must
// survive a round trip: encode(decoded) decodes again, to a message that encodes to the same
// bytes (an asymmetry between the two would let a relayed message change meaning).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tessera/common/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto msg = protocol::decode(bytes);
  volatile uint64_t id = protocol::peek_id(bytes);
  volatile bool has = protocol::peek_has_key(bytes, "max_tokens") || protocol::peek_has_key(bytes, "seed");
  (void)id;
  (void)has;
  if (!msg.ok()) {
    if (msg.error().message.empty()) {
      std::fprintf(stderr, "protocol_fuzz: decode failed without a message\n");
      std::abort();
    }
    return 0;
  }
  const std::string once = protocol::encode(*msg);
  auto back = protocol::decode(once);
  if (!back.ok()) {
    std::fprintf(stderr, "protocol_fuzz: a decoded '%s' does not decode after encode: %s\n",
                 std::string(protocol::message_type(*msg)).c_str(), back.error().to_string().c_str());
    std::abort();
  }
  if (protocol::encode(*back) != once) {
    std::fprintf(stderr, "protocol_fuzz: '%s' changed in an encode/decode round trip\n",
                 std::string(protocol::message_type(*msg)).c_str());
    std::abort();
  }
  return 0;
}
