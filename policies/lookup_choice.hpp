// Prompt lookup ahead of a draft model: at a step where the committed text's last few tokens
// occurred earlier (in the prompt or the output), what followed them there is a draft that
// costs nothing to make. Outputs that copy (edits, summaries quoting their source, code that
// repeats names) get long runs accepted from it; elsewhere it proposes nothing, or tokens the
// target rejects. LookupChoice decides, per step and per sequence, whether to verify such a
// lookup draft instead of running the draft model, from what each source delivered so far
// (rate_choice.hpp: committed tokens per millisecond; a lookup step costs the target pass, a
// draft step the draft's passes too). Lookup is the first way: tried while it has no record,
// and again after RateChoice::kRetryAfter passed chances.
#pragma once
#include <cstdint>

#include "policies/rate_choice.hpp"

namespace tandem {

class LookupChoice {
 public:
  static constexpr int32_t kRetryAfter = RateChoice::kRetryAfter;

  // A lookup draft is available at this step: verify it (true) or run the draft model.
  bool prefer_lookup() { return choice_.prefer_first(); }
  // A verified step: its drafts' source, the drafts the target accepted, and the step's time
  // (draft passes and the target's pass).
  void observe_lookup(int32_t accepted, double step_ms) { choice_.observe_first(accepted, step_ms); }
  void observe_draft(int32_t accepted, double step_ms) { choice_.observe_second(accepted, step_ms); }
  void reset() { choice_.reset(); }

 private:
  RateChoice choice_;
};

}  // namespace tandem
