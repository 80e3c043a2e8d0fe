// Endpoint discovery: where a process finds its peers (the frontend its schedulers, a worker
// the schedulers it may register with), re-read while it runs so that peers join and leave
// without a restart (docs/architecture.md "Several schedulers").
//
// A list of sources, each one of:
//   tcp://host:port (any "scheme://" ZeroMQ endpoint)  static: always itself;
//   dns:NAME:PORT                                       every address NAME resolves to
//       (getaddrinfo: its A records, or its AAAA records when it has no A record — one family,
//       so a dual-stack name does not list each peer twice), as tcp://IP:PORT ([IP] for IPv6):
//       a Kubernetes headless Service names one record per ready pod;
//   file:PATH                                           one endpoint or dns: entry per line
//       (blank lines and #-comments skipped), re-read each time: a ConfigMap, a file an
//       operator or a test edits.
// The endpoints of all sources are merged, sorted and deduplicated, so every process reading
// the same sources gets the same list (and builds the same hash ring from it).
//
// A source that fails to resolve (DNS error, unreadable file) keeps the endpoints it gave the
// last time it succeeded (none before that): a DNS hiccup never empties a cluster. A dns: name
// that resolves but has no address is a failure too (NXDOMAIN while no pod is ready).
//
// Thread-safety: parse_sources/resolve/FailoverOrder are plain functions and values (resolve
// blocks on DNS). An EndpointWatcher's methods may be called from any thread; it owns one
// background thread (only when a source is dynamic) that re-resolves every `refresh`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tessera/common/result.h"

namespace tessera::discovery {

struct Source {
  enum class Kind { kStatic, kDns, kFile };
  Kind kind = Kind::kStatic;
  std::string text;  // as given: "tcp://a:1", "dns:sched.ns.svc:8100", "file:/etc/tessera/schedulers"
  std::string host;  // dns: the name
  int port = 0;      // dns: the port
  std::string path;  // file: the path
};

// Parses each spec (already split at commas). kInvalidArgument naming `option` and the entry
// for anything else (empty, no port, port out of range, an empty path).
Result<std::vector<Source>> parse_sources(const std::vector<std::string>& specs, std::string_view option);
// Splits "a,b, c" at commas (spaces trimmed, empty entries dropped) and parses.
Result<std::vector<Source>> parse_source_list(std::string_view comma_separated, std::string_view option);
bool any_dynamic(const std::vector<Source>& sources);

// The endpoints of one source now, each once (a dns: name's sorted, a file's in line order). dns: kUnavailable when the name does not
// resolve or has no address; file: kIoError when unreadable, kInvalidArgument for a bad line
// (naming the file and line).
Result<std::vector<std::string>> resolve(const Source& source);
// "tcp://IP:PORT", with brackets for an IPv6 address.
std::string tcp_endpoint(const std::string& ip, int port);

class EndpointWatcher {
 public:
  using Clock = std::chrono::steady_clock;

  // Resolves every source once before returning (so the owner starts with a list), then, when
  // a source is dynamic, every `refresh` on its own thread. `what` names the peers in logs
  // ("schedulers").
  EndpointWatcher(std::vector<Source> sources, std::chrono::milliseconds refresh, std::string what);
  ~EndpointWatcher();  // stops and joins the thread
  EndpointWatcher(const EndpointWatcher&) = delete;
  EndpointWatcher& operator=(const EndpointWatcher&) = delete;

  // The merged list and its version (starts at 1; +1 on every change of the list).
  std::vector<std::string> endpoints() const;
  // The same endpoints in the order the sources give them (source by source; a file's in its
  // line order, a dns: name's sorted), each at its first appearance.
  std::vector<std::string> endpoints_in_order() const;
  uint64_t version() const;
  bool dynamic() const { return dynamic_; }
  // Resolves again now, on the caller's thread (tests; the thread does this every `refresh`).
  void refresh_now();

 private:
  void run();

  const std::vector<Source> sources_;
  const std::chrono::milliseconds refresh_;
  const std::string what_;
  const bool dynamic_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<std::string>> last_good_;  // GUARDED_BY(mu_): per source index
  std::vector<std::string> merged_;                       // GUARDED_BY(mu_)
  std::vector<std::string> ordered_;                      // GUARDED_BY(mu_)
  uint64_t version_ = 0;                                  // GUARDED_BY(mu_)
  bool stop_ = false;                                     // GUARDED_BY(mu_)
  std::condition_variable cv_;
  std::thread thread_;
};

// Which of several endpoints a client (a worker) should use: by default the endpoints in the
// clockwise order of a consistent-hash ring from hash(name) (hash_ring.h, 160 virtual nodes
// each), so clients spread over the endpoints and a client's first choice moves only when the
// membership changes around it; or, `listed`, in the order given (the first is the client's
// primary: an operator assigns workers explicitly). Endpoints marked failed within `cooldown`
// are passed over (when all are, the one that failed longest ago is chosen).
// Not thread-safe (a value owned by one thread).
class FailoverOrder {
 public:
  using Clock = std::chrono::steady_clock;
  FailoverOrder(std::string name, std::chrono::milliseconds cooldown, bool listed = false)
      : name_(std::move(name)), cooldown_(cooldown), listed_(listed) {}

  void set_endpoints(std::vector<std::string> endpoints) { endpoints_ = std::move(endpoints); }
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // The endpoints in preference order for this client (failures ignored).
  std::vector<std::string> order() const;
  // The endpoint to use now; "" when there is none.
  std::string choose(Clock::time_point now) const;
  void failed(const std::string& endpoint, Clock::time_point now) { failed_at_[endpoint] = now; }

 private:
  std::string name_;
  std::chrono::milliseconds cooldown_;
  bool listed_;
  std::vector<std::string> endpoints_;
  std::map<std::string, Clock::time_point> failed_at_;
};

}  // namespace tessera::discovery
