#include "engine/kv/block_allocator.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tandem {

namespace {
std::shared_ptr<FreeBlockIds> all_free(int32_t num_blocks) {
  auto f = std::make_shared<FreeBlockIds>();
  f->ids.reserve(static_cast<size_t>(std::max(num_blocks, 0)));
  for (int32_t b = num_blocks - 1; b >= 0; --b) f->ids.push_back(b);  // block 0 handed out first
  return f;
}
}  // namespace

BlockAllocator::BlockAllocator(int32_t num_blocks, KVBudget* budget, size_t block_bytes)
    : BlockAllocator(all_free(num_blocks), num_blocks, budget, block_bytes) {}

BlockAllocator::BlockAllocator(std::shared_ptr<FreeBlockIds> shared, int32_t num_blocks, KVBudget* budget,
                               size_t block_bytes)
    : free_(std::move(shared)),
      refs_(static_cast<size_t>(std::max(num_blocks, 0)), 0),
      budget_(budget),
      block_bytes_(block_bytes) {
  if (num_blocks <= 0) throw std::invalid_argument("KV cache needs at least one block");
  if (!free_) throw std::invalid_argument("BlockAllocator: no free-id list");
  if (budget && block_bytes == 0) throw std::invalid_argument("KV blocks drawing on a budget must cost bytes");
}

int32_t BlockAllocator::allocate() {
  std::vector<int32_t>& ids = free_->ids;
  if (ids.empty()) return -1;
  if (budget_ && !budget_->take(block_bytes_)) return -1;
  const int32_t b = ids.back();
  ids.pop_back();
  int32_t& r = refs_.at(static_cast<size_t>(b));
  if (r != 0) throw std::logic_error("KV block " + std::to_string(b) + " handed out twice");
  r = 1;
  ++used_;
  return b;
}

int32_t BlockAllocator::num_free() const {
  const size_t free = free_->ids.size();
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
    free_->ids.push_back(block);
    --used_;
    if (budget_) budget_->give(block_bytes_);
  }
}

}  // namespace tandem
