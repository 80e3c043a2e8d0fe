// The real tessera-frontend with a real tessera-kvstore (no Redis) and a FAKE scheduler
// (harness.h): admission comes before any expensive work, and the stored-preference lookup never
// blocks an I/O thread — a request without `user` is not delayed by a frozen kvstore, and one
// with a user continues when its lookup completes.
#include <signal.h>

#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>
#include <zmq.hpp>

#include "harness.h"
#include "tessera/common/metrics.h"
#include "tessera/common/zmq_util.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/paths.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string tok_path() { return shared_path("models/stories260K/tok512.bin"); }

std::vector<int32_t> story_tokens() {
  auto tok = load_tokenizer(tok_path());
  EXPECT_TRUE(tok.ok());
  auto p = (*tok)->encode("Once upon a time", true);
  auto all = (*tok)->encode("Once upon a time, there was a little girl named Lily.", true);
  return std::vector<int32_t>(all.begin() + static_cast<long>(p.size()), all.end());
}

// tessera-kvstore on a free loopback port, L1 only.
struct Kvstore {
  std::unique_ptr<Process> proc;
  std::string endpoint;
  bool frozen = false;

  Kvstore() {
    proc = std::make_unique<Process>(bin_path("tessera-kvstore"),
                                     with_keys({"--listen", "tcp://127.0.0.1:*", "--log-level", "warn"}));
    const std::string marker = "tessera-kvstore listening on ";
    std::string line = proc->wait_line(marker, 15s);
    EXPECT_FALSE(line.empty()) << "tessera-kvstore did not start";
    if (!line.empty()) endpoint = line.substr(marker.size(), line.find(' ', marker.size()) - marker.size());
  }
  void freeze() {
    ASSERT_EQ(::kill(proc->pid(), SIGSTOP), 0);
    frozen = true;
  }
  void thaw() {
    if (frozen) ::kill(proc->pid(), SIGCONT);
    frozen = false;
  }
  ~Kvstore() { thaw(); }
};

struct FrontendProc {
  std::unique_ptr<Process> proc;
  int port = 0;
  std::string zmq;

  FrontendProc(const std::string& scheduler, const std::string& kvstore, std::vector<std::string> extra) {
    std::vector<std::string> a = {"--model", shared_path("models/stories260K/stories260K.bin"), "--tokenizer", tok_path(),
                                  "--http-port", "0", "--zmq-endpoint", "tcp://127.0.0.1:*", "--schedulers", scheduler,
                                  "--heartbeat-ms", "50", "--scheduler-dead-ms", "2000", "--max-prompt-tokens", "64",
                                  "--kvstore", kvstore, "--log-level", "error"};
    a.insert(a.end(), extra.begin(), extra.end());
    proc = std::make_unique<Process>(bin_path("tessera-frontend"), with_keys(a));
    std::string line = proc->wait_line("LISTENING ", 20s);
    EXPECT_FALSE(line.empty()) << "tessera-frontend did not start";
    if (line.empty()) return;
    port = std::stoi(line.substr(line.find("http=") + 5));
    zmq = line.substr(line.find("zmq=") + 4);
  }

  // Sum of the samples of `name` whose labels contain `filter`.
  double metric(const std::string& name, const std::string& filter = "") const {
    auto parsed = metrics::parse_text(http_request(port, "GET", "/metrics").body);
    EXPECT_TRUE(parsed.ok());
    double sum = 0;
    if (parsed.ok())
      for (const auto& s : *parsed)
        if (s.name == name && s.labels.find(filter) != std::string::npos) sum += s.value;
    return sum;
  }
  // Polls /metrics (each poll one HTTP round trip) until `name` reaches `value` or the deadline.
  bool wait_metric(const std::string& name, double value, std::chrono::milliseconds timeout) const {
    for (const auto until = Clock::now() + timeout; Clock::now() < until;)
      if (metric(name) >= value) return true;
    return false;
  }
};

std::string completion(const std::string& user, const std::string& prompt = "Once upon a time") {
  json body = {{"prompt", prompt}, {"max_tokens", 4}};
  if (!user.empty()) body["user"] = user;
  return body.dump();
}

const char* kLookups = "tessera_frontend_stored_preference_lookups_total";

