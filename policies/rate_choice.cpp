#include "policies/rate_choice.hpp"

#include <algorithm>

namespace tandem {

void RateChoice::Record::add(double t, double step_ms) {
  tokens = kDecay * tokens + t;
  ms = kDecay * ms + (step_ms > 0.0 ? step_ms : 0.0);
  steps = kDecay * steps + 1.0;
}

void RateChoice::observe_second_instead(int32_t accepted) {
  if (second_.known()) second_.add(accepted + 1, second_.ms / second_.steps);
}

bool RateChoice::prefer_first() {
  const bool better = !first_.known() || (!second_.known() && !try_both_) ||
                      (second_.known() && first_.rate() >= second_.rate());
  const bool retry = !better && second_.known() && passed_ + 1 >= retry_after_;
  retrying_ = retry;
  passed_ = better || retry ? 0 : passed_ + 1;
  return better || retry;
}

void RateChoice::observe_first(int32_t accepted, double step_ms) {
  first_.add(accepted + 1, step_ms);
  if (!back_off_ || !second_.known()) return;
  if (first_.rate() >= second_.rate()) retry_after_ = kRetryAfter;
  else if (retrying_) retry_after_ = std::min(2 * retry_after_, kMaxRetryAfter);
  retrying_ = false;
}

}  // namespace tandem
