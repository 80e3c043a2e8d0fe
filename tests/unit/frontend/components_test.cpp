// The frontend's owned components in isolation: admission, ring choice, the in-flight table and
// request preparation (routing key policy).
#include <algorithm>
#include <cstdio>

#include <gtest/gtest.h>

#include "tessera/common/routing.h"
#include "tessera/frontend/admission.h"
#include "tessera/frontend/inflight_table.h"
#include "tessera/frontend/request_preparer.h"
#include "tessera/frontend/scheduler_links.h"
#include "tessera/frontend/scheduler_ring.h"
#include "tessera/testing/paths.h"

namespace tessera::frontend {
namespace {

TEST(Admission, ConcurrencyLimitAndQueueLimitRefuseWithOverloaded) {
  metrics::Registry registry;
  metrics::Gauge& gauge = registry.gauge("inflight", "test");
  Admission admission({.max_concurrent = 2, .max_queued = 10}, gauge);
  auto a = admission.admit(0), b = admission.admit(0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(admission.in_flight(), 2);
  EXPECT_EQ(gauge.value(), 2);
  auto c = admission.admit(0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ErrorCode::kOverloaded);
  EXPECT_EQ(admission.in_flight(), 2) << "a refused request holds no slot";
  a->reset();  // a slot is freed by its destructor, on whatever path the request ends
  EXPECT_EQ(admission.in_flight(), 1);
  EXPECT_EQ(gauge.value(), 1);
  EXPECT_TRUE(admission.admit(0).ok());
  auto queued = admission.admit(10);
  ASSERT_FALSE(queued.ok());
  EXPECT_EQ(queued.error().code, ErrorCode::kOverloaded);
  EXPECT_NE(queued.error().message.find("queues are full"), std::string::npos);
  EXPECT_EQ(admission.in_flight(), 1);
}

TEST(SchedulerRing, PicksOnlyUsableSchedulersAndMovesOnlyTheLostShare) {
  SchedulerRing ring({"tcp://a:1", "tcp://b:2", "tcp://c:3"});
  EXPECT_FALSE(ring.pick("user:alice").has_value());
  ring.set_usable(1, true);
  EXPECT_EQ(ring.pick("user:alice"), 1u);
  ring.set_usable(0, true);
  ring.set_usable(2, true);
  std::vector<size_t> before;
  for (int k = 0; k < 300; ++k) before.push_back(*ring.pick("user:u" + std::to_string(k)));
  ring.set_usable(2, false);
  int moved = 0, used[3] = {0, 0, 0};
  for (int k = 0; k < 300; ++k) {
    const size_t now = *ring.pick("user:u" + std::to_string(k));
    EXPECT_NE(now, 2u);
    if (before[k] != 2) {
      EXPECT_EQ(now, before[k]) << "a key of a scheduler that stayed must not move";
    }
    moved += before[k] != now;
    ++used[before[k]];
  }
  EXPECT_EQ(moved, used[2]);
  EXPECT_GT(used[0], 0);
  EXPECT_GT(used[1], 0);
  EXPECT_GT(used[2], 0);
}

// Issue 14: one hot prefix must not pile onto one scheduler. 40 requests of one routing key in
// flight at once over 3 schedulers: none holds more than capacity = ceil(1.25 x 40 / 3) = 17,
// the key's owner takes its share first, the spill follows the key's own clockwise order (so it
// reaches the same schedulers every time), and with nothing in flight the owner is chosen.
TEST(SchedulerRing, BoundedLoadsSpreadOneHotKeyWithinTheCap) {
  SchedulerRing ring({"tcp://10.0.0.1:8100", "tcp://10.0.0.2:8100", "tcp://10.0.0.3:8100"});
  for (size_t i = 0; i < 3; ++i) ring.set_usable(i, true);
  const std::string key = "prefix:00c0ffee00c0ffee";
  const size_t owner = *ring.pick(key);
  std::vector<int64_t> load(3, 0);
  auto by_load = [&](size_t i) { return load[i]; };
  std::vector<size_t> spill_targets;
  for (int r = 0; r < 40; ++r) {
    auto c = ring.pick_bounded(key, by_load, 0.25);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->spilled, c->scheduler != owner);
    if (r == 0) {
      EXPECT_EQ(c->scheduler, owner) << "nothing in flight: the owner (prefix affinity)";
    }
    ++load[c->scheduler];
    const int64_t total = r + 1;
    const int64_t cap = HashRing::capacity(total, 3, 0.25);
    for (int64_t l : load) EXPECT_LE(l, cap) << "after " << total << " requests";
  }
  const int64_t max = *std::max_element(load.begin(), load.end());
  EXPECT_LE(max, HashRing::capacity(40, 3, 0.25));
  EXPECT_EQ(max, load[owner]) << "the owner is filled first";
  EXPECT_LE(static_cast<double>(max) / (40.0 / 3.0), 1.25 + 3.0 / 40.0) << "max/mean within 1.25 (+ rounding)";
  for (int64_t l : load) EXPECT_GT(l, 0);
  // Everything finished: the owner again. The bound off (eps 0): always the owner.
  std::fill(load.begin(), load.end(), 0);
  EXPECT_EQ(ring.pick_bounded(key, by_load, 0.25)->scheduler, owner);
  load[owner] = 1000;
  EXPECT_EQ(ring.pick_bounded(key, by_load, 0.0)->scheduler, owner);
  EXPECT_FALSE(ring.pick_bounded(key, by_load, 0.0)->spilled);
}

// A joining or leaving scheduler moves about 1/N of the routing keys, and only to or from
// itself (the figures are in docs/architecture.md "Several schedulers").
TEST(SchedulerRing, MembershipChangesMoveAtMostTheirShareOfKeys) {
  SchedulerRing ring;
  for (int s = 1; s <= 5; ++s) ring.add("tcp://10.0.0." + std::to_string(s) + ":8100");
  for (size_t i = 0; i < 4; ++i) ring.set_usable(i, true);
  constexpr int kKeys = 20000;
  auto key = [](int k) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "prefix:%016llx", static_cast<unsigned long long>(k) * 0x9e3779b97f4a7c15ULL);
    return std::string(buf);
  };
  std::vector<size_t> four(kKeys);
  for (int k = 0; k < kKeys; ++k) four[k] = *ring.pick(key(k));
  ring.set_usable(4, true);  // N = 4 -> 5
  int moved = 0;
  for (int k = 0; k < kKeys; ++k) {
    const size_t now = *ring.pick(key(k));
    if (now != four[k]) {
      ++moved;
      EXPECT_EQ(now, 4u) << "a key moves only to the joining scheduler";
    }
  }
  const double joined = static_cast<double>(moved) / kKeys;
  EXPECT_LE(joined, 1.0 / 5 + 0.05);
  EXPECT_GE(joined, 1.0 / 5 - 0.08) << "the new scheduler takes its share";
  ring.set_usable(1, false);  // N = 5 -> 4
  std::vector<size_t> five(kKeys);
  ring.set_usable(1, true);
  for (int k = 0; k < kKeys; ++k) five[k] = *ring.pick(key(k));
  ring.set_usable(1, false);
  moved = 0;
  for (int k = 0; k < kKeys; ++k) {
    const size_t now = *ring.pick(key(k));
    if (now != five[k]) {
      ++moved;
      EXPECT_EQ(five[k], 1u) << "only the leaving scheduler's keys move";
    }
  }
  const double left = static_cast<double>(moved) / kKeys;
  EXPECT_LE(left, 1.0 / 5 + 0.05);
  std::printf("keys moved: %.4f on a join (4 -> 5), %.4f on a leave (5 -> 4); 1/5 = 0.2\n", joined, left);
}

