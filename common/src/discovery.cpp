#include "tessera/common/discovery.h"

#include <netdb.h>
#include <sys/socket.h>
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include "tessera/common/config.h"
#include "tessera/common/hash_ring.h"
#include "tessera/common/log.h"
#include "tessera/common/routing.h"

namespace tessera::discovery {
namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return std::string(s);
}

Result<Source> parse_one(const std::string& spec, std::string_view option, bool allow_file) {
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::kInvalidArgument, std::string(option) + ": '" + spec + "': " + why +
                                                       " (expected tcp://HOST:PORT, dns:NAME:PORT or file:PATH)");
  };
  if (spec.empty()) return bad("empty entry");
  if (spec.find("://") != std::string::npos) return Source{.kind = Source::Kind::kStatic, .text = spec};
  if (spec.rfind("dns:", 0) == 0) {
    const std::string rest = spec.substr(4);
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0) return bad("a dns: entry needs NAME:PORT");
    const std::string port_text = rest.substr(colon + 1);
    if (port_text.empty() || port_text.size() > 5 || !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return bad("port '" + port_text + "' is not a number");
    const int port = std::stoi(port_text);
    if (port < 1 || port > 65535) return bad("port " + port_text + " is outside 1..65535");
    return Source{.kind = Source::Kind::kDns, .text = spec, .host = rest.substr(0, colon), .port = port};
  }
  if (spec.rfind("file:", 0) == 0) {
    if (!allow_file) return bad("a file: entry cannot name another file");
    if (spec.size() == 5) return bad("file: needs a path");
    return Source{.kind = Source::Kind::kFile, .text = spec, .path = spec.substr(5)};
  }
  return bad("not an endpoint");
}

Result<std::vector<std::string>> resolve_dns(const Source& s) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(s.host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    return make_error(ErrorCode::kUnavailable, s.text + ": cannot resolve '" + s.host + "': " + ::gai_strerror(rc));
  }
  std::set<std::string> v4, v6;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char ip[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, ip, sizeof ip);
      v4.insert(tcp_endpoint(ip, s.port));
    } else if (a->ai_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, ip, sizeof ip);
      v6.insert(tcp_endpoint(ip, s.port));
    }
  }
  ::freeaddrinfo(res);
  // One address family per name: a dual-stack name would otherwise list every peer twice.
  const std::set<std::string>& out = v4.empty() ? v6 : v4;
  if (out.empty()) return make_error(ErrorCode::kUnavailable, s.text + ": '" + s.host + "' has no address");
  return std::vector<std::string>(out.begin(), out.end());
}

