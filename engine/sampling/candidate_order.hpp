// The one order a distribution's tokens are kept in: larger weight first, ties by ascending
// id. It is a strict total order (ids are unique), so any correct sort gives the same result;
// sampling (inverse CDF), the device twins and the coupled draws all read it.
//
// A distribution with no cut keeps the whole vocabulary (OpenAI's defaults: top_p 1, no
// top_k), and a comparison sort of 150k tokens took about 12 ms per sampled token. Weights are
// non-negative floats, whose bit patterns order as their values do, so a stable radix sort on
// the bits (tokens collected in id order) gives the same order in a fraction of that.
#pragma once
#include <cstdint>
#include <vector>

namespace tandem {

struct Candidate {
  float v;  // weight, >= 0 (not NaN)
  int32_t id;
};

constexpr auto candidate_before = [](const Candidate& a, const Candidate& b) {
  return a.v > b.v || (a.v == b.v && a.id < b.id);
};

// Sorts by candidate_before. Entries must have v >= 0 and ids ascending on entry for the
// radix path (large inputs); `scratch` is reused between calls.
void sort_candidates(std::vector<Candidate>& c, std::vector<Candidate>& scratch);

}  // namespace tandem
