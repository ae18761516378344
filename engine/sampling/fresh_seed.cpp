#include "engine/sampling/fresh_seed.hpp"

#include <random>

namespace tandem {

uint64_t fresh_seed() {
  // One device per call: std::random_device is not specified to be safe to share across
  // threads, and opening one costs far less than the request it seeds.
  std::random_device rd;
  static_assert(sizeof(std::random_device::result_type) == 4);
  const uint64_t hi = rd(), lo = rd();
  return (hi << 32) | lo;
}

}  // namespace tandem
