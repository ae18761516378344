// A request made ready to step: the one place that turns a request's options into a
// SequenceRun with its proposer and speculation policy. Both drivers use it (Engine::generate
// through run_to_end, and the Scheduler), so a request means the same on every path: the
// same policy (with the options it really runs with, effective_options), the same proposer,
// the same settled seed.
#pragma once
#include <memory>
#include <span>

#include "draft/proposer.hpp"
#include "engine/base/clock.hpp"
#include "engine/grammar/token_grammar.hpp"
#include "engine/runtime/engine_access.hpp"
#include "engine/runtime/sequence_run.hpp"
#include "policies/cost_model.hpp"
#include "policies/policy.hpp"
#include "tandem/generation.hpp"

namespace tandem {

// What one request owns while it runs. The run points at the proposer and the policy, and
// the policy at the cost model: members are destroyed in reverse order, the run first.
struct PreparedSequence {
  std::shared_ptr<const CostModel> costs;  // null: the policies' assumed default
  std::unique_ptr<Proposer> proposer;      // null without speculation
  std::unique_ptr<SpeculationPolicy> policy;
  std::unique_ptr<SequenceRun> run;
};

// Builds the request's proposer (a draft model's own lane in the shared draft cache, or
// prompt lookup), its policy (deciding with `costs`) and its run. Throws
// std::invalid_argument for what the request cannot have here (a draft model the engine
// lacks, an unknown policy, a prompt that does not fit: SequenceRun's checks).
// grammar: the compiled opts.grammar (GrammarCache), null when unconstrained.
PreparedSequence prepare_sequence(const EngineParts& parts, const PolicyCosts& costs, std::span<const int32_t> prompt,
                                  const GenerateOptions& opts, StreamEventCallback on_event, Clock::time_point start,
                                  std::shared_ptr<const TokenGrammar> grammar);

}  // namespace tandem
