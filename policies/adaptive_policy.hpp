// The adaptive and goodput policies: pick, before every step, the k in 0..k_max that
// maximises expected tokens per unit time, S(α, k) = E(α, k) / (k·c + r(k)), with α from
// the sequence's own acceptance history (AcceptanceEstimator) and c, r(k) from the cost
// model. k = 0 (plain decoding, S = 1) wins whenever no k is predicted to beat it by
// min_gain.
//
// Turning back on: while off, nothing about α is learnt, so the policy probes: it drafts
// again once the probe's predicted cost — the draft's catch-up pass over every token it
// missed, the other draft steps and the wider target pass — is covered by probe_budget
// of the time spent off (each off step adds that share of a target step to a credit).
// A probe that gets a draft token accepted fades the stale evidence (by default back to the
// prior), so the sequence can turn speculation back on; a probe that gets nothing accepted
// only adds its evidence and halves the budget (down to an eighth). The catch-up grows with the
// time off, so a draft whose catch-up costs more per token than the budget (a large draft
// model on a CPU) is probed soon after it turns off or not at all: probing it later would
// cost that share of the whole time off whatever the interval. max_probe_interval > 0
// forces a probe after that many off steps regardless (off by default, for that reason).
// When not even α = 1 could pay at this batch size (c large, r(k) steep, big batch), the
// policy stays off without probing: α is not what is missing.
//
// Starting: before the draft has run for a sequence, α is only the prior, and the first
// speculative step pays the draft's catch-up over the whole context (the prompt). So the
// policy starts only when that step, were nothing accepted, would cost at most start_budget
// of the output still to come (PolicyInput::horizon: what the lengths of the outputs that
// finished before predict, within what max_tokens allows; policies/output_lengths.hpp), when
// known; otherwise it starts off and only the probing above can turn it on. A short output
// where the draft disagrees then loses at most that share, and one where it agrees keeps the
// gain once the output is long enough to pay for the prompt pass.
//
// Starting on the target's confidence: that rule alone keeps a draft's prompt pass from
// ever paying on a short output, even where the draft would agree (a code answer of 96
// tokens ran at 1.04–1.07× plain where fixed k = 4 made 1.4×). But before the draft runs,
// the target's own distributions are already a sign of how well a draft can do: a draft
// agrees where the target is sure (code, boilerplate, repetition) and rarely where it is
// not (a list of random words: the Qwen 1.5B's most likely next token had 0.2–0.4 of the
// mass there, against about 0.9 on code answers). So while it waits, the policy takes the
// target's top-token probability at each plain step (observe_confidence) as an estimate of
// α, and after confidence_tokens of them (until the draft first runs, that estimate also
// picks k) starts when the gain it predicts over the tokens still to come, less the first
// step's cost, is at least confidence_odds times what that step and the min_trials steps
// after it would lose were nothing accepted. Where the estimate is wrong (a sure target, a
// draft that disagrees), that loss is what is risked: on a short output only for a large
// predicted gain, on a long one a small share of it.
//
// Staying on: the first drafts of a sequence are weak evidence (the first step drafts a
// single token when the prior predicts only k = 1), and once off, the growing catch-up may
// keep the policy from probing again. So after starting, a sequence drafts at least one
// token per step until it has tried min_trials draft tokens; start_budget covers those steps
// too (were nothing accepted), so the worst case stays within it. Measured on the Qwen pair
// (code prompts, 256 tokens): two of four prompts drew one rejected token first and stayed
// off for the rest, at 1.0× plain where fixed k = 4 made 1.03–1.15×.
//
// goodput differs in batches (the server): its choice is a wish that the scheduler's
// step-level budget (policies/step_budget.hpp) may cut, weighing every sequence's drafts
// against the batch's marginal cost and the other streams' latency (budget_alpha, granted).
// Alone (one sequence, Engine::generate) it is the adaptive policy.
//
// The cost model is calibrated on bare forward passes; a real step also pays sampling and
// verification of k+1 positions, KV bookkeeping, and passes at a longer context. So the
// policy also times its own steps: the measured time of speculative steps over what the
// cost model predicts for them, against the same ratio for plain steps, is an overhead
// factor (policies/overhead_tracker.hpp, shared by the sequences of one engine) that
// divides every predicted speedup. Probes are not counted (their draft catch-up is not a
// regular step's cost).
#pragma once
#include <memory>

#include "policies/acceptance_estimator.hpp"
#include "policies/cost_model.hpp"
#include "policies/overhead_tracker.hpp"
#include "policies/policy.hpp"
#include "policies/shape_choice.hpp"

