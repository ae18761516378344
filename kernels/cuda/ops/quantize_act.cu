// quantize_act: activation rows to symmetric int8 blocks, bit-identical to the CPU
// backend's (kernels/cpu/act_quant.cpp): d = amax/127, q = round_half_even(x * (127/amax)),
// a block with amax <= 1e-30 is all zero; and the sum of each 16 codes. One warp per block of
// 32 or 256 values.
#include "kernels/cuda/act_rows.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

__global__ void quantize_act_kernel(const float* x, int64_t ldx, int64_t c, const __grid_constant__ ops::ActQuant aq) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t t = blockIdx.y, b = blockIdx.x;
  const int block = aq.block;
  dev::quantize_block(x + t * ldx + b * block, block, aq.q + t * c + b * block, aq.d + t * (c / block) + b,
                      aq.s + t * (c / 16) + b * (block / 16));
}

}  // namespace

void ops::quantize_act(Stream s, const float* x, int64_t ldx, int64_t n, int64_t c, const ActQuant& aq) {
  if (n == 0 || c == 0) return;
  const dim3 grid(static_cast<unsigned>(c / aq.block), static_cast<unsigned>(n));
  TANDEM_LAUNCH(quantize_act_kernel, grid, dev::kWarp, 0, static_cast<cudaStream_t>(s))(x, ldx, c, aq);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