Result<std::vector<std::string>> resolve_file(const Source& s) {
  std::ifstream in(s.path);
  if (!in) return make_error(ErrorCode::kIoError, s.text + ": cannot read " + s.path + ": " + std::strerror(errno));
  std::set<std::string> seen;
  std::vector<std::string> out;  // line order, each endpoint at its first appearance
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const size_t hash = line.find('#');
    const std::string entry = trim(hash == std::string::npos ? line : line.substr(0, hash));
    if (entry.empty()) continue;
    auto src = parse_one(entry, s.path + ":" + std::to_string(line_no), /*allow_file=*/false);
    if (!src.ok()) return src.error();
    TS_ASSIGN_OR_RETURN(std::vector<std::string> eps, resolve(*src));
    for (auto& e : eps)
      if (seen.insert(e).second) out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

Result<std::vector<Source>> parse_sources(const std::vector<std::string>& specs, std::string_view option) {
  std::vector<Source> out;
  for (const auto& spec : specs) {
    TS_ASSIGN_OR_RETURN(Source s, parse_one(trim(spec), option, /*allow_file=*/true));
    out.push_back(std::move(s));
  }
  if (out.empty()) return make_error(ErrorCode::kInvalidArgument, std::string(option) + " is empty");
  return out;
}

Result<std::vector<Source>> parse_source_list(std::string_view comma_separated, std::string_view option) {
  return parse_sources(config::detail::split_list(std::string(comma_separated)), option);
}

bool any_dynamic(const std::vector<Source>& sources) {
  return std::any_of(sources.begin(), sources.end(), [](const Source& s) { return s.kind != Source::Kind::kStatic; });
}

Result<std::vector<std::string>> resolve(const Source& source) {
  switch (source.kind) {
    case Source::Kind::kStatic:
      return std::vector<std::string>{source.text};
    case Source::Kind::kDns:
      return resolve_dns(source);
    case Source::Kind::kFile:
      return resolve_file(source);
  }
  return make_error(ErrorCode::kInternal, "unknown source kind");
}

std::string tcp_endpoint(const std::string& ip, int port) {
  const bool v6 = ip.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
}

EndpointWatcher::EndpointWatcher(std::vector<Source> sources, std::chrono::milliseconds refresh, std::string what)
    : sources_(std::move(sources)), refresh_(refresh), what_(std::move(what)), dynamic_(any_dynamic(sources_)) {
  refresh_now();
  if (dynamic_) thread_ = std::thread([this] { run(); });
}

EndpointWatcher::~EndpointWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<std::string> EndpointWatcher::endpoints() const {
  std::lock_guard<std::mutex> lock(mu_);
  return merged_;
}

std::vector<std::string> EndpointWatcher::endpoints_in_order() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ordered_;
}

uint64_t EndpointWatcher::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

void EndpointWatcher::refresh_now() {
  // Resolve without the lock (DNS may block for seconds), then merge under it.
  std::vector<std::pair<size_t, Result<std::vector<std::string>>>> got;
  for (size_t i = 0; i < sources_.size(); ++i) got.emplace_back(i, resolve(sources_[i]));
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [i, r] : got) {
    if (r.ok()) {
      last_good_[i] = std::move(*r);
    } else {
      TS_LOG(kWarn) << what_ << " | " << r.error().message
                    << (last_good_.count(i) ? ": keeping its last endpoints" : ": none from it yet");
    }
  }
  std::set<std::string> all;
  std::vector<std::string> ordered;
  for (const auto& [i, eps] : last_good_)
    for (const auto& e : eps)
      if (all.insert(e).second) ordered.push_back(e);
  std::vector<std::string> merged(all.begin(), all.end());
  if (version_ != 0 && merged == merged_ && ordered == ordered_) return;
  if (version_ != 0) {
    std::string added, removed;
    for (const auto& e : merged)
      if (!std::binary_search(merged_.begin(), merged_.end(), e)) added += " +" + e;
    for (const auto& e : merged_)
      if (!std::binary_search(merged.begin(), merged.end(), e)) removed += " -" + e;
    TS_LOG(kInfo) << what_ << " | membership changed:" << added << removed << " (now " << merged.size() << ")";
  }
  merged_ = std::move(merged);
  ordered_ = std::move(ordered);
  ++version_;
}

void EndpointWatcher::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (cv_.wait_for(lock, refresh_, [&] { return stop_; })) break;
    lock.unlock();
    refresh_now();
    lock.lock();
  }
}

std::vector<std::string> FailoverOrder::order() const {
  if (listed_) return endpoints_;
  HashRing ring;
  for (const auto& e : endpoints_) (void)ring.add(e);
  std::vector<std::string> out;
  for (std::string_view e : ring.preference_list(routing_hash(name_))) out.emplace_back(e);
  return out;
}

std::string FailoverOrder::choose(Clock::time_point now) const {
  std::string oldest;
  Clock::time_point oldest_at = Clock::time_point::max();
  for (const auto& e : order()) {
    auto it = failed_at_.find(e);
    if (it == failed_at_.end() || now - it->second >= cooldown_) return e;
    if (it->second < oldest_at) {
      oldest_at = it->second;
      oldest = e;
    }
  }
  return oldest;
}

}  // namespace tessera::discovery
