// The paged KV cache. Memory is a pool of fixed-size blocks (block_size token slots, every
// layer's K and V), handed out to sequences on demand; a sequence's block table maps its
// positions to slots. Attention reads through the table, so sequences grow without copying
// and shrink (rolling back rejected draft tokens) by giving blocks back.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/kv_budget.hpp"
#include "engine/model_config.hpp"
#include "kernels/backend.hpp"

namespace tandem {

// Host-side bookkeeping of which blocks are in use. Blocks are reference-counted so that
// several sequences can share a block (prefix sharing); a block returns to the free list
// when its last user releases it. With a budget (kv_budget.hpp), every block in use also
// holds block_bytes of it, so two allocators can share one memory budget.
class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks, KVBudget* budget = nullptr, size_t block_bytes = 0);
  // A block with one reference, or -1 when none is free (or the budget is spent).
  int32_t allocate();
  void retain(int32_t block);
  void release(int32_t block);
  int32_t ref_count(int32_t block) const { return refs_.at(static_cast<size_t>(block)); }
  // Blocks allocate() could hand out now: free ones, as far as the budget still covers them.
  int32_t num_free() const;
  int32_t num_used() const { return num_total() - static_cast<int32_t>(free_.size()); }
  int32_t num_total() const { return static_cast<int32_t>(refs_.size()); }
  const KVBudget* budget() const { return budget_; }
  size_t block_bytes() const { return block_bytes_; }

 private:
  std::vector<int32_t> free_;  // stack: recently freed blocks are reused first (warm in cache)
  std::vector<int32_t> refs_;
  KVBudget* budget_;
  size_t block_bytes_;
};

struct KVCacheOptions {
  int32_t block_size = 16;  // token slots per block
  int32_t num_blocks = 0;   // 0 → enough for max_tokens, or with a budget, the most it could hold
  int64_t max_tokens = 4096;
  DType dtype = DType::F16;  // F16 or F32
  KVBudget* budget = nullptr;  // shared with another cache; must outlive this one
};

// Storage of all layers of one model's cache on the backend.
class KVCache {
 public:
  KVCache(kernels::Backend& backend, const ModelConfig& config, const KVCacheOptions& opts);
  const kernels::KVLayer& layer(int il) const { return layers_.at(static_cast<size_t>(il)); }
  BlockAllocator& blocks() { return blocks_; }
  const BlockAllocator& blocks() const { return blocks_; }
  int32_t block_size() const { return block_size_; }
  // Bytes of one block (block_size token slots of every layer): what it costs the budget.
  size_t block_bytes() const { return blocks_.block_bytes(); }
  size_t bytes() const { return bytes_; }  // the reserve: num_total blocks
  // Bytes of cache one token slot takes across all layers (for memory budgets).
  static size_t bytes_per_token(const ModelConfig& config, DType dtype);

 private:
  int32_t block_size_;
  BlockAllocator blocks_;
  std::unique_ptr<kernels::Buffer> buffer_;
  std::vector<kernels::KVLayer> layers_;
  size_t bytes_ = 0;
};

// One sequence's view of a KVCache: its block table and how many positions hold valid KV.
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
