// rope: in-place rotary embedding of x [n_tokens, n_heads, head_dim]. One block per token,
// threads over (pair, head). The angle pos * theta^(-2i/rope_dims) is computed in double
// as on the CPU backend; cos/sin in double, rounded to float.
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/rope.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 128;

__global__ void rope_kernel(float* x, int64_t ldx, const int32_t* positions, int n_heads, int head_dim,
                            int rope_dims, float theta, bool neox) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t t = blockIdx.x;
  const int half = rope_dims / 2;
  float* row = x + t * ldx;
  const double pos = static_cast<double>(positions[t]);
  for (int idx = threadIdx.x; idx < half * n_heads; idx += kThreads) {
    const int i = idx / n_heads, h = idx % n_heads;
    dev::rope_pair(row + static_cast<int64_t>(h) * head_dim, i, pos, rope_dims, theta, neox);
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
