// Scenario tests of the scheduler process's components around a dead worker: the worker
// registry's fingerprint rule, and Failover moving unstreamed requests (re-queue) and streamed
// ones (migration: resumed after the tokens sent) to a live worker, while requests moved too
// often or with nowhere to go end with peer_dead at their frontend. Real sockets on loopback; a
// DEALER plays the frontend.
#include "failover.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "tessera/common/zmq_util.h"
#include "tessera/testing/scenario.h"

namespace tessera::scheduler_app {
namespace {

using tessera::testing::Scenario;

protocol::RegisterWorker worker_info(uint64_t fingerprint) {
  return protocol::RegisterWorker{.model_fingerprint = fingerprint, .num_pages = 64, .page_size = 4,
                                  .max_batch_tokens = 256, .max_seq_len = 256, .vocab_size = 100};
}

class FailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Sockets::bind("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", curve::Keys::insecure(), registry);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    sockets = std::move(*s);
    workers = std::make_unique<WorkerRegistry>(WorkerLimits{}, LivenessConfig{}, std::move(*scheduler::Router::create({})), m);
    table = std::make_unique<RequestTable>(*sockets, m);
    failover = std::make_unique<Failover>(*workers, *table, m);
    // The frontend says hello first, so the scheduler's ROUTER knows its routing id.
    frontend.set(zmq::sockopt::routing_id, std::string("fe"));
    frontend.set(zmq::sockopt::linger, 0);
    frontend.connect(sockets->frontend_endpoint());
    ASSERT_TRUE(zmqu::send(frontend, {protocol::encode(protocol::Heartbeat{.id = 1})}).ok());
    auto hello = zmqu::recv(sockets->frontends());
    ASSERT_TRUE(hello.ok());
  }

  // Submits a request (all with one routing key, so they land on one worker) and tracks it.
  uint64_t submit(uint64_t client_id) {
    scheduler::Intake intake;
    protocol::GenerateRequest r{.id = client_id, .prompt_tokens = {1, 2, 3, 4, 5}, .max_tokens = 4,
                                .routing_key = "session"};
    auto a = intake.admit(r, table->next_id(), *workers->facts());
    EXPECT_TRUE(a.ok());
    const uint64_t id = a->request.id;
    auto route = workers->place(a->request);
    EXPECT_TRUE(route.ok()) << route.error().to_string();
    table->add(id, TrackedRequest{.frontend = "fe", .client_id = client_id, .worker = route->worker,
                                  .original = a->request});
    return id;
  }

  // The next message the frontend receives, within 5 s.
  std::optional<protocol::Message> next_event() {
    zmq::pollitem_t item{frontend.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(5000)) <= 0) return std::nullopt;
    auto frames = zmqu::recv(frontend);
    if (!frames.ok() || frames->empty()) return std::nullopt;
    auto msg = protocol::decode(frames->back());
    if (!msg.ok()) return std::nullopt;
    return std::move(*msg);
  }

  metrics::Registry registry;
  SchedulerMetrics m = SchedulerMetrics::create(registry);
  std::unique_ptr<Sockets> sockets;
  std::unique_ptr<WorkerRegistry> workers;
  std::unique_ptr<RequestTable> table;
  std::unique_ptr<Failover> failover;
  zmq::context_t ctx{1};
  zmq::socket_t frontend{ctx, zmq::socket_type::dealer};
};

TEST_F(FailoverTest, EveryWorkerServesTheSameModel) {
  Scenario("the fingerprint rule")
      .Given("w0 serving model 1", [&] { ASSERT_TRUE(workers->add("w0", worker_info(1)).ok()); })
      .Then("w1 with model 2 is refused, naming both fingerprints", [&] {
        Status st = workers->admissible("w1", worker_info(2));
        ASSERT_FALSE(st.ok());
        EXPECT_NE(st.error().message.find("0000000000000002"), std::string::npos) << st.error().message;
        EXPECT_NE(st.error().message.find("0000000000000001"), std::string::npos) << st.error().message;
      })
      .And("w1 with model 1 is admitted", [&] { EXPECT_TRUE(workers->admissible("w1", worker_info(1)).ok()); })
      .And("w0, alone, may come back with another model", [&] {
        EXPECT_TRUE(workers->admissible("w0", worker_info(2)).ok());
      })
      .When("w0 leaves", [&] { EXPECT_TRUE(workers->remove("w0")); })
      .Then("any model is welcome again", [&] {
        EXPECT_FALSE(workers->facts());
        EXPECT_TRUE(workers->admissible("w1", worker_info(2)).ok());
      });
}

