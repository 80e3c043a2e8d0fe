#include "load.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <condition_variable>
#include <fstream>
#include <sstream>
#include <mutex>
#include <random>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <zmq.hpp>

#include "tessera/common/metrics.h"
#include "tessera/common/protocol.h"
#include "tessera/common/zmq_util.h"
#include "tessera/http/client.h"

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

const char* kWords[] = {"the", "little", "dog", "ran", "to", "a", "big", "red", "ball", "in", "park", "and", "saw",
                        "cat", "who", "was", "happy", "sun", "tree", "friend", "played", "with", "her", "mom", "said",
                        "one", "day", "girl", "boy", "named", "Lily", "Tom", "went", "home", "found", "small", "bird",
                        "sky", "blue", "green", "car", "toy", "box", "jumped", "over", "water", "fish", "swim", "they",
                        "were", "very", "good", "friends", "ate", "cake", "smiled", "laughed", "ran", "fast", "slow",
                        "garden", "flower", "rain", "wind"};

}  // namespace

std::string random_words(std::mt19937_64& rng, int n) {
  std::string s;
  std::uniform_int_distribution<size_t> pick(0, sizeof(kWords) / sizeof(kWords[0]) - 1);
  for (int i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += kWords[pick(rng)];
  }
  return s;
}

namespace {

std::string words(std::mt19937_64& rng, int n) { return random_words(rng, n); }

double ms_since(Clock::time_point t0, Clock::time_point t1) { return std::chrono::duration<double, std::milli>(t1 - t0).count(); }

// The timings of a request that succeeded (total_ms and completion_tokens already set): TTFT,
// inter-token latencies and TPOT from the arrival times of its chunks.
RequestRecord finish_record(RequestRecord rec, Clock::time_point t0, const std::vector<Clock::time_point>& chunks,
                            const std::string& text, std::string* text_out) {
  if (!chunks.empty()) {
    rec.ttft_ms = ms_since(t0, chunks.front());
    for (size_t i = 1; i < chunks.size(); ++i) rec.itl_ms.push_back(ms_since(chunks[i - 1], chunks[i]));
    if (rec.completion_tokens >= 2) rec.tpot_ms = ms_since(chunks.front(), chunks.back()) / (rec.completion_tokens - 1);
  } else {
    rec.ttft_ms = rec.total_ms;
  }
  rec.ok = true;
  if (text_out) *text_out = text;
  return rec;
}

// One streamed request on `client` (kept alive between the requests of one thread);
// `text_out` receives the generated text (multi-turn history).
RequestRecord one_request(http::Client& client, const LoadConfig& c, const std::string& path, json body,
                          std::string* text_out) {
  // Usage (token counts, cached/reused tokens) comes in a streamed response only when asked for.
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  RequestRecord rec;
  std::vector<Clock::time_point> chunks;
  std::string text;
  json usage;
  http::SseParser sse;
  const auto t0 = Clock::now();
  auto on_data = [&](const std::string& d) {
    if (d == "[DONE]") return;
    json j = json::parse(d, nullptr, false);
    if (j.is_discarded()) return;
    if (j.contains("error")) {
      rec.error = j["error"].value("message", d);
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) usage = j["usage"];
    if (!j.contains("choices") || j["choices"].empty()) return;
    const json& ch = j["choices"][0];
    std::string piece;
    if (ch.contains("text") && ch["text"].is_string()) piece = ch["text"].get<std::string>();
    if (ch.contains("delta") && ch["delta"].contains("content") && ch["delta"]["content"].is_string())
      piece = ch["delta"]["content"].get<std::string>();
    if (!piece.empty()) {
      chunks.push_back(Clock::now());
      text += piece;
    }
  };
  auto r = client.request({.host = c.host, .port = c.port, .method = "POST", .path = path, .body = body.dump(),
                         .timeout_ms = c.timeout_ms, .on_body = [&](std::string_view b) {
                           sse.feed(b, on_data);
                           return true;
                         }});
  const auto t1 = Clock::now();
  rec.total_ms = ms_since(t0, t1);
  if (!r.ok()) {
    rec.error = r.error().to_string();
    return rec;
  }
  if (r->status != 200) {
    rec.error = "HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 200);
    return rec;
  }
  if (!rec.error.empty()) return rec;
  if (usage.is_object()) {
    rec.prompt_tokens = usage.value("prompt_tokens", 0);
    rec.completion_tokens = usage.value("completion_tokens", 0);
    if (usage.contains("prompt_tokens_details") && usage["prompt_tokens_details"].is_object()) {
      rec.cached_tokens = usage["prompt_tokens_details"].value("cached_tokens", 0);
      rec.reused_tokens = usage["prompt_tokens_details"].value("reused_tokens", 0);
    }
  }
  return finish_record(std::move(rec), t0, chunks, text, text_out);
}

// One streamed request over the frontend's ZeroMQ client API (docs/protocol.md): a DEALER per
// request, `completion`/`chat` with stream = true, `token` events, then `final` or `error`.
RequestRecord one_request_zmq(const LoadConfig& c, zmq::context_t& ctx, protocol::GenerateRequest req, std::string* text_out) {
  RequestRecord rec;
  req.id = 1;
  req.stream = true;
  req.max_tokens = c.max_tokens;
  req.ignore_eos = c.ignore_eos;
  std::vector<Clock::time_point> chunks;
  std::string text;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::milliseconds(c.timeout_ms);
  try {
    zmq::socket_t sock(ctx, zmq::socket_type::dealer);
    sock.set(zmq::sockopt::linger, 0);
    sock.set(zmq::sockopt::sndtimeo, c.timeout_ms);  // no connection (e.g. our key refused): give up
    zmqu::limit_message_size(sock);
    curve::make_client(sock, c.curve);
    sock.connect(c.zmq_endpoint);
    if (Status st = zmqu::send(sock, {protocol::encode(req)}); !st.ok()) {
      rec.error = st.error().to_string();
      return rec;
    }
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        rec.error = "no final event within the timeout";
        return rec;
      }
      zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, left);
      if (!(item.revents & ZMQ_POLLIN)) continue;
      auto frames = zmqu::recv(sock);
      if (!frames.ok() || frames->empty()) continue;
      auto msg = protocol::decode(frames->back());
      if (!msg.ok()) {
        rec.error = "undecodable reply: " + msg.error().to_string();
        return rec;
      }
      if (auto* t = std::get_if<protocol::TokenEvent>(&*msg)) {
        if (!t->text.empty()) {
          chunks.push_back(Clock::now());
          text += t->text;
        }
      } else if (auto* f = std::get_if<protocol::FinalEvent>(&*msg)) {
        text += f->text;
        rec.prompt_tokens = f->usage.prompt_tokens;
        rec.completion_tokens = f->usage.completion_tokens;
        rec.cached_tokens = f->usage.cached_tokens;
        break;
      } else if (auto* e = std::get_if<protocol::ErrorEvent>(&*msg)) {
        rec.error = std::string(error_code_name(e->code)) + ": " + e->message;
        return rec;
      }
    }
  } catch (const zmq::error_t& e) {
    rec.error = std::string("zmq: ") + e.what();
    return rec;
  }
  rec.total_ms = ms_since(t0, Clock::now());
  return finish_record(std::move(rec), t0, chunks, text, text_out);
}

