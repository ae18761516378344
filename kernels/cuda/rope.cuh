// The rotation of one pair of a head by rotary embedding, shared by ops/rope.cu, the fused
// ops/attn_inputs.cu and the q/k/v projections' epilogue (qkv_epilogue.cuh) so that all round alike: the angle pos * theta^(-2i/rope_dims) in
// double as on the CPU backend, cos and sin in double rounded to float.
#pragma once
#include "kernels/cuda/common.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS::dev {

// cos and sin of pair i's angle at position pos.
__device__ __forceinline__ void rope_cs(int i, double pos, int rope_dims, float theta, float& c, float& s) {
  const double inv_freq = pow(static_cast<double>(theta), -2.0 * i / rope_dims);
  const double ang = pos * inv_freq;
  c = static_cast<float>(cos(ang)), s = static_cast<float>(sin(ang));
}
// The rotated pair (x0, x1) -> (y0, y1); one expression each, shared by every caller.
__device__ __forceinline__ float rope_first(float x0, float x1, float c, float s) { return x0 * c - x1 * s; }
__device__ __forceinline__ float rope_second(float x0, float x1, float c, float s) { return x0 * s + x1 * c; }

// Pair i (0 <= i < rope_dims / 2) of the head at v, at position pos.
__device__ __forceinline__ void rope_pair(float* v, int i, double pos, int rope_dims, float theta, bool neox) {
  const int half = rope_dims / 2;
  float c, s;
  rope_cs(i, pos, rope_dims, theta, c, s);
  const int a = neox ? i : 2 * i;
  const int b = neox ? i + half : 2 * i + 1;
  const float x0 = v[a], x1 = v[b];
  v[a] = rope_first(x0, x1, c, s);
  v[b] = rope_second(x0, x1, c, s);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev
