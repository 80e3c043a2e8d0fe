#include "client_api.h"

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <cctype>
#include <chrono>
#include <optional>

#include "access_log.h"
#include "tessera/common/log.h"
#include "tessera/common/log_limit.h"
#include "tessera/frontend/generation.h"

namespace tessera::frontend {

using protocol::Message;

namespace {

// The scheduler names requests by the frontend's internal id ("request 1360: ..."); the client
// knows only its own id.
std::string with_client_id(std::string message, uint64_t internal, uint64_t client) {
  const std::string from = "request " + std::to_string(internal), to = "request " + std::to_string(client);
  for (size_t at = message.find(from); at != std::string::npos; at = message.find(from, at + to.size())) {
    const size_t end = at + from.size();
    if (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) continue;  // "request 13600"
    message.replace(at, from.size(), to);
  }
  return message;
}

}  // namespace

std::string ClientApi::key_of(const std::string& identity, uint64_t client_id) {
  return identity + '\0' + std::to_string(client_id);
}

struct ClientApi::Job {
  zmqu::Envelope env;
  uint64_t client_id = 0;
  uint64_t seq = 0;
  bool max_tokens_given = false;
  bool kv_policy_given = false;
  bool seed_given = false;
  protocol::GenerateRequest request;
  std::unique_ptr<Admission::Slot> slot;
  // The stored-preference lookup: the request continues once, at its answer or its deadline.
  // The timer and the continuation share one strand: the timer is never touched by two threads.
  std::atomic<bool> resumed{false};
  std::optional<boost::asio::strand<boost::asio::io_context::executor_type>> strand;
  std::optional<boost::asio::steady_timer> timer;
};

class ClientApi::Sink : public RequestSink {
 public:
  Sink(ClientApi* api, zmqu::Envelope to, uint64_t client_id, const protocol::GenerateRequest& r, std::unique_ptr<Admission::Slot> slot)
      : api_(api), to_(std::move(to)), client_id_(client_id), id_(r.id), stream_(r.stream), logprobs_(r.sampling.logprobs),
        top_logprobs_(r.sampling.top_logprobs > 0), gen_(api->d_.preparer.tokenizer(), r.stop, false), slot_(std::move(slot)),
        prompt_tokens_(static_cast<int32_t>(r.prompt_tokens.size())), original_(r) {
    access_.request_id = std::to_string(client_id);
    access_.client = "zmq";
    access_.method = "zmq";
    access_.route = "generate";
    access_.generation = true;
    access_.user = r.user;
  }


