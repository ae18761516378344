// scale: x *= s in place.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 256;

__global__ void scale_kernel(float* x, int64_t ld, int64_t cols, float v) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c < cols) x[blockIdx.y * ld + c] *= v;
}

}  // namespace

void ops::scale(Stream s, F32Rows dst, int64_t rows, int64_t cols, float v) {
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
  TANDEM_LAUNCH(scale_kernel, grid, kThreads, 0, static_cast<cudaStream_t>(s))(dst.p, dst.ld, cols, v);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
