// Sharing of KV blocks between requests with a common prefix (system prompts, chat
// history). Every FULL block of committed tokens is published under a hash of its tokens
// and all tokens before it; a new request adopts the longest chain of published blocks
// that matches its prompt and prefills only the rest. The cache holds one reference to
// each block it lists; when the pool runs short it evicts blocks nobody else uses, leaves
// of the chains first (a block whose parent is gone can never match again), least recently
// used first. Only committed tokens are ever published, so rejected draft tokens never
// enter it.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/kv/kv_cache.hpp"

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
  // Frees up to n blocks that only the cache still references and that have no cached
  // children, least recently used first; a parent whose last child goes is a candidate too.
  int32_t evict(int32_t n);
  int32_t cached_blocks() const { return static_cast<int32_t>(entries_.size()); }
  // Cached blocks no sequence holds (only the cache's reference): all of them can be
  // evicted for new sequences (leaves first, then their parents), so they are memory a
  // load balancer should see as free (the `serve` metric tandem_kv_cache_utilization).
  int32_t idle_blocks() const;

 private:
  struct Entry {
    int32_t block;
    std::vector<int32_t> tokens;  // the block's own tokens, to rule out hash collisions
    uint64_t parent;
    uint64_t last_used;    // clock_ at the last lookup or publish that reached it
    int32_t children = 0;  // cached entries whose parent this is
  };
  uint64_t chain_hash(uint64_t parent, std::span<const int32_t> block_tokens) const;

  BlockAllocator& blocks_;
  int32_t block_size_;
  std::unordered_map<uint64_t, Entry> entries_;
  uint64_t clock_ = 0;
};

}  // namespace tandem
