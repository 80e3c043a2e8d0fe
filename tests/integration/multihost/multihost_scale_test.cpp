// Scale-out across hosts (issue 14, "Done when"), on the three-host bed (three_hosts.h):
// 1. one hot prefix from the client host through both frontends spreads over the two schedulers
//    within the load bound, read from the schedulers' own metrics;
// 2. a scheduler's host pulled off the network with requests in flight: no request that had not
//    streamed is lost (each ends with its answer or a clear error: counted), its workers on
//    other hosts register with the other scheduler within the documented bound, and the
//    frontends' ring moves only that scheduler's keys (<= 1/N + eps of them);
// 3. a Redis shard lost (frozen: no answer, no reset, its data kept — as a host cut off):
//    nothing wrong or stale is served (each stored preference comes back right or as a miss),
//    L1 keeps serving, and once it is back the writes made meanwhile reach it.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "multihost_helpers.h"
#include "tessera/common/hash_ring.h"
#include "tessera/common/metrics.h"
#include "tessera/common/routing.h"
#include "tessera/testing/status.h"
#include "tessera/testing/wait.h"

namespace tessera::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr double kLoadEps = 0.25;        // the frontends' --scheduler-load-epsilon (default)
constexpr int kSchedulerDeadMs = 1000;   // the workers' --scheduler-dead-ms (ThreeHosts::test_flags)
const std::string kSchedA = "tcp://10.77.0.1:8100";  // the frontends' --schedulers (deploy/bare)
const std::string kSchedB = "tcp://10.77.0.2:8100";

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double sched_routed(const std::string& ip) {
  return MultiHost::cluster().metric(ip, kSchedulerMetricsPort, "tessera_scheduler_routed_requests_total");
}
double frontend_metric(const std::string& ip, const std::string& name, const std::string& filter = "") {
  return MultiHost::cluster().metric(ip, kHttpPort, name, filter);
}
double routed_via(const std::string& frontend_ip, const std::string& sched, const std::string& reason = "") {
  return frontend_metric(frontend_ip, "tessera_frontend_scheduler_routed_requests_total",
                         "scheduler=\"" + sched + "\"" + (reason.empty() ? "" : ",reason=\"" + reason + "\""));
}
double value_or_zero(double v) { return std::isnan(v) ? 0.0 : v; }

int completion_tokens(const Result<http::Response>& r) {
  if (!r.ok() || r->status != 200) return -1;
  auto j = json::parse(r->body, nullptr, false);
  return j.is_discarded() ? -1 : j["usage"]["completion_tokens"].get<int>();
}

