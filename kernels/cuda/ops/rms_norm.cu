// rms_norm: dst = x / rms(x) * (w + w_offset), per row. One block of 256 threads per row;
// the sum of squares is accumulated in double like the CPU backend's (rows of thousands
// of large activations lose bits in float), in an order fixed by the row length.
#include "kernels/cuda/act_rows.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

__global__ void rms_norm_kernel(float* dst, int64_t ldd, const float* x, int64_t ldx, const float* w, int64_t cols,
                                float eps, float w_offset) {
  TANDEM_GRID_DEPENDENCY();
  __shared__ double partial[dev::kNormThreads / dev::kWarp];
  dev::rms_norm_row(dst + blockIdx.x * ldd, x + blockIdx.x * ldx, w, cols, eps, w_offset, partial);
}

// The post-norm residual (Gemma 3): the row normed in place, then added to dst's row.
__global__ void rms_norm_add_kernel(float* x, int64_t ldx, const float* w, int64_t cols, float eps, float* dst,
                                    int64_t ldd) {
  TANDEM_GRID_DEPENDENCY();
  __shared__ double partial[dev::kNormThreads / dev::kWarp];
  dev::rms_norm_add_row(x + blockIdx.x * ldx, w, cols, eps, dst + blockIdx.x * ldd, partial);
}

}  // namespace

void ops::rms_norm_add(Stream s, F32Rows x, const float* w, int64_t rows, int64_t cols, float eps, F32Rows dst) {
  if (rows == 0) return;
  TANDEM_LAUNCH(rms_norm_add_kernel, static_cast<unsigned>(rows), dev::kNormThreads, 0, static_cast<cudaStream_t>(s))
  (x.p, x.ld, w, cols, eps, dst.p, dst.ld);
}

void ops::rms_norm(Stream s, F32Rows dst, const float* x, int64_t ldx, const float* w, int64_t rows, int64_t cols,
                   float eps, float w_offset) {
  if (rows == 0) return;
  TANDEM_LAUNCH(rms_norm_kernel, static_cast<unsigned>(rows), dev::kNormThreads, 0, static_cast<cudaStream_t>(s))
  (dst.p, dst.ld, x, ldx, w, cols, eps, w_offset);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
