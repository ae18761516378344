// rope: in-place rotary embedding of x [n_tokens, n_heads, head_dim]. One block per token,
// threads over (pair, head). The angle pos * theta^(-2i/rope_dims) is computed in double
// as on the CPU backend; cos/sin in double, rounded to float.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 128;

__global__ void rope_kernel(float* x, int64_t ldx, const int32_t* positions, int n_heads, int head_dim,
                            int rope_dims, float theta, bool neox) {
  const int64_t t = blockIdx.x;
  const int half = rope_dims / 2;
  float* row = x + t * ldx;
  const double pos = static_cast<double>(positions[t]);
  for (int idx = threadIdx.x; idx < half * n_heads; idx += kThreads) {
    const int i = idx / n_heads, h = idx % n_heads;
    const double inv_freq = pow(static_cast<double>(theta), -2.0 * i / rope_dims);
    const double ang = pos * inv_freq;
    const float c = static_cast<float>(cos(ang)), s = static_cast<float>(sin(ang));
    float* v = row + static_cast<int64_t>(h) * head_dim;
    const int a = neox ? i : 2 * i;
    const int b = neox ? i + half : 2 * i + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
  }
}

}  // namespace

void ops::rope(Stream s, F32Rows x, const int32_t* positions, int64_t n_tokens, int n_heads, int head_dim,
               int rope_dims, float theta, RopeStyle style) {
  if (n_tokens == 0) return;
  TANDEM_LAUNCH(rope_kernel, static_cast<unsigned>(n_tokens), kThreads, 0, static_cast<cudaStream_t>(s))
  (x.p, x.ld, positions, n_heads, head_dim, rope_dims, theta, style == RopeStyle::NeoX);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