TEST(FrontendWithKvstore, RefusedRequestIsNeitherTokenizedNorLookedUp) {
  FakeScheduler sched;
  sched.set_script(story_tokens());
  sched.set_hold(true, 1);
  Kvstore kv;
  ASSERT_FALSE(kv.endpoint.empty());
  FrontendProc fe(sched.endpoint(), kv.endpoint, {"--max-concurrent-requests", "1", "--request-timeout-ms", "6000"});
  ASSERT_GT(fe.port, 0);
  ASSERT_TRUE(wait_status(fe.port, "/ready", 200, 10s));

  // alice's request holds the only slot (her stored preference was looked up: none).
  HttpResult first;
  std::thread holder([&] { first = http_request(fe.port, "POST", "/v1/completions", completion("alice")); });
  ASSERT_TRUE(sched.wait_for([&] { return sched.request_count() == 1; }, 10s));
  EXPECT_EQ(fe.metric(kLookups), 1.0);

  // Refused: users that would each need a lookup, and prompts that tokenization would find too
  // long (413) — the answer is 429, so neither tokenization nor the kvstore was reached.
  for (int i = 0; i < 5; ++i) {
    HttpResult r = http_request(fe.port, "POST", "/v1/completions", completion("user" + std::to_string(i), std::string(2000, 'a')));
    EXPECT_EQ(r.status, 429) << r.body;
    EXPECT_NE(r.body.find("overloaded"), std::string::npos) << r.body;
  }
  // The same through the client API.
  zmq::context_t ctx(1);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 5000);
  dealer.connect(fe.zmq);
  protocol::GenerateRequest req;
  req.id = 9;
  req.prompt = "Once upon a time";
  req.user = "bob";
  ASSERT_TRUE(zmqu::send(dealer, {protocol::encode(req)}).ok());
  auto reply = zmqu::recv(dealer);
  ASSERT_TRUE(reply.ok() && !reply->empty());
  auto msg = protocol::decode(reply->back());
  ASSERT_TRUE(msg.ok() && std::holds_alternative<protocol::ErrorEvent>(*msg));
  EXPECT_EQ(std::get<protocol::ErrorEvent>(*msg).code, ErrorCode::kOverloaded);

  EXPECT_EQ(fe.metric(kLookups), 1.0) << "a refused request must not reach the kvstore";
  EXPECT_EQ(fe.metric("tessera_frontend_http_responses_total", "status=\"413\""), 0.0) << "refused before tokenization";
  EXPECT_EQ(sched.request_count(), 1u);

  holder.join();  // the held request times out (504) and frees its slot
  EXPECT_EQ(first.status, 504) << first.body;
  sched.set_hold(false);
  EXPECT_EQ(http_request(fe.port, "POST", "/v1/completions", completion("carol")).status, 200);
  EXPECT_EQ(fe.metric(kLookups), 2.0);
  // The client API continues after its lookup too.
  req.id = 10;
  req.user = "dave";
  req.max_tokens = 3;
  ASSERT_TRUE(zmqu::send(dealer, {protocol::encode(req)}).ok());
  std::optional<protocol::Message> last;
  for (;;) {
    auto frames = zmqu::recv(dealer);
    ASSERT_TRUE(frames.ok() && !frames->empty()) << "no reply";
    auto m = protocol::decode(frames->back());
    ASSERT_TRUE(m.ok());
    if (!std::holds_alternative<protocol::TokenEvent>(*m)) {
      last = *m;
      break;
    }
  }
  ASSERT_TRUE(std::holds_alternative<protocol::FinalEvent>(*last)) << protocol::message_type(*last);
  EXPECT_EQ(std::get<protocol::FinalEvent>(*last).usage.completion_tokens, 3);
  EXPECT_EQ(fe.metric(kLookups), 3.0);
}

