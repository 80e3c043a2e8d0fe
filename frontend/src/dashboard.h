// Private: the built-in ops page (docs/operations.md, "Dashboard"). GET /dashboard serves one
// self-contained HTML page (inline CSS and JS, hand-drawn SVG charts, no external asset);
// GET /dashboard/snapshot answers the current JSON snapshot; GET /dashboard/events streams it
// as server-sent events, one `snapshot` event per second.
//
// Every figure comes from the schedulers' heartbeats over the existing links (per worker pages
// and requests; the scheduler's cumulative `totals`: finished requests, prompt/cached/generated
// tokens, TTFT sum and count), plus the frontend's own in-flight gauge. Once a second sample()
// turns the totals' increments into a point of history (tokens/s, requests/s, mean TTFT over the
// second, running, waiting, K/V usage); the last kHistory points travel in every snapshot, so a
// page opened late still draws its charts.
//
// An events stream is not a request: it holds no admission slot (so the page never competes
// with generation), at most kMaxStreams are open at once (503 beyond), and it ends when the
// client goes away (checked every 200 ms), stops reading (the write timeout) or the frontend stops.
//
// Ownership: references the Hub and the in-flight gauge (both outlive it). Threading: sample()
// runs on an I/O thread (a timer started by start()); snapshot_json() and the streams run on any
// I/O thread; the snapshot and history are guarded by one mutex.
#pragma once

#include <atomic>
#include <utility>  // boost/asio/awaitable.hpp uses std::exchange without including it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "tessera/common/metrics.h"
#include "tessera/frontend/hub.h"

namespace tessera::frontend {

class Dashboard {
 public:
  static constexpr size_t kHistory = 120;  // points (seconds) of history in a snapshot
  static constexpr int kMaxStreams = 32;   // concurrent /dashboard/events streams

  // write_timeout: --http-write-timeout-ms, the longest an events client may leave a write untaken.
  Dashboard(const Hub& hub, std::string model, const metrics::Gauge& inflight, metrics::Registry& registry,
            std::chrono::milliseconds write_timeout);

  // Samples once now and then every second on `ioc` until it stops.
  void start(boost::asio::io_context& ioc);
  // Takes one sample (normally called by the timer).
  void sample();
  // The last sample as JSON (docs/operations.md lists the fields).
  std::string snapshot_json() const;

  // Serves GET /dashboard/events on `stream` (HTTP `version`, request id to echo) until the
  // client goes away, a write is not taken within the write timeout (a client that stops reading
  // loses its stream and its slot) or the stream fails; returns false
  // (the connection is not reused).
  boost::asio::awaitable<bool> stream_events(boost::beast::tcp_stream& stream, unsigned version, std::string request_id);
  // True when another stream may open (and counts it); release with stream_closed().
  bool stream_opened();
  void stream_closed();

 private:
  struct Point {
    int64_t unix_ms = 0;
    double tokens_per_s = 0, requests_per_s = 0, ttft_ms = -1;  // ttft_ms -1: no first token in the interval
    int64_t running = 0, waiting = 0;
    double kv_usage = 0;
  };
  struct Previous {
    protocol::SchedulerTotals totals;
    std::chrono::steady_clock::time_point at;
  };

  const std::chrono::milliseconds write_timeout_;
  const Hub& hub_;
  const std::string model_;
  const metrics::Gauge& inflight_;
  metrics::Gauge& streams_gauge_;
  std::atomic<int> streams_{0};
  mutable std::mutex mu_;
  std::deque<Point> history_;              // GUARDED_BY(mu_)
  std::map<std::string, Previous> prev_;   // GUARDED_BY(mu_): by scheduler endpoint
  std::string snapshot_;                   // GUARDED_BY(mu_)
};

// The page itself (dashboard_page.cpp).
std::string_view dashboard_html();

}  // namespace tessera::frontend