// Reads (prompt, cached) token counters from the frontend's /metrics; false when unreadable.
bool read_counters(const LoadConfig& c, double* prompt, double* cached) {
  auto r = http::request({.host = c.host, .port = c.port, .method = "GET", .path = "/metrics", .timeout_ms = 5000});
  if (!r.ok() || r->status != 200) return false;
  auto samples = metrics::parse_text(r->body);
  if (!samples.ok()) return false;
  bool p = false, q = false;
  for (const auto& s : *samples) {
    if (s.name == "tessera_frontend_prompt_tokens_total") *prompt = s.value, p = true;
    if (s.name == "tessera_frontend_cached_prompt_tokens_total") *cached = s.value, q = true;
  }
  return p && q;
}

// One unit of work: one request, or one conversation of `turns` requests for multi-turn, or a
// prepared /v1/completions body (run_prepared).
struct Unit {
  std::vector<std::string> user;  // one per turn (single-turn workloads: one)
  int group = -1;
  json prepared;                  // an object: sent as is (plus streaming)
};

// The driver: runs every unit (closed or open loop) and summarizes.
Result<LoadReport> run_units(const LoadConfig& c, const std::vector<Unit>& units, const std::vector<std::string>& systems,
                             std::mt19937_64& rng);

}  // namespace