TEST_F(MultiHost, OneHotPrefixSpreadsOverBothSchedulersWithinTheBound) {
  // 16 per frontend: each frontend's cap is ceil(1.25 x 16 / 2) = 10, so the two caps sum to the
  // cluster's ceil(1.25 x 32 / 2) = 20 (the bound is per frontend: docs/architecture.md).
  constexpr int kPerFrontend = 16, kTokens = 160;
  const std::string system =
      "You are a storyteller. Once upon a time there was a little girl named Lily who lived in a small house near the "
      "big forest with her mother, her father and a fluffy dog called Max. Every day they walked to the river. ";
  const double before_a = value_or_zero(sched_routed(kHostA)), before_b = value_or_zero(sched_routed(kHostB));
  std::map<std::string, double> fe_before, owner_before;
  for (const auto& fe : {kHostA, kHostB})
    for (const auto& s : {kSchedA, kSchedB}) {
      fe_before[fe + s] = value_or_zero(routed_via(fe, s));
      owner_before[fe + s] = value_or_zero(routed_via(fe, s, "owner"));
    }

  std::vector<Result<http::Response>> out(2 * kPerFrontend, make_error(ErrorCode::kInternal, "not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 2 * kPerFrontend; ++i)
    threads.emplace_back([&, i] {
      const json body = {{"prompt", system + "Story " + std::to_string(i) + ":"}, {"max_tokens", kTokens},
                         {"temperature", 0}, {"ignore_eos", true}};
      out[i] = c().post(i % 2 ? kHostB : kHostA, "/v1/completions", body.dump(), 60000);
    });
  // The bound is over requests in flight: check that each frontend had all of its own in flight
  // at once (they generate 160 tokens each), else the counts below would prove nothing.
  bool seen_a = false, seen_b = false;
  const bool all_in_flight = wait_until(
      [&] {
        seen_a = seen_a || frontend_metric(kHostA, "tessera_frontend_scheduler_inflight") == kPerFrontend;
        seen_b = seen_b || frontend_metric(kHostB, "tessera_frontend_scheduler_inflight") == kPerFrontend;
        return seen_a && seen_b;
      },
      milliseconds(30000), milliseconds(2));
  for (auto& t : threads) t.join();
  for (const auto& r : out) ASSERT_EQ(completion_tokens(r), kTokens) << (r.ok() ? r->body : r.error().to_string());
  ASSERT_TRUE(all_in_flight) << "the " << kPerFrontend << " requests of a frontend were never all in flight at once";

  // From the schedulers' own metrics: every request reached one of them, none above the bound.
  const double on_a = sched_routed(kHostA) - before_a, on_b = sched_routed(kHostB) - before_b;
  const int64_t cap = HashRing::capacity(2 * kPerFrontend, 2, kLoadEps);
  std::printf("one prefix, %d requests through 2 frontends: sched-a %g, sched-b %g (cap ceil(1.25 x %d / 2) = %lld)\n",
              2 * kPerFrontend, on_a, on_b, 2 * kPerFrontend, static_cast<long long>(cap));
  EXPECT_EQ(on_a + on_b, 2.0 * kPerFrontend);
  EXPECT_LE(std::max(on_a, on_b), static_cast<double>(cap)) << "the load bound between schedulers";
  EXPECT_GE(std::min(on_a, on_b), 1.0) << "the hot prefix did not spread: one scheduler took it all";
  // Each frontend within its own bound, and both agree on the key's owner (the same ring).
  const int64_t fe_cap = HashRing::capacity(kPerFrontend, 2, kLoadEps);
  std::set<std::string> owners;
  for (const auto& fe : {kHostA, kHostB}) {
    for (const auto& s : {kSchedA, kSchedB}) {
      const double n = value_or_zero(routed_via(fe, s)) - fe_before[fe + s];
      EXPECT_LE(n, static_cast<double>(fe_cap)) << "frontend " << fe << " -> " << s;
      if (value_or_zero(routed_via(fe, s, "owner")) - owner_before[fe + s] > 0) owners.insert(s);
    }
  }
  EXPECT_EQ(owners.size(), 1u) << "both frontends send the key's first requests to the same owner";
}

// Where `key` goes through host-a's frontend, sent alone (so never spilled: load 0 < cap):
// the scheduler whose routed counter moved, "" when the request failed or none did.
std::string placement(const std::string& key, int i) {
  const double a0 = value_or_zero(routed_via(kHostA, kSchedA)), b0 = value_or_zero(routed_via(kHostA, kSchedB));
  const json body = {{"prompt", "Probe number " + std::to_string(i)}, {"max_tokens", 1}, {"temperature", 0},
                     {"routing_key", key}};
  auto r = MultiHost::cluster().post(kHostA, "/v1/completions", body.dump(), 10000);
  if (!r.ok() || r->status != 200) return "";
  const double da = value_or_zero(routed_via(kHostA, kSchedA)) - a0, db = value_or_zero(routed_via(kHostA, kSchedB)) - b0;
  return da == 1 && db == 0 ? kSchedA : db == 1 && da == 0 ? kSchedB : "";
}

TEST_F(MultiHost, SchedulerHostDownLosesNothingUnstreamedAndItsWorkersMove) {
  // 1. Keys: where 24 routing keys go now, and the frontends' ring computed here the same way
  //    (HashRing named by the endpoints, routing_hash of the key): they must agree.
  constexpr int kKeys = 24;
  HashRing ring;
  ASSERT_OK(ring.add(kSchedA));
  ASSERT_OK(ring.add(kSchedB));
  std::vector<std::string> keys, before(kKeys);
  for (int k = 0; k < kKeys; ++k) keys.push_back("probe-" + std::to_string(k));
  for (int k = 0; k < kKeys; ++k) {
    before[k] = placement(keys[k], k);
    EXPECT_EQ(before[k], std::string(*ring.owner(routing_hash(keys[k])))) << keys[k];
  }
  // The fraction of all keys that moves when one of the N = 2 schedulers leaves (as
  // components_test's SchedulerRing test computes it, over 20,000 keys): sched-b's share.
  constexpr int kRingKeys = 20000;
  int ring_moved = 0;
  for (int k = 0; k < kRingKeys; ++k) {
    const std::string key = "prefix:" + std::to_string(k * 2654435761u);
    if (*ring.owner(routing_hash(key)) == kSchedB) ++ring_moved;
  }
  const double ring_fraction = static_cast<double>(ring_moved) / kRingKeys;

  // 2. Load through host-a's frontend (host-b's goes down with its host): 12 non-streamed exact
  //    greedy requests and 6 streams, all in flight, over both schedulers.
  const auto cases = greedy_cases64();
  constexpr int kPlain = 12, kStreams = 6, kTokens = 200;
  std::vector<std::string> text(kPlain), error(kPlain);
  std::vector<int> status(kPlain, 0);
  std::vector<Stream> streams(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kPlain; ++i)
    threads.emplace_back([&, i] {
      auto r = c().post(kHostA, "/v1/completions", completion_json(cases[i % cases.size()].prompt, kTokens), 30000);
      status[i] = r.ok() ? r->status : -1;
      auto j = r.ok() ? json::parse(r->body, nullptr, false) : json();
      if (r.ok() && r->status == 200 && !j.is_discarded()) text[i] = j["choices"][0]["text"].get<std::string>();
      else error[i] = r.ok() ? r->body : r.error().to_string();
    });
  for (int i = 0; i < kStreams; ++i)
    threads.emplace_back([&, i] { run_stream(c(), kHostA, "In the stream number " + std::to_string(i), kTokens, streams[i]); });
  double on_b = 0;
  const bool loaded = wait_until(
      [&] {  // one scrape: both figures of the same moment
        auto r = c().get(kHostA, kHttpPort, "/metrics", 2000);
        auto samples = r.ok() ? metrics::parse_text(r->body) : make_error(ErrorCode::kUnavailable, "no scrape");
        if (!samples.ok()) return false;
        double total = 0;
        on_b = 0;
        for (const auto& x : *samples) {
          if (x.name != "tessera_frontend_scheduler_inflight") continue;
          total += x.value;
          if (x.labels.find("scheduler=\"" + kSchedB + "\"") != std::string::npos) on_b += x.value;
        }
        return total == kPlain + kStreams;
      },
      milliseconds(20000), milliseconds(2));
  const double dead0 = value_or_zero(frontend_metric(kHostA, "tessera_frontend_peer_dead_requests_total"));
  const double requeued0 = value_or_zero(frontend_metric(kHostA, "tessera_frontend_requeued_requests_total"));
  ASSERT_OK(c().host("b").link_down());
  const auto down = Clock::now();
  EXPECT_TRUE(loaded) << "the requests were not all in flight when host-b went down";
  EXPECT_GE(on_b, 1.0) << "no request was on sched-b when its host went down";

  // 3. w4 (host-c; sched-b first, then sched-a) registers with sched-a within the documented
  //    bound: --scheduler-dead-ms of silence + one register round trip (1 s allowed).
  const bool moved = wait_until([&] { return c().live_workers("a") == 3.0; },
                                scaled(milliseconds(kSchedulerDeadMs + 1000)), milliseconds(5));
  const double moved_ms = ms_since(down);
  EXPECT_TRUE(moved) << "w4 did not register with sched-a within " << scaled(kSchedulerDeadMs + 1000.0) << " ms\n" << c().logs();
  const auto [w4_ip, w4_port] = ThreeHosts::worker_metrics("w4");
  EXPECT_EQ(c().metric(w4_ip, w4_port, "tessera_worker_scheduler_switches_total"), 1.0);

  for (auto& t : threads) t.join();
  int answered = 0, streamed_then_failed = 0, lost = 0;
  for (int i = 0; i < kPlain; ++i) {  // nothing streamed: each must be answered, exactly
    const auto& g = cases[i % cases.size()];
    if (status[i] == 200 && text[i].substr(0, g.completion.size()) == g.completion) {
      ++answered;
    } else {
      ++lost;
      ADD_FAILURE() << "request " << i << " lost or wrong: status " << status[i] << " " << error[i];
    }
  }
  for (int i = 0; i < kStreams; ++i) {
    const Stream& s = streams[i];
    if (s.done && s.error.empty()) {
      ++answered;
    } else if (s.chunks.load() >= 1 && is_clear_error(s.error)) {
      ++streamed_then_failed;
    } else {
      ++lost;
      ADD_FAILURE() << "stream " << i << " ended without its answer after " << s.chunks.load() << " chunks: status "
                    << s.status << " " << s.error;
    }
  }
  const double dead = value_or_zero(frontend_metric(kHostA, "tessera_frontend_peer_dead_requests_total")) - dead0;
  const double requeued = value_or_zero(frontend_metric(kHostA, "tessera_frontend_requeued_requests_total")) - requeued0;
  std::printf("host-b down with %g of %d requests on sched-b: %d answered, %d streamed then failed (peer_dead), %d lost; "
              "frontend-a: %g peer_dead, %g submitted again; w4 registered with sched-a after %.0f ms\n",
              on_b, kPlain + kStreams, answered, streamed_then_failed, lost, dead, requeued, moved_ms);
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(answered + streamed_then_failed, kPlain + kStreams);
  EXPECT_EQ(dead - requeued, static_cast<double>(streamed_then_failed))
      << "every peer_dead request that had not streamed was submitted again";

  // 4. The ring: once frontend-a has left sched-b, only sched-b's keys move (all to sched-a).
  ASSERT_TRUE(wait_until([&] { return frontend_metric(kHostA, "tessera_frontend_schedulers", "state=\"usable\"") == 1.0; },
                         milliseconds(5000)));
  int keys_moved = 0;
  for (int k = 0; k < kKeys; ++k) {
    const std::string now = placement(keys[k], k);
    EXPECT_EQ(now, kSchedA) << keys[k];
    if (now != before[k]) {
      ++keys_moved;
      EXPECT_EQ(before[k], kSchedB) << keys[k] << " moved although its scheduler stayed";
    }
  }
  std::printf("keys moved when 1 of 2 schedulers left: %d/%d probed (all of sched-b's); over %d keys of the ring %.4f "
              "(1/N = 0.5)\n",
              keys_moved, kKeys, kRingKeys, ring_fraction);
  EXPECT_LE(ring_fraction, 1.0 / 2 + 0.05) << "a leaving scheduler moves at most 1/N + eps of the keys";
  EXPECT_GE(keys_moved, 1);

  // 5. Back: host-b's link up, every worker home again (repair restarts the ones that moved);
  //    every key returns to exactly its first scheduler.
  ASSERT_OK(c().host("b").link_up());
  ASSERT_TRUE(wait_until([&] { return !std::isnan(c().live_workers("b")); }, milliseconds(5000)));  // reachable again
  c().repair();
  ASSERT_TRUE(c().settled(milliseconds(15000))) << c().logs();
  ASSERT_TRUE(wait_until([&] { return frontend_metric(kHostA, "tessera_frontend_schedulers", "state=\"usable\"") == 2.0; },
                         milliseconds(10000)));
  for (int k = 0; k < kKeys; ++k) EXPECT_EQ(placement(keys[k], k), before[k]) << keys[k];
}

// A scheduler stopped the orderly way (SIGTERM: a rolling update, a pod deleted) with
// non-streamed requests in flight on it: every one is answered, exactly (submitted again to the
// other scheduler, the client having seen nothing), and its workers register with the other one.
TEST_F(MultiHost, SchedulerStoppedWithSigtermLosesNothingUnstreamed) {
  const auto cases = greedy_cases64();
  constexpr int kPlain = 12, kTokens = 200;
  std::vector<std::string> text(kPlain), error(kPlain);
  std::vector<int> status(kPlain, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kPlain; ++i)
    threads.emplace_back([&, i] {
      auto r = c().post(kHostA, "/v1/completions", completion_json(cases[i % cases.size()].prompt, kTokens), 30000);
      status[i] = r.ok() ? r->status : -1;
      auto j = r.ok() ? json::parse(r->body, nullptr, false) : json();
      if (r.ok() && r->status == 200 && !j.is_discarded()) text[i] = j["choices"][0]["text"].get<std::string>();
      else error[i] = r.ok() ? r->body : r.error().to_string();
    });
  double on_b = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        on_b = value_or_zero(frontend_metric(kHostA, "tessera_frontend_scheduler_inflight", "scheduler=\"" + kSchedB + "\""));
        return value_or_zero(frontend_metric(kHostA, "tessera_frontend_scheduler_inflight")) == kPlain && on_b >= 1;
      },
      milliseconds(20000), milliseconds(2)));
  c().process("sched-b").signal(SIGTERM);
  for (auto& t : threads) t.join();
  for (int i = 0; i < kPlain; ++i) {
    const auto& g = cases[i % cases.size()];
    EXPECT_EQ(status[i], 200) << "request " << i << ": " << error[i];
    EXPECT_EQ(text[i].substr(0, g.completion.size()), g.completion) << "request " << i;
  }
  EXPECT_TRUE(wait_until([&] { return c().live_workers("a") == 4.0; }, milliseconds(kSchedulerDeadMs + 1000)))
      << c().logs();
  std::printf("sched-b stopped (SIGTERM) with %g of %d requests on it: all answered through sched-a\n", on_b, kPlain);
  (void)c().process("sched-b").wait_exit(milliseconds(5000));
  ASSERT_TRUE(c().start("sched-b")) << c().logs();
  c().repair();
}

