#include "policies/rate_choice.hpp"

#include <algorithm>
#include <cmath>

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
  if (better && refresh_ && first_.known() && second_.known() && ++since_second_ >= kRefreshAfter) {
    since_second_ = 0;  // re-time the second way once
    return false;
  }
  const bool retry = !better && second_.known() && passed_ + 1 >= retry_after_;
  retrying_ = retry;
  passed_ = better || retry ? 0 : passed_ + 1;
  return better || retry;
}

RateChoice::State RateChoice::state() const {
  return {first_.tokens, first_.ms, first_.steps, second_.tokens, second_.ms, second_.steps, passed_, retry_after_,
          since_second_};
}

void RateChoice::restore(const State& s) {
  const auto sane = [](double v) { return std::isfinite(v) && v > 0.0 ? v : 0.0; };
  const auto record = [&](double tokens, double ms, double steps) {
    Record r{sane(tokens), sane(ms), sane(steps)};
    if (r.ms == 0.0 || r.steps == 0.0) r = Record{};  // a record needs a timed step
    return r;
  };
  first_ = record(s.first_tokens, s.first_ms, s.first_steps);
  second_ = record(s.second_tokens, s.second_ms, s.second_steps);
  retry_after_ = std::clamp(s.retry_after, kRetryAfter, kMaxRetryAfter);
  passed_ = std::clamp(s.passed, 0, retry_after_);
  since_second_ = std::clamp(s.since_second, 0, kRefreshAfter);
  retrying_ = false;
}

void RateChoice::observe_first(int32_t accepted, double step_ms) {
  first_.add(accepted + 1, step_ms);
  if (!back_off_ || !second_.known()) return;
  if (first_.rate() >= second_.rate()) retry_after_ = kRetryAfter;
  else if (retrying_) retry_after_ = std::min(2 * retry_after_, kMaxRetryAfter);
  retrying_ = false;
}

}  // namespace tandem
