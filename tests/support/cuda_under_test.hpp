// The CUDA backend the CUDA tests run on: the emulated one (kernels under the SIMT emulator,
// every CI run), or with TANDEM_CUDA_TEST_DEVICE=1 the real device (bench/gpu_check.sh), so
// the same cases run natively.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/backend.hpp"

namespace tandem::test {

std::unique_ptr<kernels::Backend> cuda_under_test(size_t arena_bytes, int64_t gemm_min_tokens = 64);

}  // namespace tandem::test
