// Where the AVX2 activation quantizers (act_quant_avx2.cpp) store natural element e of a
// token's int8 codes, for the tiled kernels, which read 4 consecutive elements (4-aligned) as
// one broadcast word: every such run stays contiguous in each of these orders. The row
// kernels read whole vectors in the same orders (their weights are reordered to match), and
// a tiled matrix's last R % 16 rows go to them, so the tiled kernels of a type share its
// row kernel's activations. Positions are within the token's row of codes.
// Everything is `static` (see quant_blocks.hpp): SIMD kernel files include it.
#pragma once
#include <cstdint>

#include "kernels/dtype.hpp"

namespace tandem::kernels::cpu::mm::act_order {

// Q4_K, Q5_K (quant_qk_x4): each 128 elements as tr4x64 of their four 32-element groups;
// 8-byte unit k of group g (elements 32g + 8k ..) goes to 32k + 8g.
static constexpr int64_t x4(int64_t e) {
  const int64_t base = e / 128 * 128, r = e % 128;
  return base + 32 * ((r % 32) / 8) + 8 * (r / 32) + r % 8;
}

// Q2_K, Q3_K, Q6_K (quant_qk_x2): each 64 elements as pair64 of their two 32-element
// vectors v; unit k of v goes to 32 (k % 2) + 16 (k / 2) + 8 v.
static constexpr int64_t x2(int64_t e) {
  const int64_t base = e / 64 * 64, r = e % 64, v = r / 32, k = (r % 32) / 8;
  return base + 32 * (k % 2) + 16 * (k / 2) + 8 * v + r % 8;
}

// Element e (0-31) of block b of nb for the 32-element types: Q8_0 natural; Q4_0, Q4_1,
// Q5_0, Q5_1 (quant_q32_pairs) in block pairs A, B stored as A 0-15, B 0-15, A 16-31,
// B 16-31, an odd last block natural.
static constexpr int64_t q32(DType t, int64_t b, int e, int64_t nb) {
  if (t == DType::Q8_0 || (b == nb - 1 && nb % 2 == 1)) return 32 * b + e;
  return 64 * (b / 2) + 16 * (b % 2) + (e < 16 ? e : 16 + e);
}

}  // namespace tandem::kernels::cpu::mm::act_order
