#include "policies/overhead_tracker.hpp"

#include <algorithm>

namespace tandem {

void OverheadTracker::add(bool plain, double r) {
  if (!(r > 0.0)) return;
  std::lock_guard<std::mutex> lk(mu_);
  double& sum = plain ? plain_ : spec_;
  double& w = plain ? plain_w_ : spec_w_;
  sum = decay_ * sum + (1.0 - decay_) * r;
  w = decay_ * w + (1.0 - decay_);
}

double OverheadTracker::overhead(bool absolute) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (spec_w_ < 0.5) return 1.0;  // a handful of steps first
  const bool have_plain = plain_w_ >= 0.5;
  if (!have_plain && !absolute) return 1.0;
  const double plain = have_plain ? plain_ / plain_w_ : 1.0;
  return std::clamp((spec_ / spec_w_) / plain, 1.0 / 1.5, 2.0);
}

void OverheadTracker::reset() {
  std::lock_guard<std::mutex> lk(mu_);
  spec_ = plain_ = spec_w_ = plain_w_ = 0.0;
}

}  // namespace tandem
