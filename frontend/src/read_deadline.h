// Private: ReadDeadline, the read timeout of an HTTP connection that still lets it answer 408.
// Beast's own stream expiry closes the socket when it passes (right for writes: a client that
// does not read gets nothing more); a slow request's reader must instead stop reading and still
// write its 408, so this cancels the pending read and leaves the socket open.
//
// Ownership: owns its timer; references the socket, which must outlive the pending read (the
// handler touches it only while the object lives). Threading: construct, await the read and
// destroy on the connection's strand (the timer's handler runs there too).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>

namespace tessera::frontend {

// A deadline for the reads made while it lives: when `limit` passes first, the socket's pending
// read is cancelled — the socket stays open, so a 408 can still be written — and fired() says
// so. Construct it on the connection's strand (its executor), around one co_await of a read.
class ReadDeadline {
 public:
  ReadDeadline(const boost::asio::any_io_executor& strand, boost::asio::ip::tcp::socket& socket, std::chrono::milliseconds limit)
      : st_(std::make_shared<State>()), timer_(strand, limit) {
    timer_.async_wait([st = st_, &socket](const boost::system::error_code& ec) {
      if (ec || st->done) return;  // the socket is touched only while the read is pending
      st->fired = true;
      boost::system::error_code ignored;
      socket.cancel(ignored);
    });
  }
  ~ReadDeadline() {
    st_->done = true;
    timer_.cancel();
  }
  ReadDeadline(const ReadDeadline&) = delete;
  ReadDeadline& operator=(const ReadDeadline&) = delete;
  bool fired() const { return st_->fired; }

 private:
  struct State {
    bool done = false, fired = false;
  };
  std::shared_ptr<State> st_;
  boost::asio::steady_timer timer_;
};

}  // namespace tessera::frontend
