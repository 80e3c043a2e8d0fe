// The client's side of the wire (docs/protocol.md "Client API"): requests encoded with common's
// msgpack Writer (only the fields the caller set, so the server's defaults apply to the rest),
// replies decoded by common's protocol codec and turned into the public types.
// Pure functions; no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/client/types.h"
#include "tessera/common/protocol.h"

namespace tessera::client::detail {

// What a request asks for: prompt text, prompt token ids (completion), or messages (chat).
struct Prompt {
  const std::string* text = nullptr;
  const std::vector<int32_t>* tokens = nullptr;
  const std::vector<ChatMessage>* messages = nullptr;
};

// A `completion` (or `chat`, when prompt.messages) message. `api_key` is used when the
// options carry none.
std::string encode_request(uint64_t id, bool stream, const Prompt& prompt, const RequestOptions& options,
                           const std::string& api_key);
std::string encode_cancel(uint64_t id);
std::string encode_heartbeat(uint64_t id);

TokenEvent to_public(protocol::TokenEvent&& e);
Limits to_public(const protocol::Heartbeat& h, const std::string& endpoint);
// The Completion of a non-streamed request's `final` (text, tokens, logprobs from it).
Completion to_public(protocol::FinalEvent&& f, bool want_logprobs, bool want_top_logprobs);
// Adds a `final`'s reason, usage and timings to `c` (the concatenation of a stream's events).
void finish(Completion& c, protocol::FinalEvent&& f);
// Appends a token event to a stream's running Completion.
void append(Completion& c, const TokenEvent& e);

}  // namespace tessera::client::detail
