// Private: the state shared by the HTTP server (http_server.cpp), the ZeroMQ client API
// (client_api.cpp) and request preparation (frontend.cpp).
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <optional>
#include <string_view>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tessera/common/metrics.h"
#include "tessera/common/protocol.h"
#include "tessera/frontend/chat_template.h"
#include "tessera/frontend/frontend.h"
#include "tessera/frontend/hub.h"
#include "tessera/frontend/openai.h"
#include "tessera/frontend/output_filter.h"
#include "tessera/kvstore/client.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::frontend {

struct FrontendMetrics {
  explicit FrontendMetrics(metrics::Registry& r);
  void count_response(const std::string& route, int status);
  void finished(const protocol::FinalEvent& f);
  // Residual retrieve_fact calls removed from one response (output_filter.h), by format.
  void stripped(const FactCallCounts& counts);

  metrics::Registry& registry;
  metrics::Gauge& inflight;
  metrics::Counter& prompt_tokens;
  metrics::Counter& cached_tokens;
  metrics::Counter& completion_tokens;
  metrics::Gauge& prefix_hit_rate;
  metrics::Counter& disconnects;
  metrics::Counter& timeouts;
  metrics::Histogram& ttft;
  metrics::Histogram& e2e;
  metrics::Gauge& ready;
};

// Holds a slot of the concurrency limit for the lifetime of a request.
class InflightSlot {
 public:
  InflightSlot(std::atomic<int32_t>& counter, metrics::Gauge& gauge) : counter_(&counter), gauge_(&gauge) { gauge_->inc(); }
  ~InflightSlot() {
    counter_->fetch_sub(1);
    gauge_->dec();
  }
  InflightSlot(const InflightSlot&) = delete;
  InflightSlot& operator=(const InflightSlot&) = delete;

 private:
  std::atomic<int32_t>* counter_;
  metrics::Gauge* gauge_;
};

struct StoredPreference {
  std::string preference;
  float alpha = 0.5f;
};

struct AdminReply {
  int status = 200;
  std::string body;  // JSON
};

struct Frontend::Impl {
  FrontendConfig config;
  std::string model_name;
  std::unique_ptr<Tokenizer> tokenizer;
  ChatTemplate chat_template;
  bool tokenizer_adds_bos = false;
  int64_t created_unix = 0;

  metrics::Registry registry;
  std::unique_ptr<FrontendMetrics> metrics;
  std::unique_ptr<Hub> hub;

  boost::asio::io_context ioc;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  std::atomic<int32_t> inflight{0};
  std::atomic<bool> stopped{false};

  // ZMQ client API: (identity, client id) -> internal id, for cancel. Guarded by api_mu.
  std::mutex api_mu;
  std::unordered_map<std::string, uint64_t> api_ids;

  // kvstore client for stored preferences and invalidation (null without --kvstore). Calls
  // are serialized by kv_mu, which also guards kv_backoff_until.
  std::unique_ptr<kvstore::Client> kv;
  std::mutex kv_mu;
  std::chrono::steady_clock::time_point kv_backoff_until{};

  // Admin endpoints (admin.cpp): token check, then the route. Blocking (kvstore round trips).
  AdminReply admin(std::string_view method, std::string_view path, std::string_view token, const std::string& body);
  // The user's stored preference (nullopt when none or no kvstore).
  Result<std::optional<StoredPreference>> load_stored_preference(const std::string& user);
  // A request with a user and no preference gets the user's stored preference and its alpha.
  // A kvstore failure is logged and counted, and the request runs without one.
  Status apply_stored_preference(protocol::GenerateRequest& request);

  // Limits and readiness; returns a slot on success. kUnavailable / kOverloaded otherwise.
  Result<std::unique_ptr<InflightSlot>> admit();
  // Model check, chat template, tokenization, prompt limit, routing key; assigns request.id.
  Status prepare(protocol::GenerateRequest& request);
  std::vector<int32_t> tokenize_chat(const RenderedChat& chat) const;

  void start_accept();
  void on_client_message(zmqu::Envelope env);
  std::string ready_json(bool* ready) const;
};

}  // namespace tessera::frontend
