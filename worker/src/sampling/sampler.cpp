#include "tessera/worker/sampler.h"

#include "tessera/grammar/grammar.h"
#include "tessera/kernels/softmax.h"

#include <algorithm>
#include <limits>
#include <cmath>
#include <string>

namespace tessera::worker {
namespace {

Status bad(const std::string& field, const std::string& rule, double value) {
  return make_error(ErrorCode::kInvalidArgument, "sampling: " + field + " must be " + rule + " (got " + std::to_string(value) + ")");
}

// Most likely first; lower id first on equal logits (deterministic).
bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// The kernels' path for this CPU, detected once (argmax, exp_affine_sum).
kernels::Isa cpu_isa() {
  static const kernels::Isa isa = kernels::detect_isa();
  return isa;
}

}  // namespace

Status validate_sampling_params(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) return bad("temperature", ">= 0", p.temperature);
  if (!std::isfinite(p.top_p) || p.top_p <= 0.0f || p.top_p > 1.0f) return bad("top_p", "in (0, 1]", p.top_p);
  if (p.top_k < 0) return bad("top_k", ">= 0", p.top_k);
  if (!std::isfinite(p.min_p) || p.min_p < 0.0f || p.min_p > 1.0f) return bad("min_p", "in [0, 1]", p.min_p);
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f) {
    return bad("repetition_penalty", "> 0", p.repetition_penalty);
  }
  if (!std::isfinite(p.presence_penalty)) return bad("presence_penalty", "finite", p.presence_penalty);
  if (!std::isfinite(p.frequency_penalty)) return bad("frequency_penalty", "finite", p.frequency_penalty);
  if (p.top_logprobs < 0 || p.top_logprobs > 20) return bad("top_logprobs", "in [0, 20]", p.top_logprobs);
  return ok_status();
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

Sampler::Sampler(const SamplingParams& params, std::shared_ptr<const grammar::Schema> schema,
                 const grammar::TokenVocabulary* vocab)
    : params_(params), rng_(params.seed), schema_(std::move(schema)), vocab_(vocab) {
  TS_CHECK(schema_ != nullptr && vocab_ != nullptr);
  matcher_ = std::make_unique<grammar::Matcher>(schema_);
}

Sampler::~Sampler() = default;

void Sampler::set_history(std::span<const int32_t> tokens) {
  counts_.clear();
  generated_ = 0;
  if (matcher_) matcher_ = std::make_unique<grammar::Matcher>(schema_);
  for (int32_t t : tokens) accept(t);
  // The RNG position: a non-greedy choice takes exactly one draw per sampled token, so a request
  // resumed after `tokens` (preempted, or migrated from a dead worker) draws what it would have.
  rng_.seed(params_.seed);
  if (params_.temperature != 0.0f && params_.top_k != 1) rng_.discard(tokens.size());
}

void Sampler::accept(int32_t token) {
  ++counts_[token];
  ++generated_;
  if (matcher_) advance_grammar(token);
}

void Sampler::advance_grammar(int32_t token) {
  const auto& ends = params_.grammar_end_tokens;
  if (std::find(ends.begin(), ends.end(), token) != ends.end()) return;
  if (token >= 0 && token < vocab_->size()) matcher_->feed(vocab_->bytes(token));
}

void Sampler::constrain(std::span<float> logits) {
  const int32_t budget = params_.grammar_max_tokens > 0 ? std::max(1, params_.grammar_max_tokens - generated_) : 0;
  vocab_->allowed_tokens(*matcher_, budget, params_.grammar_end_tokens, &allowed_);
  if (allowed_.empty()) {
    // Cannot happen for a live matcher over a vocabulary with every byte; end the request
    // rather than emit text outside the grammar.
    for (int32_t e : params_.grammar_end_tokens) {
      if (e >= 0 && static_cast<size_t>(e) < logits.size()) allowed_.push_back(e);
    }
    if (allowed_.empty()) return;
  }
  // Keep the allowed logits, make every logit impossible, put the kept ones back.
  kept_.clear();
  for (int32_t t : allowed_) kept_.push_back(logits[static_cast<size_t>(t)]);
  std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < allowed_.size(); ++i) logits[static_cast<size_t>(allowed_[i])] = kept_[i];
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

