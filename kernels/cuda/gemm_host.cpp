// The emulated build's GEMM: "device" memory is host memory, so a plain loop.
#include "kernels/cuda/gemm.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

// The host GEMM: plain loops, k innermost in order.
class HostGemm final : public Gemm {
 public:
  void abt_f32(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
               int64_t ldc) override {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float s = 0.0f;
        for (int64_t p = 0; p < k; ++p) s += a[i * lda + p] * b[j * ldb + p];
        c[i * ldc + j] = s;
      }
  }
};

}  // namespace

std::unique_ptr<Gemm> make_gemm(DeviceRuntime&) { return std::make_unique<HostGemm>(); }

}  // namespace tandem::kernels::TANDEM_CUDA_NS