TEST_F(FailoverTest, UnstreamedRequestsAreRequeuedStreamedOnesMigrate) {
  uint64_t quiet = 0, streamed = 0;
  std::string dead;
  Scenario("a worker dies holding two requests")
      .Given("two workers and two requests on one of them, one of which streamed two tokens", [&] {
        ASSERT_TRUE(workers->add("w0", worker_info(1)).ok());
        ASSERT_TRUE(workers->add("w1", worker_info(1)).ok());
        quiet = submit(10);
        streamed = submit(11);
        dead = table->find(quiet)->worker;
        ASSERT_EQ(table->find(streamed)->worker, dead);
        table->emit(scheduler::StepOutcome{.tokens = {{.request_id = streamed, .token = 42}}});
        table->emit(scheduler::StepOutcome{.tokens = {{.request_id = streamed, .token = 43, .index = 1}}});
        for (int i = 0; i < 2; ++i) {
          auto tok = next_event();
          ASSERT_TRUE(tok && std::holds_alternative<protocol::TokenEvent>(*tok));
        }
      })
      .When("that worker dies", [&] { failover->worker_dead(dead, "worker '" + dead + "' stopped heartbeating"); })
      .Then("the quiet request is queued on the other worker, as if new", [&] {
        ASSERT_NE(table->find(quiet), nullptr);
        EXPECT_NE(table->find(quiet)->worker, dead);
        EXPECT_EQ(table->find(quiet)->requeues, 1);
        EXPECT_EQ(table->find(quiet)->migrations, 0);
        EXPECT_EQ(m.requeued->value(), 1.0);
      })
      .And("the streamed one is migrated there, resuming after the tokens it sent", [&] {
        const TrackedRequest* r = table->find(streamed);
        ASSERT_NE(r, nullptr);
        EXPECT_NE(r->worker, dead);
        EXPECT_EQ(r->migrations, 1);
        EXPECT_EQ(r->requeues, 0);
        EXPECT_EQ(r->generated, (std::vector<int32_t>{42, 43}));
        EXPECT_EQ(m.migrated->value(), 1.0);
        EXPECT_EQ(m.peer_dead->value(), 0.0);
        EXPECT_EQ(workers->find(r->worker)->batcher->num_waiting(), 2);
        EXPECT_EQ(workers->find(dead), nullptr);
      })
      .And("its frontend hears nothing: no error", [&] {
        zmq::pollitem_t item{frontend.handle(), 0, ZMQ_POLLIN, 0};
        EXPECT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(100)), 0);
      });
}

TEST_F(FailoverTest, MigrationsAreBounded) {
  uint64_t moved = 0;
  Scenario("limit of migrations")
      .Given("two workers and a streamed request already migrated kMaxMigrations times", [&] {
        ASSERT_TRUE(workers->add("w0", worker_info(1)).ok());
        ASSERT_TRUE(workers->add("w1", worker_info(1)).ok());
        moved = submit(30);
        table->emit(scheduler::StepOutcome{.tokens = {{.request_id = moved, .token = 42}}});
        ASSERT_TRUE(next_event().has_value());
        table->find(moved)->migrations = Failover::kMaxMigrations;
      })
      .When("its worker dies", [&] {
        const std::string w = table->find(moved)->worker;
        failover->worker_dead(w, "worker '" + w + "' stopped heartbeating");
      })
      .Then("it ends with peer_dead saying it was moved too often", [&] {
        auto ev = next_event();
        ASSERT_TRUE(ev.has_value());
        auto* err = std::get_if<protocol::ErrorEvent>(&*ev);
        ASSERT_NE(err, nullptr);
        EXPECT_EQ(err->id, 30u);
        EXPECT_EQ(err->code, ErrorCode::kPeerDead);
        EXPECT_NE(err->message.find("already migrated 2 times"), std::string::npos) << err->message;
        EXPECT_EQ(table->find(moved), nullptr);
        EXPECT_EQ(m.migrated->value(), 0.0);
      });
}

TEST_F(FailoverTest, MaxMigrationsZeroEndsStreamedRequestsAsBefore) {
  Failover no_migration(*workers, *table, m, /*max_migrations=*/0);
  uint64_t streamed = 0;
  Scenario("--max-migrations 0")
      .Given("two workers and a streamed request", [&] {
        ASSERT_TRUE(workers->add("w0", worker_info(1)).ok());
        ASSERT_TRUE(workers->add("w1", worker_info(1)).ok());
        streamed = submit(40);
        table->emit(scheduler::StepOutcome{.tokens = {{.request_id = streamed, .token = 42}}});
        ASSERT_TRUE(next_event().has_value());
      })
      .When("its worker dies", [&] {
        const std::string w = table->find(streamed)->worker;
        no_migration.worker_dead(w, "worker '" + w + "' stopped heartbeating");
      })
      .Then("it ends with peer_dead naming the option", [&] {
        auto ev = next_event();
        ASSERT_TRUE(ev.has_value());
        auto* err = std::get_if<protocol::ErrorEvent>(&*ev);
        ASSERT_NE(err, nullptr);
        EXPECT_EQ(err->code, ErrorCode::kPeerDead);
        EXPECT_NE(err->message.find("migration is off (--max-migrations 0)"), std::string::npos) << err->message;
        EXPECT_EQ(m.migrated->value(), 0.0);
      });
}

