#include "policies/adaptive_policy.hpp"

#include <algorithm>

namespace tandem {

AdaptivePolicy::AdaptivePolicy(const CostModel& costs, const AdaptiveConfig& cfg,
                               std::shared_ptr<OverheadTracker> overhead, std::shared_ptr<ShapeChoice> shapes)
    : costs_(costs),
      cfg_(cfg),
      est_(cfg.alpha_prior, cfg.prior_weight, cfg.decay),
      overhead_(std::move(overhead)),
      shapes_(shapes ? std::move(shapes) : std::make_shared<ShapeChoice>()) {
  if (!overhead_) {
    overhead_ = std::make_shared<OverheadTracker>();
    own_overhead_ = true;
  }
  reset();
}

void AdaptivePolicy::reset() {
  est_.reset();
  off_ = false;
  off_steps_ = 0;
  credit_ = 0.0;
  budget_ = cfg_.probe_budget;
  probing_ = false;
  last_draft_pos_ = 0;  // a new sequence: the draft has seen none of it
  last_batch_ = 1;
  last_k_ = 0;
  last_alpha_ = 0.0;
  prev_draft_pos_ = 0;
  tried_ = 0;
  conf_sum_ = conf_w_ = 0.0;
  conf_seen_ = 0;
  waited_ = 0;
  if (own_overhead_) overhead_->reset();
}

bool AdaptivePolicy::wants_confidence() const {
  // Only the first start reads it: nothing to catch up (n-gram) or no limit asked for
  // starts at once anyway. Reading it costs about 1% of a target step (an exp over the
  // vocabulary), so after the first 2·confidence_tokens only every fourth plain step pays it.
  if (cfg_.confidence_tokens <= 0 || cfg_.draft_free || cfg_.start_budget < 0.0 || last_draft_pos_ > 0) return false;
  return conf_seen_ < 2 * cfg_.confidence_tokens || waited_ % 4 == 0;
}

void AdaptivePolicy::observe_confidence(double p_top) {
  if (!(p_top >= 0.0 && p_top <= 1.0)) return;
  conf_sum_ = cfg_.confidence_decay * conf_sum_ + p_top;
  conf_w_ = cfg_.confidence_decay * conf_w_ + 1.0;
  ++conf_seen_;
}

double AdaptivePolicy::overhead() const {
  return cfg_.measure_overhead ? overhead_->overhead(costs_.absolute()) : 1.0;
}

int32_t AdaptivePolicy::best_k(double alpha, int32_t k_max, int32_t batch, double* speedup) const {
  int32_t best = 0;
  double best_s = 1.0;
  const double oh = overhead();
  for (int32_t k = 1; k <= k_max; ++k) {
    const double s = costs_.predict_speedup(alpha, k, batch, cfg_.draft_free) / oh;
    if (s > best_s) {
      best_s = s;
      best = k;
    }
  }
  if (best_s < 1.0 + cfg_.min_gain) {
    best = 0;
    best_s = 1.0;
  }
  if (speedup) *speedup = best_s;
  return best;
}

double AdaptivePolicy::probe_cost(const PolicyInput& in, int32_t k, int32_t batch) const {
  // Over a plain step: the catch-up pass (whose logits give the first draft token), the
  // other k − 1 draft steps, and the wider target pass.
  const int32_t missed = std::max(1, in.position - last_draft_pos_);
  const double draft = cfg_.draft_free ? 0.0 : costs_.catch_up(missed, batch) + (k - 1) * costs_.c(batch);
  return draft + costs_.r(k, batch) - 1.0;
}

bool AdaptivePolicy::may_start(const PolicyInput& in, int32_t k, int32_t batch) const {
  // Nothing to catch up, no length known, or no limit asked for.
  if (cfg_.draft_free || last_draft_pos_ > 0 || in.tokens_left <= 0 || cfg_.start_budget < 0.0) return true;
  // The first step, and the single-token steps it commits to (min_trials), all rejected.
  const double first = probe_cost(in, k, batch);
  const double risk = first + std::max(0, cfg_.min_trials - 1) * (costs_.c(batch) + costs_.r(1, batch) - 1.0);
  // The output still to come, as far as the lengths of finished outputs predict it.
  const double left = in.horizon();
  if (risk <= cfg_.start_budget * left) return true;
  if (!confident()) return false;
  // In target steps: plain decoding takes `left` of them, speculation at the speed the
  // confidence predicts left / s.
  double s = 1.0;
  if (best_k(confidence(), in.k_max, batch, &s) == 0) return false;
  return left * (1.0 - 1.0 / s) - first >= cfg_.confidence_odds * risk;
}

int32_t AdaptivePolicy::choose_k(const PolicyInput& in) {
  last_k_ = choose(in);
  return last_k_;
}

std::optional<double> AdaptivePolicy::budget_alpha() const {
  if (!cfg_.batch_aware) return std::nullopt;
  return last_alpha_;
}

void AdaptivePolicy::granted(int32_t k) {
  if (k >= last_k_) return;
  last_k_ = k;
  if (k > 0) return;
  // No draft ran: the draft has read nothing more, and a probe that did not happen spent
  // none of the probe budget.
  last_draft_pos_ = prev_draft_pos_;
  if (probing_) {
    probing_ = false;
    credit_ = prev_credit_;
    budget_ = prev_budget_;
  }
}

// The k for this step (choose_k); its costs are those of a sequence alone, which in a batch
// the step budget corrects (batch_aware).
int32_t AdaptivePolicy::choose(const PolicyInput& in) {
  const int32_t batch = 1;
  last_batch_ = std::max(1, in.batch_size);
  probing_ = false;
  prev_draft_pos_ = last_draft_pos_;
  if (in.k_max <= 0) return 0;
  // Not even a draft that is always right would pay here: no point probing for α.
  if (best_k(1.0, in.k_max, batch) == 0) {
    off_ = true;
    return 0;
  }
  // Before the draft first runs, the target's confidence (once seen long enough) stands in
  // for the acceptance prior.
  const bool unstarted = last_draft_pos_ == 0 && !cfg_.draft_free;
  if (unstarted) ++waited_;
  last_alpha_ = unstarted && confident() ? confidence() : est_.mean();
  int32_t k = best_k(last_alpha_, in.k_max, batch);
  // Started and not yet min_trials draft tokens tried: too little evidence to stop on.
  if (k == 0 && !off_ && last_draft_pos_ > 0 && tried_ < cfg_.min_trials) k = 1;
  if (k > 0 && may_start(in, k, batch)) {
    if (off_) budget_ = cfg_.probe_budget;  // back on: probing is cheap again next time
    off_ = false;
    last_draft_pos_ = in.position;
    return k;
  }
  if (!off_) {
    off_ = true;
    off_steps_ = 0;
    credit_ = 0.0;
  }
  // Off. Save up probe budget (each off step is about one target step of time).
  ++off_steps_;
  credit_ += budget_;
  const int32_t k_probe = std::max(1, best_k(cfg_.alpha_prior, in.k_max, batch));
  const bool forced = cfg_.max_probe_interval > 0 && off_steps_ >= cfg_.max_probe_interval;
  if (credit_ < probe_cost(in, k_probe, batch) && !forced) return 0;
  prev_credit_ = credit_;
  prev_budget_ = budget_;
  last_alpha_ = cfg_.alpha_prior;  // what a probe hopes for
  off_steps_ = 0;
  credit_ = 0.0;
  budget_ = std::max(cfg_.probe_budget / 8, budget_ / 2);  // restored if the probe turns it on
  probing_ = true;
  last_draft_pos_ = in.position;
  return k_probe;
}

void AdaptivePolicy::observe(const StepOutcome& o) {
  if (cfg_.measure_overhead && o.target_ms > 0.0) {
    // Predicted: the pass this sequence was in (at the real batch size) plus its draft steps.
    const int32_t b = last_batch_;
    const bool plain = o.drafted == 0 && o.target_tokens <= 1;
    const double predicted =
        costs_.target_ms(std::max(1, o.target_tokens), b) +
        (plain || cfg_.draft_free ? 0.0 : o.drafted * costs_.draft_ms(1, b));
    const double measured = o.target_ms + o.verify_ms + (plain ? 0.0 : o.draft_ms);
    if (predicted > 0.0 && !(probing_ && !plain)) overhead_->add(plain, measured / predicted);
  }
  // A probe that got a token accepted: the evidence from before the pause may be stale
  // (the text moved on), so it gives way to the prior and this outcome.
  if (probing_ && o.accepted > 0) est_.fade(cfg_.probe_fade);
  probing_ = false;
  est_.observe(o.drafted, o.accepted);
  tried_ += std::min(o.drafted, o.accepted + 1);
}

}  // namespace tandem
