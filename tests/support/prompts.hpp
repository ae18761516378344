// Token-id prompts for the tiny fixtures: n ids below `below`, a fixed function of
// (seed, salt) (an LCG, so every platform gets the same prompts). Each test file keeps its
// own salt, so its prompts stay what its expectations were written against.
#pragma once
#include <cstdint>
#include <vector>

namespace tandem::test {

std::vector<int32_t> random_prompt(int n, uint32_t seed, uint32_t salt, int32_t below = 300);

}  // namespace tandem::test
