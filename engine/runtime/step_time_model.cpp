#include "engine/runtime/step_time_model.hpp"

#include <algorithm>
#include <climits>

namespace tandem {
namespace {
void moving_average(double& v, double x) {
  constexpr double kWeight = 0.2;  // of the newest step
  v = v == 0.0 ? x : (1 - kWeight) * v + kWeight * x;
}
}  // namespace

void StepTimeModel::observe_step(double ms, int32_t prompt_tokens) {
  if (prompt_tokens == 0) {
    moving_average(base_ms_, ms);
  } else if (prompt_tokens >= 4) {  // a few tokens say little about the per-token cost
    moving_average(prompt_ms_, std::max(0.0, ms - base_ms_) / prompt_tokens);
  }
}

void StepTimeModel::observe_draft_prefill(double ms, int32_t tokens) {
  // The pass's fixed cost is shared out over its tokens: small chunks look dearer per
  // token, which errs on the side of short steps.
  if (tokens >= 4) moving_average(draft_prompt_ms_, ms / tokens);
}

int32_t StepTimeModel::prompt_budget(double spent_ms) const {
  if (max_step_ms_ <= 0 || prompt_ms_ <= 0.0) return INT32_MAX;  // no limit, or nothing measured yet
  const double tokens = (max_step_ms_ - base_ms_ - spent_ms) / prompt_ms_;
  return std::max(min_tokens_, static_cast<int32_t>(std::min<double>(tokens, INT32_MAX / 2)));
}

// Until a draft pass has been timed, the target's per-token cost stands in (a draft is the
// smaller model).
int32_t StepTimeModel::draft_prefill_budget(bool share) const {
  const double per_token = draft_prompt_ms_ > 0.0 ? draft_prompt_ms_ : prompt_ms_;
  if (max_step_ms_ <= 0 || per_token <= 0.0) return INT32_MAX;
  const double room = (max_step_ms_ - base_ms_) * (share ? 0.5 : 1.0);
  return std::max(min_tokens_, static_cast<int32_t>(std::min<double>(room / per_token, INT32_MAX / 2)));
}

}  // namespace tandem
