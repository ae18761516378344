#include "engine/runtime/sequence_grammar.hpp"

#include <stdexcept>

namespace tandem {

SequenceGrammar::SequenceGrammar(std::shared_ptr<const TokenGrammar> grammar) : grammar_(std::move(grammar)) {
  if (grammar_) state_ = grammar_->initial();
}

void SequenceGrammar::fit(Proposal& p) {
  if (!grammar_) return;
  step_states_.assign(1, state_);
  if (p.tree()) {
    fit_tree(p);
    return;
  }
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
  // q goes with its draft: held on the host (dists) or on the device (q_rows).
  if (!p.dists.empty()) p.dists.resize(keep);
  if (!p.q_rows.empty()) p.q_rows.resize(keep);
}

void SequenceGrammar::fit_tree(Proposal& p) {
  std::vector<int32_t> index(p.tokens.size(), -1), tokens, parents;  // index: old node -> kept
  for (size_t i = 0; i < p.tokens.size(); ++i) {
    const int32_t par = p.parents[i];
    if (par >= 0 && index[static_cast<size_t>(par)] < 0) continue;  // its parent was cut
    const int32_t kept_par = par < 0 ? -1 : index[static_cast<size_t>(par)];
    const GrammarState& from = step_states_[static_cast<size_t>(kept_par + 1)];
    // Nothing follows a node that ends the sentence or the generation.
    if (kept_par >= 0 &&
        (TokenGrammar::complete(from) || grammar_->vocab().is_eog(tokens[static_cast<size_t>(kept_par)])))
      continue;
    const int32_t t = p.tokens[i];
    if (!grammar_->allows(from, t)) continue;
    index[i] = static_cast<int32_t>(tokens.size());
    tokens.push_back(t);
    parents.push_back(kept_par);
    step_states_.push_back(grammar_->after(from, t));
  }
  if (tokens.size() != p.tokens.size() && !p.deterministic())
    throw std::logic_error("SequenceRun: a sampled draft tree holds a node its grammar forbids");
  p.tokens = std::move(tokens);
  p.parents = std::move(parents);
}

void SequenceGrammar::commit(int32_t token) {
  if (!grammar_) return;
  state_ = grammar_->after(state_, token);
  if (state_.dead()) throw std::logic_error("SequenceRun: committed a token the grammar forbids");
}

}  // namespace tandem
