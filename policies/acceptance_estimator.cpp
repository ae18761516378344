#include "policies/acceptance_estimator.hpp"

#include <algorithm>
#include <stdexcept>

namespace tandem {

AcceptanceEstimator::AcceptanceEstimator(double prior_mean, double prior_weight, double decay)
    : a0_(prior_mean), w0_(prior_weight), decay_(decay) {
  if (!(prior_mean >= 0.0 && prior_mean <= 1.0)) throw std::invalid_argument("acceptance prior must be in [0, 1]");
  if (!(prior_weight > 0.0)) throw std::invalid_argument("acceptance prior weight must be > 0");
  if (!(decay > 0.0 && decay <= 1.0)) throw std::invalid_argument("acceptance decay must be in (0, 1]");
}

void AcceptanceEstimator::observe(int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;  // nothing was tried
  accepted = std::clamp(accepted, 0, drafted);
  const int32_t trials = accepted < drafted ? accepted + 1 : drafted;
  for (int32_t i = 0; i < trials; ++i) {
    successes_ = decay_ * successes_ + (i < accepted ? 1.0 : 0.0);
    trials_ = decay_ * trials_ + 1.0;
  }
}

void AcceptanceEstimator::fade(double keep) {
  keep = std::clamp(keep, 0.0, 1.0);
  successes_ *= keep;
  trials_ *= keep;
}

}  // namespace tandem
