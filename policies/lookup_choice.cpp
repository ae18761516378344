#include "policies/lookup_choice.hpp"

namespace tandem {

void LookupChoice::Record::add(double t, double step_ms) {
  tokens = kDecay * tokens + t;
  ms = kDecay * ms + (step_ms > 0.0 ? step_ms : 0.0);
}

bool LookupChoice::prefer_lookup() {
  const bool use = !lookup_.known() || !draft_.known() || lookup_.rate() >= draft_.rate() || passed_ + 1 >= kRetryAfter;
  passed_ = use ? 0 : passed_ + 1;
  return use;
}

}  // namespace tandem
