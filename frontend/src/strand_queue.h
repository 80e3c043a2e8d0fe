// Private: hands values from any thread to a coroutine running on an Asio strand.
//
// push() may be called from any thread; next() is awaited by one coroutine on `strand`. The
// wake-up is posted to the same strand, so a value pushed between next()'s check of the queue
// and its wait still cancels that wait (no lost wake-up). Owned through shared_ptr by the
// producer and the coroutine; either may outlive the other.
#pragma once

#include <utility>  // boost/asio/awaitable.hpp uses std::exchange without including it

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

namespace tessera::frontend {

template <class T>
class StrandQueue : public std::enable_shared_from_this<StrandQueue<T>> {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StrandQueue(boost::asio::any_io_executor strand) : strand_(strand), timer_(strand) {}

  void push(T value) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(value));
    }
    boost::asio::post(strand_, [self = this->shared_from_this()] { self->timer_.cancel(); });
  }

  // The next value, or nullopt when `until` passes first.
  boost::asio::awaitable<std::optional<T>> next(Clock::time_point until) {
    if (auto v = pop()) co_return v;
    timer_.expires_at(until);
    boost::system::error_code ec;
    co_await timer_.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    co_return pop();
  }

 private:
  std::optional<T> pop() {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) return std::nullopt;
    T v = std::move(queue_.front());
    queue_.pop_front();
    return v;
  }

  boost::asio::any_io_executor strand_;
  boost::asio::steady_timer timer_;
  std::mutex mu_;
  std::deque<T> queue_;  // GUARDED_BY(mu_)
};

}  // namespace tessera::frontend