// --- Redis shards ------------------------------------------------------------------------------

const std::vector<std::pair<std::string, std::string>>& admin_auth() {
  static const std::vector<std::pair<std::string, std::string>> h = {{"Authorization", std::string("Bearer ") + kAdminToken}};
  return h;
}
std::string pref_path(const std::string& user) { return "/admin/v1/users/" + user + "/preference"; }
std::string pref_text(const std::string& user, const std::string& version) {
  return "Preference " + version + " of " + user + ": stories about a red ball.";
}

// PUT through the frontend on `ip`; the HTTP status.
int put_pref(const std::string& ip, const std::string& user, const std::string& version) {
  const json body = {{"preference", pref_text(user, version)}, {"alpha", 0.5}};
  auto r = MultiHost::cluster().request(
      {.host = ip, .port = kHttpPort, .method = "PUT", .path = pref_path(user), .body = body.dump(), .headers = admin_auth()});
  return r.ok() ? r->status : -1;
}
// GET through the frontend on `ip`: the stored text, "404" for a miss, "?..." for anything else.
std::string get_pref(const std::string& ip, const std::string& user) {
  auto r = MultiHost::cluster().request(
      {.host = ip, .port = kHttpPort, .method = "GET", .path = pref_path(user), .headers = admin_auth()});
  if (!r.ok()) return "?" + r.error().to_string();
  if (r->status == 404) return "404";
  auto j = json::parse(r->body, nullptr, false);
  if (r->status != 200 || j.is_discarded() || !j.contains("preference")) return "?" + std::to_string(r->status) + " " + r->body;
  return j["preference"].get<std::string>();
}
// Stored preferences on a Redis shard (their names; index sets excluded), read with redis-cli
// from the client host; -1 when it cannot be read.
int keys_on(const std::string& ip) {
  auto r = MultiHost::cluster().host("client").exec({"redis-cli", "-h", ip, "-p", "6379", "--scan", "--pattern", "tessera:pref_kv:*"});
  if (!r.ok() || r->first != 0) return -1;
  return static_cast<int>(std::count(r->second.begin(), r->second.end(), '\n'));
}
double shard_up(const std::string& kvstore_ip, const std::string& shard) {
  return MultiHost::cluster().metric(kvstore_ip, kKvstoreMetricsPort, "tessera_kvstore_redis_shard_up", "shard=\"" + shard + "\"");
}

