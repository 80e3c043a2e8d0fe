#include "tessera/common/step_plan.h"

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
  return out;
}

}  // namespace tessera
