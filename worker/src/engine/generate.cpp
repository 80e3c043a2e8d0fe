#include <chrono>
#include <string>

#include "tessera/worker/engine.h"

namespace tessera::worker {

Result<GenerateResult> generate(Engine& engine, const GenerateRequest& req) {
  if (req.prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "generate: empty prompt");
  if (req.max_tokens < 1) {
    return make_error(ErrorCode::kInvalidArgument, "generate: max_tokens must be >= 1 (got " + std::to_string(req.max_tokens) + ")");
  }
  const int32_t prefix = req.fill ? req.fill->num_tokens : 0;
  if (req.fill && prefix < 1) return make_error(ErrorCode::kInvalidArgument, "generate: the fill's num_tokens must be >= 1");
  const int32_t ps = engine.pool().page_size();
  const int64_t positions = static_cast<int64_t>(prefix) + static_cast<int64_t>(req.prompt.size()) + req.max_tokens;
  const int64_t pages = (positions + ps - 1) / ps;
  if (pages > engine.pool().num_pages()) {
    return make_error(ErrorCode::kResourceExhausted, "generate: " + std::to_string(positions) + " positions need " +
                                                         std::to_string(pages) + " pages, the pool has " +
                                                         std::to_string(engine.pool().num_pages()));
  }
  std::vector<int32_t> table(static_cast<size_t>(pages));
  for (int32_t i = 0; i < static_cast<int32_t>(pages); ++i) table[static_cast<size_t>(i)] = i;

  std::optional<KvFill> fill = req.fill;
  if (fill) {
    fill->request_id = req.request_id;
    fill->pages.assign(table.begin(), table.begin() + (prefix + ps - 1) / ps);
  }

  GenerateResult out;
  std::vector<int32_t> step_tokens(req.prompt.begin(), req.prompt.end());
  int32_t pos = prefix;
  Status status = ok_status();
  for (int32_t n = 0; n < req.max_tokens; ++n) {
    StepPlan plan;
    plan.step_id = static_cast<uint64_t>(n);
    if (n == 0 && fill) plan.fills.push_back(*fill);
    SeqPlan seq;
    seq.request_id = req.request_id;
    seq.tokens = step_tokens;
    seq.start_pos = pos;
    const int64_t end = pos + static_cast<int64_t>(step_tokens.size());
    seq.block_table.assign(table.begin(), table.begin() + (end + ps - 1) / ps);
    for (int64_t p = pos; p < end; ++p) seq.slot_mapping.push_back(static_cast<int64_t>(table[static_cast<size_t>(p / ps)]) * ps + p % ps);
    seq.sample = true;
    seq.sampling = req.sampling;
    plan.seqs.push_back(std::move(seq));
    const auto t0 = std::chrono::steady_clock::now();
    auto r = engine.execute(plan);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!r.ok()) {
      status = r.take_error();
      break;
    }
    (n == 0 ? out.prefill_ms : out.decode_ms) += ms;
    if (n == 0 && !r->fills.empty()) out.fill = r->fills.front();
    const SeqResult& res = r->results.at(0);
    out.tokens.push_back(res.token);
    if (req.sampling.logprobs) out.logprobs.push_back(res.logprob);
    if (req.sampling.top_logprobs > 0) out.top.push_back(res.top);
    pos = static_cast<int32_t>(end);
    step_tokens.assign(1, res.token);
    bool stop = false;
    for (int32_t s : req.stop_ids) stop = stop || s == res.token;
    if (req.on_token && !req.on_token(res.token)) stop = true;
    if (stop) {
      out.stopped = true;
      break;
    }
  }
  StepPlan release;
  release.released = {req.request_id};
  (void)engine.execute(release);
  if (!status.ok()) return status.take_error();
  return out;
}

}  // namespace tessera::worker
