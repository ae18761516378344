// Verification of a drafted chain against the target model's distributions.
//
// Rules (Leviathan et al. 2023, Chen et al. 2023):
//   * For draft token x_i with target distribution p_i and draft distribution q_i, accept
//     with probability min(1, p_i(x_i) / q_i(x_i)).
//   * On the first rejection, sample the replacement from norm(max(0, p_i − q_i)) and stop.
//   * If all k are accepted, sample a bonus token from p_k (the position after the last).
// p and q are the FINAL distributions (after temperature, top-k, top-p, min-p, penalties),
// so the output follows the target's distribution exactly. A deterministic draft (n-gram,
// argmax draft) is a point mass q = δ(x): accept with probability p(x), and on rejection
// sample from p with x removed. Greedy targets (p a point mass) reduce to "accept while the
// draft equals the argmax, then emit the argmax", which verify_greedy does without
// consuming randomness.
//
// Coupled verification (verify_coupled) replaces the random stream by counter-based Gumbel
// noise keyed by (seed, absolute position) (engine/sampling/gumbel.hpp): the target's token at each
// position is gumbel_argmax(p_i), a draft token is accepted iff it equals it. The output is
// then exactly plain Gumbel-max sampling: the same text for the same seed whatever k, the
// policy, the batch or the proposer did.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/sampling/gumbel.hpp"
#include "engine/sampling/rng.hpp"
#include "engine/sampling/sampler.hpp"
#include "tandem/generation.hpp"

namespace tandem {

struct VerifyResult {
  int32_t n_accepted = 0;  // leading draft tokens kept
  int32_t next_token = -1; // the corrected token (after a rejection) or the bonus token
  bool all_accepted = false;  // true → next_token is the bonus token (after a tree's leaf)
  std::vector<int32_t> path;  // a token tree's accepted nodes, root's child first (device verdicts)
  // Device verdicts of requests with logprobs: those of each committed token, in order
  // (n_accepted + 1 of them).
  std::vector<TokenLogprobs> logprobs;
  // Device verdicts that were asked for it (DeviceVerifier::Sequence::confidence): the
  // target's top-token probability at the step's first row; -1 otherwise.
  double confidence = -1.0;
};

// target_dist(i) gives p_i for i in 0..k: the target's final distribution for the position
// of draft token i (i == k: the bonus position). It is called lazily, only for the
// positions that are reached, so penalties may depend on the tokens accepted before i.
using DistFn = std::function<Distribution(int32_t i)>;

// Greedy verification: p_i must be point masses (temperature 0).
VerifyResult verify_greedy(std::span<const int32_t> draft, const DistFn& target_dist);

// Rejection sampling. draft_dist(i) gives q_i; pass nullptr for a deterministic draft
// (point masses on the drafted tokens). position: the absolute sequence position of draft
// token 0 (for the fault-injection hook below only).
VerifyResult verify_stochastic(std::span<const int32_t> draft, const DistFn& target_dist, const DistFn* draft_dist,
                               Rng& rng, int64_t position = 0);

// Coupled (Gumbel-max) verification: accept draft token i iff it equals
// gumbel_argmax(p_i, noise, position + i); the first mismatch emits the target's token.
// Whatever the draft (model, n-gram, none), the output is the same.
VerifyResult verify_coupled(std::span<const int32_t> draft, const DistFn& target_dist, const PositionNoise& noise,
                            int64_t position);

// One draw from norm(max(0, p − q)). When the residual has no mass (p ≤ q everywhere,
// which happens only through rounding when p == q), falls back to p.
int32_t sample_residual(const Distribution& p, const Distribution& q, Rng& rng);
// That residual itself (p when it has no mass).
Distribution residual(const Distribution& p, const Distribution& q);
// p(x) (0 outside its support), quick for large supports too.
float prob_of(const Distribution& p, int32_t x);

// Fault injection, for tests only: proves that the losslessness suite detects a biased
// verifier. While set, the target distribution the verifiers use at absolute position
// `position` has `mass` probability moved from its most likely token to its second (no-op
// when it has one token) — a verifier whose output is off by `mass` there. Off by default;
// set it before generating (atomics: it may be read on the scheduler thread).
struct InjectedBias {
  int64_t position = -1;  // < 0: off
  float mass = 0.0f;
};
void inject_verifier_bias(InjectedBias bias);
// The bias in force (position < 0: none), for verifiers that build p elsewhere (on the device).
InjectedBias injected_verifier_bias();
// p as the verifiers see it at absolute position `position`: p itself unless the bias is on there.
Distribution with_injected_bias(Distribution p, int64_t position);

}  // namespace tandem
