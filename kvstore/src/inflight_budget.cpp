#include "tessera/kvstore/inflight_budget.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "tessera/common/check.h"

namespace tessera::kvstore {

Result<std::optional<uint64_t>> parse_inflight_kb(std::string_view text) {
  if (text == "auto") return std::optional<uint64_t>();
  uint64_t kb = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), kb);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || kb > (uint64_t{1} << 20)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "expected auto or KiB in 0..1048576 (got '" + std::string(text) + "')");
  }
  return std::optional<uint64_t>(kb << 10);
}

InflightBudget::InflightBudget(const InflightBudgetConfig& config) : config_(config) {
  TS_CHECK(config.min_bytes <= config.max_bytes);
  budget_ = config.auto_tune ? config.min_bytes : config.fixed_bytes;
}

uint64_t InflightBudget::bytes() const {
  std::lock_guard lock(mu_);
  return budget_;
}

void InflightBudget::add_rtt_sample(std::chrono::nanoseconds rtt, RttSource source) {
  const double ns = std::max<double>(1.0, static_cast<double>(rtt.count()));
  const int k = source == RttSource::kPing ? 0 : 1;
  std::lock_guard lock(mu_);
  rtt_ns_[k][rtt_next_[k]] = ns;
  rtt_next_[k] = (rtt_next_[k] + 1) % kRttSamples;
  min_rtt_ns_ = 0;
  for (const auto& ring : rtt_ns_) {
    for (double s : ring) {
      if (s > 0 && (min_rtt_ns_ == 0 || s < min_rtt_ns_)) min_rtt_ns_ = s;
    }
  }
  update_locked();
}

void InflightBudget::add_delivery_sample(uint64_t bytes, uint64_t values, std::chrono::nanoseconds interval) {
  const double ns = static_cast<double>(interval.count());
  std::lock_guard lock(mu_);
  if (values > 0 && bytes > 0) {
    mean_value_ = bytes / values;
    update_locked();
  }
  if (min_rtt_ns_ == 0 || ns <= 0 || ns < min_rtt_ns_ / 2 || bytes == 0) return;
  rate_[rate_next_] = static_cast<double>(bytes) * 1e9 / ns;
  rate_next_ = (rate_next_ + 1) % kRateSamples;
  max_rate_ = *std::max_element(std::begin(rate_), std::end(rate_));
  update_locked();
}

void InflightBudget::update_locked() {
  if (!config_.auto_tune) return;  // budget_ stays fixed_bytes
  if (min_rtt_ns_ == 0 || max_rate_ == 0) {
    budget_ = config_.min_bytes;
    return;
  }
  const double bdp = std::round(kGain * max_rate_ * min_rtt_ns_ / 1e9) + static_cast<double>(mean_value_);
  budget_ = static_cast<uint64_t>(std::clamp(bdp, static_cast<double>(config_.min_bytes),
                                             static_cast<double>(config_.max_bytes)));
}

InflightBudget::Snapshot InflightBudget::snapshot() const {
  std::lock_guard lock(mu_);
  return {budget_, min_rtt_ns_ / 1e9, max_rate_, mean_value_};
}

}  // namespace tessera::kvstore
