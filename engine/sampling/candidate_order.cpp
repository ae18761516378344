#include "engine/sampling/candidate_order.hpp"

#include <algorithm>
#include <array>
#include <bit>

namespace tandem {
namespace {

// Below this a comparison sort is as fast (the radix passes' counts cost a fixed amount).
constexpr size_t kRadixFrom = 4096;

// The key orders descending weights ascending: non-negative floats' bits grow with the value.
uint32_t key(const Candidate& c) { return ~std::bit_cast<uint32_t>(c.v); }

}  // namespace

void sort_candidates(std::vector<Candidate>& c, std::vector<Candidate>& scratch) {
  if (c.size() < kRadixFrom) {
    std::sort(c.begin(), c.end(), candidate_before);
    return;
  }
  // Least significant digit first, 11 bits a pass (the last 10): each pass is stable, so
  // entries with equal weights keep the ascending ids they came in with.
  scratch.resize(c.size());
  std::vector<Candidate>* from = &c;
  std::vector<Candidate>* to = &scratch;
  for (int shift : {0, 11, 22}) {
    std::array<uint32_t, 2048> count{};
    for (const Candidate& e : *from) ++count[(key(e) >> shift) & 2047u];
    uint32_t sum = 0;
    for (uint32_t& n : count) {
      const uint32_t here = n;
      n = sum;
      sum += here;
    }
    for (const Candidate& e : *from) (*to)[count[(key(e) >> shift) & 2047u]++] = e;
    std::swap(from, to);
  }
  if (from != &c) c.swap(*from);
}

}  // namespace tandem
