// What a client cannot make the real tessera-frontend do (docs/security.md), against a FAKE
// scheduler (harness.h): a schema or body nested too deeply is refused with 400 naming the limit
// (and never crashes the process), a /dashboard/events client that stops reading loses its
// stream slot, and the ZeroMQ client API refuses the fields the frontend computes itself.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "harness.h"
#include "tessera/common/metrics.h"
#include "tessera/common/zmq_util.h"
#include "tessera/http/client.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/paths.h"
#include "tessera/testing/wait.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

class FrontendLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = load_tokenizer(shared_path("models/stories260K/tok512.bin"));
    ASSERT_TRUE(tok.ok());
    sched.set_script((*tok)->encode("42", false));
    std::vector<std::string> a = {"--model", shared_path("models/stories260K/stories260K.bin"), "--tokenizer",
                                  shared_path("models/stories260K/tok512.bin"), "--http-port", "0", "--zmq-endpoint",
                                  "tcp://127.0.0.1:*", "--schedulers", sched.endpoint(), "--heartbeat-ms", "50",
                                  "--scheduler-dead-ms", "5000", "--max-prompt-tokens", "64", "--log-level", "warn",
                                  // Small buffers and write timeout: a client that stops reading is found out soon.
                                  "--http-write-timeout-ms", "1000", "--http-send-buffer-bytes", "4096"};
    proc = std::make_unique<Process>(bin_path("tessera-frontend"), with_keys(a));
    const std::string line = proc->wait_line("LISTENING ", 20s);
    ASSERT_FALSE(line.empty()) << "tessera-frontend did not start";
    port = std::stoi(line.substr(line.find("http=") + 5));
    zmq = line.substr(line.find("zmq=") + 4);
    ASSERT_TRUE(wait_status(port, "/ready", 200, 10s)) << "frontend never became ready";
  }
  void expect_healthy() const {
    EXPECT_EQ(http_request(port, "GET", "/health").status, 200);
    EXPECT_TRUE(proc->alive());
  }
  // A 400 whose error message contains `what` (and names `param` when given).
  void expect_refused(const HttpResult& r, const std::string& what, const std::string& param = "") const {
    EXPECT_EQ(r.status, 400) << r.body.substr(0, 300) << r.error;
    const json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body.substr(0, 300);
    EXPECT_NE(j["error"]["message"].get<std::string>().find(what), std::string::npos) << j["error"]["message"];
    if (!param.empty()) {
      EXPECT_EQ(j["error"]["param"], param);
    }
  }

  FakeScheduler sched;
  std::unique_ptr<Process> proc;
  int port = 0;
  std::string zmq;
};

// `levels` schemas nested: levels - 1 one-option anyOf wrappers around an integer.
std::string nested_any_of(int levels) {
  std::string s = R"({"type":"integer"})";
  for (int i = 1; i < levels; ++i) s = R"({"anyOf":[)" + s + "]}";
  return s;
}

std::string with_schema(const std::string& schema) {
  return R"({"prompt":"Once upon a time","max_tokens":4,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":)" +
         schema + "}}}";
}

TEST_F(FrontendLimits, SchemaNestedPastTheLimitIsRefusedNamingIt) {
  // 64 levels (the limit) are served: the request reaches the scheduler with its grammar.
  HttpResult ok = http_request(port, "POST", "/v1/completions", with_schema(nested_any_of(64)));
  EXPECT_EQ(ok.status, 200) << ok.body;
  ASSERT_EQ(sched.requests().size(), 1u);
  EXPECT_FALSE(sched.requests()[0].sampling.grammar.empty());
  // 65: 400 naming the depth.
  expect_refused(http_request(port, "POST", "/v1/completions", with_schema(nested_any_of(65))),
                 "nests deeper than 64 levels", "response_format");
  // The same in a forced tool's parameters.
  const std::string tools = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"tool_choice":"required",
      "tools":[{"type":"function","function":{"name":"f","parameters":)" + nested_any_of(65) + "}}]}";
  expect_refused(http_request(port, "POST", "/v1/chat/completions", tools), "nests deeper than 64 levels",
                 "tools[0].function.parameters");
  // 200 levels: within the body's 512 JSON levels, over the schema text's 256.
  expect_refused(http_request(port, "POST", "/v1/completions", with_schema(nested_any_of(200))),
                 "nests more than 256 JSON arrays/objects", "response_format");
  // The largest one-option anyOf nesting that fits in the 64 KiB grammar limit (~5400 levels):
  // refused at once, before the body is even parsed.
  const std::string inner = R"({"type":"integer"})";
  const size_t levels = (64 * 1024 - inner.size()) / 12;
  std::string deep;
  for (size_t i = 0; i < levels; ++i) deep += R"({"anyOf":[)";
  deep += inner;
  for (size_t i = 0; i < levels; ++i) deep += "]}";
  ASSERT_LE(deep.size(), 64u * 1024u);
  expect_refused(http_request(port, "POST", "/v1/completions", with_schema(deep)), "nests JSON arrays/objects more than 512 levels");
  EXPECT_EQ(sched.requests().size(), 1u);
  expect_healthy();
}