double cpu_seconds(const std::string& pids) {
  double total = 0;
  std::stringstream list(pids);
  for (std::string pid; std::getline(list, pid, ',');) {
    if (pid.empty()) continue;
    std::ifstream f("/proc/" + pid + "/stat");
    std::string stat;
    if (!std::getline(f, stat)) return -1.0;
    // Fields after the command (in parentheses, may hold spaces): state is field 3, utime 14, stime 15.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) return -1.0;
    std::stringstream rest(stat.substr(close + 2));
    std::string field;
    double ticks = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i)
      if (i >= 14) ticks += std::strtod(field.c_str(), nullptr);
    total += ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  return total;
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.count = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  p.p50 = at(0.5);
  p.p90 = at(0.9);
  p.p99 = at(0.99);
  return p;
}

Result<LoadReport> run_load(const LoadConfig& c) {
  if (c.workload != "random" && c.workload != "shared-prefix" && c.workload != "multi-turn")
    return make_error(ErrorCode::kInvalidArgument, "workload must be random, shared-prefix or multi-turn (got '" + c.workload + "')");
  if (c.num_requests < 1 || c.max_tokens < 1 || c.prompt_words < 1 || c.num_groups < 1 || c.turns < 1)
    return make_error(ErrorCode::kInvalidArgument, "num-requests, max-tokens, prompt-words, num-groups and turns must be >= 1");
  if (c.api != "http" && c.api != "zmq")
    return make_error(ErrorCode::kInvalidArgument, "api must be http or zmq (got '" + c.api + "')");
  if (c.request_rate <= 0.0 && c.concurrency < 1)
    return make_error(ErrorCode::kInvalidArgument, "give concurrency >= 1 or request-rate > 0");

  // Build the work units up front (deterministic from the seed): each unit is one request, or
  // one conversation of `turns` requests for multi-turn.
  std::mt19937_64 rng(c.seed);
  std::vector<std::string> systems;
  for (int g = 0; g < c.num_groups; ++g) systems.push_back(words(rng, c.system_words));
  std::vector<Unit> units;
  if (c.workload == "multi-turn") {
    const int convs = (c.num_requests + c.turns - 1) / c.turns;
    for (int i = 0; i < convs; ++i) {
      Unit u;
      for (int t = 0; t < c.turns && i * c.turns + t < c.num_requests; ++t) u.user.push_back(words(rng, c.prompt_words));
      units.push_back(std::move(u));
    }
  } else {
    for (int i = 0; i < c.num_requests; ++i)
      units.push_back(Unit{{words(rng, c.prompt_words)}, c.workload == "shared-prefix" ? i % c.num_groups : -1, {}});
  }
  return run_units(c, units, systems, rng);
}

