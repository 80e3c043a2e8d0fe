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

#include "access_log.h"
#include "strand_queue.h"
#include "tessera/common/log.h"
#include "tessera/frontend/generation.h"
#include "tokenize.h"

namespace tessera::frontend {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using Request = http::request<http::string_body>;
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

struct HttpServer::Conn {
  const Deps& s;
  beast::tcp_stream& stream;
  unsigned version;
  bool keep_alive;
  std::string route;
  std::string request_id;  // x-request-id: the client's, else generated; echoed on every answer
  Principal principal{};   // who sent it (api_keys.h); the open principal without keys
  AccessRecord access{};   // filled as the request goes; written by log_access when it ends

  net::awaitable<bool> respond(int status, std::string_view content_type, std::string body) {
    http::response<http::string_body> res{static_cast<http::status>(status), version};
    res.set(http::field::server, "tessera");
    if (!request_id.empty()) res.set("x-request-id", request_id);
    if (status == 429) res.set(http::field::retry_after, "1");
    res.set(http::field::content_type, std::string(content_type));
    res.keep_alive(keep_alive);
    res.body() = std::move(body);
    res.prepare_payload();
    s.metrics.count_response(route, status);
    access.status = status;
    boost::system::error_code ec;
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    co_return !ec && keep_alive;
  }

  net::awaitable<bool> error(const Error& e, std::string_view param = "") {
    co_return co_await respond(http_status(e.code), "application/json", error_json(e, param));
  }

  net::awaitable<bool> refuse(const AuthFailure& f) {
    co_return co_await respond(f.http_status, "application/json",
                               error_json(make_error(ErrorCode::kPermissionDenied, f.message), "", f.code, f.http_status));
  }

  net::awaitable<bool> write_chunk(const std::string& data) {
    boost::system::error_code ec;
    co_await net::async_write(stream, http::make_chunk(net::buffer(data)), net::redirect_error(net::use_awaitable, ec));
    co_return !ec;
  }

  net::awaitable<bool> start_events() {
    http::response<http::empty_body> res{http::status::ok, version};
    res.set(http::field::server, "tessera");
    res.set(http::field::content_type, "text/event-stream");
    if (!request_id.empty()) res.set("x-request-id", request_id);
    res.set(http::field::cache_control, "no-cache");
    res.keep_alive(keep_alive);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    s.metrics.count_response(route, 200);
    access.status = 200;
    boost::system::error_code ec;
    co_await http::async_write_header(stream, sr, net::redirect_error(net::use_awaitable, ec));
    co_return !ec;
  }

  net::awaitable<bool> end_events(const std::string& last) {
    if (!co_await write_chunk(last + "data: [DONE]\n\n")) co_return false;
    boost::system::error_code ec;
    co_await net::async_write(stream, http::make_chunk_last(), net::redirect_error(net::use_awaitable, ec));
    co_return !ec && keep_alive;
  }

