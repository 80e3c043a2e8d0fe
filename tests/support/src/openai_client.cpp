#include "tessera/testing/openai_client.h"

#include <algorithm>

namespace tessera::testing {

using nlohmann::json;

Result<http::Response> post_sse(int port, const std::string& path, const std::string& body,
                                const std::function<void(const std::string&)>& on_data, int timeout_ms) {
  http::SseParser sse;
  return http::request({.port = port, .method = "POST", .path = path, .body = body, .timeout_ms = timeout_ms,
                        .on_body = [&](std::string_view b) {
                          sse.feed(b, on_data);
                          return true;
                        }});
}

void run_completion_stream(int port, CompletionStream& s) {
  auto r = post_sse(port, "/v1/completions", s.body, [&](const std::string& d) {
    if (d == "[DONE]") {
      s.done = true;
      return;
    }
    json j = json::parse(d, nullptr, false);
    if (j.is_discarded()) return;
    if (j.contains("error")) {
      s.error = d;
      s.chunks_before_error = s.chunks.load();
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) s.usage = j["usage"];
    if (!j.contains("choices") || j["choices"].empty()) return;
    const json& c = j["choices"].at(0);
    if (c.contains("finish_reason") && c["finish_reason"].is_string()) s.finish_reason = c["finish_reason"].get<std::string>();
    if (c.contains("text") && !c["text"].get<std::string>().empty()) {
      s.text += c["text"].get<std::string>();
      const auto now = std::chrono::steady_clock::now();
      if (s.chunks.load() > 0) s.max_gap_s = std::max(s.max_gap_s, std::chrono::duration<double>(now - s.last_chunk).count());
      s.last_chunk = now;
      ++s.chunks;
    }
  });
  s.status = r.ok() ? r->status : -1;
  s.end = std::chrono::steady_clock::now();
  s.ended = true;
}

double routed_to(const Cluster& cluster, const std::string& worker) {
  const double v =
      cluster.metric(cluster.metrics_port(), "tessera_scheduler_routed_requests_total", "worker=\"" + worker + "\"");
  return v == v ? v : 0.0;  // absent before the first request
}

json ApiClusterTest::post(const std::string& path, const json& body, int want_status) {
  auto r = cluster_->post(path, body.dump());
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
  if (!r.ok()) return json();
  EXPECT_EQ(r->status, want_status) << r->body;
  json j = json::parse(r->body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r->body;
  return j;
}

}  // namespace tessera::testing
