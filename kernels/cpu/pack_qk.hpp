// The CPU backend's interleaved layout for Q4_K and Q6_K weights: 16 rows side by side, so
// that one AVX-512 VNNI instruction (vpdpbusd) multiplies 4 codes of 16 rows by the same 4
// activations. Only its matmul reads it (Backend::pack_weight, RowLayout::Packed).
//
// Why: a row-at-a-time K-quant kernel spends two multiply instructions per 64 codes and
// token (vpmaddubsw, then vpdpwssd to apply the group scales, which differ from group to
// group along a row). With 16 rows in the lanes of one vector, the 32 (Q4_K) or 16 (Q6_K)
// codes of a group are summed by plain vpdpbusd, and the group scale, which now varies by
// lane, is applied once per group with one vpmulld: about 1.25 multiplies per 64 codes and
// token. Verification passes (4-9 tokens) are bound by that arithmetic, not by memory.
//
// A matrix's rows go in groups of 16; group g takes the bytes of its rows in the file
// (rows 16g..16g+15, so every group keeps its size and place) as one tile per 256-element
// block, tile after tile. The last R % 16 rows stay as stored. Tile fields (r = row in
// the group, 0-15):
//   Q4_K (16 x 144 bytes):
//     d[16] f16 | dmin[16] f16 | scales[12][16] (byte k of row r's 12 packed 6-bit scale
//     bytes at 16k + r) | codes[8 groups j][4 v][16 r][4 i]: low nibble = code of element
//     32j + 4v + i, high nibble = element 32j + 16 + 4v + i
//   Q6_K (16 x 210 bytes):
//     d[16] f16 | scales[8 p][16 r][2] (int8 scales 2p, 2p+1 of row r side by side: one
//     int16 pair a lane once sign-extended) | per group j of 16 elements: N0[16 r][4 i],
//     N1[16 r][4 i], H[16 r][4 i]: low 4 bits of element 16j + 4u + i in N0 (u = 0 low
//     nibble, 1 high) and N1 (u = 2 low, 3 high); its top 2 bits at bits 2u, 2u+1 of H
// Everything a byte move of the file's fields; codes keep their +32 (Q6_K) offset.
//
// Everything here is `static` (see quant_blocks.hpp): SIMD kernel files include it too.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"

namespace tandem::kernels::cpu::mm {

// Rows interleaved in one tile.
constexpr int kQkGroupRows = 16;

// Which K-quant types have the interleaved layout.
static inline bool qk_packs(DType t) { return t == DType::Q4_K || t == DType::Q6_K; }

// Byte offsets inside one tile.
namespace tile_q4k {
constexpr int d = 0, dmin = 32, scales = 64, codes = 256, size = 16 * 144;
}
namespace tile_q6k {
constexpr int d = 0, scales = 32, codes = 288, group_bytes = 192, size = 16 * 210;
}

// The rows of a matrix of R rows that sit in whole groups (the rest stay as stored).
static inline int64_t qk_grouped_rows(int64_t R) { return R / kQkGroupRows * kQkGroupRows; }

// 16 file rows of `cols` elements (a multiple of 256), `src_stride` bytes apart, to one
// interleaved group at dst (16 * row_bytes bytes), and row `i` of a group back to the
// file's layout. pack_qk.cpp; throws std::invalid_argument for a type qk_packs refuses.
void pack_qk_group(DType t, const uint8_t* src, size_t src_stride, uint8_t* dst, int64_t cols);
void unpack_qk_row(DType t, const uint8_t* group, int i, uint8_t* dst, int64_t cols);

}  // namespace tandem::kernels::cpu::mm
