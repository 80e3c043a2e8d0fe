#include "tessera/kvstore/redis_l2.h"

#include <hiredis/hiredis.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>

#include "tessera/common/log.h"

namespace tessera::kvstore {
namespace {

timeval to_timeval(int ms) { return timeval{ms / 1000, (ms % 1000) * 1000}; }

struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

Reply command(redisContext* c, const std::vector<std::string_view>& argv) {
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  ptrs.reserve(argv.size());
  lens.reserve(argv.size());
  for (auto a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  return Reply(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), ptrs.data(), lens.data())));
}

}  // namespace

Result<std::pair<std::string, int>> parse_host_port(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return make_error(ErrorCode::kInvalidArgument, "redis address must be host:port (got '" + std::string(address) + "')");
  }
  int port = 0;
  const std::string_view p = address.substr(colon + 1);
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || end != p.data() + p.size() || port <= 0 || port > 65535) {
    return make_error(ErrorCode::kInvalidArgument, "redis port must be 1..65535 (got '" + std::string(p) + "')");
  }
  return std::pair{std::string(address.substr(0, colon)), port};
}

// A pooled connection; hands itself back (or frees itself when broken) on destruction.
class RedisL2::Conn {
 public:
  Conn(RedisL2* owner, redisContext* c) : owner_(owner), c_(c) {}
  Conn(Conn&& o) noexcept : owner_(o.owner_), c_(o.c_), broken_(o.broken_) { o.c_ = nullptr; }
  Conn& operator=(Conn&&) = delete;
  ~Conn() {
    if (c_ != nullptr) owner_->release(c_, !broken_);
  }
  redisContext* get() const { return c_; }
  // Classifies a reply: nullptr = I/O failure (connection broken, server marked down).
  Status check(const Reply& r, const char* what) {
    if (r == nullptr) {
      broken_ = true;
      const std::string err = c_->errstr[0] != '\0' ? c_->errstr : "no reply";
      owner_->mark_down(std::string(what) + ": " + err);
      owner_->errors_.fetch_add(1);
      return make_error(ErrorCode::kUnavailable, std::string("redis ") + what + ": " + err);
    }
    if (r->type == REDIS_REPLY_ERROR) {
      owner_->errors_.fetch_add(1);
      return make_error(ErrorCode::kIoError, std::string("redis ") + what + ": " + std::string(r->str, r->len));
    }
    return ok_status();
  }

 private:
  RedisL2* owner_;
  redisContext* c_;
  bool broken_ = false;
};

RedisL2::RedisL2(const RedisConfig& config, std::string secret)
    : config_(config), signer_(std::move(secret)), budget_(config.get_many_inflight) {}

Result<std::unique_ptr<RedisL2>> RedisL2::create(const RedisConfig& config, std::string secret,
                                                 std::function<void(std::string_view)> on_event,
                                                 std::function<void()> on_back) {
  if (secret.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "an HMAC secret is required when Redis is on (--hmac-secret or TESSERA_KVSTORE_SECRET)");
  }
  if (config.host.empty()) return make_error(ErrorCode::kInvalidArgument, "redis host is empty");
  if (config.ttl_s == 0) return make_error(ErrorCode::kOutOfRange, "redis ttl must be >= 1 s");
  if (config.get_many_inflight.min_bytes > config.get_many_inflight.max_bytes) {
    return make_error(ErrorCode::kInvalidArgument, "get_many in-flight floor (" +
                                                       std::to_string(config.get_many_inflight.min_bytes >> 10) +
                                                       " KiB) is above its ceiling (" +
                                                       std::to_string(config.get_many_inflight.max_bytes >> 10) + " KiB)");
  }
  std::unique_ptr<RedisL2> l2(new RedisL2(config, std::move(secret)));
  l2->run_id_ = l2->ping_once();
  l2->up_.store(!l2->run_id_.empty());
  l2->on_back_ = std::move(on_back);
  if (!l2->up()) {
    TS_LOG(kWarn) << "redis=" << config.host << ":" << config.port << " | not reachable at start; serving from L1";
  }
  l2->health_ = std::thread([p = l2.get()] { p->health_loop(); });
  l2->on_event_ = std::move(on_event);
  l2->subscriber_ = std::thread([p = l2.get()] { p->subscriber_loop(); });
  if (l2->up()) {  // don't miss events published right after start-up: wait for SUBSCRIBE (bounded)
    std::unique_lock lock(l2->health_mu_);
    l2->health_cv_.wait_for(lock, std::chrono::milliseconds(2 * config.connect_timeout_ms + 1000),
                            [&] { return l2->subscribed_; });
  }
  return l2;
}