  void on_message(Message m) override {
    if (gone_) return;
    FrontendMetrics& metrics = api_->d_.metrics;
    if (auto* tok = std::get_if<protocol::TokenEvent>(&m)) {
      // Prompt log-probabilities (prompt_logprobs >= 0): an event of their own before the
      // first token when streaming, else in the final.
      if (!tok->prompt_logprobs.empty()) {
        if (stream_) {
          protocol::TokenEvent p{.id = client_id_};
          p.prompt_logprobs = tok->prompt_logprobs;
          p.prompt_top_logprobs = tok->prompt_top_logprobs;
          send(protocol::encode(p));
        } else {
          prompt_logprobs_ = tok->prompt_logprobs;
          prompt_top_ = tok->prompt_top_logprobs;
        }
      }
      if (tok->tokens.empty()) return;
      clock_.on_token(metrics);
      Generation::Delta d = gen_.on_tokens(*tok);
      if (gen_.stop_hit() && !cancel_sent_) {
        api_->d_.hub.cancel(id_);
        cancel_sent_ = true;
      }
      // Log-probabilities only when asked: never a placeholder.
      std::vector<float> lps;
      std::vector<std::vector<TokenLogprob>> tops;
      const size_t n = d.tokens.size();
      if (logprobs_) lps.assign(tok->logprobs.begin(), tok->logprobs.begin() + static_cast<std::ptrdiff_t>(std::min(n, tok->logprobs.size())));
      if (top_logprobs_)
        tops.assign(tok->top_logprobs.begin(), tok->top_logprobs.begin() + static_cast<std::ptrdiff_t>(std::min(n, tok->top_logprobs.size())));
      if (stream_ && n > 0) {
        send(protocol::encode(protocol::TokenEvent{.id = client_id_, .tokens = d.tokens, .text = d.text, .logprobs = std::move(lps),
                                                   .top_logprobs = std::move(tops)}));
      } else {
        all_logprobs_.insert(all_logprobs_.end(), lps.begin(), lps.end());
        all_top_.insert(all_top_.end(), tops.begin(), tops.end());
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
      end(out.finish_reason, out.usage.prompt_tokens, out.usage.cached_tokens, out.usage.completion_tokens, out.timings.queue_ms);
      if (stream_) {
        if (!tail.empty()) send(protocol::encode(protocol::TokenEvent{.id = client_id_, .text = tail}));
        out.text.clear();
        out.tokens.clear();
      } else {
        out.text = gen_.text();
        out.tokens = gen_.tokens();
        out.logprobs = std::move(all_logprobs_);
        out.top_logprobs = std::move(all_top_);
        out.prompt_logprobs = std::move(prompt_logprobs_);
        out.prompt_top_logprobs = std::move(prompt_top_);
      }
      send(protocol::encode(out));
      done();
      return;
    }
    if (auto* err = std::get_if<protocol::ErrorEvent>(&m)) {
      if (err->code == ErrorCode::kPeerDead && resubmit()) return;
      end("error", prompt_tokens_, 0, gen_.completion_tokens());
      send(protocol::encode_error(client_id_, err->code, with_client_id(err->message, id_, client_id_)));
      done();
    }
  }

  // The request again, from the start, under a new internal id (client_api.h "Resubmission");
  // true when it was, and this sink is then done without a word to the client.
  bool resubmit() {
    Hub& hub = api_->d_.hub;
    const auto deadline = clock_.arrival() + std::chrono::milliseconds(api_->d_.request_timeout_ms);
    if (sent_ || resubmits_ >= kMaxResubmits || !hub.ready() || std::chrono::steady_clock::now() >= deadline) return false;
    protocol::GenerateRequest again = original_;
    again.id = hub.next_id();
    gone_ = true;  // this sink takes nothing more
    if (!api_->rebind(key_of(to_.identity, client_id_), again.id)) {
      end("cancelled", prompt_tokens_, 0, 0);
      protocol::FinalEvent f{.id = client_id_, .finish_reason = "cancelled"};
      f.usage.prompt_tokens = prompt_tokens_;
      (void)hub.send_to_client(to_, protocol::encode(f));
      done();
      return true;
    }
    api_->d_.metrics.requeued.inc();
    TS_LOG(kInfo) << "client=" << client_id_ << " req=" << id_ << " | its scheduler or worker is gone (or draining) and "
                  << "the client saw nothing: submitted again as req=" << again.id << " (" << resubmits_ + 1 << " of "
                  << kMaxResubmits << ")";
    auto next = std::make_shared<Sink>(api_, to_, client_id_, again, std::move(slot_));
    next->resubmits_ = resubmits_ + 1;
    next->clock_ = clock_;
    done_ = true;  // the entry and the slot now belong to `next`
    hub.submit(std::move(again), std::move(next));
    return true;
  }

 private:
  // A client that can no longer be reached has its request cancelled at the scheduler.
  void send(std::string body) {
    sent_ = true;
    if (!api_->d_.hub.send_to_client(to_, std::move(body)) && !gone_) {
      gone_ = true;
      api_->d_.metrics.disconnects.inc();
      end("disconnect", prompt_tokens_, 0, gen_.completion_tokens());
      api_->d_.hub.abandon(id_);
      done();
    }
  }
  // The request's histograms and access line, once (a final event may be followed by a failed send).
  void end(std::string reason, int32_t prompt, int32_t cached, int32_t completion, double queue_ms = -1) {
    if (ended_) return;
    ended_ = true;
    access_.status = reason == "error" ? 500 : 200;
    access_.finish_reason = reason;
    access_.prompt_tokens = prompt;
    access_.cached_tokens = cached;
    access_.completion_tokens = completion;
    access_.ttft_ms = clock_.ttft_ms();
    api_->d_.metrics.done(clock_, {.finish_reason = std::move(reason), .prompt_tokens = prompt, .completion_tokens = completion,
                                   .queue_ms = queue_ms});
    log_access(access_, clock_.elapsed_ms());
  }
  void done() {
    if (done_) return;
    done_ = true;
    api_->forget(key_of(to_.identity, client_id_));
    slot_.reset();
  }

  ClientApi* api_;
  zmqu::Envelope to_;
  uint64_t client_id_;
  uint64_t id_;
  bool stream_;
  bool logprobs_;
  bool top_logprobs_;
  Generation gen_;
  std::unique_ptr<Admission::Slot> slot_;
  int32_t prompt_tokens_;
  protocol::GenerateRequest original_;  // as submitted, for resubmit()
  int resubmits_ = 0;                   // times this request was submitted again before this sink
  bool sent_ = false;                   // something of it reached (was sent to) the client
  RequestClock clock_;
  AccessRecord access_;
  std::vector<float> all_logprobs_;                           // stream == false
  std::vector<float> prompt_logprobs_;                        // stream == false, prompt_logprobs asked
  std::vector<std::vector<TokenLogprob>> prompt_top_;
  std::vector<std::vector<TokenLogprob>> all_top_;  // stream == false
  bool cancel_sent_ = false;
  bool gone_ = false;
  bool done_ = false;
  bool ended_ = false;
};

void ClientApi::on_message(zmqu::Envelope env) {
  auto msg = protocol::decode(env.body);
  if (!msg.ok()) {
    {
      static log::RateLimit limit;  // a peer can send these at will
      TS_LOG_LIMITED(kInfo, limit) << "client api: rejected message: " << msg.error().to_string();
    }
    d_.metrics.registry.counter("tessera_frontend_bad_messages_total", "messages that failed to decode, by source", {{"source", "zmq_client"}})
        .inc();
    d_.hub.send_to_client(env, protocol::encode_error(protocol::peek_id(env.body), msg.error().code, msg.error().message));
    return;
  }
  if (auto* req = std::get_if<protocol::GenerateRequest>(&*msg)) return on_request(std::move(env), std::move(*req));
  if (auto* cancel = std::get_if<protocol::CancelRequest>(&*msg)) return on_cancel(env, cancel->id);
  if (auto* hb = std::get_if<protocol::Heartbeat>(&*msg)) return on_heartbeat(env, hb->id);
  d_.hub.send_to_client(env, protocol::encode_error(protocol::message_id(*msg), ErrorCode::kInvalidArgument,
                                                    "message type '" + std::string(protocol::message_type(*msg)) +
                                                        "' is not accepted by the client API"));
}

// Hub thread, in arrival order: the id is claimed here, so a later duplicate is the one refused
// and a cancel right behind its request finds it.
void ClientApi::on_request(zmqu::Envelope env, protocol::GenerateRequest r) {
  const uint64_t client_id = r.id;
  auto refuse = [&](ErrorCode code, std::string why) { d_.hub.send_to_client(env, protocol::encode_error(client_id, code, std::move(why))); };
  if (client_id == 0) return refuse(ErrorCode::kInvalidArgument, "id 0 is reserved (it names unreadable messages); use an id >= 1");
  if (env.delimiter && r.stream)
    return refuse(ErrorCode::kInvalidArgument,
                  "stream must be false on a REQ socket (it takes one reply per request); send \"stream\": false or use a DEALER");
  // OpenAI's several-choice fields are HTTP only (docs/protocol.md): refused by name, never ignored.
  for (const char* key : {"n", "best_of", "echo", "suffix"})
    if (protocol::peek_has_key(env.body, key))
      return refuse(ErrorCode::kUnsupported, std::string(key) +
                                                 " is not a field of the ZeroMQ API (HTTP only; a request here is one sequence): send one "
                                                 "request per sample, each with its own id and seed (requests with the same prompt share "
                                                 "its cached pages); for the prompt's log-probabilities send prompt_logprobs");
  // Fields the frontend computes itself (docs/protocol.md): a client's own would skip its checks
  // and defaults (documents, --kv-policy; preference_tokens without the preference they come from),
  // so they are refused by name, never forwarded.
  if (!r.blend_chunks.empty())
    return refuse(ErrorCode::kInvalidArgument,
                  "blend_chunks is set by the frontend, not by clients: send the documents themselves in \"documents\"");
  if (!r.preference_tokens.empty())
    return refuse(ErrorCode::kInvalidArgument,
                  "preference_tokens is filled by the frontend, not by clients: send the text in \"preference\" (with a user)");
  auto job = std::make_shared<Job>();
  job->client_id = client_id;
  job->max_tokens_given = protocol::peek_has_key(env.body, "max_tokens");
  job->kv_policy_given = protocol::peek_has_key(env.body, "kv_policy");
  job->seed_given = protocol::peek_has_key(env.body, "seed");
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, added] = pending_.try_emplace(key_of(env.identity, client_id));
    if (!added)
      return refuse(ErrorCode::kInvalidArgument,
                    "duplicate id " + std::to_string(client_id) +
                        ": this later request is refused; the earlier request with that id is still in flight and "
                        "keeps running");
    job->seq = connections_[env.identity].next_seq++;
  }
  job->env = std::move(env);
  job->request = std::move(r);
  // Tokenization and the rest run on the I/O pool, never on the hub thread.
  boost::asio::post(d_.ioc, [this, job] { start(job); });
}

