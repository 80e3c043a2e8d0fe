#include "http_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int remaining_ms(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(ms);
}

// Reads some bytes; 0 on EOF.
Result<size_t> read_some(int fd, char* buf, size_t n, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r == 0) return make_error(ErrorCode::kDeadlineExceeded, "HTTP read timed out");
    if (r < 0) {
      if (errno == EINTR) continue;
      return make_error(ErrorCode::kUnavailable, std::string("poll: ") + std::strerror(errno));
    }
    ssize_t got = ::recv(fd, buf, n, 0);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return make_error(ErrorCode::kUnavailable, std::string("recv: ") + std::strerror(errno));
    }
    return static_cast<size_t>(got);
  }
}

// Body decoding state: Content-Length, chunked or until EOF.
struct BodyDecoder {
  enum class Mode { kLength, kChunked, kEof } mode = Mode::kEof;
  int64_t remaining = 0;      // kLength: bytes left; kChunked: bytes left in the current chunk
  bool done = false;
  std::string pending;        // kChunked: undecoded bytes

  // Appends decoded bytes of `in` to `out`. Errors on a malformed chunk header.
  Status feed(std::string_view in, std::string& out) {
    if (mode == Mode::kEof) {
      out.append(in);
      return ok_status();
    }
    if (mode == Mode::kLength) {
      size_t take = std::min<size_t>(in.size(), static_cast<size_t>(remaining));
      out.append(in.substr(0, take));
      remaining -= static_cast<int64_t>(take);
      done = remaining == 0;
      return ok_status();
    }
    pending.append(in);
    size_t pos = 0;
    while (!done) {
      if (remaining > 0) {
        size_t take = std::min<size_t>(pending.size() - pos, static_cast<size_t>(remaining));
        out.append(pending, pos, take);
        pos += take;
        remaining -= static_cast<int64_t>(take);
        if (remaining > 0) break;
        remaining = -2;  // expect CRLF after the chunk
      }
      if (remaining == -2) {
        if (pending.size() - pos < 2) break;
        pos += 2;
        remaining = 0;
      }
      size_t eol = pending.find("\r\n", pos);
      if (eol == std::string::npos) break;
      const std::string size_line = pending.substr(pos, eol - pos);
      char* end = nullptr;
      long long size = std::strtoll(size_line.c_str(), &end, 16);
      if (end == size_line.c_str() || size < 0)
        return make_error(ErrorCode::kMalformedMessage, "bad chunk size line '" + size_line + "'");
      pos = eol + 2;
      if (size == 0) {
        done = true;
        break;
      }
      remaining = size;
    }
    pending.erase(0, pos);
    return ok_status();
  }
};

}  // namespace

Result<HttpResponse> http_request(const HttpRequest& req) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(req.timeout_ms);
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return make_error(ErrorCode::kUnavailable, std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(req.port));
  if (::inet_pton(AF_INET, req.host.c_str(), &addr.sin_addr) != 1) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    if (::getaddrinfo(req.host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr)
      return make_error(ErrorCode::kUnavailable, "cannot resolve host '" + req.host + "'");
    addr.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    ::freeaddrinfo(res);
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return make_error(ErrorCode::kUnavailable,
                      "connect " + req.host + ":" + std::to_string(req.port) + ": " + std::strerror(errno));
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::string head = req.method + " " + req.path + " HTTP/1.1\r\nHost: " + req.host + ":" + std::to_string(req.port) +
                     "\r\nConnection: close\r\nAccept: */*\r\n";
  if (!req.body.empty()) head += "Content-Type: application/json\r\n";
  if (!req.body.empty() || req.method == "POST") head += "Content-Length: " + std::to_string(req.body.size()) + "\r\n";
  head += "\r\n";
  head += req.body;
  for (size_t off = 0; off < head.size();) {
    ssize_t n = ::send(fd.get(), head.data() + off, head.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return make_error(ErrorCode::kUnavailable, std::string("send: ") + std::strerror(errno));
    off += static_cast<size_t>(n);
  }

  HttpResponse resp;
  std::string raw;
  char buf[16384];
  size_t header_end = std::string::npos;
  while (header_end == std::string::npos) {
    TS_ASSIGN_OR_RETURN(size_t n, read_some(fd.get(), buf, sizeof(buf), deadline));
    if (n == 0) return make_error(ErrorCode::kUnavailable, "connection closed before the response headers");
    raw.append(buf, n);
    header_end = raw.find("\r\n\r\n");
    if (header_end == std::string::npos && raw.size() > (1 << 20))
      return make_error(ErrorCode::kMalformedMessage, "response headers over 1 MiB");
  }
  if (raw.compare(0, 5, "HTTP/") != 0 || raw.size() < 12)
    return make_error(ErrorCode::kMalformedMessage, "not an HTTP response");
  resp.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  BodyDecoder dec;
  {
    std::string headers = raw.substr(0, header_end);
    for (char& c : headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto header_value = [&](const std::string& name) -> std::string {
      size_t p = headers.find("\r\n" + name + ":");
      if (p == std::string::npos) return "";
      p += name.size() + 3;
      size_t e = headers.find("\r\n", p);
      std::string v = headers.substr(p, e == std::string::npos ? std::string::npos : e - p);
      while (!v.empty() && v.front() == ' ') v.erase(0, 1);
      return v;
    };
    resp.content_type = header_value("content-type");
    if (header_value("transfer-encoding").find("chunked") != std::string::npos) {
      dec.mode = BodyDecoder::Mode::kChunked;
    } else if (std::string cl = header_value("content-length"); !cl.empty()) {
      dec.mode = BodyDecoder::Mode::kLength;
      dec.remaining = std::atoll(cl.c_str());
      dec.done = dec.remaining == 0;
    }
  }
  std::string_view rest(raw);
  rest.remove_prefix(header_end + 4);
  auto deliver = [&](std::string_view bytes) -> Result<bool> {
    std::string decoded;
    TS_TRY(dec.feed(bytes, decoded));
    resp.body += decoded;
    if (req.on_body && !decoded.empty() && !req.on_body(decoded)) return false;
    return true;
  };
  TS_ASSIGN_OR_RETURN(bool go_on, deliver(rest));
  while (go_on && !dec.done) {
    TS_ASSIGN_OR_RETURN(size_t n, read_some(fd.get(), buf, sizeof(buf), deadline));
    if (n == 0) {
      if (dec.mode == BodyDecoder::Mode::kEof) break;
      return make_error(ErrorCode::kUnavailable, "connection closed in the middle of the body");
    }
    TS_ASSIGN_OR_RETURN(go_on, deliver(std::string_view(buf, n)));
  }
  return resp;
}

void SseParser::feed(std::string_view bytes, const std::function<void(const std::string&)>& on_data) {
  buffer_.append(bytes);
  for (;;) {
    size_t end = buffer_.find("\n\n");
    if (end == std::string::npos) return;
    std::string event = buffer_.substr(0, end);
    buffer_.erase(0, end + 2);
    std::string data;
    size_t pos = 0;
    while (pos <= event.size()) {
      size_t eol = event.find('\n', pos);
      std::string line = event.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) == 0) {
        std::string v = line.substr(5);
        if (!v.empty() && v.front() == ' ') v.erase(0, 1);
        if (!data.empty()) data += '\n';
        data += v;
      }
      if (eol == std::string::npos) break;
      pos = eol + 1;
    }
    if (!data.empty()) on_data(data);
  }
}

}  // namespace tessera::bench
