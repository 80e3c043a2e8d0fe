// Protocol v1 validation of decoded (or locally built) requests and plans: ranges, sizes and
// consistency that the wire format alone does not pin. Errors name the field and the value.
#include <cmath>
#include <unordered_set>

#include "msgpack_io.h"
#include "tessera/common/protocol.h"

namespace tessera::protocol {
namespace {

using detail::num;
using detail::range_error;

bool finite_in(float v, float lo, float hi) { return std::isfinite(v) && v >= lo && v <= hi; }

}  // namespace

Status validate(const SamplingParams& s) {
  if (!finite_in(s.temperature, 0.0f, 2.0f))
    return range_error("temperature must be in [0, 2] (got " + num(s.temperature) + ")");
  if (!std::isfinite(s.top_p) || s.top_p <= 0.0f || s.top_p > 1.0f)
    return range_error("top_p must be in (0, 1] (got " + num(s.top_p) + ")");
  if (s.top_k < 0) return range_error("top_k must be >= 0 (got " + num(s.top_k) + ")");
  if (!finite_in(s.min_p, 0.0f, 1.0f)) return range_error("min_p must be in [0, 1] (got " + num(s.min_p) + ")");
  if (!std::isfinite(s.repetition_penalty) || s.repetition_penalty <= 0.0f || s.repetition_penalty > 10.0f)
    return range_error("repetition_penalty must be in (0, 10] (got " + num(s.repetition_penalty) + ")");
  if (!finite_in(s.presence_penalty, -2.0f, 2.0f))
    return range_error("presence_penalty must be in [-2, 2] (got " + num(s.presence_penalty) + ")");
  if (!finite_in(s.frequency_penalty, -2.0f, 2.0f))
    return range_error("frequency_penalty must be in [-2, 2] (got " + num(s.frequency_penalty) + ")");
  if (s.top_logprobs < 0 || s.top_logprobs > kMaxTopLogprobs)
    return range_error("top_logprobs must be in [0, " + num(kMaxTopLogprobs) + "] (got " + num(s.top_logprobs) + ")");
  if (s.logit_bias.size() > kMaxLogitBias)
    return range_error("logit_bias has " + num(s.logit_bias.size()) + " entries; at most " + num(kMaxLogitBias) + " are allowed");
  for (const auto& [token, bias] : s.logit_bias) {
    if (token < 0) return range_error("logit_bias token " + num(token) + " must be >= 0");
    if (!finite_in(bias, -100.0f, 100.0f)) return range_error("logit_bias for token " + num(token) + " must be in [-100, 100] (got " + num(bias) + ")");
  }
  if (s.grammar.size() > kMaxGrammarBytes)
    return make_error(ErrorCode::kTooLarge, "grammar has " + num(s.grammar.size()) + " bytes; at most " + num(kMaxGrammarBytes) + " are allowed");
  if (s.grammar_end_tokens.size() > kMaxGrammarEndTokens)
    return range_error("grammar_end_tokens has " + num(s.grammar_end_tokens.size()) + " entries; at most " + num(kMaxGrammarEndTokens) + " are allowed");
  if (s.grammar_max_tokens < 0) return range_error("grammar_max_tokens must be >= 0 (got " + num(s.grammar_max_tokens) + ")");
  if (s.prompt_logprobs < -1 || s.prompt_logprobs > kMaxTopLogprobs)
    return range_error("prompt_logprobs must be -1 (off) or in [0, " + num(kMaxTopLogprobs) + "] (got " + num(s.prompt_logprobs) + ")");
  return ok_status();
}

Status validate(const GenerateRequest& r) {
  TS_TRY(validate(r.sampling));
  if (r.max_tokens < 1) return range_error("max_tokens must be >= 1 (got " + num(r.max_tokens) + ")");
  if (r.kind == RequestKind::kChat) {
    if (r.messages.empty() && r.prompt_tokens.empty())
      return make_error(ErrorCode::kInvalidArgument, "messages must not be empty");
    for (size_t i = 0; i < r.messages.size(); ++i) {
      const std::string& role = r.messages[i].role;
      if (role != "system" && role != "user" && role != "assistant" && role != "tool")
        return make_error(ErrorCode::kInvalidArgument, "messages[" + num(i) + "].role must be system, user, assistant or tool (got '" + role + "')");
    }
  }
  for (size_t i = 0; i < r.prompt_tokens.size(); ++i)
    if (r.prompt_tokens[i] < 0) return range_error("prompt_tokens[" + num(i) + "] must be >= 0 (got " + num(r.prompt_tokens[i]) + ")");
  if (r.stop.size() > kMaxStopStrings)
    return range_error("stop has " + num(r.stop.size()) + " strings; at most " + num(kMaxStopStrings) + " are allowed");
  for (size_t i = 0; i < r.stop.size(); ++i)
    if (r.stop[i].empty()) return make_error(ErrorCode::kInvalidArgument, "stop[" + num(i) + "] must not be empty");
  if (r.stop_token_ids.size() > kMaxStopTokenIds)
    return range_error("stop_token_ids has " + num(r.stop_token_ids.size()) + " ids; at most " + num(kMaxStopTokenIds) + " are allowed");
  for (size_t i = 0; i < r.stop_token_ids.size(); ++i)
    if (r.stop_token_ids[i] < 0) return range_error("stop_token_ids[" + num(i) + "] must be >= 0 (got " + num(r.stop_token_ids[i]) + ")");
  if (!finite_in(r.preference_alpha, 0.0f, 1.0f))
    return range_error("preference_alpha must be in [0, 1] (got " + num(r.preference_alpha) + ")");
  if (r.priority < -100 || r.priority > 100) return range_error("priority must be in [-100, 100] (got " + num(r.priority) + ")");
  if (std::string e = kv_policy_error(r.kv_policy, 0); !e.empty()) return range_error(e);
  return ok_status();
}

Status validate(const StepPlan& p) {
  std::unordered_set<uint64_t> seen;
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const SeqPlan& s = p.seqs[i];
    const std::string at = "seqs[" + num(i) + "]";
    if (!seen.insert(s.request_id).second)
      return make_error(ErrorCode::kInvalidArgument, at + ".request_id " + num(s.request_id) + " appears twice in the plan");
    if (s.tokens.empty()) return make_error(ErrorCode::kInvalidArgument, at + ".tokens must not be empty");
    if (s.start_pos < 0) return range_error(at + ".start_pos must be >= 0 (got " + num(s.start_pos) + ")");
    if (s.slot_mapping.size() != s.tokens.size())
      return make_error(ErrorCode::kInvalidArgument, at + ".slot_mapping has " + num(s.slot_mapping.size()) +
                                                         " entries for " + num(s.tokens.size()) + " tokens");
    for (int32_t page : s.block_table)
      if (page < 0) return range_error(at + ".block_table holds a negative page id (" + num(page) + ")");
    for (int64_t slot : s.slot_mapping)
      if (slot < 0) return range_error(at + ".slot_mapping holds a negative slot (" + num(slot) + ")");
    if (s.sample || s.prompt_logprobs) TS_TRY(validate(s.sampling));
    if (s.prompt_logprobs && s.sampling.prompt_logprobs < 0)
      return make_error(ErrorCode::kInvalidArgument, at + ".prompt_logprobs needs sampling.prompt_logprobs >= 0");
    if (s.next_token < -1) return range_error(at + ".next_token must be >= -1 (got " + num(s.next_token) + ")");
    for (size_t j = 0; j < s.moves.size(); ++j)
      if (s.moves[j].src < 0 || s.moves[j].dst < 0) return range_error(at + ".moves[" + num(j) + "] has a negative cache index");
    if (s.h2o_recent < -1 || s.h2o_victims < 0)
      return range_error(at + ".h2o_recent must be >= -1 and h2o_victims >= 0");
  }
  for (size_t i = 0; i < p.copies.size(); ++i)
    if (p.copies[i].src < 0 || p.copies[i].dst < 0)
      return range_error("copies[" + num(i) + "] has a negative page id");
  for (size_t i = 0; i < p.fills.size(); ++i) {
    const KvFill& f = p.fills[i];
    if (f.num_tokens < 0) return range_error("fills[" + num(i) + "].num_tokens must be >= 0");
    if (!finite_in(f.alpha, 0.0f, 1.0f)) return range_error("fills[" + num(i) + "].alpha must be in [0, 1] (got " + num(f.alpha) + ")");
    for (int32_t page : f.pages)
      if (page < 0) return range_error("fills[" + num(i) + "].pages holds a negative page id (" + num(page) + ")");
    for (int32_t t : f.tokens)
      if (t < 0) return range_error("fills[" + num(i) + "].tokens holds a negative token id (" + num(t) + ")");
  }
  return ok_status();
}

}  // namespace tessera::protocol