// Membership changes at the links: a slot keeps its index for the life of the process; an
// unlisted link stays open until its requests ended; a re-listed endpoint reopens its own slot.
TEST(SchedulerLinks, SlotsAreStableAcrossMembershipChanges) {
  zmq::context_t ctx(1);
  metrics::Registry registry;
  auto links = SchedulerLinks::create(ctx, {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2"},
                                      {.interval = std::chrono::milliseconds(100), .dead_after = std::chrono::milliseconds(1000)},
                                      registry);
  ASSERT_TRUE(links.ok()) << links.error().to_string();
  SchedulerLinks& l = **links;
  EXPECT_EQ(l.size(), 2u);
  EXPECT_EQ(l.listed_count(), 2u);
  auto change = l.set_listed({"tcp://127.0.0.1:2", "tcp://127.0.0.1:3"});
  EXPECT_EQ(change.left, std::vector<size_t>{0});
  EXPECT_EQ(change.joined, std::vector<size_t>{2});
  EXPECT_EQ(l.listed_count(), 2u);
  ASSERT_TRUE(l.open(0));
  EXPECT_FALSE(l[0].listed());
  EXPECT_FALSE(l[0].usable()) << "an unlisted scheduler takes no new request";
  EXPECT_FALSE(l.close_if_idle(0, 1)) << "it keeps its link while a request is in flight there";
  EXPECT_FALSE(l.close_if_idle(1, 0)) << "a listed one is never closed";
  EXPECT_TRUE(l.close_if_idle(0, 0));
  EXPECT_FALSE(l.open(0));
  change = l.set_listed({"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3"});
  EXPECT_EQ(change.joined, std::vector<size_t>{0}) << "the same endpoint gets its own slot back";
  EXPECT_TRUE(change.left.empty());
  EXPECT_TRUE(l.open(0));
  EXPECT_EQ(l.endpoints(), (std::vector<std::string>{"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3"}));
  EXPECT_EQ(l.status().size(), 2u) << "the snapshot is refreshed by publish()";
  l.publish();
  EXPECT_EQ(l.status().size(), 3u);
}

struct RecordingSink : RequestSink {
  std::vector<protocol::Message> got;
  void on_message(protocol::Message m) override { got.push_back(std::move(m)); }
};

TEST(InflightTable, TerminalEventsRemoveAndFailuresReachOnlyTheirScheduler) {
  InflightTable table;
  auto s1 = std::make_shared<RecordingSink>(), s2 = std::make_shared<RecordingSink>(), s3 = std::make_shared<RecordingSink>();
  table.add(1, s1, 0);
  table.add(2, s2, 1);
  table.add(3, s3, 1);
  EXPECT_TRUE(table.deliver(protocol::TokenEvent{.id = 1, .tokens = {5}}));
  EXPECT_TRUE(table.contains(1));
  EXPECT_TRUE(table.deliver(protocol::FinalEvent{.id = 1}));
  EXPECT_FALSE(table.contains(1));
  EXPECT_FALSE(table.deliver(protocol::TokenEvent{.id = 1})) << "events after the final one are dropped";
  EXPECT_EQ(s1->got.size(), 2u);
  EXPECT_EQ(table.scheduler_of(2), 1);
  EXPECT_TRUE(table.erase(2));  // abandoned: its sink hears nothing more
  EXPECT_EQ(table.fail_scheduler(1, ErrorCode::kPeerDead, "gone"), 1u);
  EXPECT_TRUE(s2->got.empty());
  ASSERT_EQ(s3->got.size(), 1u);
  EXPECT_EQ(std::get<protocol::ErrorEvent>(s3->got[0]).code, ErrorCode::kPeerDead);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.count(1), 0);
  table.add(7, s1, 2);
  table.add(8, s2, 2);
  EXPECT_EQ(table.count(2), 2) << "the ring's load: requests in flight per scheduler";
  EXPECT_TRUE(table.deliver(protocol::FinalEvent{.id = 7}));
  EXPECT_EQ(table.count(2), 1);
}

