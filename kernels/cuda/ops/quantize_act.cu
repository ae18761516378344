// quantize_act: activation rows to symmetric int8 blocks, bit-identical to the CPU
// backend's (kernels/cpu/act_quant.cpp): d = amax/127, q = round_half_even(x * (127/amax)),
// a block with amax <= 1e-30 is all zero. One warp per block of 32 or 256 values.
#include "kernels/cuda/act_rows.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

__global__ void quantize_act_kernel(const float* x, int64_t ldx, int64_t c, int block, int8_t* q, float* d) {
  const int64_t t = blockIdx.y, b = blockIdx.x;
  dev::quantize_block(x + t * ldx + b * block, block, q + t * c + b * block, d + t * (c / block) + b);
}

}  // namespace

void ops::quantize_act(Stream s, const float* x, int64_t ldx, int64_t n, int64_t c, int block, int8_t* q, float* d) {
  if (n == 0 || c == 0) return;
  const dim3 grid(static_cast<unsigned>(c / block), static_cast<unsigned>(n));
  TANDEM_LAUNCH(quantize_act_kernel, grid, dev::kWarp, 0, static_cast<cudaStream_t>(s))(x, ldx, c, block, q, d);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
