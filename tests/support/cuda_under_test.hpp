// The CUDA backend the CUDA tests run on: the emulated one (kernels under the SIMT emulator,
// every CI run), or with TANDEM_CUDA_TEST_DEVICE=1 the real device (bench/gpu_check.sh), so
// the same cases run natively.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include <vector>

#include "kernels/backend.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem::test {

std::unique_ptr<kernels::Backend> cuda_under_test(size_t arena_bytes, int64_t gemm_min_tokens = 0);

// The tiny models the CUDA forward tests run: llama with F32 weights; qwen2 with Q8_0
// weights and Q4_0 embeddings; gemma3 with Q4_K weights, Q6_K embeddings, GQA 4:1 and a
// sliding window of 5.
struct CudaModelCase {
  const char* name;
  TinyModelSpec spec;
};
std::vector<CudaModelCase> cuda_model_cases();

}  // namespace tandem::test
