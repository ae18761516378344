// The best element of a thread block under a strict total order, for the kernels that pick
// tokens in rounds (ops/top_rows.cu, ops/logprob_rows.cu). An element type E has
// `bool valid() const` (false: no element), and two functions found next to it:
// `bool before(E a, E b)` (a ranks before b) and `E shfl(E v, int lane_mask)` (the
// __shfl_xor_sync of each field). The reduction's order is fixed (the warps' butterflies, then
// the warps in order), and with a total order any order gives the same element anyway.
#pragma once
#include "kernels/cuda/common.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS::dev {

template <class E>
__device__ __forceinline__ E pick(E a, E b) {
  if (!b.valid()) return a;
  if (!a.valid()) return b;
  return before(b, a) ? b : a;
}

// The block's best (every thread gets it); kThreads a multiple of the warp size.
template <int kThreads, class E>
__device__ E block_best(E v) {
  constexpr int kWarps = kThreads / kWarp;
  __shared__ E sh[kWarps];
  for (int o = 16; o >= 1; o /= 2) v = pick(v, shfl(v, o));
  if (threadIdx.x % kWarp == 0) sh[threadIdx.x / kWarp] = v;
  __syncthreads();
  E r = sh[0];
  for (int w = 1; w < kWarps; ++w) r = pick(r, sh[w]);
  __syncthreads();  // sh may be written again by the next round
  return r;
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev
