// Gated activations of one row, y = act(g) * u, behind CpuBackend::gated_act: a plain
// scalar twin (activation.cpp, std::exp / std::tanh: the reference, and what the scalar
// level runs) and an AVX2 version (activation_avx2.cpp, the vector exp of simd_avx2.hpp).
// Each element's result depends on its g and u alone, never on its place in the row.
#pragma once
#include <cstdint>

#include "kernels/backend.hpp"

namespace tandem::kernels::cpu {

using GatedActFn = void (*)(const float* g, const float* u, float* y, int64_t n, Activation act);

void gated_act_row_scalar(const float* g, const float* u, float* y, int64_t n, Activation act);
void gated_act_row_avx2(const float* g, const float* u, float* y, int64_t n, Activation act);

}  // namespace tandem::kernels::cpu
