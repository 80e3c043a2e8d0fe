// The ZeroMQ client API: the same requests as HTTP, as protocol v1 msgpack messages on a
// ROUTER socket (docs/protocol.md, "Client API"). Messages arrive on the hub thread; requests
// are prepared (tokenized) on the HTTP thread pool, and their events are converted back to
// client ids and text on the hub thread.
#include <boost/asio/post.hpp>
#include <chrono>

#include "frontend_impl.h"
#include "tessera/common/log.h"
#include "tessera/frontend/generation.h"

namespace tessera::frontend {
namespace {

using protocol::Message;

std::string api_key(const std::string& identity, uint64_t client_id) {
  return identity + '\0' + std::to_string(client_id);
}

class ApiSink : public RequestSink {
 public:
  ApiSink(Frontend::Impl* s, zmqu::Envelope to, uint64_t client_id, uint64_t id, bool stream, bool logprobs,
          std::vector<std::string> stop, std::unique_ptr<InflightSlot> slot, int32_t prompt_tokens)
      : s_(s), to_(std::move(to)), client_id_(client_id), id_(id), stream_(stream),
        gen_(*s->tokenizer, std::move(stop), logprobs), slot_(std::move(slot)), prompt_tokens_(prompt_tokens),
        arrival_(std::chrono::steady_clock::now()) {}

  void on_message(Message m) override {
    if (gone_) return;
    if (auto* tok = std::get_if<protocol::TokenEvent>(&m)) {
      if (first_) {
        s_->metrics->ttft.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival_).count());
        first_ = false;
      }
      Generation::Delta d = gen_.on_tokens(*tok);
      if (gen_.stop_hit() && !cancel_sent_) {
        s_->hub->cancel(id_);
        cancel_sent_ = true;
      }
      if (stream_ && !d.tokens.empty()) {
        protocol::TokenEvent out{.id = client_id_, .tokens = d.tokens, .text = d.text};
        const size_t n = d.tokens.size();
        if (!tok->logprobs.empty()) out.logprobs.assign(tok->logprobs.begin(), tok->logprobs.begin() + std::min(n, tok->logprobs.size()));
        if (!tok->top_logprobs.empty())
          out.top_logprobs.assign(tok->top_logprobs.begin(), tok->top_logprobs.begin() + std::min(n, tok->top_logprobs.size()));
        send(protocol::encode(out));
      }
      return;
    }
    if (auto* fin = std::get_if<protocol::FinalEvent>(&m)) {
      std::string tail = gen_.finish();
      s_->metrics->stripped(gen_.stripped_calls());
      protocol::FinalEvent out = *fin;
      out.id = client_id_;
      if (gen_.stop_hit()) {
        out.finish_reason = "stop";
        out.usage.completion_tokens = gen_.completion_tokens();
      }
      if (out.usage.prompt_tokens == 0) out.usage.prompt_tokens = prompt_tokens_;
      s_->metrics->finished(out);
      if (stream_) {
        if (!tail.empty()) send(protocol::encode(protocol::TokenEvent{.id = client_id_, .text = tail}));
        out.text.clear();
        out.tokens.clear();
      } else {
        out.text = gen_.text();
        out.tokens = gen_.tokens();
      }
      send(protocol::encode(out));
      forget();
      return;
    }
    if (auto* err = std::get_if<protocol::ErrorEvent>(&m)) {
      send(protocol::encode_error(client_id_, err->code, err->message));
      forget();
    }
  }

 private:
  // A client that can no longer be reached has its request cancelled at the scheduler.
  void send(std::string body) {
    if (!s_->hub->send_to_client(to_, std::move(body)) && !gone_) {
      gone_ = true;
      s_->metrics->disconnects.inc();
      s_->hub->abandon(id_);
      forget();
    }
  }
  void forget() {
    std::lock_guard<std::mutex> lock(s_->api_mu);
    s_->api_ids.erase(api_key(to_.identity, client_id_));
  }

  Frontend::Impl* s_;
  zmqu::Envelope to_;
  uint64_t client_id_;
  uint64_t id_;
  bool stream_;
  Generation gen_;
  std::unique_ptr<InflightSlot> slot_;
  int32_t prompt_tokens_;
  std::chrono::steady_clock::time_point arrival_;
  bool first_ = true;
  bool cancel_sent_ = false;
  bool gone_ = false;
};

}  // namespace

void Frontend::Impl::on_client_message(zmqu::Envelope env) {
  auto msg = protocol::decode(env.body);
  if (!msg.ok()) {
    TS_LOG(kInfo) << "client api: rejected message: " << msg.error().to_string();
    registry.counter("tessera_frontend_bad_messages_total", "messages that failed to decode, by source", {{"source", "zmq_client"}}).inc();
    hub->send_to_client(env, protocol::encode_error(protocol::peek_id(env.body), msg.error().code, msg.error().message));
    return;
  }
  if (auto* req = std::get_if<protocol::GenerateRequest>(&*msg)) {
    boost::asio::post(ioc, [this, env = std::move(env), r = std::move(*req)]() mutable {
      const uint64_t client_id = r.id;
      auto fail = [&](const Error& e) { hub->send_to_client(env, protocol::encode_error(client_id, e.code, e.message)); };
      if (Status st = prepare(r); !st.ok()) return fail(st.error());
      auto slot = admit();
      if (!slot.ok()) return fail(slot.error());
      const std::string key = api_key(env.identity, client_id);
      {
        std::lock_guard<std::mutex> lock(api_mu);
        if (api_ids.count(key))
          return fail(make_error(ErrorCode::kInvalidArgument, "request id " + std::to_string(client_id) + " is already running"));
        api_ids[key] = r.id;
      }
      auto sink = std::make_shared<ApiSink>(this, env, client_id, r.id, r.stream, r.sampling.logprobs, r.stop,
                                            std::move(*slot), static_cast<int32_t>(r.prompt_tokens.size()));
      hub->submit(std::move(r), std::move(sink));
    });
    return;
  }
  if (auto* cancel = std::get_if<protocol::CancelRequest>(&*msg)) {
    uint64_t internal = 0;
    {
      std::lock_guard<std::mutex> lock(api_mu);
      auto it = api_ids.find(api_key(env.identity, cancel->id));
      if (it != api_ids.end()) internal = it->second;
    }
    if (internal != 0) hub->cancel(internal);
    return;
  }
  if (auto* hb = std::get_if<protocol::Heartbeat>(&*msg)) {
    int32_t live = 0;
    for (const auto& st : hub->schedulers())
      if (st.alive) live += st.live_workers;
    hub->send_to_client(env, protocol::encode(protocol::Heartbeat{.id = hb->id, .role = "frontend", .name = model_name,
                                                                  .live_workers = hub->ready() ? live : 0,
                                                                  .running = inflight.load(), .waiting = hub->waiting()}));
    return;
  }
  hub->send_to_client(env, protocol::encode_error(protocol::message_id(*msg), ErrorCode::kInvalidArgument,
                                                  "message type '" + std::string(protocol::message_type(*msg)) +
                                                      "' is not accepted by the client API"));
}

}  // namespace tessera::frontend
