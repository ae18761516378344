// rms_norm: dst = x / rms(x) * (w + w_offset), per row. One block of 256 threads per row;
// the sum of squares is accumulated in double like the CPU backend's (rows of thousands
// of large activations lose bits in float), in an order fixed by the row length.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_kernel(float* dst, int64_t ldd, const float* x, int64_t ldx, const float* w, int64_t cols,
                                float eps, float w_offset) {
  __shared__ double partial[kThreads / dev::kWarp];
  const float* xr = x + blockIdx.x * ldx;
  float* yr = dst + blockIdx.x * ldd;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) ss += static_cast<double>(xr[i]) * xr[i];
  ss = dev::warp_sum(ss);
  if (threadIdx.x % dev::kWarp == 0) partial[threadIdx.x / dev::kWarp] = ss;
  __syncthreads();
  double total = 0.0;
  for (int i = 0; i < kThreads / dev::kWarp; ++i) total += partial[i];
  const float inv = static_cast<float>(1.0 / sqrt(total / static_cast<double>(cols) + eps));
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) yr[i] = xr[i] * inv * (w[i] + w_offset);
}

}  // namespace

void ops::rms_norm(Stream s, F32Rows dst, const float* x, int64_t ldx, const float* w, int64_t rows, int64_t cols,
                   float eps, float w_offset) {
  if (rows == 0) return;
  TANDEM_LAUNCH(rms_norm_kernel, static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(s))
  (dst.p, dst.ld, x, ldx, w, cols, eps, w_offset);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
