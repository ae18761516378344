// The captured decode graphs of one model, by bucket (decode_buckets.hpp): at most
// `capacity` of them, the least recently used evicted first, and all dropped together when
// memory they hold the address of has moved (the stamp: the backend's capture epoch and the
// model's own scratch generation).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/graph_capture.hpp"

namespace tandem {

struct GraphKey {
  int32_t batch = 0, width = 0;
  bool operator==(const GraphKey&) const = default;
};

struct GraphStamp {
  uint64_t backend = 0, scratch = 0;
  bool operator==(const GraphStamp&) const = default;
};

struct GraphStats {
  int64_t captures = 0;       // graphs captured
  int64_t replays = 0;        // passes run by launching a captured graph
  int64_t evictions = 0;      // graphs dropped to stay within capacity
  int64_t invalidations = 0;  // times every graph was dropped (memory moved, weights changed)
  int32_t live = 0;           // graphs held now
};

class GraphCache {
 public:
  explicit GraphCache(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}
  // Drops every graph when `stamp` is not the one they were captured under.
  void validate(const GraphStamp& stamp);
  // The graph of `key`, marked as just used (counted as a replay), or nullptr.
  kernels::CapturedGraph* find(const GraphKey& key);
  // Keeps a graph captured under the current stamp, evicting the least recently used one
  // when full.
  void insert(const GraphKey& key, std::unique_ptr<kernels::CapturedGraph> g);
  void clear();  // counted as an invalidation when it held graphs
  void set_capacity(size_t capacity);
  size_t capacity() const { return capacity_; }
  const GraphStats& stats() const { return stats_; }

 private:
  struct Entry {
    GraphKey key;
    std::unique_ptr<kernels::CapturedGraph> graph;
    uint64_t used = 0;
  };
  void evict_to(size_t n);

  size_t capacity_;
  std::vector<Entry> entries_;
  GraphStamp stamp_;
  uint64_t tick_ = 0;
  GraphStats stats_;
};

}  // namespace tandem
