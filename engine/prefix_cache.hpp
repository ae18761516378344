// Sharing of KV blocks between requests with a common prefix (system prompts, chat
// history). Every FULL block of committed tokens is published under a hash of its tokens
// and all tokens before it; a new request adopts the longest chain of published blocks
// that matches its prompt and prefills only the rest. The cache holds one reference to
// each block it lists; blocks nobody else uses are evicted least-recently-used first when
// the pool runs short. Only committed tokens are ever published, so rejected draft tokens
// never enter it.
#pragma once
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache.hpp"

namespace tandem {

class PrefixCache {
 public:
  PrefixCache(BlockAllocator& blocks, int32_t block_size);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Block ids holding the longest cached prefix of `tokens` made of whole blocks, at most
  // max_blocks of them; each is retained for the caller (who releases them as usual).
  std::vector<int32_t> lookup(std::span<const int32_t> tokens, int32_t max_blocks);
  // Publishes blocks [from_block, n / block_size) of a sequence whose first n_valid
  // positions hold the KV of tokens[0, n_valid), n = min(n_valid, tokens.size()): KV past
  // the tokens has no tokens to be found under. Returns the number of full blocks now covered.
  int32_t publish(std::span<const int32_t> tokens, const std::vector<int32_t>& block_table, int32_t n_valid,
                  int32_t from_block);
  // Frees up to n blocks that only the cache still references, least recently used first.
  int32_t evict(int32_t n);
  int32_t cached_blocks() const { return static_cast<int32_t>(entries_.size()); }

 private:
  struct Entry {
    int32_t block;
    std::vector<int32_t> tokens;  // the block's own tokens, to rule out hash collisions
    uint64_t parent;
    std::list<uint64_t>::iterator lru;
  };
  uint64_t chain_hash(uint64_t parent, std::span<const int32_t> block_tokens) const;

  BlockAllocator& blocks_;
  int32_t block_size_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_;  // front = most recently used
};

}  // namespace tandem
