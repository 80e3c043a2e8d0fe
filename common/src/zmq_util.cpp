#include "tessera/common/zmq_util.h"

#include "tessera/common/protocol.h"

namespace tessera::zmqu {

Status send(zmq::socket_t& socket, const Frames& frames, bool dontwait) {
  try {
    for (size_t i = 0; i < frames.size(); ++i) {
      auto flags = zmq::send_flags::none;
      if (i + 1 < frames.size()) flags = flags | zmq::send_flags::sndmore;
      if (dontwait) flags = flags | zmq::send_flags::dontwait;
      auto sent = socket.send(zmq::buffer(frames[i].data(), frames[i].size()), flags);
      if (!sent) return make_error(ErrorCode::kUnavailable, "zmq send would block");
    }
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable, std::string("zmq send failed: ") + e.what());
  }
  return ok_status();
}

Result<Frames> recv(zmq::socket_t& socket, bool dontwait) {
  Frames out;
  try {
    for (;;) {
      zmq::message_t msg;
      auto got = socket.recv(msg, dontwait && out.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
      if (!got) return out;  // nothing ready
      out.emplace_back(static_cast<const char*>(msg.data()), msg.size());
      if (!msg.more()) break;
    }
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable, std::string("zmq recv failed: ") + e.what());
  }
  return out;
}

Result<Envelope> parse_router(Frames frames) {
  Envelope env;
  if (frames.size() == 2) {
    env.identity = std::move(frames[0]);
    env.body = std::move(frames[1]);
    return env;
  }
  if (frames.size() == 3 && frames[1].empty()) {
    env.identity = std::move(frames[0]);
    env.delimiter = true;
    env.body = std::move(frames[2]);
    return env;
  }
  return make_error(ErrorCode::kMalformedMessage,
                    "expected [identity, body] or [identity, '', body] frames (got " + std::to_string(frames.size()) + " frames)");
}

Frames router_reply(const Envelope& to, std::string body) {
  Frames f;
  f.push_back(to.identity);
  if (to.delimiter) f.emplace_back();
  f.push_back(std::move(body));
  return f;
}

std::string tcp_endpoint(std::string_view host, int port) {
  return "tcp://" + std::string(host) + ":" + std::to_string(port);
}

void limit_message_size(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(protocol::kMaxMessageBytes));
}

}  // namespace tessera::zmqu
