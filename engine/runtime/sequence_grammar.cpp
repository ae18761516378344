#include "engine/runtime/sequence_grammar.hpp"

#include <stdexcept>

namespace tandem {

SequenceGrammar::SequenceGrammar(std::shared_ptr<const TokenGrammar> grammar) : grammar_(std::move(grammar)) {
  if (grammar_) state_ = grammar_->initial();
}

void SequenceGrammar::fit(Proposal& p) {
  if (!grammar_) return;
  step_states_.assign(1, state_);
  size_t keep = 0;
  while (keep < p.tokens.size()) {
    const int32_t t = p.tokens[keep];
    if (!grammar_->allows(step_states_.back(), t)) {
      if (!p.deterministic()) throw std::logic_error("SequenceRun: a sampled draft proposed a token its grammar forbids");
      break;
    }
    step_states_.push_back(grammar_->after(step_states_.back(), t));
    ++keep;
    if (TokenGrammar::complete(step_states_.back()) || grammar_->vocab().is_eog(t)) break;
  }
  p.tokens.resize(keep);
  if (!p.deterministic()) p.dists.resize(keep);
}

void SequenceGrammar::commit(int32_t token) {
  if (!grammar_) return;
  state_ = grammar_->after(state_, token);
  if (state_.dead()) throw std::logic_error("SequenceRun: committed a token the grammar forbids");
}

}  // namespace tandem
