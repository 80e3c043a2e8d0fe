// Helpers shared by the multi-host tests: the exact greedy cases of the test model, streamed
// and non-streamed completions from the client host. Thread-safe where they say so (each call
// uses its own thread's namespace entry).
#pragma once

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "multihost_fixture.h"
#include "tessera/testing/paths.h"

namespace tessera::testing {

using json = nlohmann::json;

struct Greedy {
  std::string prompt, completion;
  int steps;
};
inline std::vector<Greedy> greedy_cases64() {
  std::ifstream in(shared_path("models/stories260K/greedy.json"));
  auto j = json::parse(in);
  std::vector<Greedy> out;
  for (const auto& c : j.at("cases"))
    if (c.at("steps").get<int>() <= 64)
      out.push_back({c.at("prompt").get<std::string>(), c.at("completion").get<std::string>(), c.at("steps").get<int>()});
  return out;
}

// One streamed completion from the client host, recorded as it arrives.
struct Stream {
  std::atomic<int> chunks{0};
  std::atomic<bool> ended{false};
  bool done = false;
  std::string error;  // the data of an error event
  int status = 0;
};

inline void run_stream(ThreeHosts& c, const std::string& ip, const std::string& prompt, int max_tokens, Stream& s) {
  NetHost::Enter in(c.host("client"));
  http::SseParser sse;
  auto r = http::request({.host = ip, .port = kHttpPort, .method = "POST", .path = "/v1/completions",
                          .body = completion_json(prompt, max_tokens, true), .timeout_ms = 20000,
                          .on_body = [&](std::string_view b) {
                            sse.feed(b, [&](const std::string& d) {
                              if (d == "[DONE]") s.done = true;
                              else if (d.find("\"error\"") != std::string::npos) s.error = d;
                              else ++s.chunks;
                            });
                            return true;
                          }});
  s.status = r.ok() ? r->status : -1;
  if (!r.ok()) s.error = r.error().to_string();
  s.ended = true;
}

// Non-streamed greedy requests, `n` at once from the client host alternating between the two
// frontends; each must be 200 and begin with the expected completion.
inline void expect_greedy_answers(ThreeHosts& c, int n, int timeout_ms = 20000) {
  const auto cases = greedy_cases64();
  std::vector<std::string> text(n), error(n);
  std::vector<int> status(n, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      NetHost::Enter in(c.host("client"));
      const auto& g = cases[i % cases.size()];
      auto r = http::request({.host = i % 2 ? kHostB : kHostA, .port = kHttpPort, .method = "POST",
                              .path = "/v1/completions", .body = completion_json(g.prompt, g.steps),
                              .timeout_ms = timeout_ms});
      if (!r.ok()) {
        error[i] = r.error().to_string();
        return;
      }
      status[i] = r->status;
      auto j = json::parse(r->body, nullptr, false);
      if (r->status == 200 && !j.is_discarded()) text[i] = j["choices"][0]["text"].get<std::string>();
      else error[i] = r->body;
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    const auto& g = cases[i % cases.size()];
    EXPECT_EQ(status[i], 200) << "request " << i << " (" << g.prompt << "): " << error[i];
    EXPECT_EQ(text[i].substr(0, g.completion.size()), g.completion) << "request " << i;
  }
}

inline bool is_clear_error(const std::string& e) {
  return e.find("peer_dead") != std::string::npos || e.find("unavailable") != std::string::npos;
}

}  // namespace tessera::testing