  net::awaitable<bool> generate(const Request& req, protocol::RequestKind kind);
  // Sets the access record's token fields and observes the request's histograms.
  void end_generation(const RequestClock& clock, std::string reason, int32_t prompt, int32_t cached, int32_t completion,
                      double queue_ms = -1) {
    access.finish_reason = reason;
    access.prompt_tokens = prompt;
    access.cached_tokens = cached;
    access.completion_tokens = completion;
    access.ttft_ms = clock.ttft_ms();
    s.metrics.done(clock, {.finish_reason = std::move(reason), .prompt_tokens = prompt, .completion_tokens = completion,
                           .queue_ms = queue_ms});
  }
  net::awaitable<bool> admin(const Request& req, const std::string& path);
  // Waits (on this strand, never blocking the thread) for the stored preference of r.user.
  net::awaitable<std::optional<StoredPreference>> stored_preference(const protocol::GenerateRequest& r, Clock::time_point deadline);
};

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
  // Admission first: a refused request costs no tokenization and no kvstore lookup.
  auto slot = s.admission.admit(s.hub.waiting());
  if (!slot.ok()) co_return co_await error(slot.error());
  const ServingLimits limits = s.preparer.limits(s.hub.schedulers());
  if (Status st = s.preparer.prepare(r, {.context_length = limits.context_length, .max_tokens_given = parsed->max_tokens_given,
                                         .seed_given = parsed->seed_given});
      !st.ok()) {
    const Error& e = st.error();
    // Over the context or the prompt limit: 400 context_length_exceeded, as OpenAI and vLLM answer.
    if (e.code == ErrorCode::kTooLarge)
      co_return co_await respond(400, "application/json",
                                 error_json(e, parsed->max_tokens_given && e.message.find("max_tokens") != std::string::npos ? "max_tokens"
                                                                                                                             : (kind == protocol::RequestKind::kChat ? "messages" : "prompt"),
                                            "context_length_exceeded"));
    co_return co_await error(e, e.code == ErrorCode::kNotFound ? "model" : "");
  }
  if (!s.hub.ready())
    co_return co_await error(make_error(ErrorCode::kUnavailable, "no scheduler with a live worker is ready; try again later"));
  if (s.preferences.wants_lookup(r))
    s.preferences.apply(r, co_await stored_preference(r, std::min(deadline, s.preferences.deadline_from(Clock::now()))));
  s.preparer.finish(r);
  r.id = s.hub.next_id();

  const uint64_t id = r.id;
  const bool streaming = r.stream;
  const int32_t prompt_tokens = static_cast<int32_t>(r.prompt_tokens.size());
  ResponseMeta meta{.kind = kind,
                    .id = (kind == protocol::RequestKind::kChat ? "chatcmpl-" : "cmpl-") + random_hex_id(),
                    .model = s.preparer.model_name(),
                    .created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
                    .logprobs = parsed->logprobs,
                    .stream_usage = parsed->include_usage ? StreamUsage::kSeparateChunk : StreamUsage::kNone};
  Generation gen(s.preparer.tokenizer(), r.stop, parsed->logprobs);
  auto channel = std::make_shared<Channel>(co_await net::this_coro::executor);
  s.hub.submit(std::move(r), channel);