TEST(RequestPreparer, RoutingKeyFollowsTheCommonPolicy) {
  FrontendConfig config;
  config.model = testing::shared_path("models/stories260K/stories260K.bin");
  config.tokenizer = testing::shared_path("models/stories260K/tok512.bin");
  config.max_prompt_tokens = 64;
  auto prep = RequestPreparer::create(config);
  ASSERT_TRUE(prep.ok()) << prep.error().to_string();
  protocol::GenerateRequest r;
  r.prompt = "Once upon a time";
  ASSERT_TRUE((*prep)->prepare(r).ok());
  (*prep)->finish(r);
  EXPECT_EQ(r.routing_key, routing_key_for("", "", r.prompt_tokens));
  EXPECT_EQ(r.routing_key.rfind("prefix:", 0), 0u);
  r.user = "alice";
  r.routing_key.clear();
  (*prep)->finish(r);
  EXPECT_EQ(r.routing_key, "user:alice");
  r.routing_key = "session-7";
  (*prep)->finish(r);
  EXPECT_EQ(r.routing_key, "session-7");
  // Limits: a prompt over --max-prompt-tokens is refused; a preference needs a user.
  protocol::GenerateRequest big;
  big.prompt = std::string(2000, 'a');
  EXPECT_EQ((*prep)->prepare(big).error().code, ErrorCode::kTooLarge);
  protocol::GenerateRequest anon;
  anon.prompt = "Once";
  anon.preference = "likes cats";
  EXPECT_EQ((*prep)->prepare(anon).error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::frontend