namespace tandem {

struct AdaptiveConfig {
  double alpha_prior = 0.6;
  double prior_weight = 2.0;   // trials the prior is worth
  double decay = 0.95;         // per trial: the estimate follows the last ~20 draft tokens
  double min_gain = 0.02;      // speculate only for a predicted speedup of at least 1 + min_gain
  double probe_budget = 0.02;  // share of the time spent off that probing may cost
  double probe_fade = 0.0;     // evidence kept after a probe that got a token accepted
  double start_budget = 0.02;  // share of the output still to come that the first draft may risk (< 0: any)
  int32_t min_trials = 3;      // draft tokens tried after starting before the policy may turn off
  int32_t confidence_tokens = 4;   // target confidences seen before they may start the draft (0: never)
  double confidence_decay = 0.85;  // per token: the confidence follows the last ~7 tokens
  double confidence_odds = 1.0;    // predicted net gain over the first step's worst-case loss needed to start
  int32_t max_probe_interval = 0;  // > 0: probe after this many off steps whatever it costs
  bool batch_aware = false;    // goodput: the step budget judges its drafts in a batch
  bool draft_free = false;     // the proposer costs nothing per token (n-gram): c = 0, no catch-up
  bool measure_overhead = true;  // correct predictions with the timings of real steps
};

class AdaptivePolicy final : public SpeculationPolicy {
 public:
  // costs must outlive the policy. `overhead` is shared with other sequences deciding with
  // the same costs; null gives the policy a private one (reset with each sequence).
  // `shapes`: trees against chains, shared likewise (null: a private one, kept across resets).
  AdaptivePolicy(const CostModel& costs, const AdaptiveConfig& cfg,
                 std::shared_ptr<OverheadTracker> overhead = nullptr, std::shared_ptr<ShapeChoice> shapes = nullptr);

  std::string name() const override { return cfg_.batch_aware ? "goodput" : "adaptive"; }
  int32_t choose_k(const PolicyInput& in) override;
  void observe(const StepOutcome& o) override;
  void reset() override;
  bool may_start_off() const override { return true; }
  bool wants_confidence() const override;
  void observe_confidence(double p_top) override;
  std::optional<double> budget_alpha() const override;
  void granted(int32_t k) override;
  const CostModel* cost_model() const override { return &costs_; }
  ShapeChoice* shape_choice() override { return shapes_.get(); }

  // The k that maximises predicted speed at acceptance alpha (0 when none beats plain
  // decoding by min_gain), and that speed relative to plain decoding.
  int32_t best_k(double alpha, int32_t k_max, int32_t batch, double* speedup = nullptr) const;
  double alpha() const { return est_.mean(); }
  // Measured cost of speculative steps over the cost model's prediction, relative to plain
  // steps (1 until timed).
  double overhead() const;
  bool off() const { return off_; }
  // The target's recent top-token probability (decayed mean; < 0 before any was observed).
  double confidence() const { return conf_w_ > 0.0 ? conf_sum_ / conf_w_ : -1.0; }

 private:
  int32_t choose(const PolicyInput& in);
  double probe_cost(const PolicyInput& in, int32_t k, int32_t batch) const;
  // The first draft of a sequence risks no more than start_budget of what is left, or the
  // target's confidence predicts a gain worth the risk.
  bool may_start(const PolicyInput& in, int32_t k, int32_t batch) const;
  bool confident() const { return cfg_.confidence_tokens > 0 && conf_seen_ >= cfg_.confidence_tokens; }

  const CostModel& costs_;
  AdaptiveConfig cfg_;
  AcceptanceEstimator est_;
  bool off_ = false;
  int32_t off_steps_ = 0;       // steps off since turning off or the last probe
  double credit_ = 0.0;         // probe budget saved up, in target steps
  double budget_ = 0.0;         // current probe budget (halves per failed probe)
  bool probing_ = false;        // the last choice was a probe
  int32_t last_draft_pos_ = 0;  // committed tokens when the draft last ran (its cache is that far)
  int32_t last_batch_ = 1;      // batch size the last choice was made for
  // The last choice, for the step budget: its k, the α it was made for, and what it changed
  // (restored when the budget grants no draft).
  int32_t last_k_ = 0;
  double last_alpha_ = 0.0;
  int32_t prev_draft_pos_ = 0;
  double prev_credit_ = 0.0, prev_budget_ = 0.0;
  int32_t tried_ = 0;           // draft tokens tried (accepted, and the first rejected) since starting
  double conf_sum_ = 0.0, conf_w_ = 0.0;  // decayed sums of target confidences before the start
  int32_t conf_seen_ = 0;                 // how many were observed
  int32_t waited_ = 0;                    // steps asked about before the start
  std::shared_ptr<OverheadTracker> overhead_;
  std::shared_ptr<ShapeChoice> shapes_;
  bool own_overhead_ = false;
};

}  // namespace tandem
