// Token-id prompts for the tiny fixtures: n ids below `below`, a fixed function of
// (seed, salt) (an LCG, so every platform gets the same prompts). Each test file keeps its
// own salt, so its prompts stay what its expectations were written against.
#pragma once
#include <cstdint>
#include <vector>

#include "tandem/generation.hpp"

namespace tandem::test {

std::vector<int32_t> random_prompt(int n, uint32_t seed, uint32_t salt, int32_t below = 300);

// Greedy generation of exactly n tokens (EOS ignored) with this proposer and k = draft_max:
// what the losslessness checks compare, speculative against plain.
GenerateOptions greedy_options(int n, DraftMode mode, int32_t draft_max);

}  // namespace tandem::test
