// Constrained decoding on the device (engine/grammar/): the tokens a grammar forbids get
// -inf in the listed logits rows, in place, so that every decoding op after it (argmax,
// make_probs, the verifiers, top_rows) takes only what the grammar allows, exactly as the
// host's make_distribution(..., allowed) does (its mask also comes before every transform).
// A mask is uploaded once per call however many rows share it (a grammar state's mask is
// ~19 KB for Qwen2.5's vocabulary, against 608 KB for a row of logits).
//
// One thread per column: a warp's 32 columns share one mask word (one load for the warp),
// and the writes of a row are coalesced. Allowed columns are not touched.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 256;

__global__ void mask_rows_kernel(float* logits, int64_t ld, int64_t n_rows, int64_t vocab, const int32_t* rows,
                                 const int32_t* mask_of, const uint32_t* masks, int64_t words, int64_t n_masks,
                                 int* err) {
  TANDEM_GRID_DEPENDENCY();
  const int32_t r = rows[blockIdx.y], m = mask_of[blockIdx.y];
  if (r < 0 || r >= n_rows || m < 0 || m >= n_masks) {
    if (blockIdx.x == 0 && threadIdx.x == 0) atomicOr(err, static_cast<int>(dev::kErrMaskIndex));
    return;
  }
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (v >= vocab) return;
  const uint32_t* mask = masks + m * words;
  const int64_t w = v / 32;
  const bool allowed = w < words && ((mask[w] >> (v % 32)) & 1u) != 0;
  if (!allowed) logits[r * ld + v] = -INFINITY;
}

}  // namespace

void ops::mask_rows(Stream s, float* logits, int64_t ld, int64_t n_rows, int64_t vocab, const int32_t* rows,
                    const int32_t* mask_of, int64_t m, const uint32_t* masks, int64_t words, int64_t n_masks,
                    int* err) {
  if (m == 0 || vocab == 0) return;
  const dim3 grid(static_cast<unsigned>((vocab + kThreads - 1) / kThreads), static_cast<unsigned>(m));
  TANDEM_LAUNCH(mask_rows_kernel, grid, kThreads, 0, static_cast<cudaStream_t>(s))
  (logits, ld, n_rows, vocab, rows, mask_of, masks, words, n_masks, err);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
