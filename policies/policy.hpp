// Speculation policies: how many tokens to draft at each step. Each sequence's step
// (engine/runtime/sequence_run.hpp) asks choose_k() before drafting and reports what
// happened with observe() after verifying, so a policy can adapt per sequence (acceptance
// estimates) and per step (batch size).
// k = 0 means "no speculation this step" (a plain target pass), which a policy must pick
// whenever speculating is expected to be slower.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "tandem/speculative.hpp"

namespace tandem {

class CostModel;
class ShapeChoice;

struct PolicyInput {
  int32_t k_max = 0;       // the request's draft_max, already clipped to context and token budget
  int32_t batch_size = 1;  // sequences in this step's target pass (1 outside the server)
  int32_t position = 0;    // committed tokens so far
  int32_t tokens_left = 0;  // tokens the request may still generate (0: not known)
  // Tokens it is expected to generate still (policies/output_lengths.hpp; <= tokens_left):
  // what a policy weighs the draft's prompt pass against. 0: take tokens_left.
  double expected_left = 0.0;
  double horizon() const { return expected_left > 0.0 ? expected_left : static_cast<double>(tokens_left); }
};

struct StepOutcome {
  int32_t drafted = 0;   // tokens the proposer returned (may be < chosen k: p_min, n-gram misses)
  int32_t accepted = 0;
  double draft_ms = 0.0;
  double target_ms = 0.0;  // the target pass of this step (the whole batch's, in the server)
  double verify_ms = 0.0;  // sampling and verification of this sequence's positions
  int32_t target_tokens = 1;  // tokens in that pass for this sequence (drafted + 1)
};

class SpeculationPolicy {
 public:
  virtual ~SpeculationPolicy() = default;
  virtual std::string name() const = 0;
  virtual int32_t choose_k(const PolicyInput& in) = 0;
  virtual void observe(const StepOutcome&) {}
  virtual void reset() {}  // a new sequence starts
  // True for a policy that may keep speculation off from the start (k = 0 before any
  // evidence): the draft model then reads the prompt only once the policy first asks for a
  // draft, so a sequence that never speculates never pays the draft's prompt pass.
  virtual bool may_start_off() const { return false; }
  // True when the policy would like the target's confidence at this plain step (before its
  // draft has ever run): the caller then computes the probability of the target's most likely
  // next token (top_probability, at the request's temperature) and passes it on.
  virtual bool wants_confidence() const { return false; }
  virtual void observe_confidence(double /*p_top*/) {}
  // In the server's batches a step-level budget (policies/step_budget.hpp) may grant fewer
  // drafts than choose_k asked for. A policy that lets it returns, after choose_k, the
  // acceptance it expects per draft position; nullopt keeps the policy's k as chosen (a
  // fixed k is the request's to set).
  virtual std::optional<double> budget_alpha() const { return std::nullopt; }
  // What the budget granted of the last choose_k (≤ it): the policy keeps its books as if it
  // had chosen that (a draft that never ran has read nothing and risked nothing).
  virtual void granted(int32_t k) { (void)k; }
  // The measured costs the policy decides with (null: none, e.g. a fixed k): a token tree's
  // size is then chosen from them too (ProposeOptions::tree_cost).
  virtual const CostModel* cost_model() const { return nullptr; }
  // Where a policy that decides from costs keeps its evidence on token trees against chains
  // (policies/shape_choice.hpp); null: trees as asked.
  virtual ShapeChoice* shape_choice() { return nullptr; }
};

// Always drafts k_max (draft_p_min, if set, still stops the draft early). The "confidence"
// policy is this one under its own name: what makes it confidence-driven is the draft_p_min
// that effective_options (factory.hpp) gives it.
class FixedPolicy final : public SpeculationPolicy {
 public:
  explicit FixedPolicy(std::string name = "fixed") : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  int32_t choose_k(const PolicyInput& in) override { return in.k_max; }

 private:
  std::string name_;
};

}  // namespace tandem
