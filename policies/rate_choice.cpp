#include "policies/rate_choice.hpp"

namespace tandem {

void RateChoice::Record::add(double t, double step_ms) {
  tokens = kDecay * tokens + t;
  ms = kDecay * ms + (step_ms > 0.0 ? step_ms : 0.0);
}

bool RateChoice::prefer_first() {
  const bool use = !first_.known() || (!second_.known() && !try_both_) ||
                   (second_.known() && (first_.rate() >= second_.rate() || passed_ + 1 >= kRetryAfter));
  passed_ = use ? 0 : passed_ + 1;
  return use;
}

}  // namespace tandem
