// generate_with_preference: worker::generate with a KvFill on the first step (preference.h).
#include <chrono>
#include <string>

#include "tessera/worker/preference.h"

namespace tessera::worker {

Result<PreferenceGenerateResult> generate_with_preference(Engine& engine, PreferenceGenerateRequest request) {
  PreferenceGenerateResult out;
  const GenerateRequest& req = request.base;
  if (!request.fill) {
    TS_ASSIGN_OR_RETURN(out.gen, generate(engine, req));
    return out;
  }
  if (req.prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "generate: empty prompt");
  if (req.max_tokens < 1) return make_error(ErrorCode::kInvalidArgument, "generate: max_tokens must be >= 1");
  KvFill fill = std::move(*request.fill);
  if (fill.num_tokens < 1) return make_error(ErrorCode::kInvalidArgument, "generate: the fill's num_tokens must be >= 1");
  const int32_t ps = engine.pool().page_size();
  const int64_t positions = static_cast<int64_t>(fill.num_tokens) + static_cast<int64_t>(req.prompt.size()) + req.max_tokens;
  const int64_t pages = (positions + ps - 1) / ps;
  if (pages > engine.pool().num_pages()) {
    return make_error(ErrorCode::kResourceExhausted, "generate: " + std::to_string(positions) + " positions need " +
                                                         std::to_string(pages) + " pages, the pool has " +
                                                         std::to_string(engine.pool().num_pages()));
  }
  fill.request_id = req.request_id;
  fill.pages.clear();
  for (int32_t i = 0; i < (fill.num_tokens + ps - 1) / ps; ++i) fill.pages.push_back(i);

  std::vector<int32_t> step_tokens(req.prompt.begin(), req.prompt.end());
  int32_t pos = fill.num_tokens;
  Status status = ok_status();
  for (int32_t n = 0; n < req.max_tokens; ++n) {
    StepPlan plan;
    plan.step_id = static_cast<uint64_t>(n);
    if (n == 0) plan.fills.push_back(fill);
    SeqPlan seq;
    seq.request_id = req.request_id;
    seq.tokens = step_tokens;
    seq.start_pos = pos;
    const int64_t end = pos + static_cast<int64_t>(step_tokens.size());
    for (int64_t p = 0; p < (end + ps - 1) / ps; ++p) seq.block_table.push_back(static_cast<int32_t>(p));
    for (int64_t p = pos; p < end; ++p) seq.slot_mapping.push_back(p);  // page i holds positions [i*ps, (i+1)*ps)
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
    (n == 0 ? out.gen.prefill_ms : out.gen.decode_ms) += ms;
    if (n == 0 && !r->fills.empty()) out.fill = r->fills.front();
    const SeqResult& res = r->results.at(0);
    out.gen.tokens.push_back(res.token);
    if (req.sampling.logprobs) out.gen.logprobs.push_back(res.logprob);
    if (req.sampling.top_logprobs > 0) out.gen.top.push_back(res.top);
    pos = static_cast<int32_t>(end);
    step_tokens.assign(1, res.token);
    bool stop = false;
    for (int32_t s : req.stop_ids) stop = stop || s == res.token;
    if (req.on_token && !req.on_token(res.token)) stop = true;
    if (stop) {
      out.gen.stopped = true;
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
