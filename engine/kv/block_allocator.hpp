// Which blocks of a paged cache (kv_cache.hpp) are in use, and by how many holders.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/kv/kv_budget.hpp"

namespace tandem {

// Free block ids. One allocator owns its own; the caches of a KVPool (kv_pool.hpp) share
// one, so a block id names the same memory column whichever model's cache holds it.
struct FreeBlockIds {
  std::vector<int32_t> ids;  // a stack: recently freed blocks are reused first (warm in cache)
};

// Host-side bookkeeping of which blocks are in use. Blocks are reference-counted so that
// several sequences can share a block (prefix sharing); a block returns to the free list
// when its last user releases it. With a budget (kv_budget.hpp), every block in use also
// holds block_bytes of it, so two allocators can share one memory budget.
class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks, KVBudget* budget = nullptr, size_t block_bytes = 0);
  // Over ids 0..num_blocks-1 shared with other allocators through `shared` (which must
  // hold exactly the ids no allocator holds). Reference counts and num_used are this
  // allocator's own: a block is used by one allocator at a time.
  BlockAllocator(std::shared_ptr<FreeBlockIds> shared, int32_t num_blocks, KVBudget* budget, size_t block_bytes);
  // A block with one reference, or -1 when none is free (or the budget is spent).
  int32_t allocate();
  void retain(int32_t block);
  void release(int32_t block);
  int32_t ref_count(int32_t block) const { return refs_.at(static_cast<size_t>(block)); }
  // Blocks allocate() could hand out now: free ones, as far as the budget still covers them.
  int32_t num_free() const;
  int32_t num_used() const { return used_; }  // by this allocator
  int32_t num_total() const { return static_cast<int32_t>(refs_.size()); }
  const KVBudget* budget() const { return budget_; }
  size_t block_bytes() const { return block_bytes_; }

 private:
  std::shared_ptr<FreeBlockIds> free_;
  std::vector<int32_t> refs_;
  int32_t used_ = 0;
  KVBudget* budget_;
  size_t block_bytes_;
};

}  // namespace tandem
