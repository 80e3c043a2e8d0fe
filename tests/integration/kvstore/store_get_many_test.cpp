// Store::get_many (the service's get_many) against real redis-server shards: the L1 misses of a
// call go to each shard pipelined (Redis's own statistics: one GET per key, but only a couple of
// read events — batches of commands read off the socket — where one GET per round trip would
// make one each), and every
// answer is what get() answers for that key — L1 hits, L2 hits promoted to L1, a key never put
// and a value failing its MAC are misses, a bad key fails the call naming it; with a shard down,
// its keys are L1 hits or misses and the other shard still answers; the answer stops within the
// byte budget (a prefix, at least one entry), and the hit/miss/byte counters count that answer
// only (not what the call read past the cut).
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "../../unit/kvstore/synthetic_kv.h"
#include "tessera/kvstore/blob.h"
#include "tessera/kvstore/store.h"
#include "tessera/testing/redis_server.h"
#include "tessera/testing/wait.h"

namespace tessera::kvstore {
namespace {

using namespace std::chrono_literals;
using tessera::testing::RedisServer;
using tessera::testing::wait_until;

constexpr uint64_t kFp = 0x6e7a11ULL;
constexpr const char* kSecret = "get-many-secret";

std::string blob_of(uint32_t tokens, uint32_t seed) {
  return encode_blob(testing::synthetic_kv(DType::kBF16, {2, tokens, 2, 16}, kFp, seed), {.codec = Codec::kZstd}).value();
}

// The `calls=` count of one command in INFO commandstats (0 when never called since the reset).
int calls(const RedisServer& r, const std::string& cmd) {
  const std::string info = r.command({"INFO", "commandstats"});
  const std::string key = "cmdstat_" + cmd + ":calls=";
  const size_t at = info.find(key);
  return at == std::string::npos ? 0 : std::stoi(info.substr(at + key.size()));
}

// Read events since the last CONFIG RESETSTAT, less the INFO that asks (one per batch of
// commands Redis reads off a socket: a round trip's worth).
int read_events(const RedisServer& r) {
  const std::string info = r.command({"INFO", "stats"});
  const std::string key = "total_reads_processed:";
  const size_t at = info.find(key);
  return at == std::string::npos ? -1 : std::stoi(info.substr(at + key.size())) - 1;
}

class StoreGetMany : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      redis_.push_back(RedisServer::start());
      ASSERT_NE(redis_.back(), nullptr) << "redis-server could not be started";
    }
  }
  std::unique_ptr<Store> make_store() const {
    StoreConfig cfg;
    auto shard = [](const RedisServer& r) {
      return RedisConfig{.host = r.host(), .port = r.port(), .health_interval_ms = 500, .max_backoff_ms = 500};
    };
    cfg.redis = shard(*redis_[0]);
    cfg.redis_shards = {shard(*redis_[1])};
    cfg.secret = kSecret;
    auto s = Store::create(std::move(cfg));
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    return std::move(s).value();
  }
  // Puts n keys "page<i>" of user "alice" through `writer`; returns the keys, blobs in `blobs`.
  std::vector<BlobKey> put_pages(Store& writer, int n, std::vector<std::string>& blobs) const {
    std::vector<BlobKey> keys;
    for (int i = 0; i < n; ++i) {
      keys.push_back({kFp, "alice", "page" + std::to_string(i)});
      blobs.push_back(blob_of(3, static_cast<uint32_t>(i + 1)));
      auto put = writer.put(keys.back(), blobs.back());
      EXPECT_TRUE(put.ok() && put->l2) << i;
    }
    return keys;
  }
  std::vector<std::unique_ptr<RedisServer>> redis_;
};

