#include "tessera/kvstore/client.h"

#include <chrono>

#include <zmq.hpp>

#include "messages.h"

namespace tessera::kvstore {

struct Client::Impl {
  ClientConfig config;
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::dealer};
  std::mutex mu;
  uint64_t next_id = 1;  // GUARDED_BY(mu)

  Result<wire::Reply> call(wire::Request req, std::string_view expect_type);
  Result<std::string> roundtrip(std::string_view body, uint64_t id);
};

namespace {

wire::Request request(wire::Op op, const BlobKey& key = {}, std::string_view blob = {}, uint32_t ttl_s = 0) {
  wire::Request r;
  r.op = op;
  r.key = key;
  r.blob = blob;
  r.ttl_s = ttl_s;
  return r;
}

}  // namespace

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::connect(const ClientConfig& config) {
  if (config.timeout_ms <= 0) return make_error(ErrorCode::kOutOfRange, "timeout_ms must be > 0");
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  try {
    impl->sock.set(zmq::sockopt::linger, 0);
    impl->sock.set(zmq::sockopt::maxmsgsize, config.max_message_bytes);
    // A DEALER with no usable connection (kvstore down, or our CURVE key refused) blocks in
    // send: bound it like the reply.
    impl->sock.set(zmq::sockopt::sndtimeo, config.timeout_ms);
    curve::make_client(impl->sock, config.curve);
    impl->sock.connect(config.endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kInvalidArgument, "kvstore endpoint '" + config.endpoint + "': " + e.what());
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

// Caller holds mu.
Result<std::string> Client::Impl::roundtrip(std::string_view body, uint64_t id) {
  try {
    if (!sock.send(zmq::message_t(body.data(), body.size()), zmq::send_flags::none)) {
      return make_error(ErrorCode::kUnavailable, "kvstore at " + config.endpoint + " took no request within " +
                                                     std::to_string(config.timeout_ms) +
                                                     " ms (not connected: down, or it refused our CURVE key)");
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config.timeout_ms);
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        return make_error(ErrorCode::kDeadlineExceeded, "kvstore at " + config.endpoint + " did not answer within " +
                                                            std::to_string(config.timeout_ms) + " ms");
      }
      zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, left);
      if (!(item.revents & ZMQ_POLLIN)) continue;
      zmq::message_t m;
      std::string last;
      do {
        if (!sock.recv(m, zmq::recv_flags::none)) break;
        last.assign(static_cast<const char*>(m.data()), m.size());
      } while (m.more());
      if (wire::peek_id(last) == id || id == 0) return last;
      // A late reply to an earlier, timed-out request: drop it.
    }
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kUnavailable, std::string("kvstore zmq: ") + e.what());
  }
}

Result<wire::Reply> Client::Impl::call(wire::Request req, std::string_view expect_type) {
  std::lock_guard lock(mu);
  req.id = next_id++;
  TS_ASSIGN_OR_RETURN(std::string body, roundtrip(wire::encode_request(req), req.id));
  TS_ASSIGN_OR_RETURN(wire::Reply reply, wire::decode_reply(body));
  if (reply.type == "error") {
    const ErrorCode code = reply.code == ErrorCode::kOk ? ErrorCode::kInternal : reply.code;
    return make_error(code, "kvstore: " + reply.message);
  }
  if (reply.type != expect_type) {
    return make_error(ErrorCode::kMalformedMessage, "kvstore answered '" + reply.type + "' to a " +
                                                        wire::op_name(req.op) + " request");
  }
  return reply;
}

Result<ClientPut> Client::put(const BlobKey& key, std::string_view blob, uint32_t ttl_s) {
  TS_TRY(validate_key(key));
  TS_ASSIGN_OR_RETURN(wire::Reply r, impl_->call(request(wire::Op::kPut, key, blob, ttl_s), "put_reply"));
  return ClientPut{r.stored_l1, r.stored_l2, std::move(r.note)};
}

Result<ClientGet> Client::get(const BlobKey& key) {
  TS_TRY(validate_key(key));
  TS_ASSIGN_OR_RETURN(wire::Reply r, impl_->call(request(wire::Op::kGet, key), "get_reply"));
  return ClientGet{r.found, parse_tier(r.tier), std::move(r.blob)};
}

Result<std::vector<ClientGet>> Client::get_many(uint64_t fingerprint, const std::string& user,
                                                const std::vector<std::string>& hashes) {
  if (hashes.empty() || hashes.size() > wire::kMaxGetMany)
    return make_error(ErrorCode::kInvalidArgument, "get_many takes 1.." + std::to_string(wire::kMaxGetMany) +
                                                       " hashes (got " + std::to_string(hashes.size()) + ")");
  for (const auto& h : hashes) TS_TRY(validate_key(BlobKey{fingerprint, user, h}));
  std::vector<ClientGet> out;
  out.reserve(hashes.size());
  while (out.size() < hashes.size()) {  // a reply may answer a prefix (one message's worth of blobs)
    wire::Request req = request(wire::Op::kGetMany, BlobKey{fingerprint, user, ""});
    req.hashes.assign(hashes.begin() + static_cast<std::ptrdiff_t>(out.size()), hashes.end());
    const size_t asked = req.hashes.size();
    TS_ASSIGN_OR_RETURN(wire::Reply r, impl_->call(std::move(req), "get_many_reply"));
    if (r.results.empty() || r.results.size() > asked)
      return make_error(ErrorCode::kMalformedMessage, "kvstore answered " + std::to_string(r.results.size()) +
                                                          " results to a get_many of " + std::to_string(asked));
    for (auto& e : r.results) out.push_back(ClientGet{e.found, parse_tier(e.tier), std::move(e.blob)});
  }
  return out;
}

bool Client::is_unknown_get_many(const Error& e) {
  return e.code == ErrorCode::kInvalidArgument && e.message.find("unknown type 'get_many'") != std::string::npos;
}

Result<Tier> Client::exists(const BlobKey& key) {
  TS_TRY(validate_key(key));
  TS_ASSIGN_OR_RETURN(wire::Reply r, impl_->call(request(wire::Op::kExists, key), "exists_reply"));
  return r.found ? parse_tier(r.tier) : Tier::kNone;
}

Result<bool> Client::remove(const BlobKey& key) {
  TS_TRY(validate_key(key));
  TS_ASSIGN_OR_RETURN(wire::Reply r, impl_->call(request(wire::Op::kDelete, key), "delete_reply"));
  return r.removed;
}

Result<InvalidateResult> Client::invalidate_user(const std::string& user) {
  wire::Request req = request(wire::Op::kInvalidateUser);
  req.key.user = user;
  TS_ASSIGN_OR_RETURN(wire::Reply r, impl_->call(std::move(req), "invalidate_user_reply"));
  return InvalidateResult{r.removed_l1, r.removed_l2};
}

Result<InvalidateResult> Client::clear() {
  TS_ASSIGN_OR_RETURN(wire::Reply r, impl_->call(request(wire::Op::kClear), "clear_reply"));
  return InvalidateResult{r.removed_l1, r.removed_l2};
}

Result<ClientStats> Client::stats() {
  TS_ASSIGN_OR_RETURN(wire::Reply r, impl_->call(request(wire::Op::kStats), "stats_reply"));
  return ClientStats{std::move(r.metrics), r.redis_configured, r.redis_up, r.l1_entries, r.l1_bytes};
}

Result<std::string> Client::call_raw(std::string_view body, uint64_t expect_id) {
  std::lock_guard lock(impl_->mu);
  return impl_->roundtrip(body, expect_id);
}

}  // namespace tessera::kvstore