TEST_F(MultiHost, RedisShardLostServesNothingWrongAndWritesGoBackAfter) {
  const std::string kShardC = kHostC + ":6379";
  if (keys_on(kHostC) < 0) GTEST_SKIP() << "SKIPPED: redis-cli (Debian redis-tools) is needed to read the shards";
  // Users stored through host-a's frontend (kvstore-a): "keep-*" are read through host-b's too
  // (so kvstore-b holds them in L1), "fresh-*" are not.
  std::vector<std::string> keep, fresh;
  for (int i = 0; i < 4; ++i) keep.push_back("keep-" + std::to_string(i));
  for (int i = 0; i < 12; ++i) fresh.push_back("fresh-" + std::to_string(i));
  const int c0 = keys_on(kHostC);
  for (const auto& u : keep) ASSERT_EQ(put_pref(kHostA, u, "v1"), 200) << u;
  const int c1 = keys_on(kHostC);
  for (const auto& u : fresh) ASSERT_EQ(put_pref(kHostA, u, "v1"), 200) << u;
  const int fresh_on_c = keys_on(kHostC) - c1;
  std::printf("16 preferences over 2 Redis shards: %d of the 12 fresh ones and %d of the 4 kept ones on host-c's\n",
              fresh_on_c, c1 - c0);
  ASSERT_GE(fresh_on_c, 1);
  ASSERT_LT(fresh_on_c, 12);
  for (const auto& u : keep) ASSERT_EQ(get_pref(kHostB, u), pref_text(u, "v1"));

  // Freeze host-c's Redis: it neither answers nor resets; both kvstores mark its shard down.
  c().process("redis-c").signal(SIGSTOP);
  ASSERT_TRUE(wait_until([&] { return shard_up(kHostA, kShardC) == 0.0 && shard_up(kHostB, kShardC) == 0.0; },
                         milliseconds(10000)))
      << c().logs();
  // L1 keeps serving; a node without the entry misses the lost shard's keys, never reads them elsewhere.
  for (const auto& u : keep) EXPECT_EQ(get_pref(kHostB, u), pref_text(u, "v1")) << "kvstore-b's L1, " << u;
  for (const auto& u : keep) EXPECT_EQ(get_pref(kHostA, u), pref_text(u, "v1")) << "kvstore-a's L1, " << u;
  for (const auto& u : fresh) EXPECT_EQ(get_pref(kHostA, u), pref_text(u, "v1")) << "kvstore-a's L1, " << u;
  std::set<std::string> lost;  // fresh users on the frozen shard: misses through host-b
  for (const auto& u : fresh) {
    const std::string got = get_pref(kHostB, u);
    if (got == "404") lost.insert(u);
    else EXPECT_EQ(got, pref_text(u, "v1")) << u;
  }
  EXPECT_EQ(static_cast<int>(lost.size()), fresh_on_c) << "exactly the frozen shard's keys miss";

  // Written meanwhile through host-a: v2 goes to kvstore-a's L1 (and to host-b's shard for its keys).
  for (const auto& u : fresh) ASSERT_EQ(put_pref(kHostA, u, "v2"), 200) << u;
  for (const auto& u : fresh) EXPECT_EQ(get_pref(kHostA, u), pref_text(u, "v2")) << u;
  for (const auto& u : fresh) {
    if (lost.count(u)) {
      EXPECT_EQ(get_pref(kHostB, u), "404") << u << ": the frozen shard's old value must not be served";
    } else {  // kvstore-b dropped its v1 copy on kvstore-a's key event
      EXPECT_TRUE(wait_until([&] { return get_pref(kHostB, u) == pref_text(u, "v2"); }, milliseconds(5000))) << u;
    }
  }

  // Back (with its old v1 values): never served; the v2 writes reach it.
  c().process("redis-c").signal(SIGCONT);
  ASSERT_TRUE(wait_until([&] { return shard_up(kHostA, kShardC) == 1.0 && shard_up(kHostB, kShardC) == 1.0; },
                         milliseconds(15000)))
      << c().logs();
  std::set<std::string> pending(lost.begin(), lost.end());
  int stale = 0;
  const bool synced = wait_until(
      [&] {
        for (auto it = pending.begin(); it != pending.end();) {
          const std::string got = get_pref(kHostB, *it);
          if (got == pref_text(*it, "v2")) {
            it = pending.erase(it);
            continue;
          }
          if (got != "404") {
            ++stale;
            ADD_FAILURE() << *it << " served " << got;
          }
          ++it;
        }
        return pending.empty();
      },
      milliseconds(10000), milliseconds(20));
  EXPECT_TRUE(synced) << pending.size() << " of host-c's keys never served their v2 through host-b";
  EXPECT_EQ(stale, 0);
  EXPECT_EQ(keys_on(kHostC) - c1, fresh_on_c) << "the v2 writes went back to host-c's shard";
  // New writes reach it again: v3 through host-b, read through host-a (its L1 copy dropped by the event).
  const std::string u = *lost.begin();
  ASSERT_EQ(put_pref(kHostB, u, "v3"), 200);
  EXPECT_TRUE(wait_until([&] { return get_pref(kHostA, u) == pref_text(u, "v3"); }, milliseconds(5000)));
  for (const auto& group : {keep, fresh})
    for (const auto& v : group)
      (void)c().request({.host = kHostA, .port = kHttpPort, .method = "DELETE", .path = pref_path(v), .headers = admin_auth()});
}

}  // namespace
}  // namespace tessera::testing
