// One pool of KV blocks for the caches of both models (target and draft): one buffer, one
// id space, one byte budget. This is what lets a GPU hold both models' KV in one piece of
// device memory sized to the budget, instead of reserving each cache at the whole budget
// (two budgets of memory for one budget of blocks).
//
// Layout. A cache's memory is strips: layer l's K strip (2l) and V strip (2l + 1), each
// num_blocks pages, block b's slots being page b (kv_cache.hpp). The pool lays out
// max(2 x n_layer) strips of num_blocks pages of page_bytes each; every cache views the
// same strips, with its own token slots per block so that a page is page_bytes in every
// cache: block_size = page_bytes / (its K row bytes). Block b is then the column of page b
// in every strip, and whichever cache allocated it writes there; a model with fewer layers
// leaves the column's deeper strips idle (for Qwen2.5-Coder 0.5B drafting for 1.5B: 24 of
// 28 layers used, 14% of a draft block). Kernels see ordinary paged caches, block ids
// being disjoint between the caches because they come from one free list.
//
// Page size. page_bytes is a multiple of every cache's K row (kv_width x the KV type's
// size) and at least the target's block_size rows; e.g. Qwen 1.5B (256 wide) with 0.5B
// (128 wide), f16, 16-token target blocks: 8 KiB pages, 32-token draft blocks. Every block
// costs the same bytes (a column), so the budget is a number of columns.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/kv/block_allocator.hpp"
#include "engine/kv/kv_budget.hpp"
#include "engine/kv/kv_shape.hpp"
#include "kernels/backend.hpp"

namespace tandem {

struct KVPoolPlan {
  size_t page_bytes = 0;             // one block of one K or V strip, in every cache
  int32_t strips = 0;                // 2 x the deepest model's layers
  std::vector<int32_t> block_sizes;  // token slots per block, per shape
  size_t column_bytes() const { return page_bytes * static_cast<size_t>(strips); }  // one block
  // Blocks (columns) that hold `tokens` positions in every cache at once.
  size_t blocks_for_tokens(int64_t tokens) const;
};

// The page and block sizes for these shapes (the first is the target: it keeps
// block_size). Throws when the caches' rows have no common page of reasonable size.
KVPoolPlan plan_kv_pool(std::span<const KVShape> shapes, DType dtype, int32_t block_size);

class KVPool {
 public:
  // Takes budget_bytes / column_bytes blocks (at least one) of zeroed backend memory, once.
  KVPool(kernels::Backend& backend, std::span<const KVShape> shapes, DType dtype, int32_t block_size,
         size_t budget_bytes);
  KVPool(const KVPool&) = delete;
  KVPool& operator=(const KVPool&) = delete;

  const KVPoolPlan& plan() const { return plan_; }
  std::span<const KVShape> shapes() const { return shapes_; }
  DType dtype() const { return dtype_; }
  int32_t num_blocks() const { return num_blocks_; }
  size_t bytes() const { return plan_.column_bytes() * static_cast<size_t>(num_blocks_); }
  KVBudget& budget() { return budget_; }
  const KVBudget& budget() const { return budget_; }
  kernels::Buffer& buffer() { return *buffer_; }
  const std::shared_ptr<FreeBlockIds>& free_ids() const { return free_; }
  // Where strip s begins in buffer().
  size_t strip_offset(int32_t s) const {
    return plan_.page_bytes * static_cast<size_t>(num_blocks_) * static_cast<size_t>(s);
  }

 private:
  std::vector<KVShape> shapes_;
  KVPoolPlan plan_;
  DType dtype_;
  int32_t num_blocks_;
  KVBudget budget_;
  std::shared_ptr<FreeBlockIds> free_;
  std::unique_ptr<kernels::Buffer> buffer_;
};

}  // namespace tandem