void ClientApi::on_cancel(const zmqu::Envelope& env, uint64_t client_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(key_of(env.identity, client_id));
  if (it == pending_.end()) return;  // unknown or finished: ignored (docs/protocol.md)
  if (it->second.id != 0) d_.hub.cancel(it->second.id);  // posted after its submit, under mu_
  it->second.cancelled = true;  // release answers it without a scheduler; a resubmission does not happen
}

void ClientApi::on_heartbeat(const zmqu::Envelope& env, uint64_t id) {
  Hub& hub = d_.hub;
  const auto schedulers = hub.schedulers();
  int32_t live = 0;
  for (const auto& st : schedulers)
    if (st.alive) live += st.live_workers;
  const ServingLimits l = d_.preparer.limits(schedulers);
  hub.send_to_client(env, protocol::encode(protocol::Heartbeat{
                              .id = id, .role = "frontend", .name = l.model, .live_workers = hub.ready() ? live : 0,
                              .running = d_.admission.in_flight(), .waiting = hub.waiting(), .model = l.model,
                              .protocol_version = l.protocol_version, .context_length = l.context_length, .page_size = l.page_size,
                              .max_prompt_tokens = l.max_prompt_tokens, .vocab_size = l.vocab_size,
                              .default_max_tokens = l.default_max_tokens}));
}

