// gated_act: dst = act(gate) * up, with the CPU backend's formulas: SiLU g / (1 + e^-g),
// GELU (tanh form) 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). expf/tanhf are the
// accurate library functions (device: <= 2 ulp), not the __expf fast path.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 256;

template <bool Gelu>
__global__ void gated_act_kernel(float* dst, int64_t ldd, const float* gate, int64_t ldg, const float* up,
                                 int64_t ldu, int64_t cols) {
  const int64_t r = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  const float g = gate[r * ldg + c], u = up[r * ldu + c];
  float y;
  if (Gelu) {
    constexpr float kC = 0.7978845608028654f;
    y = 0.5f * g * (1.0f + tanhf(kC * (g + 0.044715f * g * g * g))) * u;
  } else {
    y = g / (1.0f + expf(-g)) * u;
  }
  dst[r * ldd + c] = y;
}

}  // namespace

void ops::gated_act(Stream s, Activation act, F32Rows dst, const float* gate, int64_t ldg, const float* up,
                    int64_t ldu, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
  auto st = static_cast<cudaStream_t>(s);
  if (act == Activation::GeluTanh)
    TANDEM_LAUNCH(gated_act_kernel<true>, grid, kThreads, 0, st)(dst.p, dst.ld, gate, ldg, up, ldu, cols);
  else
    TANDEM_LAUNCH(gated_act_kernel<false>, grid, kThreads, 0, st)(dst.p, dst.ld, gate, ldg, up, ldu, cols);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
