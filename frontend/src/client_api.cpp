#include "client_api.h"

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>

#include "tessera/common/log.h"
#include "tessera/frontend/generation.h"

namespace tessera::frontend {

using protocol::Message;

std::string ClientApi::key_of(const std::string& identity, uint64_t client_id) {
  return identity + '\0' + std::to_string(client_id);
}

class ClientApi::Sink : public RequestSink {
 public:
  Sink(ClientApi* api, zmqu::Envelope to, uint64_t client_id, const protocol::GenerateRequest& r, std::unique_ptr<Admission::Slot> slot)
      : api_(api), to_(std::move(to)), client_id_(client_id), id_(r.id), stream_(r.stream),
        gen_(api->d_.preparer.tokenizer(), r.stop, r.sampling.logprobs), slot_(std::move(slot)),
        prompt_tokens_(static_cast<int32_t>(r.prompt_tokens.size())), arrival_(std::chrono::steady_clock::now()) {}

  void on_message(Message m) override {
    if (gone_) return;
    FrontendMetrics& metrics = api_->d_.metrics;
    if (auto* tok = std::get_if<protocol::TokenEvent>(&m)) {
      if (first_) {
        metrics.ttft.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival_).count());
        first_ = false;
      }
      Generation::Delta d = gen_.on_tokens(*tok);
      if (gen_.stop_hit() && !cancel_sent_) {
        api_->d_.hub.cancel(id_);
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
      metrics.stripped(gen_.stripped_calls());
      protocol::FinalEvent out = *fin;
      out.id = client_id_;
      if (gen_.stop_hit()) {
        out.finish_reason = "stop";
        out.usage.completion_tokens = gen_.completion_tokens();
      }
      if (out.usage.prompt_tokens == 0) out.usage.prompt_tokens = prompt_tokens_;
      metrics.finished(out);
      if (stream_) {
        if (!tail.empty()) send(protocol::encode(protocol::TokenEvent{.id = client_id_, .text = tail}));
        out.text.clear();
        out.tokens.clear();
      } else {
        out.text = gen_.text();
        out.tokens = gen_.tokens();
      }
      send(protocol::encode(out));
      done();
      return;
    }
    if (auto* err = std::get_if<protocol::ErrorEvent>(&m)) {
      send(protocol::encode_error(client_id_, err->code, err->message));
      done();
    }
  }

 private:
  // A client that can no longer be reached has its request cancelled at the scheduler.
  void send(std::string body) {
    if (!api_->d_.hub.send_to_client(to_, std::move(body)) && !gone_) {
      gone_ = true;
      api_->d_.metrics.disconnects.inc();
      api_->d_.hub.abandon(id_);
      done();
    }
  }
  void done() {
    api_->forget(key_of(to_.identity, client_id_));
    slot_.reset();
  }

  ClientApi* api_;
  zmqu::Envelope to_;
  uint64_t client_id_;
  uint64_t id_;
  bool stream_;
  Generation gen_;
  std::unique_ptr<Admission::Slot> slot_;
  int32_t prompt_tokens_;
  std::chrono::steady_clock::time_point arrival_;
  bool first_ = true;
  bool cancel_sent_ = false;
  bool gone_ = false;
};

void ClientApi::on_message(zmqu::Envelope env) {
  Hub& hub = d_.hub;
  auto msg = protocol::decode(env.body);
  if (!msg.ok()) {
    TS_LOG(kInfo) << "client api: rejected message: " << msg.error().to_string();
    d_.metrics.registry.counter("tessera_frontend_bad_messages_total", "messages that failed to decode, by source", {{"source", "zmq_client"}})
        .inc();
    hub.send_to_client(env, protocol::encode_error(protocol::peek_id(env.body), msg.error().code, msg.error().message));
    return;
  }
  if (auto* req = std::get_if<protocol::GenerateRequest>(&*msg)) {
    // Tokenization and the rest run on the I/O pool, never on the hub thread.
    boost::asio::post(d_.ioc, [this, env = std::move(env), r = std::move(*req)]() mutable { start(std::move(env), std::move(r)); });
    return;
  }
  if (auto* cancel = std::get_if<protocol::CancelRequest>(&*msg)) {
    uint64_t internal = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(key_of(env.identity, cancel->id));
      if (it != pending_.end()) {
        if (it->second.submitted) internal = it->second.id;
        else it->second.cancelled = true;
      }
    }
    if (internal != 0) hub.cancel(internal);
    return;
  }
  if (auto* hb = std::get_if<protocol::Heartbeat>(&*msg)) {
    int32_t live = 0;
    for (const auto& st : hub.schedulers())
      if (st.alive) live += st.live_workers;
    hub.send_to_client(env, protocol::encode(protocol::Heartbeat{.id = hb->id, .role = "frontend", .name = d_.preparer.model_name(),
                                                                 .live_workers = hub.ready() ? live : 0,
                                                                 .running = d_.admission.in_flight(), .waiting = hub.waiting()}));
    return;
  }
  hub.send_to_client(env, protocol::encode_error(protocol::message_id(*msg), ErrorCode::kInvalidArgument,
                                                 "message type '" + std::string(protocol::message_type(*msg)) +
                                                     "' is not accepted by the client API"));
}

