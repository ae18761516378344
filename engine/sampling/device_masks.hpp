// Grammar masks (engine/grammar/token_grammar.hpp: bit v of 64-bit word v / 64 set when token
// v is allowed) applied to logits rows on the device (kernels::DeviceDecode::mask_rows), so
// that constrained requests decode, draft and verify there like the others: the masks go up
// (about 19 KB each for Qwen2.5's vocabulary) instead of the rows coming down (608 KB each).
// Rows that share a mask (a grammar state's masks are cached and shared) share its upload.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/device_decode.hpp"

namespace tandem {

class RowMasks {
 public:
  // Row `row` of the logits apply() is given takes `mask`; an empty mask allows everything
  // (the row is left alone). The mask's words must stay alive until apply().
  void add(int32_t row, std::span<const uint64_t> mask);
  size_t distinct() const { return masks_.size(); }  // masks to upload
  // Writes -inf, in place, over each listed row's tokens its mask does not allow (tokens past
  // the mask included): one upload of the distinct masks, one launch. buf: the caller's
  // buffer for them (grows, then stays).
  void apply(kernels::Backend& be, kernels::DeviceDecode& dd, const kernels::Tensor& logits,
             std::unique_ptr<kernels::Buffer>& buf) const;

 private:
  std::vector<int32_t> rows_, mask_of_;
  std::vector<std::span<const uint64_t>> masks_;  // distinct, by address
};

}  // namespace tandem
