// The HTTP server: see http_server.h.
#include "http_server.h"

#include <sys/socket.h>

#include <utility>  // boost/asio/awaitable.hpp uses std::exchange without including it

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>

#include "http_conn.h"
#include "access_log.h"
#include "choice_set.h"
#include "prefix_admin.h"
#include "read_deadline.h"
#include "strand_queue.h"
#include "tessera/common/log.h"
#include "tessera/frontend/generation.h"
#include "tokenize.h"

namespace tessera::frontend {
namespace {

using protocol::Message;

constexpr auto kIdleTimeout = std::chrono::seconds(60);
constexpr auto kDisconnectCheck = std::chrono::milliseconds(200);

// Events of one request, handed from the hub thread to the connection's coroutine (on its strand).
class Channel : public RequestSink {
 public:
  explicit Channel(net::any_io_executor strand) : queue_(std::make_shared<StrandQueue<Message>>(strand)) {}
  void on_message(Message m) override { queue_->push(std::move(m)); }
  // The next message, or nullopt when `until` passes first.
  net::awaitable<std::optional<Message>> next(Clock::time_point until) { return queue_->next(until); }

 private:
  std::shared_ptr<StrandQueue<Message>> queue_;
};

// True when the client closed its side (or reset): a peek reads EOF or a hard error.
bool peer_closed(beast::tcp_stream& stream) {
  char c;
  ssize_t n = ::recv(stream.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  return false;
}

}  // namespace


net::awaitable<std::optional<StoredPreference>> HttpServer::Conn::stored_preference(const protocol::GenerateRequest& r,
                                                                                     Clock::time_point deadline) {
  auto box = std::make_shared<StrandQueue<std::optional<StoredPreference>>>(co_await net::this_coro::executor);
  s.preferences.lookup(r.user, deadline, [box](std::optional<StoredPreference> stored) { box->push(std::move(stored)); });
  // nullopt from next(): the deadline passed first; the request runs without (the lookup's
  // late result, if any, lands in `box` and is dropped with it).
  std::optional<std::optional<StoredPreference>> got = co_await box->next(deadline);
  co_return got ? std::move(*got) : std::nullopt;
}

net::awaitable<bool> HttpServer::Conn::generate(const Request& req, protocol::RequestKind kind) {
  const Admission::Activity active(s.admission);  // until the last byte of the answer (drain)
  RequestClock clock;
  const auto deadline = clock.arrival() + std::chrono::milliseconds(s.config.request_timeout_ms);
  std::string bad_param;
  auto parsed = parse_request(req.body(), kind, ParseOptions{.default_max_tokens = s.config.default_max_tokens}, &bad_param);
  if (!parsed.ok()) co_return co_await error(parsed.error(), bad_param);
  protocol::GenerateRequest& r = parsed->request;
  access.generation = true;
  access.user = r.user;
  // The user only as far as the key allows (403 names the user, never its stored preference).
  if (auto denied = ApiKeys::authorize(principal, r)) co_return co_await refuse(*denied);
  // Admission first: a refused request costs no tokenization and no kvstore lookup. One slot per
  // HTTP request, whatever its number of sequences (docs/api.md "Several choices").
  auto slot = s.admission.admit(s.hub.waiting());
  if (!slot.ok()) co_return co_await error(slot.error());
  const ServingLimits limits = s.preparer.limits(s.hub.schedulers());
  // One prepared request per prompt (a completions prompt list runs one per prompt).
  std::vector<protocol::GenerateRequest> prompts;
  std::vector<std::string> echo;
  const size_t num_prompts = kind == protocol::RequestKind::kChat ? 1 : parsed->prompts.size();
  for (size_t k = 0; k < num_prompts; ++k) {
    protocol::GenerateRequest one = r;
    if (kind == protocol::RequestKind::kCompletion) {
      one.prompt = parsed->prompts[k].text;
      one.prompt_tokens = parsed->prompts[k].tokens;
    }
    if (Status st = s.preparer.prepare(one, {.context_length = limits.context_length, .max_tokens_given = parsed->max_tokens_given,
                                             .seed_given = parsed->seed_given,
                                             .tools = kind == protocol::RequestKind::kChat ? &parsed->tools.chat : nullptr,
                                             .kv_policy_given = parsed->kv_policy_given, .grammar_checked = k > 0});
        !st.ok()) {
      const Error& e = st.error();
      const std::string prompt_param = kind == protocol::RequestKind::kChat ? "messages" : "prompt";
      // Named strings, not temporaries inside a co_await expression (GCC mishandles those).
      // Over the context or the prompt limit: 400 context_length_exceeded, as OpenAI and vLLM answer.
      if (e.code == ErrorCode::kTooLarge) {
        const std::string body = error_json(
            e, parsed->max_tokens_given && e.message.find("max_tokens") != std::string::npos ? std::string("max_tokens") : prompt_param,
            "context_length_exceeded");
        co_return co_await respond(400, "application/json", body);
      }
      const std::string param = e.code == ErrorCode::kNotFound                             ? std::string("model")
                                : e.message.rfind("kv_policy", 0) == 0                ? std::string("kv_policy")
                                : e.code == ErrorCode::kOutOfRange || num_prompts > 1 ? prompt_param
                                                                                       : std::string();
      co_return co_await error(e, param);
    }
    if (parsed->echo)
      echo.push_back(parsed->prompts[k].tokens.empty() ? parsed->prompts[k].text : s.preparer.tokenizer().decode(parsed->prompts[k].tokens));
    prompts.push_back(std::move(one));
  }
  if (!s.hub.ready())
    co_return co_await error(make_error(ErrorCode::kUnavailable, "no scheduler with a live worker is ready; try again later"));
  if (s.preferences.wants_lookup(prompts.front())) {
    const auto stored = co_await stored_preference(prompts.front(), std::min(deadline, s.preferences.deadline_from(Clock::now())));
    for (auto& one : prompts) s.preferences.apply(one, stored);
  }
  for (auto& one : prompts) s.preparer.finish(one);

  const bool streaming = r.stream;
  ResponseMeta meta{.kind = kind,
                    .id = (kind == protocol::RequestKind::kChat ? "chatcmpl-" : "cmpl-") + random_hex_id(),
                    .model = s.preparer.model_name(),
                    .created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
                    .logprobs = parsed->logprobs,
                    .stream_usage = parsed->include_usage ? StreamUsage::kSeparateChunk : StreamUsage::kNone};
  const ChoiceSetOptions choice_options{.n = parsed->n, .best_of = parsed->best_of, .streaming = streaming,
                                          .logprobs = parsed->logprobs, .page_size = limits.page_size,
                                          .tools = parsed->tools.active(), .tools_forced = parsed->tools.forced(),
                                          .tool_format = s.preparer.chat_template().tool_format,
                                          .check_arguments = required_tool_parameters(parsed->tools)};
  // Kept to run the whole request again when a worker (or scheduler) dies before anything
  // reached the client (docs/api.md "Failures"): at most kMaxResubmits times, within the deadline.
  constexpr int kMaxResubmits = 2;
  int resubmits = 0;
  const std::vector<protocol::GenerateRequest> original_prompts = prompts;
  const std::vector<std::string> original_echo = echo;
  std::optional<ChoiceSet> choices;
  choices.emplace(s.preparer.tokenizer(), meta, choice_options, std::move(prompts), std::move(echo),
                  [this] { return s.hub.next_id(); });
  access.sequences = choices->sequences();
  auto channel = std::make_shared<Channel>(co_await net::this_coro::executor);  // the sink of every sequence
  for (auto& one : choices->start()) s.hub.submit(std::move(one), channel);
  // A write the client does not take ends at the request's deadline at the latest (a client that
  // stops reading cannot hold its slot and its K/V pages past it).
  write_cap = deadline;
  auto abandon_all = [&] {
    for (uint64_t id : choices->live_ids()) s.hub.abandon(id);
  };
  // Sequences that finished, counted in the metrics when the request ends: a resubmission runs
  // every sequence again, and those that had finished before it must not count twice.
  std::vector<std::pair<protocol::FinalEvent, FactCallCounts>> finished_seqs;
  auto report_finished = [&] {
    for (const auto& [final_event, stripped] : finished_seqs) {
      s.metrics.stripped(stripped);
      s.metrics.finished(final_event);  // its prompt (cached part included) and completion tokens
    }
    finished_seqs.clear();
  };
  auto ended = [&](std::string reason) {
    report_finished();
    end_generation(clock, std::move(reason), choices->prompt_tokens(), 0, choices->completion_tokens());
  };
  // A chunk could not be written: the client went away, or did not read within the write
  // timeout. Either way every sequence is cancelled (pages freed) and the slot released on return.
  auto write_failed = [&] {
    abandon_all();
    if (write_timed_out) {
      s.metrics.timeouts.inc();
      ended("error");
      TS_LOG(kWarn) << "req=" << request_id << " | client did not take a write within " << s.config.http_write_timeout_ms
                    << " ms (or the request timeout); connection closed, request cancelled";
    } else {
      s.metrics.disconnects.inc();
      ended("disconnect");
    }
  };

  bool events_started = false;
  // The client's socket is peeked for a close at least every kDisconnectCheck, messages or not:
  // a non-streamed request (or held-back tool text) writes nothing while its tokens keep coming,
  // and a client that went away must still cancel its sequences (docs/api.md "Streaming", last paragraph).
  auto last_check = Clock::now();
  for (;;) {
    const auto now = Clock::now();
    if (s.admission.drain_expired()) {  // drain timeout: end with an error, never a silent cut
      abandon_all();
      slot.value().reset();
      ended("error");
      write_cap = Clock::time_point::max();
      Error e = make_error(ErrorCode::kUnavailable, "this frontend is shutting down: the request did not finish within "
                                                    "the drain timeout (" + std::to_string(s.config.drain_timeout_s) + " s)");
      if (!events_started) co_return co_await error(e);
      co_return co_await end_events("data: " + error_json(e) + "\n\n");
    }
    if (now >= deadline) {
      abandon_all();
      slot.value().reset();  // free the slot before the answer: a client that got it may send again at once
      s.metrics.timeouts.inc();
      ended("error");
      Error e = make_error(ErrorCode::kDeadlineExceeded,
                           "request did not finish within " + std::to_string(s.config.request_timeout_ms) + " ms");
      write_cap = Clock::time_point::max();  // the 504 itself gets the write timeout
      if (!events_started) co_return co_await error(e);
      co_return co_await end_events("data: " + error_json(e) + "\n\n");
    }
    std::optional<Message> msg = co_await channel->next(std::min(deadline, last_check + kDisconnectCheck));
    if (!msg || Clock::now() - last_check >= kDisconnectCheck) {
      last_check = Clock::now();
      if (peer_closed(stream)) {
        abandon_all();
        s.metrics.disconnects.inc();
        ended("disconnect");
        TS_LOG(kInfo) << "req=" << request_id << " | client went away; cancelled";
        co_return false;
      }
      if (!msg) continue;
    }
    if (const auto* tok = std::get_if<protocol::TokenEvent>(&*msg); tok != nullptr && !tok->tokens.empty()) clock.on_token(s.metrics);
    ChoiceSet& set = *choices;
    ChoiceSet::Output out = set.on_message(*msg);
    for (uint64_t id : out.cancel) s.hub.cancel(id);
    for (auto& one : out.submit) s.hub.submit(std::move(one), channel);
    if (out.finished) finished_seqs.emplace_back(*out.finished, out.stripped);
    if (out.error && out.error->code == ErrorCode::kPeerDead && !events_started && resubmits < kMaxResubmits &&
        s.hub.ready() && Clock::now() < deadline) {
      // Nothing reached the client yet (a non-streamed request, or a stream before its first
      // chunk): run every sequence again from the start, on whichever worker the scheduler picks.
      abandon_all();
      finished_seqs.clear();  // they run again: counted when the rerun finishes
      ++resubmits;
      s.metrics.requeued.inc();
      choices.emplace(s.preparer.tokenizer(), meta, choice_options, original_prompts, original_echo,
                      [this] { return s.hub.next_id(); });
      const net::any_io_executor strand = co_await net::this_coro::executor;
      channel = std::make_shared<Channel>(strand);
      TS_LOG(kInfo) << "req=" << request_id << " | its worker died before the client saw anything: submitted again ("
                    << resubmits << " of " << kMaxResubmits << ")";
      for (auto& one : choices->start()) s.hub.submit(std::move(one), channel);
      continue;
    }
    if (out.error) {
      abandon_all();
      slot.value().reset();
      write_cap = Clock::time_point::max();
      ended("error");
      if (!events_started) co_return co_await error(*out.error);
      co_return co_await end_events("data: " + error_json(*out.error) + "\n\n");
    }
    if (!out.sse.empty() || (streaming && set.done())) {
      bool started = events_started;
      if (!started) started = events_started = co_await start_events();
      if (!started) {
        write_failed();
        co_return false;
      }
    }
    if (set.done()) {
      slot.value().reset();
      write_cap = Clock::time_point::max();  // finished: the last writes get the write timeout
      const protocol::FinalEvent total = set.total();
      // The metrics' finish_reason label: the first choice's; the access line lists them all.
      const std::string reasons = set.finish_reasons();
      report_finished();
      end_generation(clock, reasons.substr(0, reasons.find(',')), total.usage.prompt_tokens, total.usage.cached_tokens,
                     total.usage.completion_tokens, total.timings.queue_ms);
      access.finish_reason = reasons;
      if (!streaming) co_return co_await respond(200, "application/json", set.response_body());
      std::string last = out.sse;
      if (meta.stream_usage == StreamUsage::kSeparateChunk) last += usage_chunk(meta, total);
      co_return co_await end_events(last);
    }
    if (!out.sse.empty()) {
      const bool written = co_await write_chunk(out.sse);
      if (!written) {
        write_failed();
        co_return false;
      }
    }
  }
}

namespace {

// Readiness: a scheduler with a live worker, and not draining. "instance" is --instance-id.
std::string ready_json(const HttpServer::Deps& s, bool* ready) {
  nlohmann::json sched = nlohmann::json::array();
  for (const auto& st : s.hub.schedulers())
    sched.push_back({{"endpoint", st.endpoint}, {"alive", st.alive}, {"live_workers", st.live_workers}, {"running", st.running},
                     {"waiting", st.waiting}});
  const bool draining = s.admission.draining();
  *ready = s.hub.ready() && !draining;
  return nlohmann::json{{"ready", *ready}, {"draining", draining}, {"instance", s.config.instance_id}, {"schedulers", sched}}
      .dump();
}

std::string health_json(const HttpServer::Deps& s) {
  return nlohmann::json{{"status", "ok"}, {"instance", s.config.instance_id}}.dump();
}

std::string peer_address(beast::tcp_stream& stream) {
  boost::system::error_code ec;
  auto ep = stream.socket().remote_endpoint(ec);
  if (ec) return "";
  return (ep.address().is_v6() ? "[" + ep.address().to_string() + "]" : ep.address().to_string()) + ":" + std::to_string(ep.port());
}

net::awaitable<bool> route_request(HttpServer::Conn& c, const Request& req);

// One request: routed, then written to the access log (access_log.h) however it ended.
net::awaitable<bool> handle(const HttpServer::Deps& s, beast::tcp_stream& stream, const Request& req) {
  const auto start = Clock::now();
  const std::string target(req.target());
  const std::string path = target.substr(0, target.find('?'));
  HttpServer::Conn c{s, stream, req.version(), req.keep_alive(), path, ""};
  if (auto it = req.find("x-request-id"); it != req.end() && !it->value().empty() && it->value().size() <= 256)
    c.request_id = std::string(it->value());
  else
    c.request_id = random_hex_id();
  c.access.client = peer_address(stream);
  c.access.method = std::string(req.method_string());
  c.access.route = path;
  if (s.admission.draining()) c.keep_alive = false;  // the client's next request goes elsewhere
  const bool keep = co_await route_request(c, req);
  c.access.request_id = c.request_id;
  log_access(c.access, std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  co_return keep;
}

net::awaitable<bool> route_request(HttpServer::Conn& c, const Request& req) {
  const HttpServer::Deps& s = c.s;
  const std::string& path = c.access.route;
  // HEAD is answered like GET, without the body (respond() sends the header only).
  c.head = req.method() == http::verb::head;
  const bool get = req.method() == http::verb::get || c.head;
  const bool post = req.method() == http::verb::post;
  // The OpenAI surface needs a key when keys are configured; /health, /ready, /metrics never do
  // (and /admin/v1 has its own token).
  if (path.starts_with("/v1/") || path == "/tokenize" || path == "/detokenize") {
    std::optional<std::string_view> authorization;
    if (auto it = req.find(http::field::authorization); it != req.end())
      authorization = std::string_view(it->value().data(), it->value().size());
    auto who = s.api_keys.authenticate_header(authorization);
    if (auto* failure = std::get_if<AuthFailure>(&who)) co_return co_await c.refuse(*failure);
    c.principal = std::move(std::get<Principal>(who));
  }
  if (path == "/v1/completions" && post) co_return co_await c.generate(req, protocol::RequestKind::kCompletion);
  if (path == "/v1/chat/completions" && post) co_return co_await c.generate(req, protocol::RequestKind::kChat);
  if (path == "/health" && get)  // liveness: 200 while the process serves, draining or not
    co_return co_await c.respond(200, "application/json", health_json(s));
  if (path == "/ready" && get) {
    bool ready = false;
    std::string body = ready_json(s, &ready);
    co_return co_await c.respond(ready ? 200 : 503, "application/json", body);
  }
  if (path == "/metrics" && get) {
    s.metrics.ready.set(s.hub.ready() ? 1 : 0);
    co_return co_await c.respond(200, "text/plain; version=0.0.4; charset=utf-8", s.metrics.registry.render());
  }
  if (path.rfind("/admin/", 0) == 0) co_return co_await c.admin(req, path);
  if (path.starts_with("/dashboard") && get) co_return co_await c.dashboard(path);
  const ServingLimits limits = s.preparer.limits(s.hub.schedulers());
  if (path == "/v1/models" && get)
    co_return co_await c.respond(200, "application/json", models_json(s.preparer.model_name(), s.created_unix, limits.context_length));
  if (path == "/v1/models/" + s.preparer.model_name() && get)
    co_return co_await c.respond(200, "application/json", model_json(s.preparer.model_name(), s.created_unix, limits.context_length));
  if (path.rfind("/v1/models/", 0) == 0 && get)
    co_return co_await c.error(make_error(ErrorCode::kNotFound, "model '" + path.substr(11) + "' does not exist"), "model");
  if ((path == "/tokenize" || path == "/detokenize") && post) {
    std::string param;
    auto body = path == "/tokenize" ? tokenize_json(req.body(), s.preparer, limits, &param) : detokenize_json(req.body(), s.preparer, &param);
    if (!body.ok()) co_return co_await c.error(body.error(), param);
    co_return co_await c.respond(200, "application/json", *body);
  }
  c.route = "other";
  for (const char* known : {"/v1/completions", "/v1/chat/completions", "/health", "/ready", "/metrics", "/v1/models", "/tokenize", "/detokenize"})
    if (path == known)
      co_return co_await c.respond(405, "application/json",
                                   error_json(make_error(ErrorCode::kInvalidArgument,
                                                         "method " + std::string(req.method_string()) + " is not allowed on " + path)));
  co_return co_await c.error(make_error(ErrorCode::kNotFound, "unknown route " + std::string(req.method_string()) + " " + path));
}

net::awaitable<void> session(const HttpServer::Deps& s, tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  const auto header_timeout = std::chrono::milliseconds(s.config.http_header_timeout_ms);
  const auto body_timeout = std::chrono::milliseconds(s.config.http_body_timeout_ms);
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(static_cast<uint64_t>(s.config.max_body_bytes));
    parser.header_limit(64 * 1024);
    boost::system::error_code ec;
    // Between requests the connection may idle (keep-alive) up to kIdleTimeout: closed then
    // without an answer. From the request's first byte on, the header has header_timeout and
    // then the body body_timeout (408 when either passes).
    if (buffer.size() == 0) {
      stream.expires_after(kIdleTimeout);
      const size_t n = co_await stream.async_read_some(buffer.prepare(4096), net::redirect_error(net::use_awaitable, ec));
      stream.expires_never();
      if (ec) break;
      buffer.commit(n);
    }
    // (Plain statements: GCC 12 mishandles temporaries in complex co_await expressions.)
    const net::any_io_executor strand = co_await net::this_coro::executor;
    bool in_header = true;
    {
      ReadDeadline header_deadline(strand, stream.socket(), header_timeout);
      co_await http::async_read_header(stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
      if (header_deadline.fired()) ec = beast::error::timeout;
    }
    if (!ec && !parser.is_done()) {
      in_header = false;
      ReadDeadline body_deadline(strand, stream.socket(), body_timeout);
      co_await http::async_read(stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
      if (body_deadline.fired()) ec = beast::error::timeout;
    }
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::operation_aborted)
      break;
    if (ec) {
      HttpServer::Conn c{s, stream, 11, false, "other"};
      const auto start = Clock::now();
      if (ec == beast::error::timeout) {
        std::string what = "request header not complete within " + std::to_string(s.config.http_header_timeout_ms) +
                           " ms of its first byte (--http-header-timeout-ms)";
        if (!in_header)
          what = "request body not complete within " + std::to_string(s.config.http_body_timeout_ms) +
                 " ms of its header (--http-body-timeout-ms)";
        std::string body = error_json(make_error(ErrorCode::kDeadlineExceeded, std::move(what)), "", "request_timeout", 408);
        co_await c.respond(408, "application/json", std::move(body));
      } else if (ec == http::error::body_limit)
        co_await c.error(make_error(ErrorCode::kTooLarge, "request body exceeds " + std::to_string(s.config.max_body_bytes) + " bytes"));
      else
        co_await c.error(make_error(ErrorCode::kMalformedMessage, "malformed HTTP request: " + ec.message()));
      c.access.client = peer_address(stream);
      c.access.method = parser.get().method_string().empty() ? "-" : std::string(parser.get().method_string());
      c.access.route = std::string(parser.get().target().substr(0, parser.get().target().find('?')));
      log_access(c.access, std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      // Close gracefully: stop sending, then discard what the client still sends (bounded), so
      // the close does not turn into a reset that could destroy the answer in flight.
      boost::system::error_code ignored;
      stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
      stream.expires_after(std::chrono::seconds(2));
      std::vector<char> sink(64 * 1024);
      for (size_t drained = 0; drained < (64u << 20);) {
        size_t n = co_await stream.async_read_some(net::buffer(sink), net::redirect_error(net::use_awaitable, ignored));
        if (ignored) break;
        drained += n;
      }
      co_return;
    }
    stream.expires_never();
    Request req = parser.release();
    if (!co_await handle(s, stream, req)) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

net::awaitable<void> accept_loop(const HttpServer::Deps& s, tcp::acceptor& acceptor) {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(net::make_strand(s.ioc), net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
      TS_LOG(kWarn) << "accept: " << ec.message();
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    // Bounded: what a client that stops reading can make this process hold in the kernel.
    socket.set_option(net::socket_base::send_buffer_size(s.config.http_send_buffer_bytes), ec);
    auto ex = socket.get_executor();
    net::co_spawn(ex, session(s, std::move(socket)), net::detached);
  }
}

}  // namespace

net::awaitable<bool> HttpServer::Conn::admin(const Request& req, const std::string& path) {
  std::string_view token;
  if (auto it = req.find(http::field::authorization); it != req.end()) {
    token = std::string_view(it->value().data(), it->value().size());
    route = "admin";
    // Only the Bearer scheme: a bare token (or "Basic ...") is refused, naming the problem.
    if (token.substr(0, 7) != "Bearer ")
      co_return co_await respond(401, "application/json",
                                 error_json(make_error(ErrorCode::kPermissionDenied,
                                                       "the Authorization header must be 'Bearer <token>'"),
                                            "", "invalid_authorization", 401));
    token.remove_prefix(7);
  }
  route = "admin";
  const auto method = req.method_string();
  const std::string_view target(req.target().data(), req.target().size());
  const size_t q = target.find('?');
  auto routed = s.admin.route(std::string_view(method.data(), method.size()), path, token, req.body(),
                              q == std::string_view::npos ? std::string_view() : target.substr(q + 1));
  if (auto* answer = std::get_if<AdminReply>(&routed)) co_return co_await respond(answer->status, "application/json", std::move(answer->body));
  if (auto* call = std::get_if<PrefixCall>(&routed)) {  // answered through the hub (prefix_admin.h)
    auto box = std::make_shared<StrandQueue<AdminReply>>(co_await net::this_coro::executor);
    run_prefix_call(*call, s.preparer, s.hub, [box](AdminReply r) { box->push(std::move(r)); });
    std::optional<AdminReply> a = co_await box->next(Clock::now() + std::chrono::milliseconds(s.config.request_timeout_ms));
    if (!a) a = AdminReply{504, error_json(make_error(ErrorCode::kDeadlineExceeded, "the schedulers did not answer within the request timeout"))};
    co_return co_await respond(a->status, "application/json", std::move(a->body));
  }
  // The kvstore round trips run on the kvstore executor; this coroutine waits on its strand.
  auto box = std::make_shared<StrandQueue<AdminReply>>(co_await net::this_coro::executor);
  s.preferences.post([box, call = std::get<AdminApi::Call>(std::move(routed)), admin = &s.admin](kvstore::Client& kv) {
    box->push(admin->run(call, kv));
  });
  std::optional<AdminReply> a;
  while (!(a = co_await box->next(Clock::now() + std::chrono::hours(1)))) {
  }
  co_return co_await respond(a->status, "application/json", std::move(a->body));
}

HttpServer::HttpServer(Deps deps, std::unique_ptr<tcp::acceptor> acceptor) : d_(deps), acceptor_(std::move(acceptor)) {}

Result<std::unique_ptr<HttpServer>> HttpServer::create(Deps deps) {
  const FrontendConfig& config = deps.config;
  boost::system::error_code ec;
  auto addr = net::ip::make_address(config.host, ec);
  if (ec) return make_error(ErrorCode::kInvalidArgument, "--host '" + config.host + "' is not an IP address");
  auto acceptor = std::make_unique<tcp::acceptor>(deps.ioc);
  tcp::endpoint ep(addr, static_cast<uint16_t>(config.http_port));
  acceptor->open(ep.protocol(), ec);
  if (!ec) acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(ep, ec);
  if (!ec) acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return make_error(ErrorCode::kUnavailable, "cannot listen on " + config.host + ":" + std::to_string(config.http_port) + ": " + ec.message());
  return std::unique_ptr<HttpServer>(new HttpServer(deps, std::move(acceptor)));
}

int HttpServer::port() const { return acceptor_->local_endpoint().port(); }

void HttpServer::start() { net::co_spawn(d_.ioc, accept_loop(d_, *acceptor_), net::detached); }

}  // namespace tessera::frontend
