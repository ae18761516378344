// Runs the engine's forward pass and the independent NumPy reference
// (tests/python/forward_ref.py) on the same GGUF file and tokens.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"

namespace tandem::test {

// Engine logits for every position of `tokens` ([n, n_vocab]), one batch, fresh cache.
std::vector<float> engine_logits(const std::string& model, const std::vector<int32_t>& tokens,
                                 DType kv_type = DType::F32, int threads = 2);
// Reference logits for every position; fails the test (and returns {}) if the script fails.
// act_quant: the reference rounds linear-layer inputs to int8 blocks exactly as the engine's
// CPU matmul does for quantized weights, so the comparison can be tight.
std::vector<float> reference_logits(const std::string& model, const std::vector<int32_t>& tokens,
                                    bool act_quant = false);

struct LogitDiff {
  double max_abs = 0;       // largest |a - b|
  double rms = 0;           // RMS of a - b
  double scale = 0;         // RMS of the reference logits
  int argmax_mismatches = 0;  // positions whose top token differs
};
LogitDiff compare_logits(const std::vector<float>& a, const std::vector<float>& ref, int64_t n_vocab);

// Success when `got` and `want` hold the same floats bit for bit (so -0 differs from 0 and a
// NaN equals only the same NaN); otherwise names the first difference as row/column of
// rows of `row_len`, both values with their bits, and how many elements differ.
::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want,
                                     int64_t row_len);

}  // namespace tandem::test
