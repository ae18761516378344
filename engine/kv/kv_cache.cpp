#include "engine/kv/kv_cache.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tandem {

size_t KVCache::bytes_per_token(const KVShape& c, DType dtype) {
  return 2 * static_cast<size_t>(c.n_layer) * row_bytes(dtype, c.kv_width);
}

namespace {
// Blocks of a cache: as asked, or enough for max_tokens, or with a budget the most it could
// ever hold alone (the budget decides at run time how much of that is used).
int32_t cache_blocks(const KVShape& shape, const KVCacheOptions& opts) {
  if (opts.block_size <= 0) throw std::invalid_argument("KV block size must be positive");
  if (opts.dtype != DType::F16 && opts.dtype != DType::F32)
    throw std::invalid_argument("KV cache type must be F16 or F32");
  if (opts.num_blocks > 0) return opts.num_blocks;
  if (opts.budget) {
    const size_t block = KVCache::bytes_per_token(shape, opts.dtype) * static_cast<size_t>(opts.block_size);
    return static_cast<int32_t>(std::min<size_t>(opts.budget->total() / block, INT32_MAX));
  }
  return static_cast<int32_t>((opts.max_tokens + opts.block_size - 1) / opts.block_size);
}
}  // namespace

KVCache::KVCache(kernels::Backend& backend, const KVShape& shape, const KVCacheOptions& opts)
    : block_size_(opts.block_size),
      blocks_(cache_blocks(shape, opts), opts.budget,
              bytes_per_token(shape, opts.dtype) * static_cast<size_t>(std::max(opts.block_size, 0))) {
  const int64_t slots = int64_t{blocks_.num_total()} * block_size_;
  const size_t layer_bytes = row_bytes(opts.dtype, shape.kv_width) * static_cast<size_t>(slots);
  bytes_ = 2 * layer_bytes * static_cast<size_t>(shape.n_layer);
  // Zeroed memory that is not touched here: a cache sharing a budget is reserved far larger
  // than it may ever use (kv_budget.hpp). Unwritten slots are never read (attention stops at
  // each query's position), but zeros keep a bug from turning into NaNs that depend on old
  // memory.
  buffer_ = backend.alloc_zeroed(bytes_, "a KV cache");
  layers_.resize(static_cast<size_t>(shape.n_layer));
  for (int il = 0; il < shape.n_layer; ++il) {
    const size_t base = 2 * layer_bytes * static_cast<size_t>(il);
    layers_[il].k = kernels::make_tensor(buffer_.get(), opts.dtype, shape.kv_width, slots, base);
    layers_[il].v = kernels::make_tensor(buffer_.get(), opts.dtype, shape.kv_width, slots, base + layer_bytes);
  }
}

KVCache::KVCache(KVPool& pool, size_t which)
    : block_size_(pool.plan().block_sizes.at(which)),
      blocks_(pool.free_ids(), pool.num_blocks(), &pool.budget(), pool.plan().column_bytes()),
      bytes_(pool.bytes()) {
  const KVShape& shape = pool.shapes()[which];
  const int64_t slots = int64_t{pool.num_blocks()} * block_size_;
  layers_.resize(static_cast<size_t>(shape.n_layer));
  for (int il = 0; il < shape.n_layer; ++il) {
    layers_[il].k = kernels::make_tensor(&pool.buffer(), pool.dtype(), shape.kv_width, slots, pool.strip_offset(2 * il));
    layers_[il].v =
        kernels::make_tensor(&pool.buffer(), pool.dtype(), shape.kv_width, slots, pool.strip_offset(2 * il + 1));
  }
}

}  // namespace tandem
