// The paged KV cache. Memory is a pool of fixed-size blocks (block_size token slots, every
// layer's K and V), handed out to sequences on demand; a sequence's block table
// (sequence_kv.hpp) maps its positions to slots. Attention reads through the table, so
// sequences grow without copying and shrink (rolling back rejected draft tokens) by giving
// blocks back.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "engine/kv/block_allocator.hpp"
#include "engine/kv/kv_budget.hpp"
#include "engine/kv/kv_pool.hpp"
#include "engine/kv/kv_shape.hpp"
#include "kernels/backend.hpp"

namespace tandem {


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
  // A cache with memory of its own.
  KVCache(kernels::Backend& backend, const KVShape& shape, const KVCacheOptions& opts);
  // Cache `which` of a pool's shapes, over the pool's memory and block ids (kv_pool.hpp).
  KVCache(KVPool& pool, size_t which);
  const kernels::KVLayer& layer(int il) const { return layers_.at(static_cast<size_t>(il)); }
  BlockAllocator& blocks() { return blocks_; }
  const BlockAllocator& blocks() const { return blocks_; }
  int32_t block_size() const { return block_size_; }
  // Bytes of one block (block_size token slots of every layer): what it costs the budget.
  size_t block_bytes() const { return blocks_.block_bytes(); }
  size_t bytes() const { return bytes_; }  // its memory (a pool's: the whole pool's)
  // Bytes of cache one token slot takes across all layers (for memory budgets).
  static size_t bytes_per_token(const KVShape& shape, DType dtype);

 private:
  int32_t block_size_;
  BlockAllocator blocks_;
  std::unique_ptr<kernels::Buffer> buffer_;
  std::vector<kernels::KVLayer> layers_;
  size_t bytes_ = 0;
};

// A forward pass could not get the cache blocks its batch needs (nothing was modified).
class KVCacheFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tandem
