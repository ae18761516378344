// dst[r][ids[j]] = src[r][j], every other column of dst = fill: a reduced draft vocabulary's
// logits (engine/model/output_subset.hpp) spread over the whole vocabulary on the device,
// so that the draft samples there (draft/draft_probs.hpp) with q = 0 outside the subset.
// One block per row: the fill, a barrier, then the scatter (ids are unique).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 256;

__global__ void scatter_cols_kernel(float* dst, int64_t ldd, int64_t vocab, const float* src, int64_t lds,
                                    const int32_t* ids, int64_t n, float fill, int* err) {
  TANDEM_GRID_DEPENDENCY();
  float* d = dst + blockIdx.x * ldd;
  const float* s = src + blockIdx.x * lds;
  for (int64_t v = threadIdx.x; v < vocab; v += kThreads) d[v] = fill;
  __syncthreads();
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const int32_t id = ids[j];
    if (id < 0 || id >= vocab) {
      atomicOr(err, static_cast<int>(dev::kErrTokenId));
      continue;
    }
    d[id] = s[j];
  }
}

}  // namespace

void ops::scatter_cols(Stream s, float* dst, int64_t ldd, int64_t vocab, const float* src, int64_t lds, int64_t n_rows,
                       const int32_t* ids, int64_t n, float fill, int* err) {
  if (n_rows == 0) return;
  TANDEM_LAUNCH(scatter_cols_kernel, static_cast<unsigned>(n_rows), kThreads, 0, static_cast<cudaStream_t>(s))
  (dst, ldd, vocab, src, lds, ids, n, fill, err);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
