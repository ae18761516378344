// quantize_act: activation rows to symmetric int8 blocks, bit-identical to the CPU
// backend's (kernels/cpu/act_quant.cpp): d = amax/127, q = round_half_even(x * (127/amax)),
// a block with amax <= 1e-30 is all zero. One warp per block of 32 or 256 values.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

__global__ void quantize_act_kernel(const float* x, int64_t ldx, int64_t c, int block, int8_t* q, float* d) {
  const int64_t t = blockIdx.y, b = blockIdx.x;
  const float* xb = x + t * ldx + b * block;
  float amax = 0.0f;
  for (int i = threadIdx.x; i < block; i += dev::kWarp) amax = fmaxf(amax, fabsf(xb[i]));
  amax = dev::warp_max(amax);
  const float id = amax > 1e-30f ? 127.0f / amax : 0.0f;
  int8_t* qb = q + t * c + b * block;
  for (int i = threadIdx.x; i < block; i += dev::kWarp) qb[i] = static_cast<int8_t>(__float2int_rn(xb[i] * id));
  if (threadIdx.x == 0) d[t * (c / block) + b] = amax > 1e-30f ? amax / 127.0f : 0.0f;
}

}  // namespace

void ops::quantize_act(Stream s, const float* x, int64_t ldx, int64_t n, int64_t c, int block, int8_t* q, float* d) {
  if (n == 0 || c == 0) return;
  const dim3 grid(static_cast<unsigned>(c / block), static_cast<unsigned>(n));
  TANDEM_LAUNCH(quantize_act_kernel, grid, dev::kWarp, 0, static_cast<cudaStream_t>(s))(x, ldx, c, block, q, d);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
