#include "tessera/client/admin.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <nlohmann/json.hpp>

#include "tessera/client/errors.h"

namespace tessera::client {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct HttpAnswer {
  int status = 0;
  std::string body;
};

std::string percent_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// The protocol number of an error name ("not_found" -> 104); 0 when unknown.
int code_of(const std::string& name) {
  for (int c : {100, 101, 102, 103, 104, 105, 106, 200, 201, 202, 203, 300, 301, 302, 400, 401, 402, 500})
    if (name == error_code_name(c)) return c;
  return 0;
}

int code_of_status(int status) {
  switch (status) {
    case 400: return 100;
    case 401: case 403: return 106;
    case 404: return 104;
    case 413: return 105;
    case 429: return 201;
    case 503: return 400;
    case 504: return 203;
    default: return 500;
  }
}

class Connection {
 public:
  Connection(const std::string& host, const std::string& port, Clock::time_point deadline) : deadline_(deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
      throw Unavailable(400, "unavailable", "cannot resolve " + host + ": " + gai_strerror(rc));
    std::string why = "no address";
    for (addrinfo* a = res; a != nullptr && fd_ < 0; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 || (errno == EINPROGRESS && wait(fd, POLLOUT) && connected(fd))) {
        fd_ = fd;
      } else {
        why = std::strerror(errno);
        ::close(fd);
      }
    }
    ::freeaddrinfo(res);
    if (fd_ < 0) throw Unavailable(400, "unavailable", "cannot connect to " + host + ":" + port + ": " + why);
  }
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void write_all(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        if (!wait(fd_, POLLOUT)) throw Timeout(203, "deadline_exceeded", "admin call: no answer in time");
      } else {
        throw Unavailable(400, "unavailable", std::string("admin call: send failed: ") + std::strerror(errno));
      }
    }
  }

  std::string read_to_eof() {  // the request says Connection: close
    std::string out;
    char buf[16384];
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n > 0) {
        out.append(buf, static_cast<size_t>(n));
        if (out.size() > (64u << 20)) throw BadRequest(105, "too_large", "admin call: answer over 64 MiB");
      } else if (n == 0) {
        return out;
      } else if (errno == EAGAIN || errno == EINTR) {
        if (!wait(fd_, POLLIN)) throw Timeout(203, "deadline_exceeded", "admin call: no answer in time");
      } else {
        throw Unavailable(400, "unavailable", std::string("admin call: receive failed: ") + std::strerror(errno));
      }
    }
  }

 private:
  bool wait(int fd, short events) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    return ::poll(&p, 1, static_cast<int>(left)) > 0;
  }
  static bool connected(int fd) {
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      errno = err;
      return false;
    }
    return true;
  }
  int fd_ = -1;
  Clock::time_point deadline_;
};

std::string dechunk(const std::string& body) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    size_t eol = body.find("\r\n", pos);
    if (eol == std::string::npos) break;
    size_t n = std::stoul(body.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) break;
    out.append(body, eol + 2, n);
    pos = eol + 2 + n + 2;
  }
  return out;
}

HttpAnswer parse_http(const std::string& raw) {
  HttpAnswer a;
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || head_end == std::string::npos)
    throw InternalError(500, "internal", "admin call: not an HTTP answer");
  a.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  std::string head = raw.substr(0, head_end);
  for (auto& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  a.body = raw.substr(head_end + 4);
  if (head.find("transfer-encoding: chunked") != std::string::npos) a.body = dechunk(a.body);
  return a;
}

}  // namespace

AdminClient::AdminClient(const std::string& base_url, AdminOptions options) : options_(std::move(options)) {
  const std::string scheme = "http://";
  if (base_url.compare(0, scheme.size(), scheme) != 0)
    throw BadRequest(100, "invalid_argument", "AdminClient needs an http:// URL (got '" + base_url + "')");
  std::string rest = base_url.substr(scheme.size());
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  const size_t bracket = rest.find(']');  // [v6 address]:port
  const bool has_port = colon != std::string::npos && (bracket == std::string::npos || colon > bracket);
  if (has_port) {
    host_ = rest.substr(0, colon);
    port_ = rest.substr(colon + 1);
  } else {
    host_ = rest;
    port_ = "80";
  }
  if (!host_.empty() && host_.front() == '[') host_ = host_.substr(1, host_.size() - 2);  // [::1]
  if (host_.empty() || port_.empty()) throw BadRequest(100, "invalid_argument", "AdminClient: no host in '" + base_url + "'");
}

namespace {

json call(const std::string& host, const std::string& port, const AdminOptions& o, const std::string& method,
          const std::string& user, const std::string& action, const std::string& body) {
  const std::string path = "/admin/v1/users/" + percent_encode(user) + "/" + action;
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: " + host + ":" + port +
                    "\r\nAuthorization: Bearer " + o.token + "\r\nConnection: close\r\nAccept: application/json\r\n";
  if (!body.empty()) req += "Content-Type: application/json\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  Connection conn(host, port, Clock::now() + o.timeout);
  conn.write_all(req);
  HttpAnswer a = parse_http(conn.read_to_eof());
  json j = json::parse(a.body, nullptr, /*allow_exceptions=*/false);
  if (a.status == 200 && j.is_object()) return j;
  std::string message = method + " " + path + ": HTTP " + std::to_string(a.status);
  int code = code_of_status(a.status);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const json& e = j["error"];
    if (e.contains("message") && e["message"].is_string()) message = e["message"].get<std::string>();
    if (e.contains("code") && e["code"].is_string() && code_of(e["code"].get<std::string>()) != 0)
      code = code_of(e["code"].get<std::string>());
  }
  throw_error(code, error_code_name(code), message);
}

StoredPreference preference_of(const json& j) {
  return StoredPreference{.user = j.value("user", ""), .preference = j.value("preference", ""),
                          .alpha = j.value("alpha", 0.5)};
}

}  // namespace

StoredPreference AdminClient::set_preference(const std::string& user, const std::string& preference, double alpha) {
  json body = {{"preference", preference}, {"alpha", alpha}};
  return preference_of(call(host_, port_, options_, "PUT", user, "preference", body.dump()));
}

StoredPreference AdminClient::get_preference(const std::string& user) {
  return preference_of(call(host_, port_, options_, "GET", user, "preference", ""));
}

bool AdminClient::delete_preference(const std::string& user) {
  return call(host_, port_, options_, "DELETE", user, "preference", "").value("deleted", false);
}

Invalidation AdminClient::invalidate(const std::string& user) {
  json j = call(host_, port_, options_, "POST", user, "invalidate", "");
  Invalidation inv{.user = j.value("user", ""), .kvstore_l1 = 0, .kvstore_l2 = 0,
                   .schedulers_notified = j.value("schedulers_notified", int64_t{0})};
  if (j.contains("kvstore") && j["kvstore"].is_object()) {
    inv.kvstore_l1 = j["kvstore"].value("l1", int64_t{0});
    inv.kvstore_l2 = j["kvstore"].value("l2", int64_t{0});
  }
  return inv;
}

}  // namespace tessera::client
