#include "prefix_pins.h"

#include <algorithm>

#include "tessera/common/log.h"

namespace tessera::scheduler_app {

void PrefixPins::on_admin(const std::string& frontend, const protocol::PrefixAdmin& a) {
  if (a.op == "pin") return pin(frontend, a);
  if (a.op == "unpin") return unpin(frontend, a);
  list(frontend, a);
}

std::vector<std::string> PrefixPins::targets(const std::vector<std::string>& named) const {
  std::vector<std::string> out;
  const bool all = named.empty() || std::find(named.begin(), named.end(), "*") != named.end();
  for (const auto& [name, w] : workers_.all())
    if (!w.draining && (all || std::find(named.begin(), named.end(), name) != named.end())) out.push_back(name);
  return out;
}

void PrefixPins::reply(const std::string& frontend, protocol::PrefixReport report) {
  report.scheduler = name_;
  report.pinned_pages = 0;
  report.pin_budget_pages = 0;
  for (const auto& [name, w] : workers_.all()) {
    report.pinned_pages += w.batcher->pinned_pages();
    report.pin_budget_pages += w.batcher->max_pinned_pages();
  }
  workers_.publish();
  sockets_.to_frontend(frontend, report);
}

void PrefixPins::pin(const std::string& frontend, const protocol::PrefixAdmin& a) {
  const std::optional<scheduler::WorkerFacts> facts = workers_.facts();
  if (!facts) return sockets_.fail_client(frontend, a.id, ErrorCode::kUnavailable, "no worker is registered with scheduler '" + name_ + "'");
  // The prewarm: the prefix as a one-token greedy request in the namespace a request with the
  // same tenant and cache_salt gets.
  protocol::GenerateRequest g{.id = a.id, .prompt_tokens = a.prompt_tokens, .max_tokens = 1, .ignore_eos = true,
                              .routing_key = a.routing_key, .tenant = a.tenant, .cache_salt = a.cache_salt};
  g.sampling.temperature = 0.0f;
  if (!intake_.config().prefix_cache)
    return sockets_.fail_client(frontend, a.id, ErrorCode::kUnsupported,
                                "scheduler '" + name_ + "' runs with --prefix-cache false: nothing can be pinned");
  const uint64_t job_id = next_id_++;
  auto admitted = intake_.admit(std::move(g), 0, *facts);
  if (!admitted.ok()) return sockets_.fail_client(frontend, a.id, admitted.error().code, admitted.error().message);
  Job job{.frontend = frontend, .client_id = a.id, .ns = admitted->request.ns, .tokens = admitted->request.prompt,
          .report = {.id = a.id}};
  auto start = [&](const std::string& worker, scheduler::Request r, bool routed) {
    const uint64_t prewarm = next_id_++;
    r.id = requests_.next_id();
    const uint64_t internal = r.id;
    std::string where = worker;
    if (routed) {
      auto route = workers_.place(std::move(r));
      if (!route.ok()) return job.report.entries.push_back({.worker = worker, .error = route.error().message});
      where = route->worker;
    } else if (Status st = workers_.place_on(worker, std::move(r)); !st.ok()) {
      return job.report.entries.push_back({.worker = worker, .error = st.error().message});
    }
    requests_.add(internal, TrackedRequest{.frontend = kInternal, .client_id = prewarm, .worker = where,
                                           .arrival = Clock::now(), .original = std::nullopt});
    prewarms_[prewarm] = job_id;
    ++job.pending;
  };
  const bool routed = a.workers.empty();
  if (routed) {
    start("", admitted->request, true);
  } else {
    const std::vector<std::string> names = targets(a.workers);
    for (const std::string& n : a.workers)
      if (n != "*" && std::find(names.begin(), names.end(), n) == names.end())
        job.report.entries.push_back({.worker = n, .error = "no live worker '" + n + "' on scheduler '" + name_ + "'"});
    for (const std::string& n : names) start(n, admitted->request, false);
  }
  TS_LOG(kInfo) << "prefix pin " << a.id << " | " << job.tokens.size() << " tokens, prewarming on " << job.pending
                << " worker(s)";
  if (job.pending == 0) return reply(frontend, std::move(job.report));
  jobs_.emplace(job_id, std::move(job));
}

void PrefixPins::on_internal_ends(const std::vector<InternalEnd>& ends) {
  for (const InternalEnd& e : ends) {
    auto p = prewarms_.find(e.job);
    if (p == prewarms_.end()) continue;
    auto j = jobs_.find(p->second);
    prewarms_.erase(p);
    if (j == jobs_.end()) continue;
    Job& job = j->second;
    protocol::PrefixEntry entry{.worker = e.worker};
    WorkerEntry* w = workers_.find(e.worker);
    if (!e.ok) {
      entry.error = "prewarm failed: " + e.message;
    } else if (w == nullptr) {
      entry.error = "worker '" + e.worker + "' left before the prefix could be pinned";
    } else if (auto pinned = w->batcher->pin(job.ns, job.tokens); !pinned.ok()) {
      entry.error = pinned.error().message;
    } else {
      entry = {.worker = e.worker, .hash = pinned->hash, .ns_hash = pinned->ns_hash, .tokens = pinned->tokens,
               .pages = pinned->pages, .pinned = true};
      TS_LOG(kInfo) << "worker=" << e.worker << " | pinned prefix " << pinned->hash << " (" << pinned->tokens << " tokens, "
                    << pinned->pages << " pages)";
    }
    job.report.entries.push_back(std::move(entry));
    if (--job.pending > 0) continue;
    std::sort(job.report.entries.begin(), job.report.entries.end(),
              [](const protocol::PrefixEntry& x, const protocol::PrefixEntry& y) { return x.worker < y.worker; });
    reply(job.frontend, std::move(job.report));
    jobs_.erase(j);
  }
}

void PrefixPins::unpin(const std::string& frontend, const protocol::PrefixAdmin& a) {
  protocol::PrefixReport report{.id = a.id};
  for (const std::string& n : targets(a.workers)) {
    WorkerEntry* w = workers_.find(n);
    if (w == nullptr) continue;
    if (w->batcher->unpin(a.prefix).ok()) {
      report.entries.push_back({.worker = n, .hash = a.prefix, .pinned = false});
      TS_LOG(kInfo) << "worker=" << n << " | unpinned prefix " << a.prefix;
    }
  }
  reply(frontend, std::move(report));
}

void PrefixPins::list(const std::string& frontend, const protocol::PrefixAdmin& a) {
  protocol::PrefixReport report{.id = a.id};
  for (const auto& [name, w] : workers_.all()) {
    for (const scheduler::PinnedPrefix& p : w.batcher->pins())
      report.entries.push_back({.worker = name, .hash = p.hash, .ns_hash = p.ns_hash, .tokens = p.tokens, .pages = p.pages,
                                .pinned = true});
    if (a.limit <= 0) continue;
    for (const scheduler::RadixPrefixInfo& c : w.batcher->index().prefixes(static_cast<size_t>(a.limit)))
      report.entries.push_back({.worker = name, .hash = c.hash, .ns_hash = c.ns_hash, .tokens = c.end_tokens,
                                .pages = c.own_pages, .hits = c.hits, .pinned = false});
  }
  reply(frontend, std::move(report));
}

}  // namespace tessera::scheduler_app
