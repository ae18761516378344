// The one interface the GEMM path of the matmul goes through (CudaBackend::matmul for
// calls of gemm_min_tokens tokens or more): cuBLAS in the real build (gemm_cublas.cpp), a
// plain host loop in the emulated one (gemm_host.cpp).
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/cuda/runtime.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {

// C = A * B^T for row-major F32 matrices: A [m, k] (lda), B [n, k] (ldb), C [m, n] (ldc).
// cuBLAS SGEMM without TF32 (CUBLAS_PEDANTIC_MATH) on the device's stream; the host loop
// sums k in order.
class Gemm {
 public:
  virtual ~Gemm() = default;
  virtual void abt_f32(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                       float* c, int64_t ldc) = 0;
};
std::unique_ptr<Gemm> make_gemm(DeviceRuntime& rt);

}  // namespace tandem::kernels::TANDEM_CUDA_NS
