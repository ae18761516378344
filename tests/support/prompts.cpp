#include "tests/support/prompts.hpp"

namespace tandem::test {

std::vector<int32_t> random_prompt(int n, uint32_t seed, uint32_t salt, int32_t below) {
  std::vector<int32_t> t;
  uint32_t x = seed * 2654435761u + salt;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t.push_back(static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(below)));
  }
  return t;
}

GenerateOptions greedy_options(int n, DraftMode mode, int32_t draft_max) {
  GenerateOptions g;
  g.max_tokens = n;
  g.sampling.temperature = 0.0f;
  g.ignore_eos = true;
  g.speculative.mode = mode;
  g.speculative.draft_max = draft_max;
  return g;
}

}  // namespace tandem::test
