// Model-free drafting by prompt lookup: find the most recent earlier occurrence of the
// context's last n tokens (trying n = n_max down to n_min) and propose what followed it.
// Repetitive outputs (code edits, quoting the prompt, lists) get long free drafts. Asked for
// a token tree (ProposeOptions::tree), it merges the continuations of up to tree_width
// matches, in that order of preference, into one tree: where earlier occurrences went on
// differently, each way is verified in the same pass.
#pragma once
#include "draft/proposer.hpp"

namespace tandem {

class NgramProposer final : public PerSequenceProposer {
 public:
  NgramProposer(int32_t n_min = 1, int32_t n_max = 4);
  std::string name() const override { return "ngram"; }
  Proposal propose_sequence(std::span<const int32_t> context, const ProposeOptions& opts, Rng& rng) override;

 private:
  int32_t n_min_, n_max_;
};

}  // namespace tandem