TEST_F(StoreGetMany, AnswersAsGetDoesWithPipelinedGetsPerShard) {
  auto writer = make_store();
  std::vector<std::string> blobs;
  std::vector<BlobKey> keys = put_pages(*writer, 40, blobs);
  // Key 5's value is tampered with in Redis: its MAC fails, a miss.
  const std::string name5 = writer->l2()->signer().redis_key(keys[5]);
  RedisServer& shard5 = *redis_[writer->l2()->owner(keys[5])];
  std::string v = shard5.command({"GET", name5});
  v[v.size() / 2] = static_cast<char>(v[v.size() / 2] ^ 0x01);
  ASSERT_EQ(shard5.command({"SET", name5, v}), "OK");

  auto reader = make_store();  // another node: empty L1
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(reader->get(keys[static_cast<size_t>(i)]).ok());  // 0..9 into its L1 (not 5)
  for (auto& r : redis_) ASSERT_EQ(r->command({"CONFIG", "RESETSTAT"}), "OK");
  std::vector<BlobKey> ask = keys;
  ask.insert(ask.begin() + 3, BlobKey{kFp, "alice", "never-put"});
  auto got = reader->get_many(ask);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  ASSERT_EQ(got->size(), ask.size());
  for (size_t j = 0; j < ask.size(); ++j) {
    const GetResult& g = (*got)[j];
    SCOPED_TRACE(ask[j].hash);
    if (j == 3 || ask[j].hash == "page5") {
      EXPECT_EQ(g.blob, nullptr);
      EXPECT_EQ(g.tier, Tier::kNone);
      continue;
    }
    const size_t i = j < 3 ? j : j - 1;
    ASSERT_NE(g.blob, nullptr);
    EXPECT_EQ(*g.blob, blobs[i]);
    EXPECT_EQ(g.tier, i < 10 ? Tier::kL1 : Tier::kL2);
  }
  // The L1 misses (keys 5, 10..39 and the one never put): one GET each on its shard, pipelined —
  // a couple of read events per shard, not one per key.
  int misses[2] = {0, 0};
  for (size_t j = 0; j < ask.size(); ++j) {
    const bool in_l1 = j != 3 && ask[j].hash != "page5" && (j < 3 ? j : j - 1) < 10;
    if (!in_l1) ++misses[reader->l2()->owner(ask[j])];
  }
  for (size_t s = 0; s < 2; ++s) {
    SCOPED_TRACE(redis_[s]->address());
    ASSERT_GE(misses[s], 8) << "too few keys on this shard to tell pipelining from round trips";
    // One round trip per key would take misses[s] read events. Pipelined, the first window's 4
    // GETs go out in one write and arrive in one read event (3 fewer); how the rest arrive
    // depends on when the replies come back (a loaded machine splits them into more reads), and
    // the stores' health checks (an INFO every 500 ms each) may add one.
    EXPECT_LE(read_events(*redis_[s]), misses[s] - 2) << "GETs of " << misses[s] << " keys not pipelined";
    EXPECT_EQ(calls(*redis_[s], "get"), misses[s]);
  }
  EXPECT_EQ(reader->l2()->counters().mac_failures, 2u) << "key 5: once by get, once by get_many";
  // The L2 hits were promoted: asked again, everything found is in L1 and Redis is not asked
  // for it (only key 5 and the missing key go to Redis again).
  auto again = reader->get_many(ask);
  ASSERT_TRUE(again.ok());
  for (size_t j = 0; j < ask.size(); ++j) EXPECT_EQ((*again)[j].tier, (*got)[j].blob ? Tier::kL1 : Tier::kNone) << j;
  EXPECT_EQ(calls(*redis_[0], "get") + calls(*redis_[1], "get"), misses[0] + misses[1] + 2);
  // A bad key fails the call, naming what is wrong.
  auto bad = reader->get_many(std::vector<BlobKey>{keys[0], BlobKey{kFp, "alice", ""}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("hash"), std::string::npos) << bad.error().message;
}

TEST_F(StoreGetMany, AShardDownAnswersItsKeysFromL1OrAsMisses) {
  auto writer = make_store();
  std::vector<std::string> blobs;
  const std::vector<BlobKey> keys = put_pages(*writer, 30, blobs);
  auto reader = make_store();
  for (int i = 0; i < 10; ++i) ASSERT_NE(reader->get(keys[static_cast<size_t>(i)])->blob, nullptr);
  const size_t lost = 1;
  redis_[lost]->kill();
  ASSERT_TRUE(wait_until([&] { return !reader->l2_up(); }, 5s)) << "the reader never saw the shard go";
  auto got = reader->get_many(keys);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  ASSERT_EQ(got->size(), keys.size());
  int lost_misses = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const GetResult& g = (*got)[i];
    SCOPED_TRACE(i);
    if (i < 10) {  // in the reader's L1
      ASSERT_NE(g.blob, nullptr);
      EXPECT_EQ(*g.blob, blobs[i]);
      EXPECT_EQ(g.tier, Tier::kL1);
    } else if (reader->l2()->owner(keys[i]) == lost) {
      EXPECT_EQ(g.blob, nullptr);
      ++lost_misses;
    } else {
      ASSERT_NE(g.blob, nullptr);
      EXPECT_EQ(*g.blob, blobs[i]);
      EXPECT_EQ(g.tier, Tier::kL2);
    }
  }
  EXPECT_GT(lost_misses, 0) << "no key of 10..29 on the lost shard";
}

