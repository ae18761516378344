// The step-level speculation budget: in a batch, how many draft tokens the whole step
// verifies and which sequences carry them.
//
// Each sequence's policy judges its own draft against its own one-token pass. In a batch that
// is the wrong price: a verified draft token costs the batch's marginal cost (the step's
// target pass over a few more tokens), and every draft pass delays every stream of the step,
// drafting or not. So the scheduler asks each sequence for a wish (the k its policy would
// draft alone, the acceptance it expects per position, how far its draft lags) and plans the
// step as a whole: the draft tokens, ordered by their expected yield α_i^j (the j-th draft of
// sequence i is accepted with that probability), are granted as the prefix of that order
// that maximises the step's expected tokens per millisecond,
//   G = Σ_i E(α_i, k_i) / (T_target(N + Σ k_i) + Σ_passes T_draft(tokens of the pass)),
// where N is the step's other tokens (one per decoding sequence, prompt chunks) and the
// draft passes are the batched ones the proposers run: the first feeds each drafting
// sequence's catch-up, pass j the sequences that draft a j-th token. Plain decoding (no
// draft) is the reference; the plan drafts only for a predicted gain of at least min_gain.
//
// Latency, not only throughput: a stream's expected time per token, step / E_i, may exceed
// the plain step's by at most latency_slack. A stream that drafts nothing this step (E = 1)
// thus bounds how long the others' drafts may make the step: one stream's speculation does
// not slow another's tokens. Nor do drafts make a step longer than the scheduler's step-time
// target (max_step_ms), unless the plain step already is.
//
// Timings come from the cost model (cost_model.hpp) corrected by what the steps really take:
// measured over predicted time of the target passes and of the draft passes, each a moving
// average, so the plan follows the machine (another load, longer contexts) as it drifts.
// A model given as ratios (the assumed default, tests) has no milliseconds to compare with:
// it is taken as it is.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "policies/cost_model.hpp"

namespace tandem {

// One sequence's wish for this step.
struct BudgetWish {
  int32_t k_max = 0;     // the most it would draft (its policy's choice alone); 0: no draft
  double alpha = 0.0;    // its expected acceptance per draft position
  int32_t catch_up = 1;  // tokens its first draft pass feeds (the draft's lag behind the context)
  bool draft_free = false;  // its drafts cost no draft pass (n-gram lookup)
};

struct BudgetOptions {
  double min_gain = 0.02;       // draft only for a predicted gain of at least this share
  double latency_slack = 0.10;  // a stream's time per token may grow by this share (< 0: no limit)
  // The step-time target prompt chunks are cut to (SchedulerOptions::max_step_ms): drafts do
  // not make a step longer than it, or than the plain step where that is longer. 0: none.
  double max_step_ms = 0.0;
};

struct StepPlan {
  std::vector<int32_t> k;  // granted drafts, one per wish (≤ its k_max)
  int32_t wished = 0, granted = 0;
  double plain_ms = 0.0;  // predicted step without drafts
  double step_ms = 0.0;   // predicted step as planned
  double gain = 1.0;      // predicted tokens per ms over plain decoding's
};

class StepBudget {
 public:
  explicit StepBudget(BudgetOptions opts = {}) : opts_(opts) {}

  // other_tokens: the step's target tokens outside the drafts (decoding sequences' pending
  // tokens, prompt chunk tokens); other_streams: decoding sequences not in `wishes` (they
  // produce a token each and wait for the step like the rest); catching_up: those of them
  // whose own draft is reading their context this step to draft from the next: their step is
  // long by their own draft's prompt pass, so the latency rule does not hold the others'
  // drafts back for them.
  StepPlan plan(const CostModel& costs, std::span<const BudgetWish> wishes, int32_t other_tokens,
                int32_t other_streams, int32_t catching_up = 0) const;

  // What the step really took, against what the (uncorrected) cost model predicts.
  void observe_target(const CostModel& costs, int32_t tokens, double ms);
  // A step's draft passes: tokens each pass fed, and their measured time in all.
  void observe_draft(const CostModel& costs, std::span<const int32_t> pass_tokens, double ms);

  // The model's times with the corrections applied.
  double target_ms(const CostModel& costs, int32_t tokens) const;
  double draft_ms(const CostModel& costs, std::span<const int32_t> pass_tokens) const;
  // Tokens of each draft pass for these grants (the proposers' batched passes).
  static std::vector<int32_t> draft_passes(std::span<const BudgetWish> wishes, std::span<const int32_t> k);

  double target_correction() const { return target_corr_; }
  double draft_correction() const { return draft_corr_; }
  const BudgetOptions& options() const { return opts_; }

 private:
  BudgetOptions opts_;
  double target_corr_ = 1.0, draft_corr_ = 1.0;
  bool target_seen_ = false, draft_seen_ = false;
};

}  // namespace tandem
