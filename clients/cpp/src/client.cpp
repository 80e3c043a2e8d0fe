#include "tessera/client/client.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>
#include <variant>

#include "core.h"
#include "wire.h"

namespace tessera::client {

const char* version() { return TESSERA_CLIENT_VERSION; }

namespace detail {

// A Stream's (and a blocking call's) queue of events, filled by the I/O thread and read by the
// caller. All members guarded by mu_.
struct StreamState final : Sink {
  using Item = std::variant<TokenEvent, Completion, std::exception_ptr>;

  explicit StreamState(uint64_t rid) : id(rid) {}
  void token(TokenEvent&& ev) override { put(Item(std::move(ev))); }
  void final(Completion&& c) override { put(Item(std::move(c))); }
  void error(std::exception_ptr e) override { put(Item(std::move(e))); }

  void put(Item item) {
    {
      std::lock_guard lock(mu);
      items.push_back(std::move(item));
    }
    cv.notify_one();
  }

  // The next item, waiting until `until` (nullopt: forever). nullopt when done or timed out.
  std::optional<StreamEvent> take(std::optional<Clock::time_point> until) {
    std::unique_lock lock(mu);
    if (ended) return std::nullopt;
    auto ready = [&] { return !items.empty(); };
    if (until) {
      if (!cv.wait_until(lock, *until, ready)) return std::nullopt;
    } else {
      cv.wait(lock, ready);
    }
    Item item = std::move(items.front());
    items.pop_front();
    if (auto* t = std::get_if<TokenEvent>(&item)) return StreamEvent(std::move(*t));
    ended = true;
    if (auto* c = std::get_if<Completion>(&item)) return StreamEvent(std::move(*c));
    lock.unlock();
    std::rethrow_exception(std::get<std::exception_ptr>(item));
  }

  const uint64_t id;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> items;
  bool ended = false;  // the Completion or the error was taken
};

// A Handler's sink: calls the caller's callbacks on the I/O thread.
struct HandlerSink final : Sink {
  explicit HandlerSink(Handler h) : handler(std::move(h)) {}
  void token(TokenEvent&& ev) override {
    if (handler.on_token) guard([&] { handler.on_token(ev); });
  }
  void final(Completion&& c) override {
    if (handler.on_final) guard([&] { handler.on_final(c); });
  }
  void error(std::exception_ptr e) override {
    if (!handler.on_error) return;
    try {
      std::rethrow_exception(e);
    } catch (const Error& err) {
      guard([&] { handler.on_error(err); });
    } catch (...) {
    }
  }
  template <class F>
  static void guard(F f) {
    try {
      f();
    } catch (...) {  // a throwing callback must not stop the I/O thread of every other request
    }
  }
  Handler handler;
};

}  // namespace detail

using detail::Pending;
using detail::Prompt;
using detail::StreamState;

namespace {

Pending pending_for(const detail::Core& core, const RequestOptions& o, bool stream, std::shared_ptr<detail::Sink> sink) {
  Pending p;
  p.sink = std::move(sink);
  p.streaming = stream;
  p.want_logprobs = o.logprobs.value_or(false);
  p.want_top_logprobs = o.top_logprobs.value_or(0) > 0;
  if (stream && p.want_logprobs) p.acc.logprobs.emplace();
  if (stream && p.want_top_logprobs) p.acc.top_logprobs.emplace();
  auto timeout = o.timeout ? o.timeout : core.options().timeout;
  if (timeout) p.deadline = detail::Clock::now() + *timeout;
  return p;
}

std::shared_ptr<StreamState> start(detail::Core& core, const Prompt& prompt, const RequestOptions& o, bool stream) {
  const uint64_t id = core.next_id();
  auto state = std::make_shared<StreamState>(id);
  std::string body = detail::encode_request(id, stream, prompt, o, core.options().api_key);
  core.submit(id, std::move(body), pending_for(core, o, stream, state));
  return state;
}

uint64_t start_handler(detail::Core& core, const Prompt& prompt, const RequestOptions& o, Handler h, bool stream) {
  const uint64_t id = core.next_id();
  std::string body = detail::encode_request(id, stream, prompt, o, core.options().api_key);
  core.submit(id, std::move(body), pending_for(core, o, stream, std::make_shared<detail::HandlerSink>(std::move(h))));
  return id;
}

Completion wait_completion(StreamState& s) {
  for (;;) {
    auto ev = s.take(std::nullopt);
    if (auto* c = ev ? std::get_if<Completion>(&*ev) : nullptr) return std::move(*c);
  }
}

}  // namespace

// ---- Stream ----

Stream::Stream(std::shared_ptr<detail::Core> core, std::shared_ptr<StreamState> state)
    : core_(std::move(core)), state_(std::move(state)) {}
Stream::Stream(Stream&&) noexcept = default;
Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (state_ && !done()) core_->cancel(state_->id);
    core_ = std::move(other.core_);
    state_ = std::move(other.state_);
  }
  return *this;
}
Stream::~Stream() {
  if (state_ && !done()) core_->cancel(state_->id);  // abandoned mid-way (e.g. a break): free it
}

