// OpenAI-API client helpers shared by the cluster tests (tessera_testing_cluster):
//   post_sse()              one POST whose SSE data payloads go to a callback
//   CompletionStream        a streamed /v1/completions request recorded from its own thread
//                           (run_completion_stream), for tests that kill workers mid-stream
//   routed_to()             the scheduler's routed-request count of one worker
//   ApiClusterTest          SharedClusterTest plus post() of a JSON body, checked and parsed
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/testing/cluster.h"

namespace tessera::testing {

// POSTs `body` to `path` on `port` and feeds every SSE data payload ("[DONE]" included) to
// `on_data`, on the calling thread. Returns the response (its body is what was not SSE).
Result<http::Response> post_sse(int port, const std::string& path, const std::string& body,
                                const std::function<void(const std::string&)>& on_data, int timeout_ms = 60000);

// One streamed completion. `body` is set before run_completion_stream(); `chunks` and `ended`
// may be read from any thread while it runs, the other fields once `ended` is true.
struct CompletionStream {
  std::string body;
  std::string text;
  std::atomic<int> chunks{0};    // text chunks received
  int chunks_before_error = -1;  // chunks seen when the error event came
  std::string finish_reason;
  nlohmann::json usage;          // the include_usage chunk's usage
  std::string error;             // the error event's JSON
  bool done = false;             // data: [DONE]
  std::atomic<bool> ended{false};
  int status = 0;                // HTTP status; -1: no response
  std::chrono::steady_clock::time_point last_chunk{};
  std::chrono::steady_clock::time_point end{};
  double max_gap_s = 0.0;        // longest pause between two text chunks
};

// Runs `s.body` as a POST /v1/completions stream to the end (blocking; 60 s limit).
void run_completion_stream(int port, CompletionStream& s);

// tessera_scheduler_routed_requests_total of worker `worker` ("w0", "w1", ...); 0 before the
// worker's first request (the sample is absent then).
double routed_to(const Cluster& cluster, const std::string& worker);

// SharedClusterTest with a JSON POST that expects `want_status` and a JSON body.
class ApiClusterTest : public SharedClusterTest {
 protected:
  nlohmann::json post(const std::string& path, const nlohmann::json& body, int want_status = 200);
};

}  // namespace tessera::testing
