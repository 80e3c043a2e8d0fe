// Tessera C++ client: one connection to the frontend's ZeroMQ client API (docs/protocol.md),
// completions and chats, streaming, cancel, deadlines, heartbeats and failover. The same
// concepts and names as the Python (clients/python) and Node (clients/node) clients.
//
//   tessera::client::Client client({.endpoints = {"tcp://127.0.0.1:8001"}});
//   auto r = client.complete("Once upon a time", {.max_tokens = 32, .temperature = 0.0});
//   for (const auto& ev : client.stream_complete("Lily", {.max_tokens = 64}))
//     if (auto* t = std::get_if<tessera::client::TokenEvent>(&ev)) std::cout << t->text;
//
// Threading model: each Client owns one I/O thread ("tessera-client"), the only thread that
// touches its DEALER socket. Every public member function may be called from any thread at any
// time; calls hand work to the I/O thread through a locked queue and an eventfd wake-up, and
// any number of requests may be in flight at once (replies are matched by request id). A Stream
// is used by one thread at a time (any thread). Handler callbacks run on the I/O thread: they
// must not block (they may call cancel() or start other requests).
//
// Invariant: every request ends with exactly one terminal outcome — its Completion or one Error
// (the server's; Timeout at its deadline, after which the client cancels it at the server;
// PeerDead when the frontend stops answering heartbeats; ClientClosed on close()). Nothing
// waits silently.
//
// Heartbeats and failover: the I/O thread sends a `heartbeat` every `heartbeat_interval`; any
// message from the frontend counts as life. A frontend silent for `dead_after` is declared dead,
// so a dead frontend is noticed within dead_after + heartbeat_interval (2 s by default) of its
// death: its requests in flight end with PeerDead, and the client moves to the next endpoint of
// its list (round robin; with one endpoint it reconnects to the same one). Requests are never
// re-sent automatically (a generation may have started): retry on PeerDead if you want to.
// ZeroMQ reconnects a dropped TCP connection itself, backing off from reconnect_interval to
// reconnect_interval_max.
//
// Ownership: Client owns its I/O thread, socket and ZeroMQ context; the destructor closes it
// (requests in flight end with ClientClosed). A Stream shares the state of its request and may
// outlive the Client (it then ends with ClientClosed).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/client/errors.h"
#include "tessera/client/types.h"
#include "tessera/client/version.h"

namespace tessera::client {

inline constexpr std::chrono::milliseconds kDefaultHeartbeatInterval{500};
inline constexpr std::chrono::milliseconds kDefaultDeadAfter{1500};

struct ClientOptions {
  // Frontend client-API endpoints ("tcp://host:port"), used in this order: the first one at
  // start, the next one after a dead frontend (failover).
  std::vector<std::string> endpoints{"tcp://127.0.0.1:8001"};
  std::chrono::milliseconds heartbeat_interval = kDefaultHeartbeatInterval;
  std::chrono::milliseconds dead_after = kDefaultDeadAfter;  // > heartbeat_interval
  // Default per-request deadline (RequestOptions::timeout overrides it); unset = none.
  std::optional<std::chrono::milliseconds> timeout;
  std::chrono::milliseconds reconnect_interval{100};      // ZMQ_RECONNECT_IVL
  std::chrono::milliseconds reconnect_interval_max{1000}; // ZMQ_RECONNECT_IVL_MAX (backoff cap)
  int send_queue_limit = 10000;  // messages queued to an unreachable frontend before Unavailable
  std::string api_key;           // sent with every completion/chat (docs/api.md "Authentication")
  // CURVE encryption (hook for the frontend's CURVE option, docs/security.md): the frontend's
  // Z85 public key (40 characters). When set, the socket is a CURVE client; the client's key
  // pair is generated per Client unless both client keys are given. Empty = plain TCP.
  std::string server_public_key;
  std::string client_public_key;
  std::string client_secret_key;
};

namespace detail {
class Core;
struct StreamState;
}  // namespace detail

// A streamed request: iterate it (or call next()) for its TokenEvents; the last item is its
// Completion. next()/result() throw the request's Error. Move-only; one thread at a time.
// Destroying a Stream whose end was not taken yet (a `break` out of the loop) cancels the
// request, so the server frees its pages.
class Stream {
 public:
  Stream(Stream&&) noexcept;
  Stream& operator=(Stream&&) noexcept;
  ~Stream();

  uint64_t request_id() const;
  // Blocks for the next item: a TokenEvent, or the Completion (last). std::nullopt once the
  // Completion has been returned. Throws the request's Error (once; later calls give nullopt).
  std::optional<StreamEvent> next();
  // Like next(), but waits at most `wait`; std::nullopt also when nothing came (see done()).
  std::optional<StreamEvent> next_for(std::chrono::milliseconds wait);
  // Consumes the rest of the stream and returns the Completion (throws the request's Error).
  Completion result();
  // Stops the request: the server frees its pages, and the Completion (finish_reason
  // "cancelled") still arrives. Safe from any thread; a no-op once the request ended.
  void cancel();
  bool done() const;  // the Completion or the error has been returned

  class iterator {
   public:
    using value_type = StreamEvent;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    const StreamEvent& operator*() const { return *current_; }
    const StreamEvent* operator->() const { return &*current_; }
    iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

   private:
    friend class Stream;
    explicit iterator(Stream* s) : stream_(s) { ++*this; }
    Stream* stream_ = nullptr;
    std::optional<StreamEvent> current_;
  };
  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() { return {}; }

 private:
  friend class Client;
  Stream(std::shared_ptr<detail::Core> core, std::shared_ptr<detail::StreamState> state);
  std::shared_ptr<detail::Core> core_;
  std::shared_ptr<detail::StreamState> state_;
};

// Callbacks of a request started with Client::start_*: run on the client's I/O thread, in order;
// exactly one of on_final / on_error ends the request. They must not block.
struct Handler {
  std::function<void(const TokenEvent&)> on_token;   // streamed requests only
  std::function<void(const Completion&)> on_final;
  std::function<void(const Error&)> on_error;
};

class Client {
 public:
  // Starts the I/O thread and connects to endpoints[0]. Throws BadRequest for bad options (no
  // endpoint, dead_after <= heartbeat_interval, a CURVE key that is not 40 Z85 characters).
  explicit Client(ClientOptions options = {});
  explicit Client(const std::string& endpoint);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  // The served model's limits from the frontend's heartbeat reply (waits up to `wait` for one;
  // Unavailable when none comes).
  Limits limits(std::chrono::milliseconds wait = std::chrono::seconds(5));

  // Blocking calls: the whole Completion (sent with stream = false).
  Completion complete(const std::string& prompt, const RequestOptions& options = {});
  Completion complete(const std::vector<int32_t>& prompt_tokens, const RequestOptions& options = {});
  Completion chat(const std::vector<ChatMessage>& messages, const RequestOptions& options = {});

  // Streamed requests (stream = true).
  Stream stream_complete(const std::string& prompt, const RequestOptions& options = {});
  Stream stream_complete(const std::vector<int32_t>& prompt_tokens, const RequestOptions& options = {});
  Stream stream_chat(const std::vector<ChatMessage>& messages, const RequestOptions& options = {});

  // Callback requests: return the request id at once; `stream` chooses token events or not.
  uint64_t start_complete(const std::string& prompt, const RequestOptions& options, Handler handler,
                          bool stream = true);
  uint64_t start_chat(const std::vector<ChatMessage>& messages, const RequestOptions& options,
                      Handler handler, bool stream = true);

  // Cancels a request in flight (unknown or finished ids are ignored).
  void cancel(uint64_t request_id);
  // Ends every request in flight with ClientClosed and stops the I/O thread. Idempotent.
  void close();

  std::string endpoint() const;  // the endpoint in use now (changes on failover)
  uint64_t failovers() const;    // how many times a dead frontend made the client move on

 private:
  std::shared_ptr<detail::Core> core_;
};

}  // namespace tessera::client
