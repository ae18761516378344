#include "engine/kv/block_allocator.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tandem {

BlockAllocator::BlockAllocator(int32_t num_blocks, KVBudget* budget, size_t block_bytes)
    : refs_(static_cast<size_t>(std::max(num_blocks, 0)), 0), budget_(budget), block_bytes_(block_bytes) {
  if (num_blocks <= 0) throw std::invalid_argument("KV cache needs at least one block");
  if (budget && block_bytes == 0) throw std::invalid_argument("KV blocks drawing on a budget must cost bytes");
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 handed out first
}

int32_t BlockAllocator::allocate() {
  if (free_.empty()) return -1;
  if (budget_ && !budget_->take(block_bytes_)) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

int32_t BlockAllocator::num_free() const {
  const size_t free = free_.size();
  if (!budget_) return static_cast<int32_t>(free);
  return static_cast<int32_t>(std::min(free, budget_->available() / block_bytes_));
}

void BlockAllocator::retain(int32_t block) {
  int32_t& r = refs_.at(static_cast<size_t>(block));
  if (r <= 0) throw std::logic_error("retain of a free KV block " + std::to_string(block));
  ++r;
}

void BlockAllocator::release(int32_t block) {
  int32_t& r = refs_.at(static_cast<size_t>(block));
  if (r <= 0) throw std::logic_error("double release of KV block " + std::to_string(block));
  if (--r == 0) {
    free_.push_back(block);
    if (budget_) budget_->give(block_bytes_);
  }
}

}  // namespace tandem
