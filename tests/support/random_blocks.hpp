// Random but well-formed weight data of any supported type, for tests and tiny fixture
// models: quantized blocks get random codes and small finite scales, never NaN/Inf.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/dtype.hpp"

namespace tandem::test {

// n_elements must be a multiple of the type's block size. Dequantized values are of the
// order of `scale`.
std::vector<uint8_t> random_blocks(DType t, int64_t n_elements, uint64_t seed, float scale = 1.0f);

}  // namespace tandem::test
