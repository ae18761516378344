// The draft → verify → commit loop for one sequence.
//
// The target's cache holds every committed token except the newest ("pending") one. Each
// step drafts k tokens, runs the target ONCE over [pending, d1..dk] (k+1 positions, logits
// for all), verifies, keeps pending + the accepted drafts in the cache (truncating the
// rejected tail), and commits the accepted tokens plus the corrected/bonus token, which
// becomes the new pending token. k = 0 is plain autoregressive decoding through the same
// path, so speculation on and off share every line that decides what is emitted.
#pragma once
#include <span>

#include "draft/proposer.hpp"
#include "engine/forward.hpp"
#include "engine/tokenizer.hpp"
#include "policies/policy.hpp"
#include "tandem/engine.hpp"

namespace tandem {

class Coordinator {
 public:
  // proposer may be null (no speculation possible); policy null → FixedPolicy.
  Coordinator(Transformer& target, const Tokenizer& tokenizer, Proposer* proposer, int32_t context,
              SpeculationPolicy* policy = nullptr);

  GenerateResult run(std::span<const int32_t> prompt, const GenerateOptions& opts, const StreamCallback& cb);

 private:
  Transformer& target_;
  const Tokenizer& tok_;
  Proposer* proposer_;
  int32_t context_;
  SpeculationPolicy* policy_;
  FixedPolicy fixed_;
};

}  // namespace tandem
