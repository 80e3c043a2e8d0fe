// The built-in ops page's data and event stream: see dashboard.h.
#include "dashboard.h"

#include <sys/socket.h>

#include <utility>  // boost/asio/awaitable.hpp uses std::exchange without including it

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "tessera/common/log.h"

namespace tessera::frontend {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr auto kSampleEvery = std::chrono::seconds(1);
constexpr auto kDisconnectCheck = std::chrono::milliseconds(200);

json ratio_or_null(int64_t num, int64_t den) { return den > 0 ? json(static_cast<double>(num) / static_cast<double>(den)) : json(); }

json pages_json(int64_t free, int64_t held, int64_t cached) { return {{"free", free}, {"held", held}, {"cached", cached}}; }

// True when the client closed its side (or reset): a peek reads EOF or a hard error.
bool peer_closed(beast::tcp_stream& stream) {
  char c;
  ssize_t n = ::recv(stream.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  return false;
}

// The write deadline of an events stream (beast closes the socket when it passes). These and
// log_if_timed_out are not inlined into the coroutine: GCC 12 then warns
// (-Wmismatched-new-delete, a false positive) about the coroutine frame's deallocation.
[[gnu::noinline]] void arm_write(beast::tcp_stream& stream, std::chrono::milliseconds timeout) { stream.expires_after(timeout); }
[[gnu::noinline]] void disarm_write(beast::tcp_stream& stream) { stream.expires_never(); }

[[gnu::noinline]] void log_if_timed_out(const boost::system::error_code& ec, const std::string& request_id,
                                        std::chrono::milliseconds write_timeout) {
  if (ec != beast::error::timeout) return;
  TS_LOG(kInfo) << "req=" << request_id << " | dashboard events client did not take a write within " << write_timeout.count()
                << " ms; stream closed";
}

}  // namespace

Dashboard::Dashboard(const Hub& hub, std::string model, const metrics::Gauge& inflight, metrics::Registry& registry,
                     std::chrono::milliseconds write_timeout)
    : write_timeout_(write_timeout),
      hub_(hub),
      model_(std::move(model)),
      inflight_(inflight),
      streams_gauge_(registry.gauge("tessera_frontend_dashboard_streams", "open GET /dashboard/events streams")) {
  sample();
}

void Dashboard::start(net::io_context& ioc) {
  net::co_spawn(
      ioc,
      [this, &ioc]() -> net::awaitable<void> {
        net::steady_timer timer(ioc);
        for (;;) {
          timer.expires_after(kSampleEvery);
          boost::system::error_code ec;
          co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
          if (ec) co_return;
          sample();
        }
      },
      net::detached);
}

void Dashboard::sample() {
  const auto now = Clock::now();
  const int64_t unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::vector<SchedulerStatus> status = hub_.schedulers();

  std::lock_guard<std::mutex> lock(mu_);
  json schedulers = json::array();
  int64_t running = 0, waiting = 0, free = 0, held = 0, cached = 0, workers = 0, alive = 0;
  protocol::SchedulerTotals sum;
  double d_tokens = 0, d_requests = 0, d_ttft_sum = 0, d_ttft_count = 0, elapsed = 0;
  for (const SchedulerStatus& s : status) {
    json ws = json::array();
    int64_t s_free = 0, s_held = 0, s_cached = 0;
    for (const protocol::WorkerStats& w : s.workers) {
      ws.push_back({{"name", w.name},
                    {"pages", pages_json(w.free_pages, w.held_pages, w.cached_pages)},
                    {"running", w.running},
                    {"waiting", w.waiting},
                    {"hit_rate", ratio_or_null(w.cached_prompt_tokens, w.prompt_tokens)}});
      s_free += w.free_pages;
      s_held += w.held_pages;
      s_cached += w.cached_pages;
    }
    json sj = {{"endpoint", s.endpoint}, {"name", s.name},       {"alive", s.alive},
               {"live_workers", s.live_workers}, {"running", s.running}, {"waiting", s.waiting},
               {"pages", pages_json(s_free, s_held, s_cached)},
               {"kv_usage", ratio_or_null(s_held, s_free + s_held + s_cached)},
               {"workers", std::move(ws)}};
    if (s.totals && s.alive) {
      const protocol::SchedulerTotals& t = *s.totals;
      sj["finished_requests"] = t.finished_requests;
      sj["generation_tokens"] = t.generation_tokens;
      sj["prompt_tokens"] = t.prompt_tokens;
      sj["cached_prompt_tokens"] = t.cached_prompt_tokens;
      sj["preemptions"] = t.preemptions;
      sj["hit_rate"] = ratio_or_null(t.cached_prompt_tokens, t.prompt_tokens);
      sj["ttft_ms_mean"] = t.ttft_count > 0 ? json(1000.0 * t.ttft_seconds_sum / static_cast<double>(t.ttft_count)) : json();
      sum.finished_requests += t.finished_requests;
      sum.generation_tokens += t.generation_tokens;
      sum.prompt_tokens += t.prompt_tokens;
      sum.cached_prompt_tokens += t.cached_prompt_tokens;
      if (auto it = prev_.find(s.endpoint); it != prev_.end()) {
        const protocol::SchedulerTotals& p = it->second.totals;
        elapsed = std::max(elapsed, std::chrono::duration<double>(now - it->second.at).count());
        // A restarted scheduler starts its totals again from 0: its first interval counts from 0.
        const bool restarted = t.finished_requests < p.finished_requests || t.generation_tokens < p.generation_tokens;
        d_tokens += static_cast<double>(t.generation_tokens - (restarted ? 0 : p.generation_tokens));
        d_requests += static_cast<double>(t.finished_requests - (restarted ? 0 : p.finished_requests));
        d_ttft_sum += t.ttft_seconds_sum - (restarted ? 0.0 : p.ttft_seconds_sum);
        d_ttft_count += static_cast<double>(t.ttft_count - (restarted ? 0 : p.ttft_count));
      }
      prev_[s.endpoint] = Previous{t, now};
    }
    if (s.alive) {
      ++alive;
      running += s.running;
      waiting += s.waiting;
      workers += s.live_workers;
      free += s_free;
      held += s_held;
      cached += s_cached;
    }
    schedulers.push_back(std::move(sj));
  }
  Point pt{.unix_ms = unix_ms, .running = running, .waiting = waiting};
  if (elapsed > 0) {
    pt.tokens_per_s = d_tokens / elapsed;
    pt.requests_per_s = d_requests / elapsed;
  }
  if (d_ttft_count > 0) pt.ttft_ms = 1000.0 * d_ttft_sum / d_ttft_count;
  pt.kv_usage = free + held + cached > 0 ? static_cast<double>(held) / static_cast<double>(free + held + cached) : 0.0;
  history_.push_back(pt);
  while (history_.size() > kHistory) history_.pop_front();

  json history = json::array();
  for (const Point& p : history_)
    history.push_back({{"t", p.unix_ms},
                       {"tokens_per_s", p.tokens_per_s},
                       {"requests_per_s", p.requests_per_s},
                       {"ttft_ms", p.ttft_ms < 0 ? json() : json(p.ttft_ms)},
                       {"running", p.running},
                       {"waiting", p.waiting},
                       {"kv_usage", p.kv_usage}});
  json totals = {{"schedulers", static_cast<int64_t>(status.size())},
                 {"alive_schedulers", alive},
                 {"workers", workers},
                 {"running", running},
                 {"waiting", waiting},
                 {"pages", pages_json(free, held, cached)},
                 {"kv_usage", pt.kv_usage},
                 {"finished_requests", sum.finished_requests},
                 {"generation_tokens", sum.generation_tokens},
                 {"prompt_tokens", sum.prompt_tokens},
                 {"cached_prompt_tokens", sum.cached_prompt_tokens},
                 {"hit_rate", ratio_or_null(sum.cached_prompt_tokens, sum.prompt_tokens)},
                 {"tokens_per_s", pt.tokens_per_s},
                 {"ttft_ms", pt.ttft_ms < 0 ? json() : json(pt.ttft_ms)}};
  snapshot_ = json{{"time_ms", unix_ms},
                   {"model", model_},
                   {"ready", hub_.ready()},
                   {"frontend", {{"inflight", static_cast<int64_t>(inflight_.value())}, {"dashboard_streams", streams_.load()}}},
                   {"totals", std::move(totals)},
                   {"schedulers", std::move(schedulers)},
                   {"history", std::move(history)}}
                  .dump();
}

std::string Dashboard::snapshot_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

bool Dashboard::stream_opened() {
  int n = streams_.load();
  do {
    if (n >= kMaxStreams) return false;
  } while (!streams_.compare_exchange_weak(n, n + 1));
  streams_gauge_.inc();
  return true;
}

void Dashboard::stream_closed() {
  streams_.fetch_sub(1);
  streams_gauge_.dec();
}

net::awaitable<bool> Dashboard::stream_events(beast::tcp_stream& stream, unsigned version, std::string request_id) {
  http::response<http::empty_body> res{http::status::ok, version};
  res.set(http::field::server, "tessera");
  res.set(http::field::content_type, "text/event-stream");
  res.set(http::field::cache_control, "no-cache");
  if (!request_id.empty()) res.set("x-request-id", request_id);
  res.keep_alive(false);
  res.chunked(true);
  http::response_serializer<http::empty_body> sr{res};
  boost::system::error_code ec;
  // Every write under write_timeout_: a client that stops reading (its socket buffers full) is
  // dropped when it passes (beast closes the socket), and its stream slot freed.
  arm_write(stream, write_timeout_);
  co_await http::async_write_header(stream, sr, net::redirect_error(net::use_awaitable, ec));
  disarm_write(stream);
  if (ec) co_return false;
  net::steady_timer timer(stream.get_executor());
  std::string first = "retry: 1000\n\n";
  auto next = Clock::now();
  for (;;) {
    if (Clock::now() >= next) {
      std::string event = first + "event: snapshot\ndata: " + snapshot_json() + "\n\n";
      first.clear();
      arm_write(stream, write_timeout_);
      co_await net::async_write(stream, http::make_chunk(net::buffer(event)), net::redirect_error(net::use_awaitable, ec));
      disarm_write(stream);
      if (ec) {
        log_if_timed_out(ec, request_id, write_timeout_);
        co_return false;
      }
      next += kSampleEvery;
    }
    timer.expires_after(kDisconnectCheck);
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (ec || peer_closed(stream)) co_return false;
  }
}

}  // namespace tessera::frontend