TEST(FrontendWithKvstore, FrozenKvstoreDelaysNoRequestWithoutUser) {
  FakeScheduler sched;
  sched.set_script(story_tokens());
  Kvstore kv;
  ASSERT_FALSE(kv.endpoint.empty());
  // One I/O thread: a lookup blocking it would hold every other request behind it.
  FrontendProc fe(sched.endpoint(), kv.endpoint, {"--http-threads", "1", "--kvstore-timeout-ms", "10000"});
  ASSERT_GT(fe.port, 0);
  ASSERT_TRUE(wait_status(fe.port, "/ready", 200, 10s));
  ASSERT_EQ(http_request(fe.port, "POST", "/v1/completions", completion("warm")).status, 200);  // kvstore connected
  ASSERT_EQ(fe.metric(kLookups), 1.0);

  kv.freeze();
  std::atomic<bool> alice_done{false};
  HttpResult alice;
  std::thread t([&] {
    alice = http_request(fe.port, "POST", "/v1/completions", completion("alice"), 30000);
    alice_done = true;
  });
  ASSERT_TRUE(fe.wait_metric(kLookups, 2.0, 10s)) << "alice's lookup never started";

  // alice waits for the frozen kvstore (up to 10 s); a request without a user does not.
  const auto t0 = Clock::now();
  HttpResult plain = http_request(fe.port, "POST", "/v1/completions", completion(""), 30000);
  const auto plain_time = Clock::now() - t0;
  EXPECT_EQ(plain.status, 200) << plain.body;
  EXPECT_LT(plain_time, 3s) << "a request without user waited for the kvstore";
  EXPECT_FALSE(alice_done.load()) << "alice's request should still wait for its lookup";

  // The kvstore wakes up and answers: alice continues with the lookup's result (none stored),
  // not at a timeout.
  kv.thaw();
  t.join();
  EXPECT_EQ(alice.status, 200) << alice.body;
  EXPECT_EQ(fe.metric("tessera_frontend_stored_preference_errors_total"), 0.0);
  EXPECT_EQ(sched.request_count(), 3u);
}

TEST(FrontendWithKvstore, FrozenKvstoreServesUserWithoutPreferenceAtTheDeadline) {
  FakeScheduler sched;
  sched.set_script(story_tokens());
  Kvstore kv;
  ASSERT_FALSE(kv.endpoint.empty());
  FrontendProc fe(sched.endpoint(), kv.endpoint, {"--kvstore-timeout-ms", "300"});
  ASSERT_GT(fe.port, 0);
  ASSERT_TRUE(wait_status(fe.port, "/ready", 200, 10s));
  kv.freeze();
  const auto t0 = Clock::now();
  HttpResult r = http_request(fe.port, "POST", "/v1/completions", completion("alice"));
  EXPECT_EQ(r.status, 200) << r.body;  // served without a stored preference
  EXPECT_LT(Clock::now() - t0, 5s);
  ASSERT_EQ(sched.requests().size(), 1u);
  EXPECT_TRUE(sched.requests()[0].preference.empty());
  // The failed lookup starts the back-off: the next requests skip the kvstore at once.
  EXPECT_TRUE(fe.wait_metric("tessera_frontend_stored_preference_errors_total", 1.0, 5s));
  const double lookups = fe.metric(kLookups);
  EXPECT_EQ(http_request(fe.port, "POST", "/v1/completions", completion("bob")).status, 200);
  EXPECT_EQ(fe.metric(kLookups), lookups);
}

// Issue 18 finding 5: a lookup the kvstore refuses because of the request (a user id over its
// 256-byte limit) counts as an error but starts no back-off, so the next user's stored
// preference is still looked up; only the kvstore's own failures (frozen, above) back off.
TEST(FrontendWithKvstore, ABadUserIdDoesNotDisableStoredPreferencesForOthers) {
  FakeScheduler sched;
  sched.set_script(story_tokens());
  Kvstore kv;
  ASSERT_FALSE(kv.endpoint.empty());
  FrontendProc fe(sched.endpoint(), kv.endpoint, {});
  ASSERT_GT(fe.port, 0);
  ASSERT_TRUE(wait_status(fe.port, "/ready", 200, 10s));
  (void)http_request(fe.port, "POST", "/v1/completions", completion(std::string(300, 'u')));
  ASSERT_TRUE(fe.wait_metric("tessera_frontend_stored_preference_errors_total", 1.0, 5s))
      << "the kvstore did not refuse the 300-byte user id";
  const double lookups = fe.metric(kLookups);
  EXPECT_EQ(http_request(fe.port, "POST", "/v1/completions", completion("bob")).status, 200);
  EXPECT_EQ(fe.metric(kLookups), lookups + 1) << "bob's stored preference was not looked up (back-off)";
}

}  // namespace
}  // namespace tessera::testing
