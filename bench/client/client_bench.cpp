// tessera-client-bench: what the C++ client (clients/cpp) adds over the raw protocol
// (raw_protocol.h: cppzmq + msgpack-c in one loop), against a real frontend and against a
// "blast" frontend (a forked process answering at wire speed, so the client side is the limit).
//
//   tessera-client-bench [--endpoint tcp://127.0.0.1:8001] [--runs 5] [--requests 200]
//                        [--streams 32] [--max-tokens 128] [--blast-tokens 2000]
//
// Figures (median of --runs): per-request latency of sequential 1-token completions; token-event
// throughput of --streams concurrent streams (events/s) and the process CPU time per token event
// (user + system, all threads), for raw, the client with Handler callbacks, and the client with
// one Stream per consumer thread. Without --endpoint only the blast part runs.
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "raw_protocol.h"
#include "tessera/client/client.h"

namespace {

namespace tc = tessera::client;
namespace tb = tessera::bench;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string endpoint;
  int runs = 5, requests = 200, streams = 32, max_tokens = 128, blast_tokens = 2000;
};

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

struct Sample {
  double wall_s = 0, cpu_s = 0;
  uint64_t events = 0;
};

Sample measure(const std::function<uint64_t()>& f) {
  const double c0 = cpu_seconds();
  const auto t0 = Clock::now();
  Sample s;
  s.events = f();
  s.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  s.cpu_s = cpu_seconds() - c0;
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : (v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2);
}

const tc::RequestOptions kGreedy{.temperature = 0.0, .ignore_eos = true};

tc::RequestOptions with_max(int max_tokens) {
  tc::RequestOptions o = kGreedy;
  o.max_tokens = max_tokens;
  return o;
}

uint64_t client_callbacks(tc::Client& c, int streams, int tokens) {
  std::atomic<uint64_t> events{0};
  std::latch done(streams);
  for (int i = 0; i < streams; ++i)
    c.start_complete("Once upon a time", with_max(tokens),
                     {.on_token = [&](const tc::TokenEvent&) { events.fetch_add(1, std::memory_order_relaxed); },
                      .on_final = [&](const tc::Completion&) { done.count_down(); },
                      .on_error = [&](const tc::Error& e) {
                        std::fprintf(stderr, "error: %s\n", e.what());
                        std::exit(1);
                      }});
  done.wait();
  return events.load();
}

uint64_t client_streams(tc::Client& c, int streams, int tokens) {
  std::atomic<uint64_t> events{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < streams; ++i)
    threads.emplace_back([&] {
      uint64_t n = 0;
      for (const auto& ev : c.stream_complete("Once upon a time", with_max(tokens)))
        n += std::holds_alternative<tc::TokenEvent>(ev);
      events += n;
    });
  for (auto& t : threads) t.join();
  return events.load();
}

struct Row {
  std::string name;
  std::vector<double> per_request_us, events_per_s, cpu_us_per_event;
};

void print(const char* title, const std::vector<Row>& rows) {
  std::printf("\n%s\n%-28s %16s %14s %18s\n", title, "", "us/request", "events/s", "cpu us/event");
  for (const auto& r : rows) {
    auto col = [](const std::vector<double>& v, const char* fmt) {
      char b[32];
      if (v.empty()) return std::string("-");
      std::snprintf(b, sizeof b, fmt, median(v));
      return std::string(b);
    };
    std::printf("%-28s %16s %14s %18s\n", r.name.c_str(), col(r.per_request_us, "%.1f").c_str(),
                col(r.events_per_s, "%.0f").c_str(), col(r.cpu_us_per_event, "%.2f").c_str());
  }
}

// One measured configuration against `endpoint`: sequential requests, then concurrent streams.
std::vector<Row> run_against(const std::string& endpoint, const Args& a, int tokens, bool sequential) {
  std::vector<Row> rows{{"raw cppzmq+msgpack", {}, {}, {}}, {"client (Handler callbacks)", {}, {}, {}},
                        {"client (Stream per thread)", {}, {}, {}}};
  tc::Client client(endpoint);
  client.limits();  // connected
  tb::RawClient raw(endpoint);
  raw.run("Once", 1, 1, 1, false);  // connected
  for (int run = 0; run < a.runs; ++run) {
    if (sequential) {
      Sample base = measure([&] { raw.run("Once", a.requests, 1, 1, false); return 0; });
      rows[0].per_request_us.push_back(base.wall_s * 1e6 / a.requests);
      Sample cli = measure([&] {
        for (int i = 0; i < a.requests; ++i) client.complete("Once", with_max(1));
        return 0;
      });
      rows[1].per_request_us.push_back(cli.wall_s * 1e6 / a.requests);
    }
    auto add = [&](Row& r, const Sample& s) {
      r.events_per_s.push_back(static_cast<double>(s.events) / s.wall_s);
      r.cpu_us_per_event.push_back(s.cpu_s * 1e6 / static_cast<double>(s.events));
    };
    add(rows[0], measure([&] {
      return raw.run("Once upon a time", a.streams, a.streams, tokens, true).events;
    }));
    add(rows[1], measure([&] { return client_callbacks(client, a.streams, tokens); }));
    add(rows[2], measure([&] { return client_streams(client, a.streams, tokens); }));
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--endpoint") a.endpoint = v;
    else if (k == "--runs") a.runs = std::atoi(v.c_str());
    else if (k == "--requests") a.requests = std::atoi(v.c_str());
    else if (k == "--streams") a.streams = std::atoi(v.c_str());
    else if (k == "--max-tokens") a.max_tokens = std::atoi(v.c_str());
    else if (k == "--blast-tokens") a.blast_tokens = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown option %s (see the comment at the top of client_bench.cpp)\n", k.c_str());
      return 2;
    }
  }
  int blast_pid = 0;
  const std::string blast = tb::start_blast_frontend(&blast_pid);  // before any thread starts
  std::printf("tessera-client-bench: %d runs (median), %d streams; client %s\n", a.runs, a.streams, tc::version());
  if (!a.endpoint.empty()) {
    char title[160];
    std::snprintf(title, sizeof title, "frontend %s: %d sequential 1-token requests; %d streams x %d tokens",
                  a.endpoint.c_str(), a.requests, a.streams, a.max_tokens);
    print(title, run_against(a.endpoint, a, a.max_tokens, true));
  }
  char title[160];
  std::snprintf(title, sizeof title, "blast frontend (wire speed): %d sequential requests; %d streams x %d tokens",
                a.requests, a.streams, a.blast_tokens);
  print(title, run_against(blast, a, a.blast_tokens, true));
  ::kill(blast_pid, SIGKILL);
  ::waitpid(blast_pid, nullptr, 0);
  return 0;
}
