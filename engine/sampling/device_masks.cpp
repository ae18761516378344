#include "engine/sampling/device_masks.hpp"

#include <algorithm>

namespace tandem {

void RowMasks::add(int32_t row, std::span<const uint64_t> mask) {
  if (mask.empty()) return;
  size_t m = 0;
  while (m < masks_.size() && !(masks_[m].data() == mask.data() && masks_[m].size() == mask.size())) ++m;
  if (m == masks_.size()) masks_.push_back(mask);
  rows_.push_back(row);
  mask_of_.push_back(static_cast<int32_t>(m));
}

void RowMasks::apply(kernels::Backend& be, kernels::DeviceDecode& dd, const kernels::Tensor& logits,
                     std::unique_ptr<kernels::Buffer>& buf) const {
  if (rows_.empty()) return;
  size_t words = 0;  // 64-bit words of the longest mask; shorter ones padded with "not allowed"
  for (const auto& m : masks_) words = std::max(words, m.size());
  const auto m = static_cast<int64_t>(rows_.size());
  kernels::WordViews w(be, buf, 2 * rows_.size() + 2 * words * masks_.size());
  const kernels::Tensor rows = w.take(DType::I32, m), mask_of = w.take(DType::I32, m);
  const kernels::Tensor masks = w.take(DType::I32, static_cast<int64_t>(2 * words), static_cast<int64_t>(masks_.size()));
  // 64-bit words as their little-endian 32-bit halves: bit v of word v / 32, as the kernel reads.
  std::vector<uint32_t> packed(2 * words * masks_.size(), 0);
  for (size_t i = 0; i < masks_.size(); ++i)
    for (size_t j = 0; j < masks_[i].size(); ++j) {
      const uint64_t x = masks_[i][j];
      packed[i * 2 * words + 2 * j] = static_cast<uint32_t>(x);
      packed[i * 2 * words + 2 * j + 1] = static_cast<uint32_t>(x >> 32);
    }
  be.upload(rows, rows_.data(), rows_.size() * 4);
  be.upload(mask_of, mask_of_.data(), mask_of_.size() * 4);
  // A mask at a time: each upload small enough for the CUDA backend's asynchronous staging
  // (a batch's masks together could exceed it and wait for the copy).
  for (size_t i = 0; i < masks_.size(); ++i)
    be.upload(masks.slice_rows(static_cast<int64_t>(i), 1), packed.data() + i * 2 * words, 2 * words * 4);
  dd.mask_rows(logits, rows, mask_of, masks);
}

}  // namespace tandem
