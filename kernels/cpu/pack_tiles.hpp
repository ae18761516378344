// The CPU backend's tiled layout (RowLayout::Tiled): 16 rows of a matrix side by side, so
// that one AVX-512 VNNI instruction (vpdpbusd) multiplies 4 codes of 16 rows by the same 4
// activations. For Q4_K, Q6_K and the 32-element types; only its matmul reads it
// (Backend::pack_weight). The AVX-512 kernels multiply every such type; the AVX2 ones
// (no vpdpbusd: vpmaddubsw on each 8-row half) Q4_K, Q4_0 and Q4_1, where tiles pay there.
//
// Why, for the K-quants: a row-at-a-time kernel spends two multiply instructions per 64
// codes and token (vpmaddubsw, then vpdpwssd to apply the group scales, which differ from
// group to group along a row). With 16 rows in the lanes of one vector, the 32 (Q4_K) or 16
// (Q6_K) codes of a group are summed by plain vpdpbusd, and the group scale, which now
// varies by lane, is applied once per group with one vpmulld: about 1.25 multiplies per 64
// codes and token. Verification passes (4-9 tokens) are bound by that arithmetic, not by
// memory.
//
// A matrix's rows go in groups of 16; group g takes the bytes of its rows in the file
// (rows 16g..16g+15, so every group keeps its size and place) as one tile per block, tile
// after tile. The last R % 16 rows stay as stored. Tile fields (r = row in
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
//   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (16 x the block's bytes, one 32-element block a tile):
//     d[16] f16 | m[16] f16 (Q4_1, Q5_1) | fifth bits (Q5_0, Q5_1): 8 64-bit masks, bit
//     4r + i of mask g the fifth bit of element 4g + i | codes: 4-bit types [4 v][16 r][4 i]
//     with element 4v + i in the low nibble and 16 + 4v + i in the high one (the file's qs
//     bytes 4v..4v+3 as stored); Q8_0 [8 g][16 r][4 i], element 4g + i
//   (The 32-element types' row kernels pay a scale permute, a conversion and an FMA per
//   block pair (64 products) and token; a tile's 16 rows meet their scales as one vector:
//   a conversion and two FMAs per 512 products.)
// Everything a byte move of the file's fields; codes keep their offsets.
//
// Everything here is `static` (see quant_blocks.hpp): SIMD kernel files include it too.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"

namespace tandem::kernels::cpu::mm {

// Rows interleaved in one tile.
constexpr int kTileRows = 16;

// Which types have the tiled layout.
static inline bool has_tiles(DType t) {
  switch (t) {
    case DType::Q4_K: case DType::Q6_K: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
    case DType::Q8_0: return true;
    default: return false;
  }
}

// Byte offsets inside one tile.
namespace tile_q4k {
constexpr int d = 0, dmin = 32, scales = 64, codes = 256, size = 16 * 144;
}
namespace tile_q6k {
constexpr int d = 0, scales = 32, codes = 288, group_bytes = 192, size = 16 * 210;
}

// A 32-element type's tile (absent fields -1).
struct Q32Tile {
  int d = 0, m = -1, qh = -1, codes = 0, size = 0;
};
static constexpr Q32Tile q32_tile(DType t) {
  Q32Tile p;
  const bool has_m = t == DType::Q4_1 || t == DType::Q5_1, has_qh = t == DType::Q5_0 || t == DType::Q5_1;
  int o = 32;
  if (has_m) p.m = o, o += 32;
  if (has_qh) p.qh = o, o += 64;
  p.codes = o;
  p.size = o + (t == DType::Q8_0 ? 512 : 256);
  return p;
}

// The rows of a matrix of R rows that sit in whole groups (the rest stay as stored).
static inline int64_t tiled_rows(int64_t R) { return R / kTileRows * kTileRows; }

// 16 file rows of `cols` elements (a multiple of the block size), `src_stride` bytes apart,
// to one tiled group at dst (16 * row_bytes bytes), and row `i` of a group back to the
// file's layout. pack_tiles.cpp; throws std::invalid_argument for a type has_tiles refuses.
void tile_group(DType t, const uint8_t* src, size_t src_stride, uint8_t* dst, int64_t cols);
void untile_row(DType t, const uint8_t* group, int i, uint8_t* dst, int64_t cols);

}  // namespace tandem::kernels::cpu::mm
