// ZeroMQ helpers over cppzmq: multipart send/receive as strings and the ROUTER envelope.
//
// Framing used by every Tessera socket pair (docs/protocol.md, "Framing"):
//   DEALER -> ROUTER   the DEALER sends [body]; the ROUTER receives [identity, body]
//   REQ    -> ROUTER   the REQ sends [body] as ["", body]; the ROUTER receives [identity, "", body]
// A ROUTER answers with the same envelope it received (identity, and the empty delimiter when
// there was one). `body` is one protocol v1 msgpack map (protocol.h).
//
// Thread-safety: a zmq::socket_t belongs to one thread at a time (ZeroMQ rule); these helpers
// add no locking.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "tessera/common/result.h"

namespace tessera::zmqu {

using Frames = std::vector<std::string>;

// Sends all frames as one multipart message. kUnavailable when it would block (dontwait)
// or the peer is unreachable (ROUTER_MANDATORY).
Status send(zmq::socket_t& socket, const Frames& frames, bool dontwait = false);
// Receives one multipart message. With dontwait, returns an empty Frames when none is ready.
Result<Frames> recv(zmq::socket_t& socket, bool dontwait = false);

struct Envelope {
  std::string identity;
  bool delimiter = false;  // the sender was REQ-style (empty frame before the body)
  std::string body;
};

// [identity, body] or [identity, "", body]; anything else is kMalformedMessage.
Result<Envelope> parse_router(Frames frames);
Frames router_reply(const Envelope& to, std::string body);

std::string tcp_endpoint(std::string_view host, int port);  // "tcp://host:port"

// Caps every frame this socket accepts at protocol::kMaxMessageBytes (ZMQ_MAXMSGSIZE): libzmq
// drops a connection that announces a larger frame before allocating it, so one peer cannot
// make the process buffer an arbitrarily large message. Call before bind/connect. Every
// Tessera socket that receives from another process sets it.
void limit_message_size(zmq::socket_t& socket);

}  // namespace tessera::zmqu
