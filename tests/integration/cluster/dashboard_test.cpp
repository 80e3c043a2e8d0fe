// The built-in ops page (docs/operations.md, "Dashboard") against a real, busy cluster:
// - in headless Chromium (Debian `chromium`; the test is skipped with a message without it): the
//   page shows the scheduler and worker names, non-zero running or finished counts, and page
//   counts equal to the scheduler's /metrics once the load ended; the events stream was live;
// - GET /dashboard/events holds no admission slot (a completion still runs with
//   --max-concurrent-requests 1 and two streams open) and ends when its client goes away
//   (tessera_frontend_dashboard_streams back to 0).
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "tessera/common/child_process.h"
#include "tessera/testing/cluster.h"
#include "tessera/testing/paths.h"

namespace tessera::testing {
namespace {

using json = nlohmann::json;

std::string find_chromium() {
  for (const char* dir : {"/usr/bin/", "/usr/local/bin/", "/snap/bin/"})
    for (const char* name : {"chromium", "chromium-browser"})
      if (std::ifstream(std::string(dir) + name).good()) return std::string(dir) + name;
  return "";
}

// Runs headless Chromium on `url` with `extra` flags; its stdout (the DOM with --dump-dom).
std::string run_chromium(const std::string& chromium, const std::string& dir, const std::vector<std::string>& extra,
                         const std::string& url) {
  std::vector<std::string> args = {"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                   "--no-first-run", "--user-data-dir=" + dir + "/chromium-profile"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back(url);
  auto r = run_to_exit(SpawnOptions{.binary = chromium, .args = args, .stdout_to = ChildOutput::pipe(),
                                    .stderr_to = ChildOutput::file(dir + "/chromium.log")});
  if (!r.ok()) return "";
  return r->second;
}

// The text of the element `<tag ... class="cls">` inside the row `<tr data-worker="name" ...>`.
std::string worker_cell(const std::string& dom, const std::string& worker, const std::string& cls) {
  const size_t row = dom.find("<tr data-worker=\"" + worker + "\"");
  if (row == std::string::npos) return "";
  const size_t end = dom.find("</tr>", row);
  const std::string tr = dom.substr(row, end - row);
  std::smatch m;
  if (!std::regex_search(tr, m, std::regex("class=\"" + cls + "\">([^<]*)<"))) return "";
  return m[1];
}

std::string by_id(const std::string& dom, const std::string& id) {
  std::smatch m;
  if (!std::regex_search(dom, m, std::regex("id=\"" + id + "\"[^>]*>([^<]*)<"))) return "";
  return m[1];
}

// Load: `threads` clients sending completions with a shared 40-token prefix until `stop`.
class Load {
 public:
  Load(const Cluster& c, int threads) {
    for (int t = 0; t < threads; ++t)
      threads_.emplace_back([this, &c, t] {
        for (int i = 0; !stop_.load(); ++i) {
          const std::string prompt = "Once upon a time there was a little girl named Lily who loved to play in the park with "
                                     "her friends every day " + std::to_string(t * 1000 + i);
          auto r = c.post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}}.dump());
          if (r.ok() && r->status == 200) done_.fetch_add(1);
        }
      });
  }
  ~Load() { stop(); }
  void stop() {
    stop_.store(true);
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  int done() const { return done_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> done_{0};
  std::vector<std::thread> threads_;
};

TEST(DashboardTest, HeadlessChromiumShowsTheBusyCluster) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (Debian package `chromium`): dashboard browser test skipped";
  Cluster c(ClusterOptions{.num_workers = 2, .scheduler_args = {"--name", "sched-a"}});
  ASSERT_TRUE(c.ok());
  const std::string dir = make_temp_dir("tessera-dashboard");
  const std::string url = "http://127.0.0.1:" + std::to_string(c.http_port()) + "/dashboard";
  {
    Load load(c, 6);
    ASSERT_TRUE(wait_until([&] { return load.done() >= 12; }, milliseconds(60000))) << c.logs();
    // Busy: the page follows the events stream (status "live" is only set by an SSE event).
    // ?events=3 closes the stream after three events, so that the headless browser's virtual
    // time (which waits for open requests) runs out and it renders.
    const std::string dom = run_chromium(chromium, dir, {"--virtual-time-budget=2000", "--dump-dom"}, url + "?events=3");
    ASSERT_FALSE(dom.empty()) << "chromium produced no DOM";
    EXPECT_EQ(by_id(dom, "status"), "live") << dom.substr(0, 2000);
    EXPECT_NE(dom.find("data-sse-events=\"3\""), std::string::npos) << "three SSE events were not all rendered";
    EXPECT_EQ(by_id(dom, "model"), "stories260K");
    EXPECT_NE(dom.find("<tr data-scheduler=\"sched-a\">"), std::string::npos);
    for (const char* w : {"w0", "w1"}) EXPECT_NE(dom.find("<tr data-worker=\"" + std::string(w) + "\""), std::string::npos) << w;
    const int running = std::atoi(by_id(dom, "running").c_str());
    const int finished = std::atoi(by_id(dom, "finished").c_str());
    EXPECT_GT(running + finished, 0) << "running " << running << ", finished " << finished;
    EXPECT_EQ(by_id(dom, "workers"), "2");
    // The charts were drawn from the history (one point per second).
    EXPECT_TRUE(std::regex_search(dom, std::regex("id=\"chart-tokens\"[^>]*data-points=\"[1-9]"))) << "no chart points";
    // A screenshot (docs/operations.md shows one taken like this).
    (void)run_chromium(chromium, dir, {"--virtual-time-budget=2000", "--window-size=1280,1000", "--screenshot=" + dir + "/dashboard.png"},
                       url + "?events=2");
    std::ifstream png(dir + "/dashboard.png", std::ios::binary);
    char magic[4] = {};
    png.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG") << "no screenshot written";
  }
  // Quiet: the pages the page shows equal the scheduler's own /metrics.
  ASSERT_TRUE(wait_until([&] { return c.metric(c.metrics_port(), "tessera_scheduler_running_requests") == 0; }, milliseconds(30000)));
  // The dashboard samples once a second from heartbeats; wait until its snapshot agrees.
  auto agrees = [&] {
    auto snap = c.get("/dashboard/snapshot");
    if (!snap.ok() || snap->status != 200) return false;
    const json s = json::parse(snap->body);
    for (const auto& w : s["schedulers"][0]["workers"])
      for (const char* state : {"free", "held", "cached"})
        if (w["pages"][state].get<double>() !=
            c.metric(c.metrics_port(), "tessera_scheduler_pages", "worker=\"" + w["name"].get<std::string>() + "\",state=\"" + state + "\""))
          return false;
    return s["totals"]["running"] == 0;
  };
  ASSERT_TRUE(wait_until(agrees, milliseconds(10000)));
  const std::string dom = run_chromium(chromium, dir, {"--virtual-time-budget=2000", "--dump-dom"}, url + "?static");
  int64_t cached_total = 0;
  for (const char* w : {"w0", "w1"}) {
    for (const char* state : {"free", "held", "cached"}) {
      const std::string shown = worker_cell(dom, w, std::string("pages-") + state);
      ASSERT_FALSE(shown.empty()) << w << " " << state << " not shown";
      EXPECT_EQ(std::stod(shown), c.metric(c.metrics_port(), "tessera_scheduler_pages",
                                           "worker=\"" + std::string(w) + "\",state=\"" + state + "\""))
          << w << " " << state;
    }
    cached_total += std::atoll(worker_cell(dom, w, "pages-cached").c_str());
  }
  EXPECT_GT(cached_total, 0) << "the shared prefix left no cached page";
  EXPECT_GT(std::atoi(by_id(dom, "finished").c_str()), 0);
  EXPECT_NE(by_id(dom, "hit-rate"), "0.0%") << "requests sharing a 2-page prefix should hit the cache";
}

TEST(DashboardTest, EventsHoldNoSlotAndCloseWithTheClient) {
  Cluster c(ClusterOptions{.frontend_args = {"--max-concurrent-requests", "1"}});
  ASSERT_TRUE(c.ok());
  const auto streams = [&] { return c.metric(c.http_port(), "tessera_frontend_dashboard_streams"); };
  std::atomic<bool> stop{false};
  std::atomic<int> events{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i)
    clients.emplace_back([&] {
      http::SseParser parser;
      (void)http::request({.port = c.http_port(), .path = "/dashboard/events", .timeout_ms = 60000, .on_body = [&](std::string_view piece) {
                             parser.feed(piece, [&](const std::string& data) {
                               if (json::parse(data, nullptr, false).contains("schedulers")) events.fetch_add(1);
                             });
                             return !stop.load();
                           }});
    });
  ASSERT_TRUE(wait_until([&] { return streams() == 2 && events.load() >= 4; }, milliseconds(15000)))
      << "streams " << streams() << ", events " << events.load();
  // Both streams open, one admission slot: a completion still runs.
  auto r = c.post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":4})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200) << r->body;
  stop.store(true);
  for (auto& t : clients) t.join();
  EXPECT_TRUE(wait_until([&] { return streams() == 0; }, milliseconds(5000))) << "a stream outlived its client";
  // The page itself: self-contained (no external asset).
  auto page = c.get("/dashboard");
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->content_type.find("text/html"), std::string::npos);
  EXPECT_FALSE(std::regex_search(page->body, std::regex(R"((src|href)=["']?(https?:)?//)"))) << "the page loads an external asset";
  EXPECT_EQ(c.get("/dashboard/nothing")->status, 404);
}

}  // namespace
}  // namespace tessera::testing
