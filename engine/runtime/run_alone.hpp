// One request decoded by itself (Engine::generate): its SequenceRun stepped with nothing to
// batch with. The Scheduler (scheduler.hpp) is the other driver, for many requests at once;
// both leave every decision about drafts, verification and output to the SequenceRun.
#pragma once
#include <cstdint>
#include <memory>
#include <span>

#include "draft/draft_probs.hpp"
#include "draft/proposer.hpp"
#include "engine/grammar/token_grammar.hpp"
#include "engine/model/transformer.hpp"
#include "engine/text/tokenizer.hpp"
#include "policies/policy.hpp"
#include "tandem/generation.hpp"

namespace tandem {

class SequenceRun;

struct AloneModels {
  Transformer& target;
  const Tokenizer& tokenizer;
  Proposer* proposer;          // null: no speculation possible
  SpeculationPolicy* policy;   // null: a FixedPolicy
  int32_t context;
  std::shared_ptr<const TokenGrammar> grammar = nullptr;  // the compiled opts.grammar, if any
  DraftProbs* draft_probs = nullptr;  // where the proposer's device drafts leave q (if it does)
};

// Prefill, then draft → verify → commit steps until the output ends.
GenerateResult run_alone(const AloneModels& m, std::span<const int32_t> prompt, const GenerateOptions& opts,
                         const StreamEventCallback& cb);

// The loop of run_alone for a run built elsewhere (its proposer, if any, is run.proposer()):
// the prompt in chunks, then one target pass per step, the draft reading its context in one
// go when it has to.
// draft_probs: the proposer's DraftProbs store, if it samples on the device.
void run_to_end(SequenceRun& run, Transformer& target, DraftProbs* draft_probs = nullptr);

}  // namespace tandem
