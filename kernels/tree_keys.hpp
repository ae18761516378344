// Which cached keys a query token of a token tree reads (tree attention). A tree's nodes sit
// in the sequence's cache in the order they were fed, from index `base` on, whatever their
// depth; a node at depth d has position base - 1 + d (the root, the last committed token,
// sits at base - 1). The node attends to every key below `base` and to the tree keys whose
// bits are set in its ancestor mask (bit b: index base + b; its own bit and its ancestors').
//
// Attention walks a token's keys by *logical* index j = 0..position: below `base` that is the
// cache index itself, above it the (j - base)-th set bit of the mask. A node's logical keys
// are then exactly those of the same tokens fed as a chain, in the same order, so its scores,
// their order of summation and its output are the chain's, bit for bit (the batch invariance
// the verification of a tree relies on). A token with mask 0 reads positions 0..position as
// always. Host C++ and nvcc (C++17), like exp_nonpos.hpp.
#pragma once
#include <cstdint>

#include "kernels/exp_nonpos.hpp"  // TANDEM_HOST_DEVICE

namespace tandem::kernels {

// Most nodes one tree may hold in a sequence's cache (the bits of the mask).
constexpr int kMaxTreeNodes = 64;
// I32 fields per token of PagedAttnMeta::tree: base, mask bits 0..31, mask bits 32..63, unused.
constexpr int kTreeFields = 4;

TANDEM_HOST_DEVICE int tree_ctz64(uint64_t m) {
#if defined(__CUDA_ARCH__)
  return __ffsll(static_cast<long long>(m)) - 1;
#else
  return __builtin_ctzll(m);
#endif
}

TANDEM_HOST_DEVICE int tree_popcount64(uint64_t m) {
#if defined(__CUDA_ARCH__)
  return __popcll(m);
#else
  return __builtin_popcountll(m);
#endif
}

// The cache index of a node's last tree key (mask not 0): its highest set bit.
TANDEM_HOST_DEVICE int32_t tree_last_key(int32_t base, uint64_t mask) {
#if defined(__CUDA_ARCH__)
  return base + 63 - __clzll(static_cast<long long>(mask));
#else
  return base + 63 - __builtin_clzll(mask);
#endif
}

TANDEM_HOST_DEVICE uint64_t tree_mask_of(const int32_t* fields) {
  return static_cast<uint64_t>(static_cast<uint32_t>(fields[1])) |
         (static_cast<uint64_t>(static_cast<uint32_t>(fields[2])) << 32);
}

// The cache index of logical key j of a token whose tree fields are {base, mask}; -1 when
// the token has no such key (j at or past base + popcount(mask)).
TANDEM_HOST_DEVICE int32_t tree_key_index(int32_t j, int32_t base, uint64_t mask) {
  if (mask == 0 || j < base) return j;
  uint64_t m = mask;
  for (int32_t n = j - base; n > 0 && m != 0; --n) m &= m - 1;  // drop the lower set bits
  return m == 0 ? -1 : base + tree_ctz64(m);
}

}  // namespace tandem::kernels
