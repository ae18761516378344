#include "tests/support/cuda_under_test.hpp"

#include <cstdlib>

#include "kernels/backend_factory.hpp"

namespace tandem::test {

std::unique_ptr<kernels::Backend> cuda_under_test(size_t arena_bytes, int64_t gemm_min_tokens) {
  const char* e = std::getenv("TANDEM_CUDA_TEST_DEVICE");
  if (e && *e == '1') {
    kernels::BackendOptions o;
    o.device = "cuda";
    o.gpu_mem_bytes = arena_bytes;
    o.gemm_min_tokens = gemm_min_tokens;
    return kernels::make_backend(o);
  }
  return kernels::make_emulated_cuda_backend(arena_bytes, gemm_min_tokens);
}

}  // namespace tandem::test
