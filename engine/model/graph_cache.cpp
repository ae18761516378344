#include "engine/model/graph_cache.hpp"

#include <algorithm>

namespace tandem {

void GraphCache::validate(const GraphStamp& stamp) {
  if (stamp == stamp_) return;
  clear();
  stamp_ = stamp;
}

kernels::CapturedGraph* GraphCache::find(const GraphKey& key) {
  for (Entry& e : entries_)
    if (e.key == key) {
      e.used = ++tick_;
      ++stats_.replays;
      return e.graph.get();
    }
  return nullptr;
}

void GraphCache::insert(const GraphKey& key, std::unique_ptr<kernels::CapturedGraph> g) {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  if (it != entries_.end()) entries_.erase(it);
  evict_to(capacity_ - 1);
  entries_.push_back({key, std::move(g), ++tick_});
  ++stats_.captures;
  stats_.live = static_cast<int32_t>(entries_.size());
}

void GraphCache::clear() {
  if (!entries_.empty()) ++stats_.invalidations;
  entries_.clear();
  stats_.live = 0;
}

void GraphCache::set_capacity(size_t capacity) {
  capacity_ = capacity < 1 ? 1 : capacity;
  evict_to(capacity_);
}

void GraphCache::evict_to(size_t n) {
  while (entries_.size() > n) {
    auto lru = std::min_element(entries_.begin(), entries_.end(),
                                [](const Entry& a, const Entry& b) { return a.used < b.used; });
    entries_.erase(lru);
    ++stats_.evictions;
  }
  stats_.live = static_cast<int32_t>(entries_.size());
}

}  // namespace tandem