TEST_F(FrontendLimits, BodyNestedTooDeeplyIsRefusedAndTheProcessStaysUp) {
  // 200000 levels (400 KB, under the 1 MiB body limit): dumping it would overflow an I/O
  // thread's stack; it is refused before it is parsed.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  expect_refused(http_request(port, "POST", "/v1/completions", with_schema(R"({"const":)" + deep + "}")),
                 "nests JSON arrays/objects more than 512 levels");
  expect_refused(http_request(port, "POST", "/v1/chat/completions", R"({"messages":)" + deep + "}"), "more than 512 levels");
  expect_refused(http_request(port, "POST", "/tokenize", R"({"prompt":)" + deep + "}"), "more than 512 levels");
  expect_healthy();
  EXPECT_EQ(sched.requests().size(), 0u);
}

double dashboard_streams(int port) {
  auto parsed = metrics::parse_text(http_request(port, "GET", "/metrics").body);
  if (!parsed.ok()) return -1;
  for (const auto& s : *parsed)
    if (s.name == "tessera_frontend_dashboard_streams") return s.value;
  return -1;
}

TEST_F(FrontendLimits, DashboardClientsThatStopReadingLoseTheirSlots) {
  // Every stream slot taken by a client that never reads (a small receive buffer fills soon).
  std::vector<int> fds;
  for (int i = 0; i < 32; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
    const int small = 1;  // the kernel's minimum
    ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string get = "GET /dashboard/events HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(send(fd, get.data(), get.size(), MSG_NOSIGNAL), static_cast<ssize_t>(get.size()));
  }
  ASSERT_TRUE(wait_until([&] { return dashboard_streams(port) == 32; }, 20s)) << "streams " << dashboard_streams(port);
  EXPECT_EQ(http_request(port, "GET", "/dashboard/events?events=1").status, 503);
  // Their writes stop being taken and time out (--http-write-timeout-ms 1000): the slots free
  // up and a reading client is served again.
  int status = 0;
  std::string got;
  auto served = [&] {
    got.clear();
    auto r = http::request({.port = port, .path = "/dashboard/events", .timeout_ms = 10000, .on_body = [&](std::string_view piece) {
                              got += piece;
                              return got.find("event: snapshot") == std::string::npos;  // close once one arrived
                            }});
    status = r.ok() ? r->status : 0;
    return status == 200 && got.find("event: snapshot") != std::string::npos;
  };
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(wait_until(served, 90s, 200ms)) << "still " << status << " with " << dashboard_streams(port) << " streams open";
  std::printf("a reading client was served again %.1f s after the slots filled\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  for (int fd : fds) close(fd);
  expect_healthy();
}

TEST_F(FrontendLimits, ZmqClientCannotSendTheFieldsTheFrontendComputes) {
  zmq::context_t ctx(1);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 10000);
  dealer.connect(zmq);
  auto first_reply = [&](const protocol::GenerateRequest& r) -> std::optional<protocol::Message> {
    EXPECT_TRUE(zmqu::send(dealer, {protocol::encode(r)}).ok());
    auto frames = zmqu::recv(dealer);
    if (!frames.ok() || frames->empty()) return std::nullopt;
    auto msg = protocol::decode(frames->back());
    if (!msg.ok()) return std::nullopt;
    return *msg;
  };
  auto expect_refused_naming = [&](const protocol::GenerateRequest& r, const std::string& field) {
    auto reply = first_reply(r);
    ASSERT_TRUE(reply) << "no reply";
    const auto* e = std::get_if<protocol::ErrorEvent>(&*reply);
    ASSERT_NE(e, nullptr) << "not an error: " << protocol::message_type(*reply);
    EXPECT_EQ(e->id, r.id);
    EXPECT_EQ(e->code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(e->message.rfind(field + " is ", 0), 0u) << e->message;
  };
  protocol::GenerateRequest blend;
  blend.id = 1;
  blend.prompt = "Once upon a time";
  blend.stream = false;
  blend.blend_chunks = {BlendChunk{.begin = 1, .length = 2}};
  expect_refused_naming(blend, "blend_chunks");
  protocol::GenerateRequest pref;
  pref.id = 2;
  pref.prompt = "Once upon a time";
  pref.stream = false;
  pref.preference_tokens = {5, 6, 7};
  expect_refused_naming(pref, "preference_tokens");
  EXPECT_EQ(sched.request_count(), 0u) << "a refused request reached the scheduler";
  // The same request without them is served.
  protocol::GenerateRequest plain;
  plain.id = 3;
  plain.prompt = "Once upon a time";
  plain.stream = false;
  auto reply = first_reply(plain);
  ASSERT_TRUE(reply);
  EXPECT_TRUE(std::holds_alternative<protocol::FinalEvent>(*reply)) << protocol::message_type(*reply);
  EXPECT_EQ(sched.request_count(), 1u);
}

}  // namespace
}  // namespace tessera::testing
