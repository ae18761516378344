// Verification of a scheduler step's sequences on the backend (kernels/device_decode.hpp):
// the target's verdict on every sequence's drafts is reached where the logits are, and only
// ids and counts come back to the host, instead of n_vocab floats per verified position.
//   * greedy requests without penalties: the argmax of each row, accepted drafts = the
//     leading ones equal to it (two launches);
//   * every other request: each row's final distribution
//     (make_probs: penalties, temperature, top-k, top-p, min-p), then rejection sampling
//     against the draft's q (its rows in DraftProbs when it sampled on the device, point
//     masses for n-gram and greedy drafts) with counter-based noise keyed by (seed,
//     position), or coupled verification (Gumbel-max with the request's noise).
// Token trees (Sequence::parents), greedy or coupled: each row's target token (the argmax, of
// the penalised logits where there are penalties, or the Gumbel-max token at the row's depth),
// then a walk from the root along them; in rejection mode, each row's final distribution, then
// a walk with recursive rejection over each visited node's children (their q rows, drawn
// without replacement on the device, or point masses).
// Grammars: each constrained row's mask goes up and its forbidden tokens become -inf there
// (RowMasks) before any of the above, as make_distribution's mask comes first on the host.
// Logprobs: after the verdicts, each committed token's from the row that verified it
// (logprob_rows over the rows' penalised logits and final distributions, made again), so
// only 1 + 2·n_top numbers a token come back.
// Rejection mode on the device draws its uniforms from PositionNoise(seed) at each token's
// position (kernels::kTagAccept / kTagSample / kTagDraft) instead of the request's Rng
// stream: the output follows the target's distribution exactly as on the host, but a seed
// gives another text than the CPU backend's rejection mode (coupled mode gives the same).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/device_decode.hpp"
#include "tandem/sampling.hpp"
#include "verify/verifier.hpp"

namespace tandem {

class DeviceVerifier {
 public:
  // Null when the backend cannot decode on the device (the CPU backend).
  static std::unique_ptr<DeviceVerifier> for_backend(kernels::Backend& be);

  struct Sequence {
    int32_t first_row = 0;             // its first row in the logits (the pending token's)
    std::span<const int32_t> drafts;   // its drafts; rows first_row .. first_row + drafts.size()
    // Null: the verdict is the argmax (greedy without penalties). Else the request's
    // transforms and what they need:
    const SamplingParams* sampling = nullptr;
    std::span<const int32_t> history;  // committed tokens before the first verified one
    bool coupled = false;
    int64_t position = 0;              // absolute position of the first verified token
    std::span<const int32_t> q_rows;   // the drafts' q in `q` (empty: point masses)
    // A token tree's parents (drafts are its nodes, node i verified by row first_row + 1 + i,
    // q_rows[i] the q its siblings were drawn from); empty: a chain.
    std::span<const int32_t> parents;
    // Constrained requests: each row's grammar mask (engine/grammar/token_grammar.hpp; row r
    // of a chain after its first r drafts, of a tree after node r - 1's path), one per row;
    // empty: unconstrained.
    std::span<const std::span<const uint64_t>> masks;
    // The request's sampling (always set by SequenceRun; needed by the two below).
    const SamplingParams* request = nullptr;
    // Logprobs (GenerateOptions::logprobs): each committed token's and this many
    // alternatives' (-1: none), of `request`'s transforms (history: its committed tokens),
    // into VerifyResult::logprobs.
    int32_t logprobs = -1;
    // A plain step whose target confidence a waiting policy reads (AdaptivePolicy): the
    // largest softmax probability of the first row's raw logits at the request's temperature
    // (1 for greedy), as top_probability has it on the host, into VerifyResult::confidence.
    bool confidence = false;
  };
  // The verdict of each sequence against the logits [rows, n_vocab] on the backend. q: the
  // step's DraftProbs rows (null when no sequence has q rows). Constrained sequences' rows
  // are masked in place first (what the grammar forbids becomes -inf), so that p is over
  // what it allows, as on the host. A sequence asking for logprobs gets those of every
  // token its verdict commits (the accepted drafts and the next token), reached on the
  // device from the rows that verified them (logprob_rows).
  std::vector<VerifyResult> verify(const kernels::Tensor& logits, std::span<const Sequence> seqs,
                                   const kernels::Tensor* q = nullptr);

 private:
  DeviceVerifier(kernels::Backend& be, kernels::DeviceDecode& dd) : be_(be), dd_(dd) {}
  void verify_argmax(const kernels::Tensor& logits, std::span<const Sequence> seqs, std::span<VerifyResult> out);
  void verify_sampled(const kernels::Tensor& logits, std::span<const Sequence> seqs, const kernels::Tensor* q,
                      std::span<VerifyResult> out);
  // Coupled trees, and greedy ones with penalties: each row's Gumbel-max token under its
  // transform (greedy: the argmax of the penalised logits), then the walk.
  void verify_transformed_trees(const kernels::Tensor& logits, std::span<const Sequence> seqs,
                                std::span<VerifyResult> out);
  // The target's confidence at the first row of each sequence that asks, before any mask (-1
  // for the others).
  std::vector<double> confidences(const kernels::Tensor& logits, std::span<const Sequence> seqs);
  // The logprobs of the tokens each verdict commits, for the sequences that ask.
  void add_logprobs(const kernels::Tensor& logits, std::span<const Sequence> seqs, std::span<VerifyResult> out);
  // make_probs' output: rows x vocab floats in `buf`, grown to the largest step seen.
  kernels::Tensor probs_rows(std::unique_ptr<kernels::Buffer>& buf, int64_t rows, int64_t vocab);
  // The walk of verify_greedy over row tokens `ids` (argmax or coupled draws) for seqs.
  void walk(const kernels::Tensor& ids, std::span<const Sequence> seqs, std::span<VerifyResult> out);
  kernels::Backend& be_;
  kernels::DeviceDecode& dd_;
  // Each grows to the largest step seen, then stays.
  std::unique_ptr<kernels::Buffer> buf_, probs_, side_, masks_, lp_side_, lp_scratch_, conf_side_;
  // Rows made again from a few rows of the logits (make_probs with a row map): the
  // confidences' and the logprobs' penalised logits, one row each.
  std::unique_ptr<kernels::Buffer> rows_;
};

}  // namespace tandem
