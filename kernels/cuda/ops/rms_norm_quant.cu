// rms_norm_quant: rms_norm of each row, then the normed row quantized to int8 blocks of 32
// and/or 256 for the matmuls that read it (Backend::norm_matmul_shared): one launch instead
// of two or three (four with a pending post-norm residual, added to the row first as
// ops/rms_norm.cu's rms_norm_add does: dev::rms_norm_add_row). One block of 256 threads per
// row: the norm as ops/rms_norm.cu computes it (dev::rms_norm_row), then its 8 warps quantize
// the row's blocks as ops/quantize_act.cu does (dev::quantize_block): the same bits.
#include "kernels/cuda/act_rows.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

__global__ void rms_norm_quant_kernel(float* dst, int64_t ldd, float* x, int64_t ldx, const float* w, int64_t cols,
                                      float eps, float w_offset, const __grid_constant__ ops::ActQuant q32,
                                      const __grid_constant__ ops::ActQuant qk, ops::PendingAdd pending) {
  TANDEM_GRID_DEPENDENCY();
  __shared__ double partial[dev::kNormThreads / dev::kWarp];
  const int64_t t = blockIdx.x;
  if (pending.src) {
    dev::rms_norm_add_row(pending.src + t * pending.ld, pending.w, cols, pending.eps, x + t * ldx, partial);
    __syncthreads();  // the row is whole, and `partial` free again
  }
  float* yr = dst + t * ldd;
  dev::rms_norm_row(yr, x + t * ldx, w, cols, eps, w_offset, partial);
  __syncthreads();  // the normed row (global memory) is complete for every warp of the block
  const int warp = threadIdx.x / dev::kWarp;
  constexpr int warps = dev::kNormThreads / dev::kWarp;
  // Each output in turn (not through an array of their addresses, which would live in local
  // memory).
  const auto quantize = [&](const ops::ActQuant& aq) {
    if (!aq.q) return;
    const int64_t nb = cols / aq.block;
    for (int64_t b = warp; b < nb; b += warps)
      dev::quantize_block(yr + b * aq.block, aq.block, aq.q + t * cols + b * aq.block, aq.d + t * nb + b,
                          aq.s + t * (cols / 16) + b * (aq.block / 16));
  };
  quantize(q32);
  quantize(qk);
}

}  // namespace

void ops::rms_norm_quant(Stream s, F32Rows dst, float* x, int64_t ldx, const float* w, int64_t rows, int64_t cols,
                         float eps, float w_offset, const ActQuant& q32, const ActQuant& qk, const PendingAdd& pending) {
  if (rows == 0) return;
  TANDEM_LAUNCH(rms_norm_quant_kernel, static_cast<unsigned>(rows), dev::kNormThreads, 0, static_cast<cudaStream_t>(s))
  (dst.p, dst.ld, x, ldx, w, cols, eps, w_offset, q32, qk, pending);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
