// A constrained run's grammar (GenerateOptions::grammar, compiled by GrammarCache): its state
// after the committed output, and the states along the step's drafts, whose masks p_i is
// taken over (and q_i, by the proposer). Unconstrained runs have none: every call is then
// a no-op and active() is false.
#pragma once
#include <memory>
#include <vector>

#include "draft/proposer.hpp"
#include "engine/grammar/token_grammar.hpp"

namespace tandem {

class SequenceGrammar {
 public:
  explicit SequenceGrammar(std::shared_ptr<const TokenGrammar> grammar);

  bool active() const { return grammar_ != nullptr; }
  const TokenGrammar* grammar() const { return grammar_.get(); }
  // After the committed output.
  const GrammarState& state() const { return state_; }
  // The sentence is whole: nothing may follow (an empty grammar is whole from the start).
  bool complete() const { return grammar_ && TokenGrammar::complete(state_); }

  // The step's drafts cut to what the grammar allows: a deterministic draft (n-gram) knows
  // nothing of it and is cut before its first forbidden token (the cut is a function of the
  // context, so output is unaffected); drafts sampled from a masked q never hold one. Any
  // draft is cut after a token that completes the sentence: the output ends there, so what
  // follows could never be committed. Records the states along the kept drafts.
  // A token tree is cut node by node: a node the grammar forbids (a deterministic tree's)
  // goes with its subtree, and so do the children of a node that ends the sentence; a
  // sampled tree never needs a cut (the builder drew from masked q's) and a cut there throws.
  void fit(Proposal& p);
  // The mask of the step's row i: a chain's after its first i drafts; a tree's row 0 after
  // the committed output, row n + 1 after node n's path.
  std::shared_ptr<const TokenMask> step_mask(size_t i) const { return grammar_->mask(step_states_.at(i)); }
  // Past a committed token; throws std::logic_error for one the grammar forbids.
  void commit(int32_t token);

 private:
  std::shared_ptr<const TokenGrammar> grammar_;
  GrammarState state_;
  void fit_tree(Proposal& p);
  std::vector<GrammarState> step_states_;  // [0] = state_, then after each kept draft (node)
};

}  // namespace tandem
