#include <gtest/gtest.h>

#include <thread>

#include "tessera/common/metrics.h"

namespace tessera::metrics {
namespace {

TEST(Metrics, RendersExactText) {
  Registry r;
  r.counter("t_requests_total", "requests answered", {{"code", "200"}}).inc(3);
  r.counter("t_requests_total", "requests answered", {{"code", "400"}}).inc();
  r.gauge("t_inflight", "requests in flight\nnow").set(2);
  Histogram& h = r.histogram("t_latency_seconds", "latency", {0.1, 1});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(7);
  EXPECT_EQ(r.render(),
            "# HELP t_inflight requests in flight\\nnow\n"
            "# TYPE t_inflight gauge\n"
            "t_inflight 2\n"
            "# HELP t_latency_seconds latency\n"
            "# TYPE t_latency_seconds histogram\n"
            "t_latency_seconds_bucket{le=\"0.1\"} 1\n"
            "t_latency_seconds_bucket{le=\"1\"} 2\n"
            "t_latency_seconds_bucket{le=\"+Inf\"} 3\n"
            "t_latency_seconds_sum 7.55\n"
            "t_latency_seconds_count 3\n"
            "# HELP t_requests_total requests answered\n"
            "# TYPE t_requests_total counter\n"
            "t_requests_total{code=\"200\"} 3\n"
            "t_requests_total{code=\"400\"} 1\n");
  auto parsed = parse_text(r.render());
  ASSERT_TRUE(parsed.ok()) << parsed.error().to_string();
  EXPECT_EQ(parsed->size(), 8u);
}

TEST(Metrics, SameNameSameLabelsIsSameMetric) {
  Registry r;
  Counter& a = r.counter("x_total", "x", {{"k", "v"}});
  Counter& b = r.counter("x_total", "x", {{"k", "v"}});
  EXPECT_EQ(&a, &b);
}

TEST(Metrics, ConcurrentIncrements) {
  Registry r;
  Counter& c = r.counter("c_total", "c");
  Histogram& h = r.histogram("h", "h", {1});
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.inc();
        h.observe(0.5);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(c.value(), 40000.0);
  EXPECT_EQ(h.count(), 40000u);
}

TEST(Metrics, ParserRejectsBadText) {
  EXPECT_FALSE(parse_text("x 1").ok());                 // no final newline
  EXPECT_FALSE(parse_text("1x 1\n").ok());              // bad name
  EXPECT_FALSE(parse_text("x{a=1} 1\n").ok());          // unquoted label
  EXPECT_FALSE(parse_text("x{a=\"1\" 1\n").ok());       // unterminated labels
  EXPECT_FALSE(parse_text("x abc\n").ok());             // bad value
  EXPECT_FALSE(parse_text("# TYPE x widget\n").ok());   // bad type
  auto ok = parse_text("# HELP x y\nx{a=\"q\\\"\",b=\"\"} +Inf\ny -3.5e-2\n");
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_EQ((*ok)[1].value, -0.035);
}

}  // namespace
}  // namespace tessera::metrics