Result<LoadReport> run_prepared(const LoadConfig& c, const std::vector<std::string>& bodies) {
  if (c.api != "http") return make_error(ErrorCode::kInvalidArgument, "workload " + c.workload + " runs over --api http only");
  if (c.request_rate <= 0.0 && c.concurrency < 1)
    return make_error(ErrorCode::kInvalidArgument, "give concurrency >= 1 or request-rate > 0");
  std::vector<Unit> units;
  for (const auto& b : bodies) {
    json j = json::parse(b, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return make_error(ErrorCode::kInvalidArgument, "a prepared request is not a JSON object");
    units.push_back(Unit{{}, -1, std::move(j)});
  }
  std::mt19937_64 rng(c.seed);
  return run_units(c, units, {}, rng);
}

namespace {

Result<LoadReport> run_units(const LoadConfig& c, const std::vector<Unit>& units, const std::vector<std::string>& systems,
                             std::mt19937_64& rng) {
  LoadReport rep;
  rep.config = c;
  int total_requests = 0;
  for (const auto& u : units) total_requests += u.prepared.is_object() ? 1 : static_cast<int>(u.user.size());
  std::mutex mu;
  zmq::context_t zctx(1);
  const bool use_zmq = c.api == "zmq";
  auto run_unit = [&](const Unit& u, http::Client& client) {
    std::vector<RequestRecord> recs;
    if (u.prepared.is_object()) {
      recs.push_back(one_request(client, c, "/v1/completions", u.prepared, nullptr));
    } else if (c.workload == "multi-turn") {
      json messages = json::array();
      for (const auto& user : u.user) {
        messages.push_back({{"role", "user"}, {"content", user}});
        json body = {{"messages", messages}, {"max_tokens", c.max_tokens}, {"stream", true}, {"ignore_eos", c.ignore_eos}};
        std::string answer;
        if (use_zmq) {
          protocol::GenerateRequest req;
          req.kind = protocol::RequestKind::kChat;
          for (const auto& m : messages) req.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
          recs.push_back(one_request_zmq(c, zctx, std::move(req), &answer));
        } else {
          recs.push_back(one_request(client, c, "/v1/chat/completions", body, &answer));
        }
        if (!recs.back().ok) break;
        messages.push_back({{"role", "assistant"}, {"content", answer}});
      }
    } else {
      std::string prompt = u.group >= 0 ? systems[static_cast<size_t>(u.group)] + "\n" + u.user[0] : u.user[0];
      json body = {{"prompt", prompt}, {"max_tokens", c.max_tokens}, {"stream", true}, {"ignore_eos", c.ignore_eos}};
      if (use_zmq) {
        protocol::GenerateRequest req;
        req.prompt = prompt;
        recs.push_back(one_request_zmq(c, zctx, std::move(req), nullptr));
      } else {
        recs.push_back(one_request(client, c, "/v1/completions", body, nullptr));
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    for (auto& r : recs) rep.requests.push_back(std::move(r));
  };
  // Progress on stderr (stdout may carry the JSON report): requests done, failures, tokens/s.
  auto progress_line = [&](Clock::time_point since) {
    size_t done = 0, failed = 0;
    double tokens = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      done = rep.requests.size();
      for (const auto& r : rep.requests) {
        failed += r.ok ? 0 : 1;
        tokens += r.completion_tokens;
      }
    }
    const double s = std::chrono::duration<double>(Clock::now() - since).count();
    std::fprintf(stderr, "tessera bench: %zu/%d requests done (%zu failed) in %.1f s, %.0f generated tokens/s\n", done,
                 total_requests, failed, s, s > 0 ? tokens / s : 0.0);
  };

  double prompt0 = 0, cached0 = 0;
  const bool have_before = read_counters(c, &prompt0, &cached0);
  const double cpu0 = c.cpu_pids.empty() ? -1.0 : cpu_seconds(c.cpu_pids);
  const auto t0 = Clock::now();
  std::mutex progress_mu;
  std::condition_variable progress_cv;
  bool finished = false;  // GUARDED_BY(progress_mu)
  std::thread progress;
  if (c.progress_s > 0) {
    progress = std::thread([&] {
      std::unique_lock<std::mutex> lock(progress_mu);
      const auto every = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(c.progress_s));
      while (!progress_cv.wait_for(lock, every, [&] { return finished; })) progress_line(t0);
    });
  }
  std::vector<std::thread> threads;
  std::atomic<size_t> next_unit{0};  // closed loop: the next unit to run (outlives every thread)
  if (c.request_rate > 0.0) {
    std::exponential_distribution<double> gap(c.request_rate);
    auto next = Clock::now();
    for (const auto& u : units) {
      std::this_thread::sleep_until(next);  // open-loop arrival schedule
      threads.emplace_back([&, &unit = u] {
        http::Client client;
        run_unit(unit, client);
      });
      next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    }
  } else {
    for (int t = 0; t < c.concurrency; ++t)
      threads.emplace_back([&] {
        http::Client client;  // one keep-alive connection per closed-loop client
        for (size_t i; (i = next_unit.fetch_add(1)) < units.size();) run_unit(units[i], client);
      });
  }
  for (auto& t : threads) t.join();
  rep.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (cpu0 >= 0) {
    const double cpu1 = cpu_seconds(c.cpu_pids);
    rep.cpu_s = cpu1 >= 0 ? cpu1 - cpu0 : -1.0;
  }
  if (progress.joinable()) {
    {
      std::lock_guard<std::mutex> lock(progress_mu);
      finished = true;
    }
    progress_cv.notify_all();
    progress.join();
  }

  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& r : rep.requests) {
    if (!r.ok) {
      ++rep.failed;
      if (rep.sample_errors.size() < 5) rep.sample_errors.push_back(r.error);
      continue;
    }
    ++rep.ok;
    ttft.push_back(r.ttft_ms);
    e2e.push_back(r.total_ms);
    if (r.tpot_ms >= 0) tpot.push_back(r.tpot_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    rep.prompt_tokens += r.prompt_tokens;
    rep.cached_tokens += r.cached_tokens;
    rep.completion_tokens += r.completion_tokens;
    rep.reused_tokens += r.reused_tokens;
  }
  rep.ttft = percentiles(ttft);
  rep.tpot = percentiles(tpot);
  rep.itl = percentiles(itl);
  rep.e2e = percentiles(e2e);
  rep.output_tokens_per_s = rep.wall_s > 0 ? static_cast<double>(rep.completion_tokens) / rep.wall_s : 0.0;
  rep.requests_per_s = rep.wall_s > 0 ? rep.ok / rep.wall_s : 0.0;
  rep.usage_hit_rate = rep.prompt_tokens > 0 ? static_cast<double>(rep.cached_tokens) / static_cast<double>(rep.prompt_tokens) : 0.0;
  double prompt1 = 0, cached1 = 0;
  if (have_before && read_counters(c, &prompt1, &cached1) && prompt1 > prompt0)
    rep.metrics_hit_rate = (cached1 - cached0) / (prompt1 - prompt0);
  return rep;
}

}  // namespace

std::string report_json(const LoadReport& r) {
  auto pj = [](const Percentiles& p) { return json{{"mean", p.mean}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"count", p.count}}; };
  const LoadConfig& c = r.config;
  json j = {{"config",
             {{"api", c.api}, {"workload", c.workload}, {"num_requests", c.num_requests}, {"concurrency", c.request_rate > 0 ? 0 : c.concurrency},
              {"request_rate", c.request_rate}, {"max_tokens", c.max_tokens}, {"prompt_words", c.prompt_words},
              {"num_groups", c.num_groups}, {"system_words", c.system_words}, {"turns", c.turns}, {"seed", c.seed}}},
            {"ok", r.ok},
            {"failed", r.failed},
            {"wall_s", r.wall_s},
            {"ttft_ms", pj(r.ttft)},
            {"tpot_ms", pj(r.tpot)},
            {"itl_ms", pj(r.itl)},
            {"e2e_ms", pj(r.e2e)},
            {"output_tokens_per_s", r.output_tokens_per_s},
            {"requests_per_s", r.requests_per_s},
            {"prompt_tokens", r.prompt_tokens},
            {"cached_prompt_tokens", r.cached_tokens},
            {"reused_prompt_tokens", r.reused_tokens},
            {"cpu_s", r.cpu_s < 0 ? json(nullptr) : json(r.cpu_s)},
            {"completion_tokens", r.completion_tokens},
            {"prefix_cache_hit_rate_usage", r.usage_hit_rate},
            {"prefix_cache_hit_rate_metrics", r.metrics_hit_rate < 0 ? json(nullptr) : json(r.metrics_hit_rate)},
            {"errors", r.sample_errors}};
  return j.dump(2);
}

