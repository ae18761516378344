// Prompt lookup ahead of a draft model: at a step where the committed text's last few tokens
// occurred earlier (in the prompt or the output), what followed them there is a draft that
// costs nothing to make. Outputs that copy (edits, summaries quoting their source, code that
// repeats names) get long runs accepted from it; elsewhere it proposes nothing, or tokens the
// target rejects. LookupChoice decides, per step and per sequence, whether to verify such a
// lookup draft instead of running the draft model, from what each source delivered so far:
// committed tokens per millisecond of the steps it drafted (a lookup step costs the target
// pass; a draft step the draft's passes too). Recent steps weigh most (copying comes in
// phases). Lookup is tried first while it has no record, and again after kRetryAfter passed
// chances, so that a bad phase does not turn it off for the rest of the sequence.
// Either choice leaves the output unchanged: the target verifies every draft.
#pragma once
#include <cstdint>

namespace tandem {

class LookupChoice {
 public:
  // Passed-over chances after which a lookup draft is verified anyway.
  static constexpr int32_t kRetryAfter = 8;
  // Weight of the earlier record at each new step of the same source.
  static constexpr double kDecay = 0.8;

  // A lookup draft is available at this step: verify it (true) or run the draft model.
  bool prefer_lookup();
  // A verified step: its drafts' source, the drafts the target accepted, and the step's time
  // (draft passes and the target's pass).
  void observe_lookup(int32_t accepted, double step_ms) { lookup_.add(accepted + 1, step_ms); }
  void observe_draft(int32_t accepted, double step_ms) { draft_.add(accepted + 1, step_ms); }
  void reset() { *this = LookupChoice{}; }

 private:
  struct Record {
    double tokens = 0.0, ms = 0.0;
    void add(double t, double step_ms);
    bool known() const { return ms > 0.0; }  // a step of this source was timed
    double rate() const { return tokens / ms; }
  };
  Record lookup_, draft_;
  int32_t passed_ = 0;  // chances passed over since the last lookup step
};

}  // namespace tandem
