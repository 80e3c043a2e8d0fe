// Crafted seeds for the message fuzz targets: every protocol v1 message type (protocol_fuzz),
// every kvstore request and reply (kvstore_messages_fuzz), and the frontend's inputs
// (frontend_request_fuzz: OpenAI JSON bodies, /tokenize and /detokenize bodies, and client-API
// msgpack requests, each behind the one-byte mode prefix that target reads).
// Written by `fuzz_write_seeds --kind protocol|kvstore|frontend|kvstore_blob --write-seeds DIR`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::fuzz {

// frontend_request_fuzz: the first byte picks what the rest of the input is.
enum class FrontendMode : uint8_t {
  kCompletionJson = 0,  // POST /v1/completions body
  kChatJson = 1,        // POST /v1/chat/completions body
  kTokenizeJson = 2,    // POST /tokenize body
  kDetokenizeJson = 3,  // POST /detokenize body
  kClientMsgpack = 4,   // a ZeroMQ client-API message (protocol v1 msgpack)
};
inline constexpr uint8_t kFrontendModes = 5;

std::vector<std::vector<uint8_t>> protocol_seeds();
std::vector<std::vector<uint8_t>> kvstore_seeds();
std::vector<std::vector<uint8_t>> frontend_seeds();
// kvstore_blob_fuzz: a small blob of every codec (f32, f16 and bf16 K/V).
std::vector<std::vector<uint8_t>> kvstore_blob_seeds();

}  // namespace tessera::fuzz
