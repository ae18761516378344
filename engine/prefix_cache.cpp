#include "engine/prefix_cache.hpp"

#include <algorithm>

namespace tandem {
namespace {
uint64_t mix(uint64_t x) {  // splitmix64 finaliser: good avalanche for chained hashing
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
constexpr uint64_t kRoot = 0x74616e64656dULL;  // any fixed value: the hash of "no prefix"
}  // namespace

PrefixCache::PrefixCache(BlockAllocator& blocks, int32_t block_size) : blocks_(blocks), block_size_(block_size) {}

PrefixCache::~PrefixCache() {
  for (auto& [h, e] : entries_) blocks_.release(e.block);
}

uint64_t PrefixCache::chain_hash(uint64_t parent, std::span<const int32_t> block_tokens) const {
  uint64_t h = mix(parent);
  for (int32_t t : block_tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

std::vector<int32_t> PrefixCache::lookup(std::span<const int32_t> tokens, int32_t max_blocks) {
  std::vector<int32_t> out;
  uint64_t parent = kRoot;
  const int32_t n_full = std::min<int32_t>(max_blocks, static_cast<int32_t>(tokens.size()) / block_size_);
  for (int32_t b = 0; b < n_full; ++b) {
    const auto bt = tokens.subspan(static_cast<size_t>(b) * block_size_, static_cast<size_t>(block_size_));
    const uint64_t h = chain_hash(parent, bt);
    auto it = entries_.find(h);
    if (it == entries_.end() || it->second.parent != parent || !std::equal(bt.begin(), bt.end(), it->second.tokens.begin()))
      break;
    blocks_.retain(it->second.block);
    out.push_back(it->second.block);
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    parent = h;
  }
  return out;
}

int32_t PrefixCache::publish(std::span<const int32_t> tokens, const std::vector<int32_t>& table, int32_t n_valid,
                             int32_t from_block) {
  n_valid = std::min<int32_t>(n_valid, static_cast<int32_t>(tokens.size()));
  const int32_t n_full = std::min<int32_t>(n_valid / block_size_, static_cast<int32_t>(table.size()));
  uint64_t parent = kRoot;
  for (int32_t b = 0; b < n_full; ++b) {
    const auto bt = tokens.subspan(static_cast<size_t>(b) * block_size_, static_cast<size_t>(block_size_));
    const uint64_t h = chain_hash(parent, bt);
    if (b >= from_block && !entries_.count(h)) {
      lru_.push_front(h);
      entries_.emplace(h, Entry{table[static_cast<size_t>(b)], std::vector<int32_t>(bt.begin(), bt.end()), parent,
                                lru_.begin()});
      blocks_.retain(table[static_cast<size_t>(b)]);
    }
    parent = h;
  }
  return n_full;
}

int32_t PrefixCache::evict(int32_t n) {
  int32_t freed = 0;
  for (auto it = lru_.end(); it != lru_.begin() && freed < n;) {
    --it;
    auto e = entries_.find(*it);
    if (blocks_.ref_count(e->second.block) != 1) continue;  // still used by a sequence
    blocks_.release(e->second.block);
    entries_.erase(e);
    it = lru_.erase(it);
    ++freed;
  }
  return freed;
}

}  // namespace tandem
