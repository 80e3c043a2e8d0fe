// get_many's in-flight budget (docs/kvstore.md "get_many's in-flight budget") on a slow link: the
// real tessera-kvstore process reads a real redis-server through a DelayProxy (a TCP relay adding
// a round-trip time on loopback; this kernel has no sch_netem). With 200 KB pages and 4 ms RTT
// the auto budget grows from its floor to its ceiling and never passes it; a fixed budget stays
// fixed while the RTT and rate are still measured; every page comes back, in order, intact,
// under both. Bad budget options are refused naming the option.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "../../unit/kvstore/synthetic_kv.h"
#include "tessera/kvstore/blob.h"
#include "tessera/kvstore/client.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/delay_proxy.h"
#include "tessera/testing/kv_process.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/redis_server.h"

namespace tessera::kvstore {
namespace {

using testing::KvProcess;

constexpr uint64_t kFp = 0x5eed0b0dULL;
constexpr int kPages = 24;
constexpr auto kRtt = std::chrono::milliseconds(4);

std::unique_ptr<Client> connect_to(const KvProcess& p) {
  return Client::connect({.endpoint = p.endpoint(), .timeout_ms = 30000,
                          .curve = tessera::testing::client_keys(curve::Role::kFrontend, curve::Role::kKvstore)})
      .value();
}

// The value of `name`'s sample in Prometheus text; -1 when absent.
double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + "{shard=");
  if (at == std::string::npos) return -1;
  const size_t sp = text.find("} ", at);
  return sp == std::string::npos ? -1 : std::stod(text.substr(sp + 2));
}

class GetManyBudget : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = tessera::testing::RedisServer::start();
    ASSERT_NE(redis_, nullptr) << "redis-server could not be started";
    proxy_ = tessera::testing::DelayProxy::start(redis_->host(), redis_->port(), kRtt);
    ASSERT_NE(proxy_, nullptr);
    // The pages go in directly (no delay): 24 SmolLM2-135M-sized int8 pages of ~200 KB.
    auto writer = KvProcess::start({"--redis", redis_->address(), "--hmac-secret", kSecret});
    ASSERT_NE(writer, nullptr);
    auto w = connect_to(*writer);
    for (uint32_t i = 0; i < kPages; ++i) {
      hashes_.push_back("page" + std::to_string(i));
      pages_.push_back(
          encode_blob(testing::synthetic_kv(DType::kF16, {30, 16, 3, 64}, kFp, i + 1), {.codec = Codec::kInt8}).value());
      ASSERT_TRUE(w->put({kFp, "alice", hashes_.back()}, pages_.back()).ok());
    }
    ASSERT_GT(pages_[0].size(), 150000u);
  }

  // A reader kvstore with no L1, reaching Redis through the proxy.
  std::unique_ptr<KvProcess> reader(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--redis", proxy_->address(), "--hmac-secret", kSecret, "--l1-max-entries", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    return KvProcess::start(args);
  }

  // One get_many of every page: each found, from Redis, byte-equal, in order.
  void get_all_and_check(Client& c) {
    auto got = c.get_many(kFp, "alice", hashes_);
    ASSERT_TRUE(got.ok()) << got.error().to_string();
    ASSERT_EQ(got->size(), pages_.size());
    for (size_t i = 0; i < pages_.size(); ++i) {
      ASSERT_TRUE((*got)[i].found) << i;
      EXPECT_EQ((*got)[i].tier, Tier::kL2) << i;
      ASSERT_EQ((*got)[i].blob, pages_[i]) << "page " << i << " wrong or out of order";
    }
  }

  static constexpr const char* kSecret = "budget-secret";
  std::unique_ptr<tessera::testing::RedisServer> redis_;
  std::unique_ptr<tessera::testing::DelayProxy> proxy_;
  std::vector<std::string> hashes_, pages_;
};

