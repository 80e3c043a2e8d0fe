// Batcher::apply(): the worker's StepResult for the outstanding plan, as named stages:
// check the result against the plan, advance each sequence, index completed prefill chunks,
// append sampled tokens, check stops, finish and release.
#include <algorithm>

#include "sequence.h"
#include "tessera/common/check.h"

namespace tessera::scheduler {

Result<StepOutcome> Batcher::apply(const StepResult& result) {
  if (!outstanding_) return make_error(ErrorCode::kInvalidArgument, "apply: no plan is outstanding");
  if (result.step_id != q_->inflight_step) {
    return make_error(ErrorCode::kInvalidArgument, "apply: result for step " + std::to_string(result.step_id) +
                                                       ", outstanding plan is step " + std::to_string(q_->inflight_step));
  }
  outstanding_ = false;
  StepOutcome out;
  apply_reloads(result, static_cast<ErrorCode>(result.error_code) == ErrorCode::kOk);
  // Check: a failed step or a result that does not answer the plan fails the plan's sequences.
  // error_code is an ErrorCode value (an int32 on the wire); the cast reads either form.
  if (const auto code = static_cast<ErrorCode>(result.error_code); code != ErrorCode::kOk) {
    fail_plan("worker failed step " + std::to_string(result.step_id) + " (code " +
                  std::to_string(static_cast<int32_t>(code)) + " " + std::string(error_code_name(code)) +
                  "): " + result.error_message,
              out);
    return out;
  }
  size_t expected = 0;
  for (const auto& f : q_->inflight) expected += f.sample ? 1 : 0;
  bool matches = result.results.size() == expected;
  for (size_t i = 0, k = 0; matches && i < q_->inflight.size(); ++i) {
    if (q_->inflight[i].sample) matches = result.results[k++].request_id == q_->inflight[i].id;
  }
  if (!matches) {
    fail_plan("worker answered step " + std::to_string(result.step_id) + " with " +
                  std::to_string(result.results.size()) + " results that do not match the " + std::to_string(expected) +
                  " sampled sequences of the plan",
              out);
    return out;
  }
  // Prompt log-probabilities of scored chunks, in position order (positions already gathered
  // before a preemption are skipped).
  for (const PromptLogprobs& pl : result.prompt_logprobs) {
    auto it = q_->live.find(pl.request_id);
    if (it == q_->live.end() || !it->second->in_plan) continue;
    Sequence& s = *it->second;
    for (size_t i = 0; i < pl.logprobs.size() && s.lp_next < s.prompt_end; ++i) {
      if (pl.first_pos + static_cast<int32_t>(i) != s.lp_next) continue;
      s.prompt_lp.push_back(pl.logprobs[i]);
      if (i < pl.top.size()) s.prompt_top.push_back(pl.top[i]);
      ++s.lp_next;
    }
    if (s.lp_next == s.prompt_end && !s.prompt_lp.empty()) {
      out.prompt_logprobs.push_back({s.req.id, std::move(s.prompt_lp), std::move(s.prompt_top)});
      s.prompt_lp.clear();
      s.prompt_top.clear();
    }
  }
  // Advance every sequence that is still live (cancelled ones are gone: their results are dropped).
  const auto inflight = std::move(q_->inflight);
  q_->inflight.clear();
  size_t k = 0;
  for (const auto& f : inflight) {
    const SeqResult* sampled = f.sample ? &result.results[k++] : nullptr;
    auto it = q_->live.find(f.id);
    if (it == q_->live.end() || !it->second->in_plan) continue;
    Sequence& s = *it->second;
    s.in_plan = false;
    s.num_computed = f.end_pos;
    for (int32_t page : s.retiring) pages_->release(page);  // the worker has read them
    s.retiring.clear();
    advance(s, out, sampled);
  }
  return out;
}

void Batcher::fail_plan(const std::string& message, StepOutcome& out) {
  const auto inflight = std::move(q_->inflight);
  q_->inflight.clear();
  for (const auto& f : inflight) {
    auto it = q_->live.find(f.id);
    if (it == q_->live.end() || !it->second->in_plan) continue;
    it->second->in_plan = false;
    out.finished.push_back(finish(*it->second, FinishReason::kError, -1, message));
  }
}

void Batcher::advance(Sequence& s, StepOutcome& out, const SeqResult* sampled) {
  // Index completed full pages while the prompt is being prefilled, so that requests with the
  // same prefix share them as early as possible. Decode pages are indexed on finish/preemption.
  if (s.num_computed <= s.prompt_end) cache_prefix(s);
  if (sampled == nullptr) return;
  // The worker reports a prompt's reused tokens once, with its first sampled token (summed over
  // the blended steps); a sequence resumed after a preemption blends its prompt again and reports
  // them again: counted once, from its first sample.
  if (!s.reused_counted) {
    s.reused_counted = true;
    s.reused_prompt_tokens = sampled->reused_tokens;
  }
  if (s.req.kv_policy.type == KvPolicyType::kH2O) s.victims = sampled->victims;
  if (sampled->token < 0) {
    out.finished.push_back(finish(s, FinishReason::kError, -1, "worker sampled no token"));
    return;
  }
  s.tokens.push_back(sampled->token);
  if (check_stop(s, sampled->token, out)) return;
  out.tokens.push_back(TokenEvent{s.req.id, sampled->token, s.generated() - 1, sampled->logprob, sampled->top});
  if (s.generated() >= s.req.max_tokens) {
    out.finished.push_back(finish(s, FinishReason::kLength, -1, {}));
  } else if (s.len() >= config_.max_context && s.req.kv_policy.type != KvPolicyType::kStreaming) {
    // (StreamingLLM runs past the context: its cache never holds more than sinks + window.)
    out.finished.push_back(finish(s, FinishReason::kContextLength, -1, {}));
  }
}

// EOS (unless ignore_eos) or a stop id ends the sequence; the stop token is not an output token.
bool Batcher::check_stop(Sequence& s, int32_t token, StepOutcome& out) {
  const bool eos = !s.req.ignore_eos && std::find(config_.eos_ids.begin(), config_.eos_ids.end(), token) != config_.eos_ids.end();
  const bool stop = eos || std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), token) != s.req.stop_ids.end();
  if (!stop) return false;
  out.finished.push_back(finish(s, FinishReason::kStop, token, {}));
  return true;
}

}  // namespace tessera::scheduler