TEST_F(StoreGetMany, TheAnswerIsAPrefixWithinTheByteBudget) {
  auto writer = make_store();
  std::vector<std::string> blobs;
  const std::vector<BlobKey> keys = put_pages(*writer, 8, blobs);
  auto reader = make_store();
  const size_t budget = blobs[0].size() + blobs[1].size() + blobs[2].size();  // the blobs are about the same size
  auto got = reader->get_many(keys, budget);
  ASSERT_TRUE(got.ok());
  size_t bytes = 0, n = 0;
  while (n < keys.size() && bytes + blobs[n].size() <= budget) bytes += blobs[n++].size();
  ASSERT_EQ(got->size(), n) << "a prefix of the keys whose blobs fit the budget";
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(*(*got)[i].blob, blobs[i]);
  // The windows shrink to what the rest of the budget holds: the call fetched (and promoted to
  // L1) about one blob past its cut, not all 8 keys.
  EXPECT_LE(reader->l1_stats().entries, n + 2) << "get_many read far past its byte budget";
  auto one = reader->get_many(keys, 1);  // smaller than any blob: still one entry
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ(*(*one)[0].blob, blobs[0]);
}

// A counter's value in a store's metrics text (the whole line "name{labels} value"); -1 when absent.
double metric(const Store& s, const std::string& series) {
  const std::string text = s.metrics_text();
  const size_t at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

TEST_F(StoreGetMany, CountsOnlyTheEntriesItAnswers) {
  auto writer = make_store();
  std::vector<std::string> blobs;
  const std::vector<BlobKey> keys = put_pages(*writer, 8, blobs);
  auto reader = make_store();
  ASSERT_NE(reader->get(keys[0])->blob, nullptr);  // page0 into the reader's L1
  // page0 (an L1 hit), a key never put (a miss), then pages 1..7 from Redis; the budget holds
  // pages 0..2 exactly, so the answer is 4 entries. The call reads (and promotes) page 3 before
  // it knows that page 3 is past the cut: it is not answered, so it is not counted either.
  std::vector<BlobKey> ask = keys;
  ask.insert(ask.begin() + 1, BlobKey{kFp, "alice", "never-put"});
  const size_t budget = blobs[0].size() + blobs[1].size() + blobs[2].size();
  const char* series[] = {"tessera_kvstore_hits_total{tier=\"l1\"}",   "tessera_kvstore_hits_total{tier=\"l2\"}",
                          "tessera_kvstore_misses_total{tier=\"l1\"}", "tessera_kvstore_misses_total{tier=\"l2\"}",
                          "tessera_kvstore_misses_total{tier=\"all\"}", "tessera_kvstore_get_bytes_total"};
  double before[6];
  for (int i = 0; i < 6; ++i) {
    before[i] = metric(*reader, series[i]);
    ASSERT_GE(before[i], 0) << series[i] << " not in the metrics";
  }
  auto got = reader->get_many(ask, budget);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  ASSERT_EQ(got->size(), 4u) << "page0, never-put, page1, page2";
  EXPECT_EQ((*got)[0].tier, Tier::kL1);
  EXPECT_EQ((*got)[1].blob, nullptr);
  EXPECT_EQ((*got)[2].tier, Tier::kL2);
  EXPECT_EQ((*got)[3].tier, Tier::kL2);
  // Page 3 was read past the cut (else this test would prove nothing): it is in L1 now.
  ASSERT_GE(reader->l1_stats().entries, 4u) << "pages 0..2 and at least page 3 (read past the cut)";
  const double expected[6] = {1, 2, 3, 1, 1, static_cast<double>(budget)};  // the answer's 4 entries, as get() counts them
  for (int i = 0; i < 6; ++i) EXPECT_EQ(metric(*reader, series[i]) - before[i], expected[i]) << series[i];
  // Asked for the rest, page 3 is an L1 hit now, and counted once, as such.
  auto rest = reader->get_many(std::span<const BlobKey>(ask).subspan(4, 1));
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->size(), 1u);
  EXPECT_EQ((*rest)[0].tier, Tier::kL1);
  EXPECT_EQ(metric(*reader, series[0]) - before[0], 2);
  EXPECT_EQ(metric(*reader, series[1]) - before[1], 2);
  EXPECT_EQ(metric(*reader, series[5]) - before[5], static_cast<double>(budget + blobs[3].size()));
}

}  // namespace
}  // namespace tessera::kvstore
