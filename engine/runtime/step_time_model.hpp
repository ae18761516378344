// How long a scheduler step will take, learnt from the steps so far, so prompt chunks can be
// cut to keep decoding streams' inter-token latency within max_step_ms. A step of d decode
// tokens, p prompt tokens and q draft prefill tokens takes about
//   base_ms + p * prompt_ms + q * draft_prompt_ms,
// each a moving average of what steps took (the draft's prefill is a pass of its own, timed
// alone).
#pragma once
#include <cstdint>

namespace tandem {

class StepTimeModel {
 public:
  // max_step_ms 0: no time limit (token budgets only). Budgets are at least min_tokens.
  StepTimeModel(double max_step_ms, int32_t min_tokens) : max_step_ms_(max_step_ms), min_tokens_(min_tokens) {}

  void observe_step(double ms, int32_t prompt_tokens);
  void observe_draft_prefill(double ms, int32_t tokens);
  // Target prompt tokens that fit this step's time, after `spent_ms` of draft prefill.
  int32_t prompt_budget(double spent_ms) const;
  // Draft prefill tokens that fit this step's time: all the room, or half of it when target
  // prompts wait too (share).
  int32_t draft_prefill_budget(bool share) const;

 private:
  double max_step_ms_;
  int32_t min_tokens_;
  double base_ms_ = 0.0, prompt_ms_ = 0.0, draft_prompt_ms_ = 0.0;
};

}  // namespace tandem
