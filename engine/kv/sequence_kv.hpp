// One sequence's view of a KVCache: its block table and how many positions hold valid KV.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/kv/kv_cache.hpp"

namespace tandem {

class SequenceKV {
 public:
  explicit SequenceKV(KVCache& cache) : cache_(&cache) {}
  ~SequenceKV() { clear(); }
  SequenceKV(const SequenceKV&) = delete;
  SequenceKV& operator=(const SequenceKV&) = delete;

  int32_t length() const { return length_; }
  // Make room for positions [0, n): allocates blocks as needed. Returns false, changing
  // nothing, when the pool has too few free blocks.
  bool reserve(int32_t n);
  // Marks positions [0, n) as holding valid KV (after a forward pass wrote them).
  void set_length(int32_t n);
  // Rolls back to the first n positions and frees the blocks no longer needed.
  void truncate(int32_t n);
  void clear() { truncate(0); }
  // Takes over already-retained blocks holding a shared prefix (empty sequences only).
  void adopt_prefix(std::vector<int32_t> blocks);
  const std::vector<int32_t>& block_table() const { return table_; }
  int32_t capacity() const { return static_cast<int32_t>(table_.size()) * cache_->block_size(); }
  int32_t slot(int32_t pos) const;
  // Throws std::logic_error when a block that positions [pos, pos + n) lie in is shared
  // (reference count above 1). There is no copy-on-write: writing there would change the
  // KV another sequence or the prefix cache holds for other tokens.
  void check_writable(int32_t pos, int32_t n) const;
  KVCache& cache() const { return *cache_; }

 private:
  KVCache* cache_;
  std::vector<int32_t> table_;
  int32_t length_ = 0;
};

}  // namespace tandem
