// The orders in which the AVX-512 K-quant kernels read the 32-element chunks of a block
// (matmul_qk_avx512.cpp decodes code vector k as natural chunks order[2k], order[2k+1], and
// its activations are stored in the same order). Shared with the interleaved kernels
// (matmul_qk_packed_avx512.cpp), which read the same activations.
#pragma once

namespace tandem::kernels::cpu::mm::qk512 {

constexpr int kNatural[8] = {0, 1, 2, 3, 4, 5, 6, 7};
constexpr int kNibbles[8] = {0, 2, 1, 3, 4, 6, 5, 7};  // Q4_K, Q5_K: qs bytes 0-63 and 64-127
constexpr int kCrumbs[8] = {0, 4, 1, 5, 2, 6, 3, 7};   // Q2_K, Q3_K: bit pairs of qs bytes

}  // namespace tandem::kernels::cpu::mm::qk512