RedisL2::~RedisL2() {
  {
    std::lock_guard lock(health_mu_);
    stop_ = true;
    if (sub_ctx_ != nullptr) ::shutdown(sub_ctx_->fd, SHUT_RDWR);  // unblocks the subscriber's read
  }
  health_cv_.notify_all();
  if (health_.joinable()) health_.join();
  if (subscriber_.joinable()) subscriber_.join();
  std::lock_guard lock(pool_mu_);
  for (redisContext* c : idle_) redisFree(c);
  idle_.clear();
}

std::string RedisL2::ping_once() {
  redisContext* c = redisConnectWithTimeout(config_.host.c_str(), config_.port, to_timeval(config_.connect_timeout_ms));
  std::string run_id;
  if (c != nullptr && c->err == 0) {
    redisSetTimeout(c, to_timeval(config_.connect_timeout_ms));
    Reply r = command(c, {"INFO", "server"});
    if (r != nullptr && r->type == REDIS_REPLY_STRING) {
      const std::string_view info(r->str, r->len);
      constexpr std::string_view kKey = "run_id:";
      if (size_t at = info.find(kKey); at != std::string_view::npos) {
        const size_t from = at + kKey.size();
        run_id = std::string(info.substr(from, info.find_first_of("\r\n", from) - from));
      }
      if (run_id.empty()) run_id = "?";  // reachable, run_id unknown: restarts go unnoticed
      // An RTT sample for get_many's budget: a PING on the connected socket (the connect and
      // INFO above warmed it); the budget's min filter discards late wake-ups.
      const auto t0 = std::chrono::steady_clock::now();
      if (Reply p = command(c, {"PING"}); p != nullptr && p->type == REDIS_REPLY_STATUS) {
        budget_.add_rtt_sample(std::chrono::steady_clock::now() - t0);
      }
    } else if (Reply p = command(c, {"PING"}); p != nullptr && p->type == REDIS_REPLY_STATUS) {
      run_id = "?";  // INFO refused (renamed command?): reachable, restarts go unnoticed
    }
  }
  if (c != nullptr) redisFree(c);
  return run_id;
}

void RedisL2::health_loop() {
  int backoff_ms = 100;
  std::unique_lock lock(health_mu_);
  while (!stop_) {
    int wait_ms = config_.health_interval_ms;
    {
      lock.unlock();
      const std::string run_id = ping_once();
      lock.lock();
      if (!run_id.empty()) {
        bool back = false;
        if (!up()) {
          TS_LOG(kInfo) << "redis=" << config_.host << ":" << config_.port << " | reachable; L2 back on";
          back = true;
        } else if (run_id != run_id_ && run_id_ != "?" && !run_id_.empty()) {
          TS_LOG(kWarn) << "redis=" << config_.host << ":" << config_.port << " | restarted (run_id changed); it may have lost its data";
          std::lock_guard pool(pool_mu_);  // the pooled connections went with the old server
          for (redisContext* c : idle_) redisFree(c);
          idle_.clear();
          back = true;
        }
        run_id_ = run_id;
        up_.store(true, std::memory_order_release);
        backoff_ms = 100;
        if (back) {
          reconnects_.fetch_add(1);
          if (on_back_) {
            lock.unlock();  // on_back talks to Redis; nothing here may wait on it under health_mu_
            on_back_();
            lock.lock();
          }
        }
      } else {
        if (up()) go_down("health check failed");  // health_mu_ is held: no mark_down
        wait_ms = backoff_ms;
        backoff_ms = std::min(backoff_ms * 2, config_.max_backoff_ms);
      }
    }
    check_now_ = false;
    health_cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return stop_ || check_now_; });
  }
}

