#include "engine/runtime/sequence_setup.hpp"

#include <stdexcept>

#include "draft/model_proposer.hpp"
#include "draft/ngram_proposer.hpp"
#include "policies/factory.hpp"

namespace tandem {

PreparedSequence prepare_sequence(const EngineParts& parts, const PolicyCosts& costs, std::span<const int32_t> prompt,
                                  const GenerateOptions& opts, StreamEventCallback on_event, Clock::time_point start,
                                  std::shared_ptr<const TokenGrammar> grammar) {
  PreparedSequence s;
  // The options the request really runs with (the confidence policy's default p_min).
  GenerateOptions run_opts = opts;
  run_opts.speculative = effective_options(opts.speculative);
  const SpeculativeOptions& so = run_opts.speculative;
  switch (so.mode) {
    case DraftMode::None:
      break;
    case DraftMode::Model:
      if (!parts.draft) throw std::invalid_argument("draft-model speculation needs a draft model (-md)");
      s.proposer = std::make_unique<ModelProposer>(*parts.draft, parts.draft_probs);
      break;
    case DraftMode::Ngram:
      s.proposer = std::make_unique<NgramProposer>(so.ngram_min, so.ngram_max);
      break;
  }
  s.costs = costs.model;
  s.policy = make_policy(so, s.costs.get(), costs.overhead, costs.shapes);
  s.run = std::make_unique<SequenceRun>(parts.target, parts.tokenizer, prompt, run_opts, std::move(on_event),
                                        parts.context, parts.target.model().config().n_vocab, s.proposer.get(),
                                        s.policy.get(), start, std::move(grammar));
  s.run->set_output_lengths(costs.lengths);
  return s;
}

}  // namespace tandem
