// An online estimate of the per-token acceptance rate α of one sequence: a Beta posterior
// whose evidence fades geometrically, so it follows the text as it changes (prose → code).
//
// Each verification is a run of Bernoulli trials: every accepted draft token is a success,
// the first rejected one a failure, and nothing after it was tried. Positions that were
// never drafted (a short draft: the draft's confidence fell below p_min, the n-gram table
// had no continuation) are not trials either, so short drafts do not read as rejections.
#pragma once
#include <cstdint>

namespace tandem {

class AcceptanceEstimator {
 public:
  // prior_mean: α before any evidence; prior_weight: how many trials it is worth;
  // decay: weight kept by older evidence per new trial (memory ≈ 1 / (1 − decay) trials).
  explicit AcceptanceEstimator(double prior_mean = 0.6, double prior_weight = 2.0, double decay = 0.95);

  void observe(int32_t drafted, int32_t accepted);
  double mean() const { return (successes_ + w0_ * a0_) / (trials_ + w0_); }
  double trials() const { return trials_; }  // discounted
  // Keeps a fraction of the evidence (0 → back to the prior): old evidence goes stale while
  // speculation is off and nothing new is observed.
  void fade(double keep);
  void reset() { successes_ = trials_ = 0.0; }

 private:
  double a0_, w0_, decay_;
  double successes_ = 0.0, trials_ = 0.0;
};

}  // namespace tandem
