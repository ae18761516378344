// gated_act: dst = act(gate) * up (dev::gated: the CPU backend's formulas), one thread per
// element; gated_act_quant: the same row by row, then the row quantized to int8 blocks for
// the matmul that reads it (the down projection): one launch instead of two, the same bits.
#include "kernels/cuda/act_rows.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 256;

template <bool Gelu>
__global__ void gated_act_kernel(float* dst, int64_t ldd, const float* gate, int64_t ldg, const float* up,
                                 int64_t ldu, int64_t cols) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t r = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  const float y = dev::gated<Gelu>(gate[r * ldg + c], up[r * ldu + c]);
  dst[r * ldd + c] = y;
}

template <bool Gelu>
__global__ void gated_act_quant_kernel(float* dst, int64_t ldd, const float* gate, int64_t ldg, const float* up,
                                       int64_t ldu, int64_t cols, ops::ActQuant aq) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t r = blockIdx.x;
  float* yr = dst + r * ldd;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) yr[c] = dev::gated<Gelu>(gate[r * ldg + c], up[r * ldu + c]);
  __syncthreads();  // the row (global memory) is complete for every warp of the block
  const int64_t nb = cols / aq.block;
  for (int64_t b = threadIdx.x / dev::kWarp; b < nb; b += kThreads / dev::kWarp)
    dev::quantize_block(yr + b * aq.block, aq.block, aq.q + r * cols + b * aq.block, aq.d + r * nb + b,
                        aq.s + r * (cols / 16) + b * (aq.block / 16));
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

void ops::gated_act_quant(Stream s, Activation act, F32Rows dst, const float* gate, int64_t ldg, const float* up,
                          int64_t ldu, int64_t rows, int64_t cols, const ActQuant& aq) {
  if (rows == 0 || cols == 0) return;
  auto st = static_cast<cudaStream_t>(s);
  if (act == Activation::GeluTanh)
    TANDEM_LAUNCH(gated_act_quant_kernel<true>, static_cast<unsigned>(rows), kThreads, 0, st)
    (dst.p, dst.ld, gate, ldg, up, ldu, cols, aq);
  else
    TANDEM_LAUNCH(gated_act_quant_kernel<false>, static_cast<unsigned>(rows), kThreads, 0, st)
    (dst.p, dst.ld, gate, ldg, up, ldu, cols, aq);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
