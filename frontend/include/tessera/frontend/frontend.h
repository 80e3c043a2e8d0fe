// tessera-frontend: the OpenAI-compatible HTTP server (Boost.Beast on Boost.Asio, a few
// threads, C++20 coroutines) and the ZeroMQ client API, both in front of the schedulers.
//
// A request is validated (openai.h / protocol::validate), admitted against the limits below
// (admission.h) before anything expensive, prepared — chat template, tokenization, prompt
// limit (request_preparer.h) —, given its user's stored preference when it names a user and no
// preference (stored_preferences.h: a kvstore lookup on an executor, never on an I/O thread),
// given an id and a routing key (common/routing.h), and handed to the Hub (hub.h), which sends it
// to a scheduler and routes its token events back. Text goes out through Generation (UTF-8-safe
// detokenization + stop strings). docs/architecture.md ("Frontend") draws the components and
// their threads.
//
// Status codes: 400 bad input, 404 unknown model or route, 413 body or prompt too long,
// 429 concurrency or queue limit (checked first), 503 no ready scheduler (never waits for one),
// 504 request timeout. A client that disconnects has its request cancelled at the scheduler.
//
// Ownership/threads: Frontend owns every component, the io_context and its threads. create()
// builds every component, then starts the hub thread; run() starts the I/O threads and blocks
// until stop() (thread-safe, also from a signal-handling thread) or the end of a drain().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/common/curve.h"
#include "tessera/common/result.h"

namespace tessera::frontend {

struct FrontendConfig {
  std::string host = "127.0.0.1";
  int http_port = 8000;                  // 0 = pick a free port
  std::string zmq_endpoint = "tcp://127.0.0.1:8001";  // client API ROUTER; "" = off; port * = free
  std::vector<std::string> schedulers = {"tcp://127.0.0.1:8100"};  // endpoints, dns:NAME:PORT, file:PATH
  int scheduler_refresh_ms = 5000;     // dns:/file: entries of --schedulers are read again this often
  double scheduler_load_epsilon = 0.25;  // ring load bound (1 + eps) x mean; 0 = plain consistent hashing
  std::string model;                     // model file (tokenizer/template/name source)
  std::string tokenizer;                 // tokenizer file; "" = from the model
  std::string model_name;                // served id; "" = model file name without extension
  std::string chat_template = "auto";    // auto | chatml | llama2 | llama3
  std::string chat_template_file;        // Jinja template to render (overrides the model's)
  int http_threads = 2;
  int64_t max_body_bytes = 1 << 20;
  int32_t max_prompt_tokens = 4096;
  int32_t max_concurrent_requests = 256;
  int32_t max_queued_requests = 1024;
  int32_t default_max_tokens = 256;
  // K/V policy of requests that give no kv_policy (docs/kv.md): "none", "streaming:SINKS:WINDOW"
  // or "h2o:BUDGET:RECENT" — the per-model default; a request's own field (even "none") wins.
  std::string kv_policy = "none";
  int64_t request_timeout_ms = 300000;
  // Slow clients (docs/security.md "Slow clients"): a request's header must arrive within
  // http_header_timeout_ms of its first byte and its body within http_body_timeout_ms after the
  // header (408 otherwise); one write (a response, or one SSE chunk) that the client does not
  // take within http_write_timeout_ms (or the request's deadline, whichever is first) closes the
  // connection and cancels its request. The kernel send buffer of each connection is
  // http_send_buffer_bytes.
  int http_header_timeout_ms = 10000;
  int http_body_timeout_ms = 30000;
  int http_write_timeout_ms = 30000;
  int http_send_buffer_bytes = 262144;
  int heartbeat_ms = 500;
  int scheduler_dead_ms = 5000;  // a dropped connection is noticed at once (scheduler_links.h)
  // Admin endpoints (docs/api.md "Admin"): "" = disabled (they answer 403).
  std::string admin_token;
  // tessera-kvstore endpoint for stored preferences and invalidation ("" = none).
  std::string kvstore;
  int kvstore_timeout_ms = 2000;
  // API keys (api_keys.h; docs/api.md "Authentication and tenants"): both "" = open (every
  // request is tenant "default" and may name any user).
  std::string api_key;        // one key: tenant "default", any user
  std::string api_keys_file;  // lines "<key> <tenant> [<user>,...|*]"
  // Drain (docs/operations.md "Drain"): how long live requests may run on after SIGTERM or
  // POST /admin/v1/drain before they are ended with an error event.
  int drain_timeout_s = 30;
  // Echoed as "instance" by /health and /ready, so a supervisor (`tessera up`) can tell its own
  // frontend from another process on the port; "" = a random one.
  std::string instance_id;
  // Internal sockets (curve.h, docs/security.md): --curve-dir or --insecure; --zmq-curve also
  // puts the client API behind CURVE.
  curve::Settings curve;
  bool zmq_curve = false;
};

// Declares every frontend option (flag, config key [frontend], env var, check), each bound to
// its member of `config`, whose initializer above is the default (frontend/src/options.cpp).
// `config` must outlive `options`.
void declare_options(config::Options& options, FrontendConfig& config);

class Frontend {
 public:
  // Loads the tokenizer, binds the HTTP port and the client API, connects to schedulers.
  static Result<std::unique_ptr<Frontend>> create(const FrontendConfig& config);
  ~Frontend();

  int http_port() const;                     // as bound
  std::string zmq_endpoint() const;          // as bound ("" when off)
  void run();                                // serves until stop()
  void stop();
  // Graceful shutdown (thread-safe): new requests get 503, /ready 503; the live ones run on for
  // up to drain_timeout_s, then those left end with an error event; then stop(). False when a
  // drain was already under way (the caller may then stop() at once).
  bool drain();
  const std::string& instance_id() const;

  struct Impl;

 private:
  explicit Frontend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::frontend
