// The frontend's owned components in isolation: admission, ring choice, the in-flight table and
// request preparation (routing key policy).
#include <gtest/gtest.h>

#include "tessera/common/routing.h"
#include "tessera/frontend/admission.h"
#include "tessera/frontend/inflight_table.h"
#include "tessera/frontend/request_preparer.h"
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
