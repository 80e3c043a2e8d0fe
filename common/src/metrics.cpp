#include "tessera/common/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace tessera::metrics {
namespace {

bool valid_name(std::string_view n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string escape(std::string_view s, bool quotes) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (quotes && c == '"') out += "\\\"";
    else out += c;
  }
  return out;
}

std::string render_labels(const Labels& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    TS_CHECK(valid_name(k) && k.find(':') == std::string::npos) << "bad label name '" << k << "'";
    if (!out.empty()) out += ",";
    out += k + "=\"" + escape(v, true) + "\"";
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.15g", v);  // shortest form that reads back exactly
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string with_labels(const std::string& name, const std::string& labels, const std::string& extra = "") {
  std::string all = labels;
  if (!extra.empty()) all += (all.empty() ? "" : ",") + extra;
  return all.empty() ? name : name + "{" + all + "}";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  for (size_t i = 1; i < bounds_.size(); ++i) TS_CHECK_LT(bounds_[i - 1], bounds_[i]) << "histogram bounds must increase";
  buckets_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::bucket_counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = buckets_[i].load(std::memory_order_relaxed);
  return out;
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

Registry::Series& Registry::series(const std::string& name, const std::string& help, Kind kind, const Labels& labels) {
  TS_CHECK(valid_name(name)) << "bad metric name '" << name << "'";
  std::string l = render_labels(labels);
  auto [it, inserted] = families_.try_emplace(name, Family{kind, help, {}});
  TS_CHECK(it->second.kind == kind) << "metric " << name << " registered with two types";
  for (auto& s : it->second.series)
    if (s.labels == l) return s;
  it->second.series.push_back(Series{l, nullptr, nullptr, nullptr});
  return it->second.series.back();
}

Counter& Registry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, help, Kind::kCounter, labels);
  if (!s.counter) s.counter = std::make_unique<Counter>();
  return *s.counter;
}

Gauge& Registry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, help, Kind::kGauge, labels);
  if (!s.gauge) s.gauge = std::make_unique<Gauge>();
  return *s.gauge;
}

Histogram& Registry::histogram(const std::string& name, const std::string& help, std::vector<double> bounds,
                               const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, help, Kind::kHistogram, labels);
  if (!s.histogram) s.histogram = std::make_unique<Histogram>(std::move(bounds));
  return *s.histogram;
}

std::string Registry::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, fam] : families_) {
    const char* type = fam.kind == Kind::kCounter ? "counter" : fam.kind == Kind::kGauge ? "gauge" : "histogram";
    out += "# HELP " + name + " " + escape(fam.help, false) + "\n";
    out += "# TYPE " + name + " " + type + "\n";
    for (const auto& s : fam.series) {
      if (s.counter) out += with_labels(name, s.labels) + " " + number(s.counter->value()) + "\n";
      if (s.gauge) out += with_labels(name, s.labels) + " " + number(s.gauge->value()) + "\n";
      if (s.histogram) {
        const Histogram& h = *s.histogram;
        std::vector<uint64_t> counts = h.bucket_counts();
        uint64_t cum = 0;
        for (size_t i = 0; i < counts.size(); ++i) {
          cum += counts[i];
          std::string le = i < h.bounds().size() ? number(h.bounds()[i]) : "+Inf";
          out += with_labels(name + "_bucket", s.labels, "le=\"" + le + "\"") + " " + std::to_string(cum) + "\n";
        }
        out += with_labels(name + "_sum", s.labels) + " " + number(h.sum()) + "\n";
        out += with_labels(name + "_count", s.labels) + " " + std::to_string(cum) + "\n";
      }
    }
  }
  return out;
}

Result<std::vector<Sample>> parse_text(std::string_view text) {
  std::vector<Sample> out;
  size_t pos = 0;
  int lineno = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos)
      return make_error(ErrorCode::kMalformedMessage, "line " + std::to_string(lineno + 1) + ": missing final newline");
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++lineno;
    auto bad = [&](const std::string& why) {
      return make_error(ErrorCode::kMalformedMessage, "line " + std::to_string(lineno) + ": " + why + ": '" + std::string(line) + "'");
    };
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
        std::string_view rest = line.substr(7);
        size_t sp = rest.find(' ');
        if (sp == std::string_view::npos || !valid_name(rest.substr(0, sp))) return bad("bad metric name");
        if (line[2] == 'T') {
          std::string_view t = rest.substr(sp + 1);
          if (t != "counter" && t != "gauge" && t != "histogram" && t != "summary" && t != "untyped") return bad("bad type");
        }
      }
      continue;
    }
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = std::string(line.substr(0, i));
    if (!valid_name(s.name)) return bad("bad metric name");
    if (i < line.size() && line[i] == '{') {
      size_t start = ++i;
      // label="value" pairs separated by commas
      while (i < line.size() && line[i] != '}') {
        size_t ks = i;
        while (i < line.size() && line[i] != '=') ++i;
        if (i >= line.size() || !valid_name(line.substr(ks, i - ks))) return bad("bad label name");
        if (++i >= line.size() || line[i] != '"') return bad("label value must be quoted");
        ++i;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\') ++i;
          ++i;
        }
        if (i >= line.size()) return bad("unterminated label value");
        ++i;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return bad("unterminated label set");
      s.labels = std::string(line.substr(start, i - start));
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') return bad("expected a space before the value");
    std::string v(line.substr(i + 1));
    size_t sp = v.find(' ');  // optional timestamp
    if (sp != std::string::npos) v = v.substr(0, sp);
    if (v == "+Inf") s.value = INFINITY;
    else if (v == "-Inf") s.value = -INFINITY;
    else if (v == "NaN") s.value = NAN;
    else {
      char* end = nullptr;
      s.value = std::strtod(v.c_str(), &end);
      if (v.empty() || end == nullptr || *end != '\0') return bad("bad value");
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tessera::metrics