uint64_t Stream::request_id() const { return state_->id; }
std::optional<StreamEvent> Stream::next() { return state_->take(std::nullopt); }
std::optional<StreamEvent> Stream::next_for(std::chrono::milliseconds wait) {
  return state_->take(detail::Clock::now() + wait);
}
Completion Stream::result() {
  for (;;) {
    auto ev = state_->take(std::nullopt);
    if (!ev) throw ClientClosed(0, "closed", "result() of a stream whose end was already taken", state_->id);
    if (auto* c = std::get_if<Completion>(&*ev)) return std::move(*c);
  }
}
void Stream::cancel() { core_->cancel(state_->id); }
bool Stream::done() const {
  std::lock_guard lock(state_->mu);
  return state_->ended;
}

Stream::iterator& Stream::iterator::operator++() {
  current_ = stream_->next();
  return *this;
}

// ---- Client ----

Client::Client(ClientOptions options) : core_(std::make_shared<detail::Core>(std::move(options))) {}
Client::Client(const std::string& endpoint) : Client(ClientOptions{.endpoints = {endpoint}}) {}
Client::~Client() {
  if (core_) core_->close();
}
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&& other) noexcept {
  if (this != &other) {
    if (core_) core_->close();
    core_ = std::move(other.core_);
  }
  return *this;
}

Limits Client::limits(std::chrono::milliseconds wait) { return core_->limits(wait); }

Completion Client::complete(const std::string& prompt, const RequestOptions& options) {
  return wait_completion(*start(*core_, Prompt{.text = &prompt}, options, false));
}
Completion Client::complete(const std::vector<int32_t>& prompt_tokens, const RequestOptions& options) {
  return wait_completion(*start(*core_, Prompt{.tokens = &prompt_tokens}, options, false));
}
Completion Client::chat(const std::vector<ChatMessage>& messages, const RequestOptions& options) {
  return wait_completion(*start(*core_, Prompt{.messages = &messages}, options, false));
}

Stream Client::stream_complete(const std::string& prompt, const RequestOptions& options) {
  return Stream(core_, start(*core_, Prompt{.text = &prompt}, options, true));
}
Stream Client::stream_complete(const std::vector<int32_t>& prompt_tokens, const RequestOptions& options) {
  return Stream(core_, start(*core_, Prompt{.tokens = &prompt_tokens}, options, true));
}
Stream Client::stream_chat(const std::vector<ChatMessage>& messages, const RequestOptions& options) {
  return Stream(core_, start(*core_, Prompt{.messages = &messages}, options, true));
}

uint64_t Client::start_complete(const std::string& prompt, const RequestOptions& options, Handler handler,
                                bool stream) {
  return start_handler(*core_, Prompt{.text = &prompt}, options, std::move(handler), stream);
}
uint64_t Client::start_chat(const std::vector<ChatMessage>& messages, const RequestOptions& options,
                            Handler handler, bool stream) {
  return start_handler(*core_, Prompt{.messages = &messages}, options, std::move(handler), stream);
}

void Client::cancel(uint64_t request_id) { core_->cancel(request_id); }
void Client::close() { core_->close(); }
std::string Client::endpoint() const { return core_->endpoint(); }
uint64_t Client::failovers() const { return core_->failovers(); }

}  // namespace tessera::client
