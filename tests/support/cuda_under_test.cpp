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

std::vector<CudaModelCase> cuda_model_cases() {
  std::vector<CudaModelCase> v;
  TinyModelSpec s;
  v.push_back({"llama_f32", s});
  s.arch = "qwen2";
  s.weight_type = DType::Q8_0;
  s.embd_type = DType::Q4_0;
  v.push_back({"qwen2_q8_0", s});
  s = {};
  s.arch = "gemma3";
  s.n_embd = 256;
  s.n_ff = 256;
  s.n_head = 4;
  s.n_head_kv = 1;
  s.weight_type = DType::Q4_K;
  s.embd_type = DType::Q6_K;
  s.sliding_window = 5;
  v.push_back({"gemma3_q4_k", s});
  return v;
}

}  // namespace tandem::test