SampleOutcome Sampler::finish_logprobs(std::span<const float> logits, SampleOutcome out, bool want_lp, double log_z) const {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (want_lp) {
    out.logprob = static_cast<float>(logits[static_cast<size_t>(out.token)] - log_z);
    if (params_.top_logprobs > 0) {
      const size_t k = std::min(static_cast<size_t>(params_.top_logprobs), static_cast<size_t>(n));
      std::vector<std::pair<float, int32_t>> all(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = {logits[static_cast<size_t>(i)], static_cast<int32_t>(i)};
      std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(), better);
      for (size_t i = 0; i < k; ++i) out.top.push_back({all[i].second, static_cast<float>(all[i].first - log_z)});
    }
  }
  return out;
}

SampleOutcome Sampler::sample(std::span<float> logits) {
  TS_CHECK(!logits.empty());
  const int64_t n = static_cast<int64_t>(logits.size());
  // 0. logit_bias (OpenAI: added to the logits before anything else).
  for (const auto& [tok, bias] : params_.logit_bias)
    if (tok >= 0 && tok < n) logits[static_cast<size_t>(tok)] += bias;
  // 0b. Structured output: what the grammar does not allow next is impossible.
  if (matcher_) constrain(logits);
  // 1. Penalties over the history.
  for (const auto& [tok, count] : counts_) {
    if (tok < 0 || tok >= n || count <= 0) continue;
    float& l = logits[static_cast<size_t>(tok)];
    if (params_.repetition_penalty != 1.0f) l = l > 0.0f ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    l -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
  }
  SampleOutcome out;
  // 2. Log-probabilities of the penalized logits (temperature 1, no truncation).
  const bool want_lp = params_.logprobs || params_.top_logprobs > 0;
  double log_z = 0.0;
  if (want_lp) {
    const float mx = *std::max_element(logits.begin(), logits.end());
    double z = 0.0;
    for (float l : logits) z += std::exp(static_cast<double>(l) - mx);
    log_z = mx + std::log(z);
  }
  // 3. Choice.
  if (params_.temperature == 0.0f || params_.top_k == 1) {
    out.token = static_cast<int32_t>(kernels::argmax(logits.data(), n, cpu_isa()));  // lowest id on ties
  } else {
    // Scaled logits. Candidates below min_p * p_max can never survive, so they are dropped
    // before sorting (p_i / p_max >= min_p  <=>  l_i >= l_max + ln(min_p)); with no truncation
    // at all the categorical draw needs no order and no sort.
    const float inv_t = 1.0f / params_.temperature;
    // max(l_i * inv_t) = max(l_i) * inv_t exactly (inv_t > 0: rounding is monotonic); eight
    // running maxima, not one dependent chain of 49k compares.
    float m8[8];
    std::fill(m8, m8 + 8, -std::numeric_limits<float>::infinity());
    int64_t i8 = 0;
    for (; i8 + 8 <= n; i8 += 8) {
      for (int j = 0; j < 8; ++j) m8[j] = std::max(m8[j], logits[static_cast<size_t>(i8 + j)]);
    }
    for (; i8 < n; ++i8) m8[0] = std::max(m8[0], logits[static_cast<size_t>(i8)]);
    const float l_max = *std::max_element(m8, m8 + 8) * inv_t;
    const bool truncates = (params_.top_k > 0 && params_.top_k < n) || params_.top_p < 1.0f || params_.min_p > 0.0f;
    if (!truncates) {
      // The categorical draw: the first i whose running sum of e_i = exp(l_i - l_max) passes
      // u * z. z is summed per block of kBlock tokens (kernels::exp_affine_sum, vectorized) and
      // the running sums at block edges kept; the walk recomputes the terms of the one block
      // where u * z falls (n + kBlock exps in float instead of ~1.5 n in double). Its in-block
      // running sum can differ from the block's total in the last bits: when it ends short of
      // u, the block's last possible token is drawn. A term of 0 (logit -inf) is never drawn.
      constexpr int64_t kBlock = 512;
      const kernels::Isa isa = cpu_isa();
      const float* l = logits.data();
      const size_t blocks = static_cast<size_t>((n + kBlock - 1) / kBlock);
      prefix_.assign(blocks + 1, 0.0);
      for (size_t b = 0; b < blocks; ++b) {
        const int64_t i0 = static_cast<int64_t>(b) * kBlock;
        prefix_[b + 1] = prefix_[b] + kernels::exp_affine_sum(l + i0, std::min(kBlock, n - i0), inv_t, l_max, nullptr, isa);
      }
      const double u = uniform() * prefix_[blocks];
      size_t b = 0;
      while (b + 1 < blocks && !(u < prefix_[b + 1])) ++b;
      while (b > 0 && !(prefix_[b + 1] > prefix_[b])) --b;  // u * z rounded to z: the last block with mass
      const int64_t i0 = static_cast<int64_t>(b) * kBlock, len = std::min(kBlock, n - i0);
      float terms[kBlock];
      kernels::exp_affine_sum(l + i0, len, inv_t, l_max, terms, isa);
      double acc = prefix_[b];
      int64_t pick = -1;
      for (int64_t i = 0; i < len; ++i) {
        if (terms[i] <= 0.0f) continue;
        pick = i;
        acc += static_cast<double>(terms[i]);
        if (u < acc) break;
      }
      out.token = pick >= 0 ? static_cast<int32_t>(i0 + pick) : static_cast<int32_t>(n - 1);  // no mass at all: the last id
      return finish_logprobs(logits, out, want_lp, log_z);
    }
    const float floor = params_.min_p > 0.0f ? l_max + std::log(params_.min_p) : -std::numeric_limits<float>::infinity();
    cand_.clear();
    for (int64_t i = 0; i < n; ++i) {
      const float l = logits[static_cast<size_t>(i)] * inv_t;
      if (l >= floor) cand_.push_back({l, static_cast<int32_t>(i)});
    }
    size_t keep = cand_.size();
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
      keep = static_cast<size_t>(params_.top_k);
      std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(keep), cand_.end(), better);
    } else {
      std::sort(cand_.begin(), cand_.end(), better);
    }
    // Softmax over the survivors (sorted, most likely first); p[0] is p_max.
    std::vector<double> p(keep);
    double z = 0.0;
    for (size_t i = 0; i < keep; ++i) z += (p[i] = std::exp(static_cast<double>(cand_[i].first) - cand_[0].first));
    for (auto& v : p) v /= z;
    const double p_max = 1.0 / z;  // = p[0]: cand_[0] is the most likely survivor
    if (params_.min_p > 0.0f) {
      const double cut = static_cast<double>(params_.min_p) * p_max;
      size_t k = 1;
      while (k < keep && p[k] >= cut) ++k;
      keep = k;
    }
    if (params_.top_p < 1.0f) {
      double mass = 0.0;
      for (size_t i = 0; i < keep; ++i) mass += p[i];
      double cum = 0.0;
      size_t k = 0;
      while (k < keep) {
        cum += p[k] / mass;
        ++k;
        if (cum >= static_cast<double>(params_.top_p)) break;
      }
      keep = k;
    }
    double mass = 0.0;
    for (size_t i = 0; i < keep; ++i) mass += p[i];
    const double u = uniform() * mass;
    double acc = 0.0;
    out.token = cand_[keep - 1].second;
    for (size_t i = 0; i < keep; ++i) {
      acc += p[i];
      if (u < acc) {
        out.token = cand_[i].second;
        break;
      }
    }
  }
  return finish_logprobs(logits, out, want_lp, log_z);
}

}  // namespace tessera::worker