void ClientApi::start(std::shared_ptr<Job> job) {
  // Identity first (docs/protocol.md "Authentication"): the api_key field, then the user as far
  // as that key allows. Either refusal is an error event with code permission_denied whose
  // message starts with "invalid_api_key:" or "user_not_allowed:".
  auto who = d_.api_keys.authenticate(job->request.api_key);
  const AuthFailure* failure = std::get_if<AuthFailure>(&who);
  std::optional<AuthFailure> denied;
  if (!failure) denied = ApiKeys::authorize(std::get<Principal>(who), job->request);
  if (denied) failure = &*denied;
  if (failure) return fail(job, make_error(ErrorCode::kPermissionDenied, failure->code + ": " + failure->message));
  auto slot = d_.admission.admit(d_.hub.waiting());  // before any expensive work
  if (!slot.ok()) return fail(job, slot.error());
  job->slot = std::move(*slot);
  protocol::GenerateRequest& r = job->request;
  const ServingLimits limits = d_.preparer.limits(d_.hub.schedulers());
  if (Status st = d_.preparer.prepare(r, {.context_length = limits.context_length, .max_tokens_given = job->max_tokens_given,
                                                  .seed_given = job->seed_given, .kv_policy_given = job->kv_policy_given}); !st.ok())
    return fail(job, st.error());
  if (!d_.hub.ready()) return fail(job, make_error(ErrorCode::kUnavailable, "no scheduler with a live worker is ready; try again later"));
  if (!d_.preferences.wants_lookup(r)) return prepared(std::move(job));

  // The lookup runs on the kvstore executor; the request continues on the I/O pool at its
  // answer or its deadline, whichever comes first (once: `resumed`).
  const auto deadline = d_.preferences.deadline_from(std::chrono::steady_clock::now());
  job->strand.emplace(boost::asio::make_strand(d_.ioc));
  job->timer.emplace(*job->strand, deadline);
  job->timer->async_wait([this, job](const boost::system::error_code&) {
    if (!job->resumed.exchange(true)) prepared(job);
  });
  d_.preferences.lookup(r.user, deadline, [this, job](std::optional<StoredPreference> stored) {
    if (job->resumed.exchange(true)) return;
    boost::asio::post(*job->strand, [this, job, stored = std::move(stored)] {
      job->timer->cancel();
      d_.preferences.apply(job->request, stored);
      prepared(job);
    });
  });
}

