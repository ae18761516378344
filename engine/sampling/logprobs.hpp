// Log-probabilities of generated tokens (GenerateOptions::logprobs), from the target's logits
// row of the token's position. They describe the distribution the token was drawn from, so
// a sampled request's come from its final Distribution (make_distribution: penalties,
// temperature, top-k, top-p, min-p), and a greedy one's — a point mass, which says nothing —
// from the log-softmax of the penalised logits at temperature 1. Only the row and the
// history matter, never how the token was proposed: speculation cannot change them.
#pragma once
#include <cstdint>
#include <span>

#include "engine/sampling/sampler.hpp"
#include "tandem/generation.hpp"

namespace tandem {

// `chosen`'s logprob and the n_top (0..kMaxTopLogprobs) most likely tokens, most likely
// first, ties by ascending id. final_dist: the distribution a sampled request drew from (the
// caller has it from verification) or null for a greedy request. When the distribution has
// fewer than n_top tokens, the list goes on with the most likely of the cut ones (-inf), so
// it always holds min(n_top, vocab) entries. Cost: O(vocab) for greedy or that fill,
// O(n_top) otherwise. Throws std::invalid_argument for n_top outside 0..kMaxTopLogprobs or
// `chosen` outside the vocabulary.
TokenLogprobs token_logprobs(std::span<const float> logits, const SamplingParams& p, std::span<const int32_t> history,
                             const Distribution* final_dist, int32_t chosen, int32_t n_top);

}  // namespace tandem
