#include "engine/kv_cache.hpp"

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

size_t KVCache::bytes_per_token(const ModelConfig& c, DType dtype) {
  return 2 * static_cast<size_t>(c.n_layer) * row_bytes(dtype, c.kv_width());
}

namespace {
// Blocks of a cache: as asked, or enough for max_tokens, or with a budget the most it could
// ever hold alone (the budget decides at run time how much of that is used).
int32_t cache_blocks(const ModelConfig& config, const KVCacheOptions& opts) {
  if (opts.block_size <= 0) throw std::invalid_argument("KV block size must be positive");
  if (opts.dtype != DType::F16 && opts.dtype != DType::F32)
    throw std::invalid_argument("KV cache type must be F16 or F32");
  if (opts.num_blocks > 0) return opts.num_blocks;
  if (opts.budget) {
    const size_t block = KVCache::bytes_per_token(config, opts.dtype) * static_cast<size_t>(opts.block_size);
    return static_cast<int32_t>(std::min<size_t>(opts.budget->total() / block, INT32_MAX));
  }
  return static_cast<int32_t>((opts.max_tokens + opts.block_size - 1) / opts.block_size);
}
}  // namespace

KVCache::KVCache(kernels::Backend& backend, const ModelConfig& config, const KVCacheOptions& opts)
    : block_size_(opts.block_size),
      blocks_(cache_blocks(config, opts), opts.budget,
              bytes_per_token(config, opts.dtype) * static_cast<size_t>(std::max(opts.block_size, 0))) {
  const int64_t slots = int64_t{blocks_.num_total()} * block_size_;
  const size_t layer_bytes = row_bytes(opts.dtype, config.kv_width()) * static_cast<size_t>(slots);
  bytes_ = 2 * layer_bytes * static_cast<size_t>(config.n_layer);
  // Zeroed memory that is not touched here: a cache sharing a budget is reserved far larger
  // than it may ever use (kv_budget.hpp). Unwritten slots are never read (attention stops at
  // each query's position), but zeros keep a bug from turning into NaNs that depend on old
  // memory.
  buffer_ = backend.alloc_zeroed(bytes_);
  layers_.resize(static_cast<size_t>(config.n_layer));
  for (int il = 0; il < config.n_layer; ++il) {
    const size_t base = 2 * layer_bytes * static_cast<size_t>(il);
    layers_[il].k = kernels::make_tensor(buffer_.get(), opts.dtype, config.kv_width(), slots, base);
    layers_[il].v = kernels::make_tensor(buffer_.get(), opts.dtype, config.kv_width(), slots, base + layer_bytes);
  }
}

bool SequenceKV::reserve(int32_t n) {
  const int32_t bs = cache_->block_size();
  const size_t need = static_cast<size_t>((n + bs - 1) / bs);
  if (need <= table_.size()) return true;
  if (static_cast<int32_t>(need - table_.size()) > cache_->blocks().num_free()) return false;
  while (table_.size() < need) table_.push_back(cache_->blocks().allocate());
  return true;
}

void SequenceKV::set_length(int32_t n) {
  if (n < 0 || n > capacity()) throw std::logic_error("SequenceKV::set_length beyond reserved capacity");
  length_ = n;
}

void SequenceKV::truncate(int32_t n) {
  if (n < 0) n = 0;
  if (n < length_) length_ = n;
  const int32_t bs = cache_->block_size();
  const size_t keep = static_cast<size_t>((n + bs - 1) / bs);
  while (table_.size() > keep) {
    cache_->blocks().release(table_.back());
    table_.pop_back();
  }
}

void SequenceKV::adopt_prefix(std::vector<int32_t> blocks) {
  if (!table_.empty()) throw std::logic_error("SequenceKV::adopt_prefix on a sequence that holds blocks");
  table_ = std::move(blocks);
  length_ = static_cast<int32_t>(table_.size()) * cache_->block_size();
}

int32_t SequenceKV::slot(int32_t pos) const {
  const int32_t bs = cache_->block_size();
  if (pos < 0 || pos / bs >= static_cast<int32_t>(table_.size()))
    throw std::out_of_range("SequenceKV: position " + std::to_string(pos) + " has no block");
  return table_[static_cast<size_t>(pos / bs)] * bs + pos % bs;
}

void SequenceKV::check_writable(int32_t pos, int32_t n) const {
  const int32_t bs = cache_->block_size();
  const int32_t end = std::min(pos + n, capacity());  // blocks not allocated yet will be fresh ones
  for (int32_t p = pos; p < end; p = (p / bs + 1) * bs) {
    const int32_t block = table_[static_cast<size_t>(p / bs)];
    if (cache_->blocks().ref_count(block) != 1)
      throw std::logic_error("KV write of position " + std::to_string(p) + " into shared block " +
                             std::to_string(block));
  }
}

}  // namespace tandem
