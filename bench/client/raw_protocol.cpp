#include "raw_protocol.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#define MSGPACK_NO_BOOST 1
#include <msgpack.hpp>
#include <zmq.hpp>

namespace tessera::bench {
namespace {

std::string pack_request(uint64_t id, const std::string& prompt, int max_tokens, bool stream) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(8);
  pk.pack("v"), pk.pack(1);
  pk.pack("type"), pk.pack("completion");
  pk.pack("id"), pk.pack(id);
  pk.pack("prompt"), pk.pack(prompt);
  pk.pack("max_tokens"), pk.pack(max_tokens);
  pk.pack("temperature"), pk.pack(0.0);
  pk.pack("ignore_eos"), pk.pack(true);
  pk.pack("stream"), pk.pack(stream);
  return std::string(buf.data(), buf.size());
}

bool key_is(const msgpack::object_kv& kv, const char* k) {
  return kv.key.type == msgpack::type::STR && kv.key.via.str.size == std::strlen(k) &&
         std::memcmp(kv.key.via.str.ptr, k, kv.key.via.str.size) == 0;
}

std::string_view str_of(const msgpack::object& o) {
  return o.type == msgpack::type::STR ? std::string_view(o.via.str.ptr, o.via.str.size) : std::string_view();
}

}  // namespace

struct RawClient::Impl {
  zmq::context_t ctx{1};
  zmq::socket_t s{ctx, zmq::socket_type::dealer};
};

RawClient::RawClient(const std::string& endpoint) : impl_(new Impl) {
  impl_->s.set(zmq::sockopt::linger, 0);
  impl_->s.set(zmq::sockopt::rcvhwm, 0);
  impl_->s.connect(endpoint);
}

RawClient::~RawClient() { delete impl_; }

RawResult RawClient::run(const std::string& prompt, int requests, int in_flight, int max_tokens, bool stream) {
  zmq::socket_t& s = impl_->s;
  uint64_t& next_id = next_id_;
  struct Acc {
    std::string text;
    std::vector<int32_t> tokens;
  };
  std::unordered_map<uint64_t, Acc> live;
  RawResult r;
  int sent = 0, done = 0;
  auto send_one = [&] {
    const uint64_t id = next_id++;
    s.send(zmq::buffer(pack_request(id, prompt, max_tokens, stream)), zmq::send_flags::none);
    live.emplace(id, Acc{});
    ++sent;
  };
  while (sent < requests && sent - done < in_flight) send_one();
  while (done < requests) {
    zmq::message_t msg;
    if (!s.recv(msg)) continue;
    msgpack::object_handle oh = msgpack::unpack(static_cast<const char*>(msg.data()), msg.size());
    const msgpack::object& o = oh.get();
    if (o.type != msgpack::type::MAP) continue;
    std::string_view type, text;
    uint64_t id = 0;
    const msgpack::object* tokens = nullptr;
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      if (key_is(kv, "type")) type = str_of(kv.val);
      else if (key_is(kv, "id")) id = kv.val.as<uint64_t>();
      else if (key_is(kv, "text")) text = str_of(kv.val);
      else if (key_is(kv, "tokens")) tokens = &kv.val;
    }
    auto it = live.find(id);
    if (it == live.end()) continue;
    it->second.text.append(text);
    if (tokens && tokens->type == msgpack::type::ARRAY)
      for (uint32_t i = 0; i < tokens->via.array.size; ++i) it->second.tokens.push_back(tokens->via.array.ptr[i].as<int32_t>());
    if (type == "token") {
      ++r.events;
    } else if (type == "final" || type == "error") {
      if (type == "error") throw std::runtime_error("raw: request failed");
      r.bytes += it->second.text.size();
      live.erase(it);
      ++done;
      if (sent < requests) send_one();
    }
  }
  return r;
}

std::string start_blast_frontend(int* pid) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe");
  const pid_t child = ::fork();
  if (child < 0) throw std::runtime_error("fork");
  if (child > 0) {
    ::close(fds[1]);
    char buf[256] = {};
    ssize_t n = ::read(fds[0], buf, sizeof buf - 1);
    ::close(fds[0]);
    *pid = child;
    return std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::close(fds[0]);
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.set(zmq::sockopt::sndhwm, 0);
  s.set(zmq::sockopt::linger, 0);
  s.bind("tcp://127.0.0.1:*");
  const std::string ep = s.get(zmq::sockopt::last_endpoint);
  [[maybe_unused]] ssize_t w = ::write(fds[1], ep.data(), ep.size());
  ::close(fds[1]);
  for (;;) {
    std::vector<zmq::message_t> frames;
    zmq::message_t m;
    do {
      if (!s.recv(m)) break;
      frames.push_back(std::move(m));
      m = zmq::message_t();
    } while (frames.back().more());
    if (frames.size() < 2) continue;
    msgpack::object_handle oh = msgpack::unpack(static_cast<const char*>(frames.back().data()), frames.back().size());
    const msgpack::object& o = oh.get();
    std::string_view type;
    uint64_t id = 0;
    int max_tokens = 16;
    bool stream = true;
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      if (key_is(kv, "type")) type = str_of(kv.val);
      else if (key_is(kv, "id")) id = kv.val.as<uint64_t>();
      else if (key_is(kv, "max_tokens")) max_tokens = kv.val.as<int>();
      else if (key_is(kv, "stream")) stream = kv.val.as<bool>();
    }
    auto reply = [&](const msgpack::sbuffer& b) {
      s.send(zmq::buffer(frames[0].data(), frames[0].size()), zmq::send_flags::sndmore);
      s.send(zmq::buffer(b.data(), b.size()), zmq::send_flags::none);
    };
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> pk(b);
    if (type == "heartbeat") {
      pk.pack_map(5);
      pk.pack("v"), pk.pack(1), pk.pack("type"), pk.pack("heartbeat"), pk.pack("id"), pk.pack(id);
      pk.pack("role"), pk.pack("frontend"), pk.pack("model"), pk.pack("blast");
      reply(b);
      continue;
    }
    if (type != "completion") continue;
    for (int t = 0; stream && t < max_tokens; ++t) {
      b.clear();
      pk.pack_map(5);
      pk.pack("v"), pk.pack(1), pk.pack("type"), pk.pack("token"), pk.pack("id"), pk.pack(id);
      pk.pack("tokens"), pk.pack_array(1), pk.pack(t % 500);
      pk.pack("text"), pk.pack(" tok");
      reply(b);
    }
    b.clear();
    pk.pack_map(8);
    pk.pack("v"), pk.pack(1), pk.pack("type"), pk.pack("final"), pk.pack("id"), pk.pack(id);
    pk.pack("finish_reason"), pk.pack("length");
    pk.pack("text"), pk.pack(stream ? "" : " tok");
    pk.pack("tokens"), pk.pack_array(0);
    pk.pack("usage"), pk.pack_map(3), pk.pack("prompt_tokens"), pk.pack(2), pk.pack("completion_tokens"),
        pk.pack(max_tokens), pk.pack("cached_tokens"), pk.pack(0);
    pk.pack("timings"), pk.pack_map(4), pk.pack("queue_ms"), pk.pack(0.0), pk.pack("ttft_ms"), pk.pack(0.0),
        pk.pack("decode_ms"), pk.pack(0.0), pk.pack("total_ms"), pk.pack(0.0);
    reply(b);
  }
}

}  // namespace tessera::bench
