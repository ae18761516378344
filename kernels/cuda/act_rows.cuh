// Row steps shared by ops/rms_norm.cu, ops/quantize_act.cu and their fusion
// (ops/rms_norm_quant.cu), so that a fused launch rounds exactly as the ops one by one.
#pragma once
#include "kernels/cuda/common.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS::dev {

constexpr int kNormThreads = 256;

// A row's 1 / rms from its sum of squares, and one normed element: the steps every RMS norm
// kernel shares (rms_norm_row, and the per-head norms of qkv_epilogue.cuh).
__device__ __forceinline__ float rms_inv(double sum_sq, int64_t cols, float eps) {
  return static_cast<float>(1.0 / sqrt(sum_sq / static_cast<double>(cols) + eps));
}
__device__ __forceinline__ float rms_scaled(float x, float inv, float w, float w_offset) { return x * inv * (w + w_offset); }

// y = x / rms(x) * (w + w_offset) for one row, by a block of kNormThreads threads: the sum
// of squares in double like the CPU backend's, in an order fixed by the row length: thread
// i's elements i, i + kNormThreads, ... in turn, each warp's sums by warp_sum, then the warps'
// in order.
__device__ __forceinline__ void rms_norm_row(float* yr, const float* xr, const float* w, int64_t cols, float eps,
                                             float w_offset, double* partial /* [kNormThreads / kWarp], shared */) {
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < cols; i += kNormThreads) ss += static_cast<double>(xr[i]) * xr[i];
  ss = warp_sum(ss);
  if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = ss;
  __syncthreads();
  double total = 0.0;
  for (int i = 0; i < kNormThreads / kWarp; ++i) total += partial[i];
  const float inv = rms_inv(total, cols, eps);
  for (int64_t i = threadIdx.x; i < cols; i += kNormThreads) yr[i] = rms_scaled(xr[i], inv, w[i], w_offset);
}

// The post-norm residual of one row (Gemma 3), by a block of kNormThreads threads: xr normed
// in place by w, then added to dr with ops/binary.cu's operation once the barrier has made the
// row whole. Callers need a barrier before `partial` is used again.
__device__ __forceinline__ void rms_norm_add_row(float* xr, const float* w, int64_t cols, float eps, float* dr,
                                                 double* partial /* [kNormThreads / kWarp], shared */) {
  rms_norm_row(xr, xr, w, cols, eps, 0.0f, partial);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < cols; i += kNormThreads) dr[i] = dr[i] + xr[i];
}

// act(g) * u with the CPU backend's formulas: SiLU g / (1 + e^-g), GELU (tanh form)
// 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))); expf/tanhf are the accurate library
// functions (device: <= 2 ulp), not the __expf fast path.
template <bool Gelu>
__device__ __forceinline__ float gated(float g, float u) {
  if (Gelu) {
    constexpr float kC = 0.7978845608028654f;
    return 0.5f * g * (1.0f + tanhf(kC * (g + 0.044715f * g * g * g))) * u;
  }
  return g / (1.0f + expf(-g)) * u;
}

// One block of `block` activations (a multiple of 32) to symmetric int8, by one warp
// (lane = threadIdx.x % 32), bit-identical to the CPU backend's (kernels/cpu/act_quant.cpp):
// d = amax/127, q = round_half_even(x * (127/amax)), a block with amax <= 1e-30 all zero.
// sb[g]: the sum of codes 16g..16g+15 of the block (at most 16 * 127: an int16).
__device__ __forceinline__ void quantize_block(const float* xb, int block, int8_t* qb, float* d, int16_t* sb) {
  const int lane = threadIdx.x % kWarp;
  float amax = 0.0f;
  for (int i = lane; i < block; i += kWarp) amax = fmaxf(amax, fabsf(xb[i]));
  amax = warp_max(amax);
  const float id = amax > 1e-30f ? 127.0f / amax : 0.0f;
  for (int i = lane; i < block; i += kWarp) qb[i] = static_cast<int8_t>(__float2int_rn(xb[i] * id));
  if (lane == 0) *d = amax > 1e-30f ? amax / 127.0f : 0.0f;
  __syncwarp();  // the codes every lane wrote, read back by the lane of their group
  // (qb is 16-byte aligned: blocks start at multiples of 32 codes in rows of whole blocks.)
  for (int g = lane; g < block / 16; g += kWarp) {
    uint32_t w[4];
    ld_u128_a16(reinterpret_cast<const uint8_t*>(qb + 16 * g), w);
    int sum = 0;
    for (int k = 0; k < 4; ++k) sum = __dp4a(static_cast<int>(w[k]), 0x01010101, sum);
    sb[g] = static_cast<int16_t>(sum);
  }
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev
