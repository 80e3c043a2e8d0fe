// The frontend's dashboard routes (http_conn.h, dashboard.h): GET /dashboard (the page),
// /dashboard/snapshot (JSON) and /dashboard/events (a server-sent event stream, at most
// Dashboard::kMaxStreams at once); no key and no admission slot.
#include "http_conn.h"

namespace tessera::frontend {

net::awaitable<bool> HttpServer::Conn::dashboard(const std::string& path) {
  route = path;
  if (path == "/dashboard" || path == "/dashboard/") co_return co_await respond(200, "text/html; charset=utf-8", std::string(dashboard_html()));
  if (path == "/dashboard/snapshot") co_return co_await respond(200, "application/json", s.dashboard.snapshot_json());
  if (path != "/dashboard/events") {
    route = "other";
    co_return co_await error(make_error(ErrorCode::kNotFound, "unknown route GET " + path));
  }
  if (!s.dashboard.stream_opened())
    co_return co_await respond(503, "application/json",
                               error_json(make_error(ErrorCode::kUnavailable, "too many dashboard streams are open (at most " +
                                                                                  std::to_string(Dashboard::kMaxStreams) + ")")));
  struct Release {  // also when the coroutine is destroyed at shutdown
    Dashboard& d;
    ~Release() { d.stream_closed(); }
  } release{s.dashboard};
  s.metrics.count_response(route, 200);
  access.status = 200;
  co_return co_await s.dashboard.stream_events(stream, version, request_id);
}

}  // namespace tessera::frontend