void RedisL2::go_down(const std::string& why) {
  if (up_.exchange(false)) {
    TS_LOG(kWarn) << "redis=" << config_.host << ":" << config_.port << " | down (" << why << "); serving from L1";
  }
  std::lock_guard lock(pool_mu_);
  for (redisContext* c : idle_) redisFree(c);
  idle_.clear();
}

void RedisL2::mark_down(const std::string& why) {
  go_down(why);
  {
    std::lock_guard lock(health_mu_);
    check_now_ = true;
  }
  health_cv_.notify_all();
}

Result<RedisL2::Conn> RedisL2::acquire() {
  if (!up()) return make_error(ErrorCode::kUnavailable, "redis is down; L2 skipped");
  {
    std::lock_guard lock(pool_mu_);
    if (!idle_.empty()) {
      redisContext* c = idle_.back();
      idle_.pop_back();
      return Conn(this, c);
    }
  }
  redisContext* c = redisConnectWithTimeout(config_.host.c_str(), config_.port, to_timeval(config_.connect_timeout_ms));
  if (c == nullptr || c->err != 0) {
    const std::string err = c != nullptr ? c->errstr : "out of memory";
    if (c != nullptr) redisFree(c);
    mark_down("connect: " + err);
    errors_.fetch_add(1);
    return make_error(ErrorCode::kUnavailable, "redis connect: " + err);
  }
  redisSetTimeout(c, to_timeval(config_.io_timeout_ms));
  return Conn(this, c);
}

void RedisL2::release(redisContext* c, bool healthy) {
  if (healthy && c->err == 0 && up()) {
    std::lock_guard lock(pool_mu_);
    if (idle_.size() < 64) {
      idle_.push_back(c);
      return;
    }
  }
  redisFree(c);
}

Status RedisL2::put(const BlobKey& key, std::string_view blob, uint32_t ttl_s) {
  TS_TRY(validate_key(key));
  TS_ASSIGN_OR_RETURN(Conn conn, acquire());
  const std::string name = signer_.redis_key(key);
  const std::string index = signer_.user_index_key(key.user);
  const std::string value = signer_.seal(key, blob);
  const std::string ttl = std::to_string(ttl_s == 0 ? config_.ttl_s : ttl_s);
  // Pipelined: SET, SADD, EXPIRE (the index lives at least as long as its longest member).
  const std::vector<std::vector<std::string_view>> cmds = {
      {"SET", name, value, "EX", ttl}, {"SADD", index, name}, {"EXPIRE", index, ttl, "GT"}, {"EXPIRE", index, ttl, "NX"}};
  for (const auto& argv : cmds) {
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    for (auto a : argv) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(conn.get(), static_cast<int>(argv.size()), ptrs.data(), lens.data());
  }
  Status first_error = ok_status();
  for (size_t i = 0; i < cmds.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(conn.get(), &raw) != REDIS_OK) raw = nullptr;
    Reply r(static_cast<redisReply*>(raw));
    Status st = conn.check(r, "put");
    if (!st.ok()) {
      if (r == nullptr) return st;  // connection gone: no more replies
      if (first_error.ok()) first_error = std::move(st);
    }
  }
  if (!first_error.ok()) return first_error;
  puts_.fetch_add(1);
  bytes_written_.fetch_add(value.size());
  return ok_status();
}