TEST_F(FailoverTest, RequeuesAreBoundedAndNeedALiveWorker) {
  uint64_t tired = 0, last = 0;
  Scenario("limits of re-queueing")
      .Given("one worker, a request already re-queued kMaxRequeues times and a fresh one", [&] {
        ASSERT_TRUE(workers->add("w0", worker_info(1)).ok());
        tired = submit(20);
        table->find(tired)->requeues = Failover::kMaxRequeues;
        last = submit(21);
      })
      .When("the only worker dies", [&] { failover->worker_dead("w0", "w0 shut down"); })
      .Then("both end with peer_dead: one moved too often, one has nowhere to go", [&] {
        int seen = 0;
        for (int i = 0; i < 2; ++i) {
          auto ev = next_event();
          ASSERT_TRUE(ev.has_value());
          auto* err = std::get_if<protocol::ErrorEvent>(&*ev);
          ASSERT_NE(err, nullptr);
          EXPECT_EQ(err->code, ErrorCode::kPeerDead);
          if (err->id == 20u) {
            EXPECT_NE(err->message.find("already re-queued 3 times"), std::string::npos) << err->message;
            ++seen;
          } else if (err->id == 21u) {
            EXPECT_NE(err->message.find("was lost"), std::string::npos) << err->message;
            ++seen;
          }
        }
        EXPECT_EQ(seen, 2);
        EXPECT_TRUE(table->empty());
      });
}

// CacheBlend over several steps is planned only for a worker that announces blend_steps at
// registration; an older one (chunk_blend without it, or no list) gets one-step blends only.
TEST_F(FailoverTest, MultiStepBlendsOnlyForWorkersAnnouncingBlendSteps) {
  protocol::RegisterWorker newer = worker_info(1), older = worker_info(1), bare = worker_info(1);
  newer.capabilities = {"cpu", "greedy", "chunk_blend", "blend_steps"};
  older.capabilities = {"cpu", "greedy", "chunk_blend"};
  auto a = workers->add("newer", newer);
  auto b = workers->add("older", older);
  auto c = workers->add("bare", bare);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_TRUE(a->blend_steps);
  EXPECT_FALSE(b->blend_steps);
  EXPECT_FALSE(c->blend_steps);
}

// Capabilities advertised at registration decide placement: a request is queued only on a
// worker whose backend has what it needs (kv_fill for a preference, each sampling option),
// and refused at once, naming what is missing, when no live worker has it.
TEST_F(FailoverTest, RequestsGoOnlyToWorkersWithTheCapabilitiesTheyNeed) {
  auto with_caps = [](std::vector<std::string> caps) {
    protocol::RegisterWorker r = worker_info(1);
    r.capabilities = std::move(caps);
    return r;
  };
  scheduler::Intake intake;
  auto admit = [&](protocol::GenerateRequest r) {
    auto a = intake.admit(std::move(r), table->next_id(), *workers->facts());
    EXPECT_TRUE(a.ok()) << a.error().to_string();
    return a->request;
  };
  const protocol::GenerateRequest sampled{.id = 1, .prompt_tokens = {1, 2, 3},
                                          .sampling = {.temperature = 0.8f, .top_p = 0.9f}, .max_tokens = 4,
                                          .routing_key = "k"};
  const protocol::GenerateRequest greedy{.id = 2, .prompt_tokens = {1, 2, 3}, .sampling = {.temperature = 0.0f},
                                         .max_tokens = 4, .routing_key = "k"};
  Scenario("placement by capability")
      .Given("a cuda worker without kv_fill or top_p", [&] {
        ASSERT_TRUE(workers->add("gpu", with_caps({"cuda", "greedy", "temperature", "logprobs"})).ok());
      })
      .Then("a top_p request is refused, naming the worker and the capability", [&] {
        auto r = workers->place(admit(sampled));
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.error().code, ErrorCode::kUnsupported);
        EXPECT_NE(r.error().message.find("gpu (cuda) lacks top_p"), std::string::npos) << r.error().message;
      })
      .And("a greedy request is placed there", [&] {
        auto r = workers->place(admit(greedy));
        ASSERT_TRUE(r.ok()) << r.error().to_string();
        EXPECT_EQ(r->worker, "gpu");
      })
      .When("a cpu worker with every capability joins", [&] {
        ASSERT_TRUE(workers->add("cpu", with_caps({"cpu", "kv_fill", "greedy", "temperature", "top_k", "top_p",
                                                   "min_p", "penalties", "logprobs"})).ok());
      })
      .Then("every top_p request goes to the cpu worker, however loaded it is", [&] {
        for (int i = 0; i < 20; ++i) {
          protocol::GenerateRequest r = sampled;
          r.routing_key = "key" + std::to_string(i);
          auto placed = workers->place(admit(r));
          ASSERT_TRUE(placed.ok()) << placed.error().to_string();
          EXPECT_EQ(placed->worker, "cpu");
        }
      });
}

}  // namespace
}  // namespace tessera::scheduler_app
