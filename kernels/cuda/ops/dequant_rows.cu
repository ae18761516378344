// dequant_rows: weight rows [r0, r0 + nr) dequantized to a row-major F32 tile, for the
// GEMM path of the matmul (prefill). Element-wise with the CPU reference's operations, so
// the tile holds exactly dequantize_row_ref's values.
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

template <int T>
__global__ void dequant_rows_kernel(const uint8_t* w, size_t w_stride, int64_t r0, int64_t cols, float* tile) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t r = blockIdx.x;
  const uint8_t* wr = w + static_cast<size_t>(r0 + r) * w_stride;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) tile[r * cols + c] = dev::dequant_row_elem<T>(wr, c);
}

}  // namespace

void ops::dequant_rows(Stream s, DType t, const uint8_t* w, size_t w_stride, int64_t r0, int64_t nr, int64_t cols,
                       float* tile) {
  if (nr == 0) return;
  dev::dispatch_wtype(t, [&](auto wt) {
    TANDEM_LAUNCH(dequant_rows_kernel<decltype(wt)::value>, static_cast<unsigned>(nr), 256, 0,
                  static_cast<cudaStream_t>(s))(w, w_stride, r0, cols, tile);
  });
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
