// The real build's GEMM: cuBLAS on the runtime's stream, every call checked.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/gemm.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cublas: ") + what + " failed: " + cublasGetStatusString(s));
}

class CublasGemm final : public Gemm {
 public:
  explicit CublasGemm(DeviceRuntime& rt) {
    check(cublasCreate(&h_), "cublasCreate");
    check(cublasSetStream(h_, static_cast<cudaStream_t>(rt.stream())), "cublasSetStream");
    check(cublasSetMathMode(h_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");  // no TF32
  }
  ~CublasGemm() override { cublasDestroy(h_); }
  // Row-major C = A B^T is column-major C^T = B A^T: (n x k)^T... i.e. op(B)=T, op(A)=N.
  void abt_f32(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
               int64_t ldc) override {
    const float one = 1.0f, zero = 0.0f;
    check(cublasSgemm(h_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one,
                      b, static_cast<int>(ldb), a, static_cast<int>(lda), &zero, c, static_cast<int>(ldc)),
          "cublasSgemm");
  }

 private:
  cublasHandle_t h_ = nullptr;
};

}  // namespace

std::unique_ptr<Gemm> make_gemm(DeviceRuntime& rt) { return std::make_unique<CublasGemm>(rt); }

}  // namespace tandem::kernels::TANDEM_CUDA_NS