void ClientApi::prepared(std::shared_ptr<Job> job) {
  d_.preparer.finish(job->request);
  const std::string identity = job->env.identity;
  const uint64_t seq = job->seq;
  release_in_order(identity, seq, [this, job] { submit_locked(job); });
}

void ClientApi::fail(const std::shared_ptr<Job>& job, Error e) {
  const std::string identity = job->env.identity;
  release_in_order(identity, job->seq, [this, job, e = std::move(e)] {
    pending_.erase(key_of(job->env.identity, job->client_id));
    d_.hub.send_to_client(job->env, protocol::encode_error(job->client_id, e.code, e.message));
  });
}

void ClientApi::release_in_order(const std::string& identity, uint64_t seq, std::function<void()> outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  auto c = connections_.find(identity);
  TS_CHECK(c != connections_.end());
  Connection& conn = c->second;
  conn.ready.emplace(seq, std::move(outcome));
  for (auto it = conn.ready.find(conn.next_release); it != conn.ready.end(); it = conn.ready.find(conn.next_release)) {
    it->second();
    conn.ready.erase(it);
    ++conn.next_release;
  }
  if (conn.next_release == conn.next_seq) connections_.erase(c);  // nothing of it in flight here
}

void ClientApi::submit_locked(const std::shared_ptr<Job>& job) {
  const std::string key = key_of(job->env.identity, job->client_id);
  auto it = pending_.find(key);
  TS_CHECK(it != pending_.end());
  protocol::GenerateRequest& r = job->request;
  if (it->second.cancelled) {
    pending_.erase(it);
    protocol::FinalEvent f{.id = job->client_id, .finish_reason = "cancelled"};
    f.usage.prompt_tokens = static_cast<int32_t>(r.prompt_tokens.size());
    d_.metrics.finished(f);
    d_.metrics.done(RequestClock{}, {.finish_reason = "cancelled", .prompt_tokens = f.usage.prompt_tokens});
    d_.hub.send_to_client(job->env, protocol::encode(f));
    return;
  }
  r.id = d_.hub.next_id();
  it->second.id = r.id;
  auto sink = std::make_shared<Sink>(this, job->env, job->client_id, r, std::move(job->slot));
  d_.hub.submit(std::move(r), std::move(sink));
}

bool ClientApi::rebind(const std::string& key, uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(key);
  if (it == pending_.end() || it->second.cancelled) return false;
  it->second.id = id;
  return true;
}

void ClientApi::forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(key);
}

}  // namespace tessera::frontend
