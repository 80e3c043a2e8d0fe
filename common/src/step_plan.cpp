#include "tessera/common/step_plan.h"

#include <string>

namespace tessera {

std::vector<std::string_view> required_sampling_capabilities(const SamplingParams& p) {
  std::vector<std::string_view> out;
  const bool greedy = p.temperature == 0.0f || p.top_k == 1;
  if (greedy) {
    out.emplace_back("greedy");
  } else {
    out.emplace_back("temperature");
    if (p.top_k > 1) out.emplace_back("top_k");
    if (p.top_p < 1.0f) out.emplace_back("top_p");
    if (p.min_p > 0.0f) out.emplace_back("min_p");
  }
  // logit_bias is applied where the penalties are (the host Sampler), so it needs the same.
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || !p.logit_bias.empty())
    out.emplace_back("penalties");
  if (p.logprobs || p.top_logprobs > 0) out.emplace_back("logprobs");
  if (!p.grammar.empty()) out.emplace_back("grammar");
  if (p.prompt_logprobs >= 0) out.emplace_back("prompt_logprobs");
  return out;
}

std::string_view kv_policy_type_name(KvPolicyType t) {
  switch (t) {
    case KvPolicyType::kNone: return "none";
    case KvPolicyType::kStreaming: return "streaming";
    case KvPolicyType::kH2O: return "h2o";
  }
  return "unknown";
}

std::string kv_policy_error(const KvPolicy& p, int32_t max_context) {
  constexpr int32_t kMax = 1 << 20;
  auto bad = [](const char* field, const std::string& rule, int32_t got) {
    return std::string("kv_policy.") + field + " must be " + rule + " (got " + std::to_string(got) + ")";
  };
  const std::string ctx = std::to_string(max_context);
  switch (p.type) {
    case KvPolicyType::kNone: return {};
    case KvPolicyType::kStreaming:
      if (p.sinks < 0 || p.sinks > kMax) return bad("sinks", ">= 0", p.sinks);
      if (p.window < 1 || p.window > kMax) return bad("window", ">= 1", p.window);
      if (max_context > 0 && p.sinks + p.window > max_context) {
        return "kv_policy: sinks + window (" + std::to_string(p.sinks + p.window) + ") must be <= the context (" + ctx + ")";
      }
      return {};
    case KvPolicyType::kH2O:
      if (p.budget < 2 || p.budget > kMax) return bad("budget", ">= 2", p.budget);
      if (max_context > 0 && p.budget > max_context) return bad("budget", "<= the context (" + ctx + ")", p.budget);
      if (p.recent < 0 || p.recent >= p.budget) return bad("recent", "in [0, budget)", p.recent);
      return {};
  }
  return "kv_policy.type is unknown";
}

}  // namespace tessera