void ClientApi::start(zmqu::Envelope env, protocol::GenerateRequest r) {
  const uint64_t client_id = r.id;
  auto fail = [&](const Error& e) { d_.hub.send_to_client(env, protocol::encode_error(client_id, e.code, e.message)); };
  auto slot = d_.admission.admit(d_.hub.waiting());  // before any expensive work
  if (!slot.ok()) return fail(slot.error());
  if (Status st = d_.preparer.prepare(r); !st.ok()) return fail(st.error());
  if (!d_.hub.ready()) return fail(make_error(ErrorCode::kUnavailable, "no scheduler with a live worker is ready; try again later"));
  r.id = d_.hub.next_id();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, added] = pending_.try_emplace(key_of(env.identity, client_id), Pending{.id = r.id});
    if (!added) return fail(make_error(ErrorCode::kInvalidArgument, "request id " + std::to_string(client_id) + " is already running"));
  }
  if (!d_.preferences.wants_lookup(r)) return submit(std::move(env), client_id, std::move(r), std::move(*slot));

  // The lookup runs on the kvstore executor; the request continues on the I/O pool when it
  // completes or at its deadline, whichever comes first (once). The deadline timer and the
  // continuation share one strand, so the timer is never touched by two threads at once.
  struct Continuation {
    explicit Continuation(boost::asio::io_context& ioc) : strand(boost::asio::make_strand(ioc)), timer(strand) {}
    std::atomic<bool> fired{false};
    boost::asio::any_io_executor strand;
    boost::asio::steady_timer timer;
    zmqu::Envelope env;
    uint64_t client_id = 0;
    protocol::GenerateRequest request;
    std::unique_ptr<Admission::Slot> slot;
  };
  const auto deadline = d_.preferences.deadline_from(std::chrono::steady_clock::now());
  auto c = std::make_shared<Continuation>(d_.ioc);
  c->env = std::move(env);
  c->client_id = client_id;
  c->request = std::move(r);
  c->slot = std::move(*slot);
  auto resume = [this, c](std::optional<StoredPreference> stored) {
    c->timer.cancel();
    d_.preferences.apply(c->request, stored);
    submit(std::move(c->env), c->client_id, std::move(c->request), std::move(c->slot));
  };
  c->timer.expires_at(deadline);
  c->timer.async_wait([c, resume](const boost::system::error_code&) {
    if (!c->fired.exchange(true)) resume(std::nullopt);
  });
  std::string user = c->request.user;
  d_.preferences.lookup(std::move(user), deadline, [c, resume](std::optional<StoredPreference> stored) {
    if (c->fired.exchange(true)) return;
    boost::asio::post(c->strand, [resume, stored = std::move(stored)] { resume(stored); });
  });
}

void ClientApi::submit(zmqu::Envelope env, uint64_t client_id, protocol::GenerateRequest r, std::unique_ptr<Admission::Slot> slot) {
  d_.preparer.finish(r);
  const uint64_t id = r.id;
  bool cancelled = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(key_of(env.identity, client_id));
    if (it != pending_.end()) {
      it->second.submitted = true;
      cancelled = it->second.cancelled;
    }
  }
  auto sink = std::make_shared<Sink>(this, std::move(env), client_id, r, std::move(slot));
  d_.hub.submit(std::move(r), std::move(sink));
  if (cancelled) d_.hub.cancel(id);  // after the submit in the hub's queue: reaches the scheduler after it
}

void ClientApi::forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(key);
}

}  // namespace tessera::frontend
