// The `rag` workload of `tessera bench` (docs/kv.md "CacheBlend"): RAG prompts — k documents
// drawn from a pool of --rag-pool, shuffled per request, then a --prompt-words question — sent
// in up to three caching modes, one after the other, against the same running cluster:
//
//   blend   the documents in the request's `documents` field (CacheBlend: each document's K/V
//           reused wherever it appears, ~15 % of its tokens recomputed), the question as `prompt`;
//   prefix  the same text concatenated into `prompt`, no `documents`: only the radix prefix cache
//           (a page-aligned prefix an earlier request shared: in practice the first document);
//   none    the same prompt with a cache_salt unique to the request: a K/V namespace of its own,
//           so nothing is reused (what the scheduler's --prefix-cache false does per request).
//
// Every mode sends the same measured requests (same documents, order and question) in a
// cache_salt namespace of its own, fresh for each invocation (rag-<random>-<mode>), so modes
// never share K/V with each other nor with an earlier run. Unmeasured warm-up (--rag-warmup):
// blend and prefix first send one request per pool document with that document first (then the
// k-1 following), so every document is in the chunk cache and every first document in the
// prefix cache — the steady state of a pool that recurs; none sends one request (warm process).
//
// Thread-safety: run_rag() runs its modes one after the other (each with the load driver's own
// threads) and returns when all have ended.
#pragma once

#include <string>
#include <vector>

#include "load.h"
#include "tessera/common/result.h"

namespace tessera::bench {

struct RagModeReport {
  std::string mode;  // blend | prefix | none
  LoadReport load;   // the measured requests only
  // Over the measured requests, from the scheduler's counters (LoadConfig::scheduler_metrics_port;
  // < 0 when not read): blended prefill steps and CacheBlend fallbacks per request.
  double blend_steps_per_request = -1.0;
  double blend_fallbacks_per_request = -1.0;
};

struct RagReport {
  LoadConfig config;
  std::string run_salt;  // the cache_salt prefix of this invocation
  std::vector<RagModeReport> modes;
};

// kInvalidArgument for a bad configuration; kUnavailable when a warm-up request fails (e.g. no
// worker serves `documents`: the error names it). Failed measured requests are counted.
Result<RagReport> run_rag(const LoadConfig& config);

std::string rag_report_json(const RagReport& report);
std::string rag_report_table(const RagReport& report);

}  // namespace tessera::bench
