// A choice between two ways of drafting a step, by what each delivered so far: committed
// tokens per millisecond of the steps it drafted (its draft passes and the target's pass).
// Recent steps weigh most (what pays comes in phases). The first way is tried first while it
// has no record, and again after kRetryAfter passed chances, so that a bad phase does not
// rule it out for the rest of the sequence (back_off: the wait doubles, up to kMaxRetryAfter,
// each time the retried way loses again, and starts over when it wins). The second way is
// taken while the first has no record, or (try_both) once the first has a record and the
// second none. Prompt lookup ahead of a draft model
// (lookup_choice.hpp) and token trees against chains (the runtime's step) decide so. Either
// choice leaves the output unchanged: the target verifies every draft.
#pragma once
#include <cstdint>

namespace tandem {

class RateChoice {
 public:
  // Passed-over chances after which the first way is taken anyway.
  static constexpr int32_t kRetryAfter = 8;
  static constexpr int32_t kMaxRetryAfter = 64;
  // Weight of the earlier record at each new step of the same way.
  static constexpr double kDecay = 0.8;

  // While the first way wins, the second is taken again after this many chances (refresh):
  // paired observations (observe_second_instead) keep its tokens current but price them at
  // its mean step time, which only its own steps measure.
  static constexpr int32_t kRefreshAfter = 32;

  // try_both: take the second way once before comparing (it is not always the default).
  // refresh: re-time the second way every kRefreshAfter chances while the first wins.
  explicit RateChoice(bool try_both = false, bool back_off = false, bool refresh = false)
      : try_both_(try_both), back_off_(back_off), refresh_(refresh) {}
  // The first way is available at this step: take it (true) or the second.
  bool prefer_first();
  // A verified step of either way: the drafts the target accepted and the step's time.
  void observe_first(int32_t accepted, double step_ms);
  void observe_second(int32_t accepted, double step_ms) {
    second_.add(accepted + 1, step_ms);
    since_second_ = 0;
  }
  // A step of the first way that also shows what the second would have committed in its
  // place (the same context and verdict: a paired observation, which one lucky or unlucky
  // step cannot tilt as it tilts two separate records), priced at the second way's mean
  // step time so far. Ignored while the second way has no record.
  void observe_second_instead(int32_t accepted);
  void reset() { *this = RateChoice{try_both_, back_off_, refresh_}; }

  // What the choice has learned: both records, the retry wait and the chances passed over
  // since the first way's last step; restore() carries it into a choice made later (another
  // process: policies/shape_cache.hpp). Values out of range (a damaged file) are clamped.
  struct State {
    double first_tokens = 0.0, first_ms = 0.0, first_steps = 0.0;
    double second_tokens = 0.0, second_ms = 0.0, second_steps = 0.0;
    int32_t passed = 0, retry_after = kRetryAfter;
    int32_t since_second = 0;  // chances since the second way's last step (refresh)
    bool operator==(const State&) const = default;
  };
  State state() const;
  void restore(const State& s);

 private:
  struct Record {
    double tokens = 0.0, ms = 0.0, steps = 0.0;  // decayed sums
    void add(double t, double step_ms);
    bool known() const { return ms > 0.0; }  // a step of this way was timed
    double rate() const { return tokens / ms; }
  };
  bool try_both_, back_off_, refresh_;
  Record first_, second_;
  int32_t passed_ = 0;  // chances passed over since the last step of the first way
  int32_t retry_after_ = kRetryAfter;
  bool retrying_ = false;  // the first way was taken as a retry
  int32_t since_second_ = 0;  // chances since the second way's last step
};

}  // namespace tandem