Result<std::optional<std::string>> RedisL2::get(const BlobKey& key) {
  TS_TRY(validate_key(key));
  TS_ASSIGN_OR_RETURN(Conn conn, acquire());
  const std::string name = signer_.redis_key(key);
  Reply r = command(conn.get(), {"GET", name});
  TS_TRY(conn.check(r, "get"));
  if (r->type == REDIS_REPLY_NIL) {
    misses_.fetch_add(1);
    return std::optional<std::string>();
  }
  if (r->type != REDIS_REPLY_STRING) {
    errors_.fetch_add(1);
    return make_error(ErrorCode::kCorruptFile, "redis value for a kv key is not a string");
  }
  bytes_read_.fetch_add(r->len);
  auto blob = signer_.open(key, std::string_view(r->str, r->len));
  if (!blob.ok()) {
    mac_failures_.fetch_add(1);
    TS_LOG(kWarn) << "user=" << key.user << " | rejected L2 value: " << blob.error().message;
    return blob.take_error();
  }
  hits_.fetch_add(1);
  return std::optional<std::string>(std::move(blob).value());
}

std::vector<Result<std::optional<std::string>>> RedisL2::get_many(std::span<const BlobKey> keys) {
  std::vector<Result<std::optional<std::string>>> out;
  out.reserve(keys.size());
  if (keys.empty()) return out;
  std::vector<std::string> names;
  names.reserve(keys.size());
  for (const BlobKey& k : keys) {
    if (Status v = validate_key(k); !v.ok()) return std::vector<Result<std::optional<std::string>>>(keys.size(), v.error());
    names.push_back(signer_.redis_key(k));
  }
  auto conn = acquire();
  if (!conn.ok()) return std::vector<Result<std::optional<std::string>>>(keys.size(), conn.error());
  // Pipelined with a sliding window: up to `window` GETs are in flight; after each reply the next
  // ones are appended (written with the next read). The window holds about budget_.bytes() of
  // replies (the mean size of the values so far decides; 4 before the first value; 0 bytes: one
  // GET per round trip): many small values go in a few round trips; values of about the budget or more
  // one at a time (on loopback queueing several large replies cost Redis and the client more CPU
  // than the round trips saved, docs/BENCHMARKS.md "kvstore"), never all queued in Redis's
  // output buffer at once. The budget follows the link's bandwidth-delay product
  // (inflight_budget.h): this call's first reply is an RTT sample, its later replies a
  // delivery-rate sample.
  const uint64_t inflight = budget_.bytes();
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point first_reply{}, last_reply{};
  uint64_t later_bytes = 0, later_values = 0;  // of the values after the first reply
  size_t sent = 0, window = inflight == 0 ? 1 : 4;
  uint64_t value_bytes = 0, values = 0;  // of the string replies so far (a missing key's NIL is none)
  auto send_upto = [&](size_t answered) {
    for (; sent < keys.size() && sent < answered + window; ++sent) {
      const char* argv[2] = {"GET", names[sent].data()};
      const size_t lens[2] = {3, names[sent].size()};
      redisAppendCommandArgv(conn->get(), 2, argv, lens);
    }
  };
  send_upto(0);
  for (size_t i = 0; i < keys.size(); ++i) {  // each reply as get() reads it, freed before the next
    void* raw = nullptr;
    if (redisGetReply(conn->get(), &raw) != REDIS_OK) raw = nullptr;
    const Reply r(static_cast<redisReply*>(raw));
    if (r != nullptr) {
      last_reply = Clock::now();
      if (i == 0) {
        first_reply = last_reply;
        budget_.add_rtt_sample(first_reply - start, RttSource::kFirstReply);
      } else {
        later_bytes += r->type == REDIS_REPLY_STRING ? r->len : 0;
        later_values += r->type == REDIS_REPLY_STRING ? 1 : 0;
      }
      if (i + 1 == keys.size() && i > 0) budget_.add_delivery_sample(later_bytes, later_values, last_reply - first_reply);
    }
    if (r != nullptr && r->type == REDIS_REPLY_STRING) {
      value_bytes += r->len;
      ++values;
    }
    // Whole values, rounded: a budget of 1.8 values is 2 in flight (floor would keep the self-tuning
    // budget at one large value per round trip), 1.3 is 1. The mean is over values only: a run of
    // missing keys says nothing about the size of the values after it, so the window stays at its
    // initial size until the first value arrives (averaging the misses' empty replies in made
    // the mean ~1 byte and sent every remaining GET at once, past the budget).
    if (values > 0) {
      const double mean = std::max(1.0, static_cast<double>(value_bytes) / static_cast<double>(values));
      window = static_cast<size_t>(std::clamp(std::round(static_cast<double>(inflight) / mean), 1.0, 256.0));
    }
    send_upto(i + 1);
    if (Status st = conn->check(r, "get"); !st.ok()) {
      if (r == nullptr) {  // connection gone: this key and the rest are unavailable
        out.resize(keys.size(), st.error());
        return out;
      }
      out.emplace_back(st.take_error());
      continue;
    }
    if (r->type == REDIS_REPLY_NIL) {
      misses_.fetch_add(1);
      out.emplace_back(std::optional<std::string>());
      continue;
    }
    if (r->type != REDIS_REPLY_STRING) {
      errors_.fetch_add(1);
      out.emplace_back(make_error(ErrorCode::kCorruptFile, "redis value for a kv key is not a string"));
      continue;
    }
    bytes_read_.fetch_add(r->len);
    auto blob = signer_.open(keys[i], std::string_view(r->str, r->len));
    if (!blob.ok()) {
      mac_failures_.fetch_add(1);
      TS_LOG(kWarn) << "user=" << keys[i].user << " | rejected L2 value: " << blob.error().message;
      out.emplace_back(blob.take_error());
      continue;
    }
    hits_.fetch_add(1);
    out.emplace_back(std::optional<std::string>(std::move(blob).value()));
  }
  return out;
}

