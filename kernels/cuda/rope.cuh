// The rotation of one pair of a head by rotary embedding, shared by ops/rope.cu and the fused
// ops/attn_inputs.cu so that both round alike: the angle pos * theta^(-2i/rope_dims) in
// double as on the CPU backend, cos and sin in double rounded to float.
#pragma once
#include "kernels/cuda/common.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS::dev {

// Pair i (0 <= i < rope_dims / 2) of the head at v, at position pos.
__device__ __forceinline__ void rope_pair(float* v, int i, double pos, int rope_dims, float theta, bool neox) {
  const int half = rope_dims / 2;
  const double inv_freq = pow(static_cast<double>(theta), -2.0 * i / rope_dims);
  const double ang = pos * inv_freq;
  const float c = static_cast<float>(cos(ang)), s = static_cast<float>(sin(ang));
  const int a = neox ? i : 2 * i;
  const int b = neox ? i + half : 2 * i + 1;
  const float x0 = v[a], x1 = v[b];
  v[a] = x0 * c - x1 * s;
  v[b] = x0 * s + x1 * c;
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev
