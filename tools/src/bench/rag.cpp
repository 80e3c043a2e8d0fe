#include "rag.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>
#include <random>
#include <sstream>

#include <chrono>
#include <optional>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "tessera/common/metrics.h"
#include "tessera/http/client.h"

namespace tessera::bench {
namespace {

using nlohmann::json;

constexpr int kMaxDocuments = 64;  // the API's limit on `documents` (docs/api.md)

struct RagRequest {
  std::vector<std::string> documents;
  std::string question;
};

// A document: `n` words as one sentence ending in a newline, so documents concatenated into a
// prompt (prefix / none modes) read as separate lines and tokenize much as they do alone.
std::string document(std::mt19937_64& rng, int n) {
  std::string d = random_words(rng, n);
  if (!d.empty()) d[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(d[0])));
  return d + ".\n";
}

Result<std::vector<std::string>> parse_modes(const std::string& list) {
  std::vector<std::string> modes;
  std::stringstream in(list);
  for (std::string m; std::getline(in, m, ',');) {
    if (m != "blend" && m != "prefix" && m != "none")
      return make_error(ErrorCode::kInvalidArgument, "rag-modes: '" + m + "' is not one of blend, prefix, none");
    if (std::find(modes.begin(), modes.end(), m) != modes.end())
      return make_error(ErrorCode::kInvalidArgument, "rag-modes: '" + m + "' given twice");
    modes.push_back(m);
  }
  if (modes.empty()) return make_error(ErrorCode::kInvalidArgument, "rag-modes: give at least one of blend, prefix, none");
  return modes;
}

// The request body of `r` in `mode`; `salt` is the mode's namespace (none: unique per request).
std::string body(const LoadConfig& c, const std::string& mode, const RagRequest& r, const std::string& salt) {
  json b = {{"max_tokens", c.max_tokens}, {"ignore_eos", c.ignore_eos}, {"cache_salt", salt}};
  if (mode == "blend") {
    b["documents"] = r.documents;
    b["prompt"] = r.question;
    if (c.recompute_ratio >= 0) b["recompute_ratio"] = c.recompute_ratio;
  } else {
    std::string prompt;
    for (const auto& d : r.documents) prompt += d;
    b["prompt"] = prompt + r.question;
  }
  return b.dump();
}

std::string random_hex() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The scheduler's (blend steps, blend fallbacks) counters; nullopt when unreadable.
std::optional<std::pair<double, double>> read_blend_counters(const LoadConfig& c) {
  auto r = http::request({.host = c.host, .port = c.scheduler_metrics_port, .method = "GET", .path = "/metrics", .timeout_ms = 5000});
  if (!r.ok() || r->status != 200) return std::nullopt;
  auto samples = metrics::parse_text(r->body);
  if (!samples.ok()) return std::nullopt;
  std::pair<double, double> v{0.0, 0.0};  // a counter not exported yet is 0
  for (const auto& s : *samples) {
    if (s.name == "tessera_scheduler_blend_steps_total") v.first = s.value;
    if (s.name == "tessera_scheduler_blend_fallbacks_total") v.second = s.value;
  }
  return v;
}

// The counters once the scheduler has published what the finished requests planned: it publishes
// them every <= 250 ms, so two reads 300 ms apart that agree are final (nothing else runs).
std::optional<std::pair<double, double>> settled_blend_counters(const LoadConfig& c) {
  auto prev = read_blend_counters(c);
  for (int i = 0; prev && i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto now = read_blend_counters(c);
    if (!now || *now == *prev) return now;
    prev = now;
  }
  return prev;
}

double speedup(double base, double x) { return x > 0 && base > 0 ? base / x : 0.0; }

const RagModeReport* find_mode(const RagReport& r, const std::string& mode) {
  for (const auto& m : r.modes)
    if (m.mode == mode) return &m;
  return nullptr;
}

}  // namespace

Result<RagReport> run_rag(const LoadConfig& c) {
  if (c.rag_pool < 1 || c.rag_pool > kMaxDocuments * 1024 || c.rag_k < 1 || c.rag_k > c.rag_pool || c.rag_k > kMaxDocuments)
    return make_error(ErrorCode::kInvalidArgument, "rag: need 1 <= rag-k <= rag-pool and rag-k <= " +
                                                       std::to_string(kMaxDocuments) + " (got rag-k " +
                                                       std::to_string(c.rag_k) + ", rag-pool " + std::to_string(c.rag_pool) + ")");
  if (c.rag_doc_words < 1 || c.prompt_words < 1 || c.num_requests < 1 || c.max_tokens < 1)
    return make_error(ErrorCode::kInvalidArgument, "rag: rag-doc-words, prompt-words, num-requests and max-tokens must be >= 1");
  if (static_cast<int64_t>(c.rag_pool) * c.rag_doc_words > (int64_t{1} << 26))
    return make_error(ErrorCode::kInvalidArgument, "rag: rag-pool x rag-doc-words must be <= 2^26 words (got " +
                                                       std::to_string(c.rag_pool) + " x " + std::to_string(c.rag_doc_words) + ")");
  if (c.recompute_ratio > 1.0)
    return make_error(ErrorCode::kInvalidArgument, "rag: recompute-ratio must be in [0, 1] (or < 0 for the worker's default)");
  auto modes = parse_modes(c.rag_modes);
  if (!modes.ok()) return modes.error();

  // Everything from the seed: the pool, then each measured request's draw, shuffle and question.
  std::mt19937_64 rng(c.seed);
  std::vector<std::string> pool;
  for (int i = 0; i < c.rag_pool; ++i) pool.push_back(document(rng, c.rag_doc_words));
  std::vector<RagRequest> measured;
  std::vector<size_t> order(pool.size());
  for (int i = 0; i < c.num_requests; ++i) {
    std::iota(order.begin(), order.end(), size_t{0});
    std::shuffle(order.begin(), order.end(), rng);  // the first k: drawn and in a random order
    RagRequest r;
    for (int j = 0; j < c.rag_k; ++j) r.documents.push_back(pool[order[static_cast<size_t>(j)]]);
    r.question = random_words(rng, c.prompt_words) + "?";
    measured.push_back(std::move(r));
  }
  std::vector<RagRequest> warmup;  // document j first, then the k-1 following ones
  for (int j = 0; j < c.rag_pool; ++j) {
    RagRequest r;
    for (int d = 0; d < c.rag_k; ++d) r.documents.push_back(pool[static_cast<size_t>((j + d) % c.rag_pool)]);
    r.question = random_words(rng, c.prompt_words) + "?";
    warmup.push_back(std::move(r));
  }

  RagReport rep;
  rep.config = c;
  rep.run_salt = "rag-" + random_hex();
  for (const auto& mode : *modes) {
    const std::string salt = rep.run_salt + "-" + mode;
    auto salt_of = [&](const std::string& tag, size_t i) { return mode == "none" ? salt + "-" + tag + std::to_string(i) : salt; };
    if (c.rag_warmup) {
      std::vector<std::string> bodies;
      const size_t n = mode == "none" ? 1 : warmup.size();
      for (size_t i = 0; i < n; ++i) bodies.push_back(body(c, mode, warmup[i], salt_of("w", i)));
      LoadConfig wc = c;
      wc.concurrency = 1;
      wc.request_rate = 0;
      wc.progress_s = 0;
      wc.cpu_pids.clear();
      std::fprintf(stderr, "tessera bench: rag mode %s: %zu warm-up request(s)\n", mode.c_str(), n);
      auto w = run_prepared(wc, bodies);
      if (!w.ok()) return w.error();
      if (w->failed > 0)
        return make_error(ErrorCode::kUnavailable, "rag mode " + mode + ": a warm-up request failed: " +
                                                       (w->sample_errors.empty() ? std::string("?") : w->sample_errors[0]));
    }
    std::vector<std::string> bodies;
    for (size_t i = 0; i < measured.size(); ++i) bodies.push_back(body(c, mode, measured[i], salt_of("m", i)));
    std::fprintf(stderr, "tessera bench: rag mode %s: %zu measured request(s)\n", mode.c_str(), bodies.size());
    std::optional<std::pair<double, double>> before;
    if (c.scheduler_metrics_port > 0) before = settled_blend_counters(c);
    auto m = run_prepared(c, bodies);
    if (!m.ok()) return m.error();
    RagModeReport mr{mode, std::move(*m)};
    if (before) {
      if (auto after = settled_blend_counters(c); after && mr.load.ok > 0) {
        mr.blend_steps_per_request = (after->first - before->first) / mr.load.ok;
        mr.blend_fallbacks_per_request = (after->second - before->second) / mr.load.ok;
      }
    }
    rep.modes.push_back(std::move(mr));
  }
  return rep;
}

std::string rag_report_json(const RagReport& r) {
  const LoadConfig& c = r.config;
  json modes = json::object();
  const RagModeReport* none = find_mode(r, "none");
  for (const auto& m : r.modes) {
    json j = json::parse(report_json(m.load));
    j.erase("config");
    const LoadReport& l = m.load;
    j["prompt_tokens_per_s"] = l.wall_s > 0 ? static_cast<double>(l.prompt_tokens) / l.wall_s : 0.0;
    j["cpu_ms_per_request"] = l.cpu_s >= 0 && l.ok > 0 ? json(1000.0 * l.cpu_s / l.ok) : json(nullptr);
    j["prompt_tokens_per_cpu_s"] = l.cpu_s > 0 ? json(static_cast<double>(l.prompt_tokens) / l.cpu_s) : json(nullptr);
    j["blend_steps_per_request"] = m.blend_steps_per_request < 0 ? json(nullptr) : json(m.blend_steps_per_request);
    j["blend_fallbacks_per_request"] = m.blend_fallbacks_per_request < 0 ? json(nullptr) : json(m.blend_fallbacks_per_request);
    if (none) {
      j["ttft_p50_speedup_vs_none"] = speedup(none->load.ttft.p50, l.ttft.p50);
      j["ttft_mean_speedup_vs_none"] = speedup(none->load.ttft.mean, l.ttft.mean);
      if (l.cpu_s > 0 && none->load.cpu_s > 0 && l.ok > 0 && none->load.ok > 0)
        j["cpu_speedup_vs_none"] = speedup(none->load.cpu_s / none->load.ok, l.cpu_s / l.ok);
    }
    modes[m.mode] = std::move(j);
  }
  json order = json::array();
  for (const auto& m : r.modes) order.push_back(m.mode);
  json j = {{"config",
             {{"api", c.api}, {"workload", "rag"}, {"num_requests", c.num_requests},
              {"concurrency", c.request_rate > 0 ? 0 : c.concurrency}, {"request_rate", c.request_rate},
              {"max_tokens", c.max_tokens}, {"question_words", c.prompt_words}, {"rag_pool", c.rag_pool},
              {"rag_k", c.rag_k}, {"rag_doc_words", c.rag_doc_words}, {"rag_warmup", c.rag_warmup},
              {"recompute_ratio", c.recompute_ratio < 0 ? json(nullptr) : json(c.recompute_ratio)},
              {"cpu_pids", c.cpu_pids}, {"seed", c.seed}, {"run_salt", r.run_salt}}},
            {"order", order},
            {"modes", modes}};
  return j.dump(2);
}

std::string rag_report_table(const RagReport& r) {
  const LoadConfig& c = r.config;
  char buf[512];
  std::string s;
  std::snprintf(buf, sizeof(buf),
                "rag workload: %d of %d documents (%d words each) per request, shuffled, + a %d-word question; %d "
                "requests per mode, %s, max_tokens %d\n",
                c.rag_k, c.rag_pool, c.rag_doc_words, c.prompt_words, c.num_requests,
                c.request_rate > 0 ? ("rate " + std::to_string(c.request_rate) + " req/s").c_str()
                                   : ("concurrency " + std::to_string(c.concurrency)).c_str(),
                c.max_tokens);
  s += buf;
  s += "mode     ok fail   TTFT p50   TTFT p90  TTFT mean   out tok/s   req/s  prompt tok  cached %  reused %  "
       "CPU ms/req  TTFT p50 vs none\n";
  const RagModeReport* none = find_mode(r, "none");
  for (const auto& m : r.modes) {
    const LoadReport& l = m.load;
    const double pt = l.prompt_tokens > 0 ? static_cast<double>(l.prompt_tokens) : 1.0;
    std::string cpu = "n/a", vs = "n/a";
    if (l.cpu_s >= 0 && l.ok > 0) cpu = std::to_string(static_cast<long long>(1000.0 * l.cpu_s / l.ok + 0.5));
    if (none && l.ttft.p50 > 0) {
      char v[32];
      std::snprintf(v, sizeof(v), "%.2fx", speedup(none->load.ttft.p50, l.ttft.p50));
      vs = v;
    }
    std::snprintf(buf, sizeof(buf), "%-7s %3d %4d %8.1fms %8.1fms %8.1fms %11.1f %7.2f %11lld %8.1f%% %8.1f%% %11s  %s\n",
                  m.mode.c_str(), l.ok, l.failed, l.ttft.p50, l.ttft.p90, l.ttft.mean, l.output_tokens_per_s,
                  l.requests_per_s, static_cast<long long>(l.prompt_tokens), 100.0 * static_cast<double>(l.cached_tokens) / pt,
                  100.0 * static_cast<double>(l.reused_tokens) / pt, cpu.c_str(), vs.c_str());
    s += buf;
    if (m.blend_steps_per_request >= 0) {
      std::snprintf(buf, sizeof(buf), "  %s: %.2f blended prefill steps, %.2f CacheBlend fallbacks per request (scheduler)\n",
                    m.mode.c_str(), m.blend_steps_per_request, m.blend_fallbacks_per_request);
      s += buf;
    }
    for (const auto& e : l.sample_errors) s += "  error (" + m.mode + "): " + e + "\n";
  }
  s += "(cached = prompt tokens from the prefix cache, reused = from CacheBlend's document cache; usage fields)\n";
  return s;
}

}  // namespace tessera::bench