Result<bool> RedisL2::exists(const BlobKey& key) {
  TS_TRY(validate_key(key));
  TS_ASSIGN_OR_RETURN(Conn conn, acquire());
  Reply r = command(conn.get(), {"EXISTS", signer_.redis_key(key)});
  TS_TRY(conn.check(r, "exists"));
  return r->type == REDIS_REPLY_INTEGER && r->integer > 0;
}

Result<bool> RedisL2::remove(const BlobKey& key) {
  TS_TRY(validate_key(key));
  TS_ASSIGN_OR_RETURN(Conn conn, acquire());
  const std::string name = signer_.redis_key(key);
  Reply r = command(conn.get(), {"DEL", name});
  TS_TRY(conn.check(r, "delete"));
  Reply s = command(conn.get(), {"SREM", signer_.user_index_key(key.user), name});
  TS_TRY(conn.check(s, "delete"));
  return r->type == REDIS_REPLY_INTEGER && r->integer > 0;
}

Result<uint64_t> RedisL2::remove_user(const std::string& user) {
  TS_ASSIGN_OR_RETURN(Conn conn, acquire());
  const std::string index = signer_.user_index_key(user);
  Reply members = command(conn.get(), {"SMEMBERS", index});
  TS_TRY(conn.check(members, "invalidate_user"));
  uint64_t removed = 0;
  if (members->type == REDIS_REPLY_ARRAY && members->elements > 0) {
    std::vector<std::string_view> argv{"DEL"};
    for (size_t i = 0; i < members->elements; ++i) {
      const redisReply* m = members->element[i];
      if (m->type == REDIS_REPLY_STRING) argv.emplace_back(m->str, m->len);
    }
    Reply del = command(conn.get(), argv);
    TS_TRY(conn.check(del, "invalidate_user"));
    if (del->type == REDIS_REPLY_INTEGER) removed = static_cast<uint64_t>(del->integer);
  }
  Reply del_index = command(conn.get(), {"DEL", index});
  TS_TRY(conn.check(del_index, "invalidate_user"));
  return removed;
}

