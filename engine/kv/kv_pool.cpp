#include "engine/kv/kv_pool.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "engine/kv/kv_cache.hpp"

namespace tandem {

namespace {
// A draft's block may hold more tokens than the target's (a narrower model fills a page
// with more rows); past this the common page is unreasonable (a sequence's last block
// wasting most of a column) and the shapes are refused.
constexpr int64_t kMaxBlockTokens = 1024;
}  // namespace

size_t KVPoolPlan::blocks_for_tokens(int64_t tokens) const {
  size_t n = 0;
  for (int32_t bs : block_sizes) n += static_cast<size_t>((tokens + bs - 1) / bs);
  return n;
}

KVPoolPlan plan_kv_pool(std::span<const KVShape> shapes, DType dtype, int32_t block_size) {
  if (shapes.empty()) throw std::invalid_argument("KV pool: no caches");
  if (block_size <= 0) throw std::invalid_argument("KV block size must be positive");
  if (dtype != DType::F16 && dtype != DType::F32) throw std::invalid_argument("KV cache type must be F16 or F32");
  size_t common = 1;
  int32_t layers = 0;
  for (const KVShape& s : shapes) {
    if (s.n_layer <= 0 || s.kv_width <= 0) throw std::invalid_argument("KV pool: a model without layers");
    common = std::lcm(common, row_bytes(dtype, s.kv_width));
    layers = std::max(layers, s.n_layer);
  }
  KVPoolPlan p;
  const size_t target_rows = row_bytes(dtype, shapes[0].kv_width) * static_cast<size_t>(block_size);
  p.page_bytes = (target_rows + common - 1) / common * common;
  p.strips = 2 * layers;
  for (const KVShape& s : shapes) {
    const size_t bs = p.page_bytes / row_bytes(dtype, s.kv_width);
    if (bs > static_cast<size_t>(std::max<int64_t>(kMaxBlockTokens, block_size)))
      throw std::invalid_argument("KV pool: caches of " + std::to_string(shapes[0].kv_width) + " and " +
                                  std::to_string(s.kv_width) + " values per token share no page of at most " +
                                  std::to_string(kMaxBlockTokens) + " tokens");
    p.block_sizes.push_back(static_cast<int32_t>(bs));
  }
  return p;
}

KVPool::KVPool(kernels::Backend& backend, std::span<const KVShape> shapes, DType dtype, int32_t block_size,
               size_t budget_bytes)
    : shapes_(shapes.begin(), shapes.end()),
      plan_(plan_kv_pool(shapes, dtype, block_size)),
      dtype_(dtype),
      num_blocks_(static_cast<int32_t>(std::min<size_t>(budget_bytes / plan_.column_bytes(), INT32_MAX))),
      budget_(plan_.column_bytes() * static_cast<size_t>(num_blocks_)),
      free_(std::make_shared<FreeBlockIds>()) {
  if (num_blocks_ <= 0)
    throw std::invalid_argument("KV memory budget of " + std::to_string(budget_bytes) +
                                " bytes holds not even one block (" + std::to_string(plan_.column_bytes()) + " bytes)");
  // Slot indices are int32 in the kernels: the widest cache's slots must fit.
  for (int32_t bs : plan_.block_sizes)
    if (int64_t{num_blocks_} * bs > INT32_MAX)
      throw std::invalid_argument("KV memory budget too large: more than 2^31 token slots");
  free_->ids.reserve(static_cast<size_t>(num_blocks_));
  for (int32_t b = num_blocks_ - 1; b >= 0; --b) free_->ids.push_back(b);  // block 0 handed out first
  // Zeroed and not touched here: see kv_cache.cpp (unwritten slots are never read).
  buffer_ = backend.alloc_zeroed(bytes(), shapes_.size() > 1 ? "the KV cache pool of both models" : "the KV cache");
}

}  // namespace tandem