  bool events_started = false, first_chunk = true, cancel_sent = false;
  for (;;) {
    const auto now = Clock::now();
    if (s.admission.drain_expired()) {  // drain timeout: end with an error, never a silent cut
      s.hub.abandon(id);
      slot.value().reset();
      end_generation(clock, "error", prompt_tokens, 0, gen.completion_tokens());
      Error e = make_error(ErrorCode::kUnavailable, "this frontend is shutting down: the request did not finish within "
                                                    "the drain timeout (" + std::to_string(s.config.drain_timeout_s) + " s)");
      if (!events_started) co_return co_await error(e);
      co_return co_await end_events("data: " + error_json(e) + "\n\n");
    }
    if (now >= deadline) {
      s.hub.abandon(id);
      slot.value().reset();  // free the slot before the answer: a client that got it may send again at once
      s.metrics.timeouts.inc();
      end_generation(clock, "error", prompt_tokens, 0, gen.completion_tokens());
      Error e = make_error(ErrorCode::kDeadlineExceeded,
                           "request did not finish within " + std::to_string(s.config.request_timeout_ms) + " ms");
      if (!events_started) co_return co_await error(e);
      co_return co_await end_events("data: " + error_json(e) + "\n\n");
    }
    std::optional<Message> msg = co_await channel->next(std::min(deadline, now + kDisconnectCheck));
    if (!msg) {
      if (peer_closed(stream)) {
        s.hub.abandon(id);
        s.metrics.disconnects.inc();
        end_generation(clock, "disconnect", prompt_tokens, 0, gen.completion_tokens());
        TS_LOG(kInfo) << "req=" << id << " | client went away; cancelled";
        co_return false;
      }
      continue;
    }
    if (auto* tok = std::get_if<protocol::TokenEvent>(&*msg)) {
      clock.on_token(s.metrics);
      Generation::Delta d = gen.on_tokens(*tok);
      if (gen.stop_hit() && !cancel_sent) {
        s.hub.cancel(id);  // the scheduler answers with a final event
        cancel_sent = true;
      }
      if (!streaming || (d.text.empty() && d.logprobs.empty())) continue;
      if (!events_started && !(events_started = co_await start_events())) {
        s.hub.abandon(id);
        s.metrics.disconnects.inc();
        end_generation(clock, "disconnect", prompt_tokens, 0, gen.completion_tokens());
        co_return false;
      }
      if (!co_await write_chunk(stream_chunk(meta, d.text, d.logprobs, first_chunk, "", nullptr))) {
        s.hub.abandon(id);
        s.metrics.disconnects.inc();
        end_generation(clock, "disconnect", prompt_tokens, 0, gen.completion_tokens());
        co_return false;
      }
      first_chunk = false;
      continue;
    }
    if (auto* fin = std::get_if<protocol::FinalEvent>(&*msg)) {
      slot.value().reset();
      std::string tail = gen.finish();
      s.metrics.stripped(gen.stripped_calls());
      protocol::FinalEvent f = *fin;
      std::string reason = gen.stop_hit() ? "stop" : f.finish_reason;
      if (gen.stop_hit()) f.usage.completion_tokens = gen.completion_tokens();
      if (f.usage.prompt_tokens == 0) f.usage.prompt_tokens = prompt_tokens;
      s.metrics.finished(f);
      end_generation(clock, reason, f.usage.prompt_tokens, f.usage.cached_tokens, f.usage.completion_tokens, f.timings.queue_ms);
      if (!streaming) co_return co_await respond(200, "application/json", response_json(meta, gen.text(), gen.logprobs(), f, reason));
      if (!events_started && !(events_started = co_await start_events())) co_return false;
      std::string last = stream_chunk(meta, tail, {}, first_chunk, reason, &f);
      if (meta.stream_usage == StreamUsage::kSeparateChunk) last += usage_chunk(meta, f);
      co_return co_await end_events(last);
    }
    if (auto* err = std::get_if<protocol::ErrorEvent>(&*msg)) {
      slot.value().reset();
      // The scheduler names the frontend's internal request number; the client never saw it.
      std::string message = err->message;
      if (const std::string own = "request " + std::to_string(id) + ": "; message.rfind(own, 0) == 0) message.erase(0, own.size());
      Error e = make_error(err->code, std::move(message));
      end_generation(clock, "error", prompt_tokens, 0, gen.completion_tokens());
      if (!events_started) co_return co_await error(e);
      co_return co_await end_events("data: " + error_json(e) + "\n\n");
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
  const bool get = req.method() == http::verb::get;
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
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(static_cast<uint64_t>(s.config.max_body_bytes));
    parser.header_limit(64 * 1024);
    stream.expires_after(kIdleTimeout);
    boost::system::error_code ec;
    co_await http::async_read(stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted)
      break;
    if (ec) {
      HttpServer::Conn c{s, stream, 11, false, "other"};
      stream.expires_after(std::chrono::seconds(5));
      const auto start = Clock::now();
      if (ec == http::error::body_limit)
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
    auto ex = socket.get_executor();
    net::co_spawn(ex, session(s, std::move(socket)), net::detached);
  }
}

}  // namespace

net::awaitable<bool> HttpServer::Conn::admin(const Request& req, const std::string& path) {
  std::string_view token;
  if (auto it = req.find(http::field::authorization); it != req.end()) {
    token = std::string_view(it->value().data(), it->value().size());
    if (token.substr(0, 7) == "Bearer ") token.remove_prefix(7);
  }
  route = "admin";
  const auto method = req.method_string();
  auto routed = s.admin.route(std::string_view(method.data(), method.size()), path, token, req.body());
  if (auto* answer = std::get_if<AdminReply>(&routed)) co_return co_await respond(answer->status, "application/json", std::move(answer->body));
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
