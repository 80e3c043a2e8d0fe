// K/V events (docs/protocol.md, "K/V events") from a real scheduler under load: a subscriber
// follows the replay rule (subscribe, take a kv_snapshot, apply only messages after its `seq`,
// take a new snapshot on a gap) and its reconstructed index equals the scheduler's own at the
// end (a last snapshot, built from the radix indexes themselves). A pool of 48 pages per worker
// makes the load evict, so `removed` events are exercised; one preference request gives a
// `preference_fill` event. Each block's hash is checked against the documented chain.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <thread>
#include <zmq.hpp>

#include "tessera/common/hash.h"
#include "tessera/common/zmq_util.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/kv_snapshot.h"

namespace tessera::testing {
namespace {

struct Block {
  uint64_t parent = 0;
  int32_t page = 0;
  std::vector<int32_t> tokens;
  bool operator==(const Block&) const = default;
};
using Index = std::map<std::string, std::map<uint64_t, Block>>;  // worker -> block hash -> block

const msgpack::object* field(const msgpack::object& map, const std::string& key) {
  for (const auto& kv : map.via.map)
    if (kv.key.as<std::string>() == key) return &kv.val;
  return nullptr;
}

class Subscriber {
 public:
  Subscriber(const std::string& pub, const std::string& snapshot) : sub_(ctx_, zmq::socket_type::sub), req_(ctx_, zmq::socket_type::dealer) {
    sub_.set(zmq::sockopt::subscribe, "kv");
    secure_client(sub_, curve::Role::kRouter, curve::Role::kScheduler);  // subscribers hold a router key
    sub_.connect(pub);
    req_.set(zmq::sockopt::linger, 0);
    secure_client(req_, curve::Role::kRouter, curve::Role::kScheduler);
    req_.connect(snapshot);
  }

  // kv_snapshot: the index and its seq.
  std::pair<Index, uint64_t> snapshot() {
    const std::string ask = kv_snapshot_request(7);
    EXPECT_TRUE(zmqu::send(req_, {ask}).ok());
    auto frames = zmqu::recv(req_);
    EXPECT_TRUE(frames.ok());
    msgpack::object_handle oh = msgpack::unpack(frames->back().data(), frames->back().size());
    const msgpack::object& m = oh.get();
    EXPECT_EQ(field(m, "type")->as<std::string>(), "kv_snapshot");
    Index index;
    for (const auto& w : field(m, "workers")->via.array) {
      auto& blocks = index[field(w, "name")->as<std::string>()];
      for (const auto& b : field(w, "blocks")->via.array)
        blocks[field(b, "hash")->as<uint64_t>()] = Block{field(b, "parent_hash")->as<uint64_t>(), field(b, "page")->as<int32_t>(),
                                                         field(b, "token_ids")->as<std::vector<int32_t>>()};
    }
    return {std::move(index), field(m, "seq")->as<uint64_t>()};
  }

  // Applies every message that arrived (the replay rule); returns how many were read.
  int poll(std::chrono::milliseconds wait) {
    int n = 0;
    zmq::pollitem_t item{sub_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, wait) <= 0) return 0;
    for (;;) {
      auto frames = zmqu::recv(sub_, true);
      if (!frames.ok() || frames->empty()) return n;
      ++n;
      EXPECT_EQ(frames->front(), "kv");
      msgpack::object_handle oh = msgpack::unpack(frames->back().data(), frames->back().size());
      const msgpack::object& m = oh.get();
      const uint64_t seq = field(m, "seq")->as<uint64_t>();
      if (!synced_ || seq <= seq_) {
        if (!synced_) early_.push_back(std::move(frames->back()));
        continue;  // covered by the snapshot
      }
      if (seq != seq_ + 1) {  // a gap: what we hold is incomplete
        ++resnapshots_;
        resync();
        continue;
      }
      apply(m);
      seq_ = seq;
    }
  }

  // Subscribes, then takes the snapshot the events apply to.
  void resync() {
    auto [index, seq] = snapshot();
    index_ = std::move(index);
    seq_ = seq;
    synced_ = true;
    for (const std::string& body : std::exchange(early_, {})) {
      msgpack::object_handle oh = msgpack::unpack(body.data(), body.size());
      const uint64_t s = field(oh.get(), "seq")->as<uint64_t>();
      if (s == seq_ + 1) {
        apply(oh.get());
        seq_ = s;
      }
    }
  }

  const Index& index() const { return index_; }
  uint64_t seq() const { return seq_; }
  std::map<std::string, int> kinds;  // events seen by kind
  int resnapshots_ = 0;

