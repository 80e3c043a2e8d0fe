// RedisL2::get_many's sliding window (docs/kvstore.md "Store::get_many") against a real
// redis-server, through a relay (DelayProxy, no delay) that counts the GETs in flight exactly:
// the requests it has relayed to Redis less the replies it has relayed back. Missing keys before
// the first value do not shrink the mean value size: with a fixed 256 KiB budget and 1 MiB
// values, the window stays at its initial 4 GETs while only misses have come back, and once
// values do, one GET is in flight at a time — not every remaining GET at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/kvstore/redis_l2.h"
#include "tessera/testing/delay_proxy.h"
#include "tessera/testing/redis_server.h"

namespace tessera::kvstore {
namespace {

constexpr uint64_t kFp = 0x3a11d0ULL;

// Counts complete top-level RESP2 items in a byte stream fed in arbitrary chunks: commands
// (arrays of bulk strings) one way, GET replies (bulk strings, nil, status, errors) the other;
// the subscriber's push arrays count as one item each. Bulk payloads are skipped, not kept.
class RespCounter {
 public:
  // Calls `on_item` after each complete item.
  template <typename F>
  void feed(std::string_view bytes, F&& on_item) {
    for (size_t i = 0; i < bytes.size();) {
      if (skip_ > 0) {
        const size_t n = std::min<size_t>(skip_, bytes.size() - i);
        skip_ -= n;
        i += n;
        if (skip_ == 0) element_done(on_item);
        continue;
      }
      line_ += bytes[i++];
      if (line_.size() < 2 || line_.compare(line_.size() - 2, 2, "\r\n") != 0) continue;
      const char type = line_[0];
      const long long n = (type == '*' || type == '$') ? std::stoll(line_.substr(1)) : 0;
      line_.clear();
      if (type == '*') {
        if (n <= 0) {
          element_done(on_item);
        } else {
          pending_ = static_cast<uint64_t>(n);
        }
      } else if (type == '$' && n >= 0) {
        skip_ = static_cast<uint64_t>(n) + 2;  // the payload and its CRLF
      } else {
        element_done(on_item);  // nil bulk, status, error, integer
      }
    }
  }

 private:
  template <typename F>
  void element_done(F&& on_item) {
    if (pending_ > 0 && --pending_ > 0) return;  // an array element, not the array's last
    on_item();
  }
  std::string line_;
  uint64_t skip_ = 0, pending_ = 0;
};

// Per relayed connection: requests and replies so far, and the requests in flight (relayed to
// Redis, not yet answered back) as each request arrived.
struct LinkCount {
  RespCounter requests, replies;
  int64_t sent = 0, answered = 0;
  std::vector<int64_t> in_flight_at;  // [k]: as request k arrived, itself included
};

TEST(RedisGetManyWindow, LeadingMissesDoNotOpenTheWindowPastTheBudget) {
  auto redis = tessera::testing::RedisServer::start();
  ASSERT_NE(redis, nullptr) << "redis-server could not be started";
  std::map<int, LinkCount> links;  // touched only on the relay thread until it is stopped
  auto proxy = tessera::testing::DelayProxy::start(
      redis->host(), redis->port(), std::chrono::microseconds(0), [&](int id, bool from_client, std::string_view b) {
        LinkCount& l = links[id];
        if (from_client) {
          l.requests.feed(b, [&] {
            ++l.sent;
            l.in_flight_at.push_back(l.sent - l.answered);
          });
        } else {
          l.replies.feed(b, [&] { ++l.answered; });
        }
      });
  ASSERT_NE(proxy, nullptr);

  constexpr const char* kSecret = "window-secret";
  constexpr int kMissing = 3, kValues = 60;
  // The values go in directly; the reader reaches Redis through the relay, its budget fixed.
  auto writer = RedisL2::create({.host = redis->host(), .port = redis->port()}, kSecret).value();
  std::vector<BlobKey> keys;
  for (int i = 0; i < kMissing; ++i) keys.push_back({kFp, "alice", "expired" + std::to_string(i)});
  std::vector<std::string> values;
  for (int i = 0; i < kValues; ++i) {
    keys.push_back({kFp, "alice", "page" + std::to_string(i)});
    values.push_back(std::string(size_t{1} << 20, static_cast<char>('a' + i % 26)));
    ASSERT_TRUE(writer->put(keys.back(), values.back()).ok());
  }
  RedisConfig cfg{.host = "127.0.0.1", .port = proxy->port()};
  cfg.get_many_inflight = {.auto_tune = false, .fixed_bytes = 256 * 1024};
  auto reader = RedisL2::create(cfg, kSecret).value();
  ASSERT_TRUE(reader->up());

  const auto got = reader->get_many(keys);
  ASSERT_EQ(got.size(), keys.size());
  for (int i = 0; i < kMissing; ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].error().to_string();
    EXPECT_FALSE(got[i]->has_value()) << i;
  }
  for (int i = 0; i < kValues; ++i) {
    ASSERT_TRUE(got[kMissing + i].ok()) << got[kMissing + i].error().to_string();
    ASSERT_TRUE(got[kMissing + i]->has_value()) << i;
    ASSERT_EQ(**got[kMissing + i], values[i]) << i;
  }
  reader.reset();
  proxy.reset();  // joins the relay thread: `links` is ours now

  // The connection that carried the GETs (the others: the health check's INFO + PING, the
  // subscriber's SUBSCRIBE, each one request at a time).
  const LinkCount* gets = nullptr;
  for (const auto& [id, l] : links) {
    if (l.sent == kMissing + kValues) gets = &l;
  }
  ASSERT_NE(gets, nullptr) << "no connection carried the " << kMissing + kValues << " GETs";
  EXPECT_EQ(gets->answered, kMissing + kValues);
  // The initial window (4 GETs) stays while only misses come back: GETs 0-3 go at once, 4-6 one
  // per miss read. From then on each GET is sent after reading the value before it (256 KiB /
  // 1 MiB rounds to a window of 1): exactly one in flight. (Before the fix: the first miss made
  // the mean value size ~1 byte and GETs 4-62 all went out at once.)
  constexpr int kInitialWindow = 4;
  std::string seen;
  for (int64_t n : gets->in_flight_at) seen += " " + std::to_string(n);
  for (size_t k = 0; k < gets->in_flight_at.size(); ++k) {
    SCOPED_TRACE("GET " + std::to_string(k) + "; in flight as each arrived:" + seen);
    EXPECT_LE(gets->in_flight_at[k], kInitialWindow) << "leading misses opened the window past the 256 KiB budget";
    if (k >= static_cast<size_t>(kMissing + kInitialWindow)) {
      EXPECT_EQ(gets->in_flight_at[k], 1);
    }
  }
}

}  // namespace
}  // namespace tessera::kvstore