std::string report_table(const LoadReport& r) {
  char buf[512];
  std::string s;
  const LoadConfig& c = r.config;
  std::snprintf(buf, sizeof(buf), "%s API, workload %s, %d requests, %s, max_tokens %d: %d ok, %d failed in %.2f s\n",
                c.api.c_str(), c.workload.c_str(), c.num_requests,
                c.request_rate > 0 ? ("rate " + std::to_string(c.request_rate) + " req/s").c_str()
                                   : ("concurrency " + std::to_string(c.concurrency)).c_str(),
                c.max_tokens, r.ok, r.failed, r.wall_s);
  s += buf;
  s += "metric            mean       p50       p90       p99\n";
  auto row = [&](const char* name, const Percentiles& p) {
    std::snprintf(buf, sizeof(buf), "%-12s %9.2f %9.2f %9.2f %9.2f   (ms, n=%zu)\n", name, p.mean, p.p50, p.p90, p.p99, p.count);
    s += buf;
  };
  row("TTFT", r.ttft);
  row("TPOT", r.tpot);
  row("ITL", r.itl);
  row("E2E", r.e2e);
  std::snprintf(buf, sizeof(buf), "throughput   %.1f output tok/s, %.2f req/s\n", r.output_tokens_per_s, r.requests_per_s);
  s += buf;
  std::snprintf(buf, sizeof(buf), "prefix cache %.1f%% of prompt tokens cached (usage: %lld / %lld); /metrics: %s\n",
                100.0 * r.usage_hit_rate, static_cast<long long>(r.cached_tokens), static_cast<long long>(r.prompt_tokens),
                r.metrics_hit_rate < 0 ? "n/a" : (std::to_string(100.0 * r.metrics_hit_rate) + "%").c_str());
  s += buf;
  for (const auto& e : r.sample_errors) s += "error: " + e + "\n";
  return s;
}

}  // namespace tessera::bench