TEST_F(GetManyBudget, AutoGrowsToTheCeilingOnASlowLinkAndNeverPassesIt) {
  constexpr double kCap = 512 * 1024;  // --redis-get-many-inflight-max-kb 512
  auto kv = reader({"--redis-get-many-inflight-max-kb", "512"});
  ASSERT_NE(kv, nullptr);
  auto c = connect_to(*kv);
  std::string m = c->stats().value().metrics;
  EXPECT_EQ(metric(m, "tessera_kvstore_redis_shard_get_many_inflight_bytes"), 256.0 * 1024) << "starts at the floor";
  // 2 x BDP + a value through the proxy is about 1 MB or more (4 ms x the rate the kvstore reads
  // 200 KB values at; ~0.8 MB when that is slowed 10x under TSan), so the budget grows from the
  // floor (one value in flight) within a few calls and stops at the cap (3 values).
  std::vector<double> budgets;
  for (int call = 0; call < 8; ++call) {
    SCOPED_TRACE(call);
    get_all_and_check(*c);
    m = c->stats().value().metrics;
    budgets.push_back(metric(m, "tessera_kvstore_redis_shard_get_many_inflight_bytes"));
    ASSERT_LE(budgets.back(), kCap) << m;
    ASSERT_GE(budgets.back(), 256.0 * 1024) << m;
  }
  std::string seen;
  for (double x : budgets) seen += " " + std::to_string(static_cast<int64_t>(x));
  EXPECT_EQ(budgets.back(), kCap) << "did not grow to the cap on a 4 ms link with 200 KB pages; budgets:" << seen;
  // The RTT estimate is at least the proxy's delay (and not wildly more); a rate was measured.
  const double rtt = metric(m, "tessera_kvstore_redis_shard_rtt_seconds");
  EXPECT_GE(rtt, 0.004);
  EXPECT_LT(rtt, 0.2);
  EXPECT_GT(metric(m, "tessera_kvstore_redis_shard_delivery_rate_bytes_per_second"), 0.0);
  // The new series pass Prometheus's lint, like every endpoint's (cluster_ops_test).
  if (std::system("command -v promtool > /dev/null 2>&1") == 0) {
    const std::string path = tessera::testing::make_temp_dir("tessera-budget-metrics") + "/metrics.txt";
    std::ofstream(path) << m;
    EXPECT_EQ(std::system(("promtool check metrics < " + path + " > " + path + ".out 2>&1").c_str()), 0);
  }
}

TEST_F(GetManyBudget, FixedStaysFixedAndStillMeasures) {
  for (const char* kb : {"256", "0"}) {
    SCOPED_TRACE(kb);
    auto kv = reader({"--redis-get-many-inflight-kb", kb});
    ASSERT_NE(kv, nullptr);
    auto c = connect_to(*kv);
    for (int call = 0; call < 3; ++call) get_all_and_check(*c);
    const std::string m = c->stats().value().metrics;
    EXPECT_EQ(metric(m, "tessera_kvstore_redis_shard_get_many_inflight_bytes"), std::stod(kb) * 1024) << m;
    EXPECT_GE(metric(m, "tessera_kvstore_redis_shard_rtt_seconds"), 0.004) << m;
  }
}

TEST(GetManyBudgetOptions, BadValuesAreRefusedNamingTheOption) {
  auto [code, out] = KvProcess::run_to_exit({"--redis-get-many-inflight-kb", "fast"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("--redis-get-many-inflight-kb: expected auto or KiB in 0..1048576 (got 'fast')"), std::string::npos)
      << out;
  std::tie(code, out) = KvProcess::run_to_exit({"--redis-get-many-inflight-min-kb", "4096", "--redis-get-many-inflight-max-kb", "1024"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("--redis-get-many-inflight-min-kb (4096) is above --redis-get-many-inflight-max-kb (1024)"),
            std::string::npos)
      << out;
  std::tie(code, out) = KvProcess::run_to_exit({"--redis-get-many-inflight-max-kb", "0"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("redis-get-many-inflight-max-kb"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::kvstore
