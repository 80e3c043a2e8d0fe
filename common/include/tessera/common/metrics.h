// Metrics in Prometheus text exposition format (version 0.0.4). Each metric carries its
// definition as help text (STYLE.md habit 12): "prefix-cache hit rate = cached prompt tokens /
// prompt tokens".
//
//   metrics::Registry reg;
//   auto& reqs = reg.counter("tessera_requests_total", "HTTP requests answered", {{"code", "200"}});
//   reqs.inc();
//   auto& ttft = reg.histogram("tessera_ttft_seconds", "arrival -> first token", {0.01, 0.1, 1});
//   ttft.observe(0.05);
//   std::string text = reg.render();
//
// Ownership: the Registry owns every metric; references stay valid for its lifetime.
// Thread-safety: registration and render() take a mutex; inc/set/observe are lock-free atomics
// and may be called from any thread. Registering a name twice with the same labels returns the
// same metric; with another type it is a programming error (TS_CHECK).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/common/result.h"

namespace tessera::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  void dec(double v = 1.0) { value_.fetch_sub(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // strictly increasing upper bounds
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per-bucket (not cumulative) counts; the last is the +Inf bucket.
  std::vector<uint64_t> bucket_counts() const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

// Default latency buckets in seconds (1 ms .. 60 s).
std::vector<double> latency_buckets();

class Registry {
 public:
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help, std::vector<double> bounds,
                       const Labels& labels = {});
  std::string render() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Series {
    std::string labels;  // rendered `a="x",b="y"` (may be empty)
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    Kind kind;
    std::string help;
    std::vector<Series> series;
  };
  Series& series(const std::string& name, const std::string& help, Kind kind, const Labels& labels);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;  // GUARDED_BY(mu_); sorted by name for stable output
};

// One sample of a parsed exposition: `name{labels}` -> value.
struct Sample {
  std::string name;
  std::string labels;  // as written between the braces, "" when none
  double value = 0.0;
};

// Parses and checks Prometheus text format: comment lines (# HELP / # TYPE with a valid
// metric name and type), sample lines `name{l="v",...} value`, valid names, label syntax and
// numbers (incl. +Inf/-Inf/NaN). Errors name the line. Used by tests and `tessera bench`.
Result<std::vector<Sample>> parse_text(std::string_view text);

}  // namespace tessera::metrics