 private:
  void apply(const msgpack::object& m) {
    for (const auto& e : field(m, "events")->via.array) {
      const std::string kind = field(e, "kind")->as<std::string>();
      const std::string worker = field(e, "worker")->as<std::string>();
      ++kinds[kind];
      auto& blocks = index_[worker];
      if (kind == "stored") {
        const auto hashes = field(e, "block_hashes")->as<std::vector<uint64_t>>();
        const auto pages = field(e, "pages")->as<std::vector<int32_t>>();
        const auto tokens = field(e, "token_ids")->as<std::vector<int32_t>>();
        ASSERT_EQ(hashes.size(), pages.size());
        ASSERT_EQ(tokens.size() % hashes.size(), 0u);
        const size_t ps = tokens.size() / hashes.size();
        uint64_t parent = field(e, "parent_hash")->as<uint64_t>();
        for (size_t i = 0; i < hashes.size(); ++i) {
          std::vector<int32_t> page(tokens.begin() + static_cast<ptrdiff_t>(i * ps), tokens.begin() + static_cast<ptrdiff_t>((i + 1) * ps));
          // The documented chain: hash = hash_combine(parent, hash_tokens(page tokens)).
          EXPECT_EQ(hashes[i], hash_combine(parent, hash_tokens(page)));
          EXPECT_FALSE(blocks.count(hashes[i])) << "stored twice";
          blocks[hashes[i]] = Block{parent, pages[i], std::move(page)};
          parent = hashes[i];
        }
      } else if (kind == "removed") {
        for (uint64_t h : field(e, "block_hashes")->as<std::vector<uint64_t>>()) EXPECT_EQ(blocks.erase(h), 1u) << "removed unknown block";
      } else if (kind == "cleared") {
        blocks.clear();
      }
    }
  }

  zmq::context_t ctx_{1};
  zmq::socket_t sub_, req_;
  Index index_;
  uint64_t seq_ = 0;
  bool synced_ = false;
  std::vector<std::string> early_;  // messages that arrived before the snapshot
};

TEST(KvEventsTest, SubscriberReconstructsTheSchedulersIndex) {
  Cluster c(ClusterOptions{.num_pages = 48,
                           .num_workers = 2,
                           .scheduler_args = {"--kv-events-endpoint", "tcp://127.0.0.1:*", "--kv-events-snapshot-endpoint",
                                              "tcp://127.0.0.1:*"}});
  ASSERT_TRUE(c.ok());
  const std::string pub = line_field(c.scheduler_listening(), "kv_events");
  const std::string snap = line_field(c.scheduler_listening(), "kv_snapshot");
  ASSERT_FALSE(pub.empty()) << c.scheduler_listening();
  Subscriber sub(pub, snap);
  sub.resync();

  std::atomic<int> done{0};
  std::vector<std::thread> load;
  for (int t = 0; t < 4; ++t)
    load.emplace_back([&, t] {
      for (int i = 0; i < 12; ++i) {
        // Four families of prompts sharing long prefixes; 48 pages per worker cannot keep them all.
        const std::string prompt = "Once upon a time in a land far away there lived a " + std::to_string(i % 4) +
                                   " little dragon who liked to fly over the hills and the rivers every single morning " +
                                   std::to_string(t * 100 + i);
        auto r = c.post("/v1/completions", nlohmann::json{{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}}.dump());
        if (r.ok() && r->status == 200) done.fetch_add(1);
      }
    });
  auto pref = c.post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":4,"user":"ann","preference":"I like cats."})");
  // Follow the stream while the load runs (poll waits for messages; the deadline bounds it).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (done.load() < 48 && std::chrono::steady_clock::now() < deadline) sub.poll(milliseconds(100));
  for (auto& th : load) th.join();
  ASSERT_EQ(done.load(), 48) << c.logs();
  ASSERT_TRUE(pref.ok() && pref->status == 200);
  ASSERT_TRUE(wait_until([&] { return c.metric(c.metrics_port(), "tessera_scheduler_running_requests") == 0; }, milliseconds(20000)));

  // The scheduler's own index now; the subscriber catches up to that seq and must equal it.
  auto [truth, truth_seq] = sub.snapshot();
  ASSERT_TRUE(wait_until([&] { sub.poll(milliseconds(50)); return sub.seq() >= truth_seq; }, milliseconds(10000)))
      << "subscriber at seq " << sub.seq() << ", scheduler at " << truth_seq;
  ASSERT_EQ(sub.seq(), truth_seq) << "the scheduler published after its last snapshot while idle";
  EXPECT_GT(sub.kinds["stored"], 0);
  EXPECT_GT(sub.kinds["removed"], 0) << "48 pages per worker should have forced evictions";
  EXPECT_GE(sub.kinds["preference_fill"], 1);
  size_t blocks = 0;
  for (const auto& [w, b] : truth) blocks += b.size();
  EXPECT_GT(blocks, 0u);
  for (const auto& [worker, want] : truth) {
    const auto it = sub.index().find(worker);
    ASSERT_NE(it, sub.index().end()) << worker;
    EXPECT_EQ(it->second.size(), want.size()) << worker;
    EXPECT_TRUE(it->second == want) << worker << ": the reconstructed index differs from the scheduler's";
  }
  // The blocks the scheduler holds as cached pages match its /metrics (cached <= indexed).
  for (const auto& [worker, want] : truth)
    EXPECT_LE(c.metric(c.metrics_port(), "tessera_scheduler_pages", "worker=\"" + worker + "\",state=\"cached\""),
              static_cast<double>(want.size()));
}

}  // namespace
}  // namespace tessera::testing
