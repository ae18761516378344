// Proposers: where draft tokens come from. A proposer sees the committed context (prompt +
// accepted output) and proposes up to max_tokens continuation tokens, with the draft's
// final distribution q for each when it is a sampling draft. The chain shape is what
// verification consumes today; `Proposal` is the place a token tree will go later
// (several candidates per position with parent links).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/grammar/token_grammar.hpp"
#include "engine/sampling/gumbel.hpp"
#include "engine/sampling/rng.hpp"
#include "engine/sampling/sampler.hpp"

namespace tandem {

struct Proposal {
  std::vector<int32_t> tokens;
  // q_i for each token when the draft sampled from a distribution; empty when the tokens
  // are deterministic (point masses: n-gram lookup, greedy draft).
  std::vector<Distribution> dists;
  // Or, when the draft sampled on the device (ProposeOptions::on_device), q_i is row
  // q_rows[i] of the step's DraftProbs store (draft/draft_probs.hpp) and dists is empty.
  std::vector<int32_t> q_rows;
  bool on_device = false;  // the tokens were drawn on the device
  bool deterministic() const { return dists.empty() && q_rows.empty(); }
};

struct ProposeOptions {
  int32_t max_tokens = 4;   // k
  // Stop drafting when the draft's most likely token has probability below this, decided
  // before sampling (so the kept tokens are still plain draws from q).
  float p_min = 0.0f;
  const SamplingParams* sampling = nullptr;  // the request's sampling (q uses the same transforms as p)
  // Token ids the target accepts: [0, vocab). A draft with a larger (padded) vocabulary
  // never proposes ids outside it. 0 = no limit.
  int32_t vocab = 0;
  // Coupled verification: propose gumbel_argmax(q_i) with the target's noise at the token's
  // absolute position (context.size() + i) instead of sampling from the Rng.
  const PositionNoise* coupled = nullptr;
  // Constrained decoding: the draft proposes only tokens the grammar allows (its q is taken
  // over them, as the target's p is), starting from `grammar_state`, the state after the
  // context; it stops once the grammar is complete. Null: unconstrained.
  const TokenGrammar* grammar = nullptr;
  const GrammarState* grammar_state = nullptr;
  // The request is verified on the device: a draft model with a DraftProbs store samples
  // there too and leaves q on the device (Proposal::q_rows). Never with a grammar.
  bool on_device = false;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string name() const = 0;
  // context: every committed token so far (prompt and accepted output).
  virtual Proposal propose(std::span<const int32_t> context, const ProposeOptions& opts, Rng& rng) = 0;
  // Drops any per-sequence state (a new request starts).
  virtual void reset() {}
  // Called once the prompt is processed (its first token sampled): a proposer with a model
  // of its own reads the context now, as its prefill, so that drafting steps cost drafting
  // only (and the speculation policy and the cost metrics see that cost, not a prefill).
  // The server's scheduler feeds a model draft's prefill in chunks instead (ModelProposer).
  virtual void prefill(std::span<const int32_t> context) { (void)context; }
  // Context tokens still to be read before drafting, i.e. the prefill not yet done (0 for
  // model-free proposers, and once the prefill is complete). Steps stay plain meanwhile.
  virtual size_t prefill_pending(std::span<const int32_t> context) const {
    (void)context;
    return 0;
  }
  // Model forward passes run so far (0 for model-free proposers); for cost metrics.
  virtual int64_t forward_passes() const { return 0; }
};

}  // namespace tandem
