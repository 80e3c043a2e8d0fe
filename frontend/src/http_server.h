// Private: the HTTP/1.1 server (Boost.Beast): routes, one C++20 coroutine per connection on a
// strand, keep-alive, bounded bodies, server-sent events for stream: true.
//
// A generation request goes: parse (openai.h) -> admission (429, before any expensive work) ->
// preparation (tokenization, limits) -> readiness (503) -> stored-preference lookup (only with a
// user; the coroutine waits for it on its strand with the lookup's deadline, never blocking the
// I/O thread) -> hub. Admin routes run their kvstore calls on the kvstore executor too.
//
// Ownership: owns the bound acceptor; everything else is referenced (Frontend owns it and keeps
// it alive until the I/O threads are joined). Threading: create() and start() on the owner's
// thread before the I/O threads run; connections then run on any I/O thread, each on its
// strand.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <memory>

#include "admin.h"
#include "dashboard.h"
#include "frontend_metrics.h"
#include "tessera/frontend/api_keys.h"
#include "tessera/frontend/admission.h"
#include "tessera/frontend/frontend.h"
#include "tessera/frontend/hub.h"
#include "tessera/frontend/request_preparer.h"
#include "tessera/frontend/stored_preferences.h"

namespace tessera::frontend {

class HttpServer {
 public:
  struct Deps {
    const FrontendConfig& config;
    boost::asio::io_context& ioc;
    Hub& hub;
    const RequestPreparer& preparer;
    Admission& admission;
    StoredPreferences& preferences;
    AdminApi& admin;
    FrontendMetrics& metrics;
    const ApiKeys& api_keys;
    Dashboard& dashboard;
    int64_t created_unix = 0;  // for /v1/models
  };

  // Binds and listens on config.host:config.http_port (kInvalidArgument, kUnavailable).
  static Result<std::unique_ptr<HttpServer>> create(Deps deps);
  int port() const;  // as bound
  // Starts accepting (the connections run when the io_context runs).
  void start();

  struct Conn;  // one request on one connection (http_server.cpp)

 private:
  HttpServer(Deps deps, std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor);
  Deps d_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
};

}  // namespace tessera::frontend
