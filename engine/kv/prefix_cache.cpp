#include "engine/kv/prefix_cache.hpp"

#include <algorithm>
#include <functional>
#include <queue>

#include "engine/base/splitmix.hpp"

namespace tandem {
namespace {
// One splitmix64 step: good avalanche for chained hashing.
uint64_t mix(uint64_t x) { return splitmix64_mix(x + kSplitmixGamma); }
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
    it->second.last_used = ++clock_;
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
      entries_.emplace(h, Entry{table[static_cast<size_t>(b)], std::vector<int32_t>(bt.begin(), bt.end()), parent,
                                ++clock_});
      blocks_.retain(table[static_cast<size_t>(b)]);
      if (auto p = entries_.find(parent); p != entries_.end()) ++p->second.children;
    }
    parent = h;
  }
  return n_full;
}

int32_t PrefixCache::evict(int32_t n) {
  // Only leaves go: a block whose parent is gone could never be matched again, so evicting
  // parents first would keep memory that is of no use.
  auto evictable = [&](const Entry& e) { return e.children == 0 && blocks_.ref_count(e.block) == 1; };
  using Candidate = std::pair<uint64_t, uint64_t>;  // last_used, hash
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> oldest;
  for (const auto& [h, e] : entries_)
    if (evictable(e)) oldest.emplace(e.last_used, h);
  int32_t freed = 0;
  for (; freed < n && !oldest.empty(); ++freed) {
    const auto it = entries_.find(oldest.top().second);
    oldest.pop();
    const uint64_t parent = it->second.parent;
    blocks_.release(it->second.block);
    entries_.erase(it);
    if (auto p = entries_.find(parent); p != entries_.end() && --p->second.children == 0 && evictable(p->second))
      oldest.emplace(p->second.last_used, parent);
  }
  return freed;
}

int32_t PrefixCache::idle_blocks() const {
  int32_t n = 0;
  for (const auto& [hash, e] : entries_) n += blocks_.ref_count(e.block) == 1 ? 1 : 0;
  return n;
}

}  // namespace tandem
