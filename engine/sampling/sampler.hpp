// Sampling, split in two steps because speculative decoding needs the middle result:
//   1. make_distribution: logits → the FINAL probability distribution (after penalties, bias,
//      temperature, top-k, top-p, min-p). The rejection sampler compares these p (target)
//      and q (draft) token by token, so every transform must already be applied.
//   2. sample: one draw from that distribution with the request's own Rng.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampling/rng.hpp"
#include "tandem/sampling.hpp"  // SamplingParams (public API)

namespace tandem {

// A sparse final distribution: the tokens with non-zero probability and their probabilities,
// which sum to 1 (up to float rounding), sorted by descending probability, ties by ascending
// id, so the order — and hence sample() — is deterministic.
struct Distribution {
  std::vector<int32_t> ids;
  std::vector<float> probs;

  // 0 for tokens outside the support. A linear scan: O(support size), which is small unless
  // top-k, top-p and min-p are all off.
  float prob(int32_t id) const;
  bool point_mass() const { return ids.size() == 1; }
  size_t size() const { return ids.size(); }
};

// history: the tokens seen so far (prompt and output), for the penalties; ids outside
// [0, vocab) are ignored (a padded or smaller draft vocabulary cannot emit them), negative
// ids throw std::invalid_argument.
// Greedy (temperature <= 0) → a point mass on the argmax of the penalised logits (penalties
// and the logit bias applied; "penalised" includes the bias throughout).
// NaN logits count as -inf. Throws std::runtime_error("logits are all NaN/-inf") when no
// token is possible, std::invalid_argument for empty logits or meaningless parameters
// (NaN/inf temperature, top_p, min_p, penalties, biases; repetition_penalty <= 0; a negative
// logit_bias id).
Distribution make_distribution(std::span<const float> logits, const SamplingParams& p,
                               std::span<const int32_t> history);
// The same over the tokens a mask allows (bit i of allowed[i / 64] set: token i allowed;
// tokens past the mask are not): the others are -inf before every transform, so top-k, top-p
// and min-p choose among allowed tokens only (constrained decoding, engine/grammar/). An
// empty mask allows everything. Throws std::runtime_error when it allows no possible token.
Distribution make_distribution(std::span<const float> logits, const SamplingParams& p,
                               std::span<const int32_t> history, std::span<const uint64_t> allowed);

// Throws std::invalid_argument for meaningless parameters, as make_distribution does (NaN/inf
// temperature, top_p, min_p, penalties, biases; repetition_penalty <= 0): for callers that
// transform logits elsewhere (on the device).
void validate_sampling(const SamplingParams& p);

// The logits the transforms start from: NaN → -inf, then the penalties and the logit bias
// (a copy into out).
// The same validation as make_distribution.
void penalised_logits(std::span<const float> logits, const SamplingParams& p, std::span<const int32_t> history,
                      std::vector<float>& out);

// log Σ exp(w_i) over NaN-free values with a finite maximum m, as m + log Σ exp(w_i − m):
// the sampler's own vectorised exp and fixed-order double sum (so deterministic), for the
// log-softmax of logprobs. Throws std::invalid_argument when max(w) is not finite.
double log_sum_exp(std::span<const float> w);

// The probability of the most likely token under softmax(logits / temperature), penalties
// and truncation left out: how sure the model is of its next token, the signal a policy reads
// before the draft has run (the draft tends to agree where the target is sure). NaN counts
// as -inf; 0 when no logit is finite (no signal), and for temperature <= 0 the temperature-1
// softmax's (greedy decoding picks the same token either way).
double top_probability(std::span<const float> logits, float temperature);

// Inverse CDF over the distribution's order with exactly one rng.uniform() draw.
// Throws std::invalid_argument on an empty distribution.
int32_t sample(const Distribution& d, Rng& rng);
// d without token x, renormalised (d itself when x is not in it, or nothing would remain):
// the distribution the next sibling of a token tree is drawn from after x, which drafting
// and verification (verify/tree_verifier.hpp) must compute alike.
Distribution remove_token(const Distribution& d, int32_t x);

// The index of the largest logit; ties → lowest id; NaN counts as -inf.
// Throws std::runtime_error("logits are all NaN/-inf") when there is no finite or +inf value.
int32_t argmax(std::span<const float> logits);

}  // namespace tandem
