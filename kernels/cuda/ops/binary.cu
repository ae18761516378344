// add / mul with one-row broadcast of b. One thread per element (rows x cols grid).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 256;

template <bool Mul>
__global__ void binary_kernel(float* dst, int64_t ldd, const float* a, int64_t lda, const float* b, int64_t ldb,
                              int64_t cols) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t r = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  const float x = a[r * lda + c], y = b[r * ldb + c];
  dst[r * ldd + c] = Mul ? x * y : x + y;
}

}  // namespace

void ops::binary(Stream s, Binary op, F32Rows dst, const float* a, int64_t lda, const float* b, int64_t ldb,
                 int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
  if (op == Binary::Mul)
    TANDEM_LAUNCH(binary_kernel<true>, grid, kThreads, 0, static_cast<cudaStream_t>(s))(dst.p, dst.ld, a, lda, b, ldb, cols);
  else
    TANDEM_LAUNCH(binary_kernel<false>, grid, kThreads, 0, static_cast<cudaStream_t>(s))(dst.p, dst.ld, a, lda, b, ldb, cols);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