Result<uint64_t> RedisL2::clear() {
  TS_ASSIGN_OR_RETURN(Conn conn, acquire());
  uint64_t removed = 0;
  std::string cursor = "0";
  do {
    Reply r = command(conn.get(), {"SCAN", cursor, "MATCH", "tessera:pref_kv*", "COUNT", "1000"});
    TS_TRY(conn.check(r, "clear"));
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
      return make_error(ErrorCode::kIoError, "redis clear: unexpected SCAN reply");
    }
    cursor.assign(r->element[0]->str, r->element[0]->len);
    const redisReply* keys = r->element[1];
    if (keys->elements == 0) continue;
    std::vector<std::string_view> argv{"UNLINK"};
    for (size_t i = 0; i < keys->elements; ++i) {
      std::string_view k(keys->element[i]->str, keys->element[i]->len);
      argv.push_back(k);
      if (k.starts_with(kRedisKeyPrefix)) ++removed;
    }
    Reply del = command(conn.get(), argv);
    TS_TRY(conn.check(del, "clear"));
  } while (cursor != "0");
  return removed;
}

Status RedisL2::publish_event(std::string_view event) {
  TS_ASSIGN_OR_RETURN(Conn conn, acquire());
  Reply r = command(conn.get(), {"PUBLISH", kEventChannel, event});
  return conn.check(r, "publish");
}

void RedisL2::subscriber_loop() {
  int backoff_ms = 100;
  while (true) {
    {
      std::unique_lock lock(health_mu_);
      if (stop_) return;
    }
    redisContext* c =
        redisConnectWithTimeout(config_.host.c_str(), config_.port, to_timeval(config_.connect_timeout_ms));
    bool subscribed = false;
    if (c != nullptr && c->err == 0) {
      std::lock_guard lock(health_mu_);
      if (!stop_) {
        sub_ctx_ = c;
        subscribed = true;
      }
    }
    if (subscribed) {
      Reply r = command(c, {"SUBSCRIBE", kEventChannel});
      subscribed = r != nullptr && r->type == REDIS_REPLY_ARRAY;
    }
    if (subscribed) {
      backoff_ms = 100;
      {
        std::lock_guard lock(health_mu_);
        subscribed_ = true;
      }
      health_cv_.notify_all();
      while (true) {  // blocks until an event, a disconnect, or shutdown() from the destructor
        void* raw = nullptr;
        if (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr) break;
        Reply msg(static_cast<redisReply*>(raw));
        if (msg->type == REDIS_REPLY_ARRAY && msg->elements == 3 && msg->element[2]->type == REDIS_REPLY_STRING &&
            std::string_view(msg->element[0]->str, msg->element[0]->len) == "message") {
          events_received_.fetch_add(1);
          if (on_event_) on_event_(std::string_view(msg->element[2]->str, msg->element[2]->len));
        }
      }
    }
    {
      std::lock_guard lock(health_mu_);
      sub_ctx_ = nullptr;
      subscribed_ = false;
    }
    if (c != nullptr) redisFree(c);
    std::unique_lock lock(health_mu_);
    health_cv_.wait_for(lock, std::chrono::milliseconds(backoff_ms), [&] { return stop_; });
    backoff_ms = std::min(backoff_ms * 2, config_.max_backoff_ms);
  }
}

L2Counters RedisL2::counters() const {
  return {hits_.load(), misses_.load(), puts_.load(), errors_.load(), mac_failures_.load(), reconnects_.load(),
          bytes_written_.load(), bytes_read_.load(), events_received_.load()};
}

}  // namespace tessera::kvstore
