// The CPU backend's packed row layout for the 32-element block types (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0), which only its matmul reads (Backend::pack_rows, RowLayout::Packed).
//
// A row of nb blocks keeps its size and its place; inside it, the blocks' fields become
// arrays, in this order:
//   d[nb] f16 | m[nb] f16 (Q4_1, Q5_1) | qh (Q5_0, Q5_1) | qs[nb] (each block's as stored)
// qs: 16 nibble bytes a block (Q8_0: 32 codes), so the codes of a pair of blocks A, B are
// one 32-byte load: A's elements 0-15 | B's 0-15 as low nibbles, A's 16-31 | B's 16-31 as
// high nibbles, the order both kernel levels multiply pairs in (quant_q32_pairs).
// qh: per pair a 64-bit word of 16-bit parts A 0-15, B 0-15, A 16-31, B 16-31 (the fifth
// bits in that same order: one mask register on AVX-512, two 32-bit words on AVX2); an
// odd last block's 32-bit word as stored.
//
// Why: a file row puts each block's f16 scale 18-34 bytes after the last. The AVX-512
// kernel gathered 16 of them per chunk of 16 blocks and the AVX2 one assembled 8 in general
// registers; a packed row gives them in one load, and a pair's codes and bits in one each.
//
// Everything here is `static` (see quant_blocks.hpp): SIMD kernel files include it too.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"

namespace tandem::kernels::cpu::mm {

// Which types have the packed layout.
static inline bool q32_packs(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q8_0;
}

// Byte offsets of the field arrays of a packed row of nb blocks (m, qh: 0 when absent).
struct PackedQ32 {
  size_t d = 0, m = 0, qh = 0, codes = 0;
  int code_bytes = 16;  // qs bytes per block: 16 (4- and 5-bit types), 32 (Q8_0)
};
static inline PackedQ32 packed_q32(DType t, int64_t nb) {
  const size_t n = static_cast<size_t>(nb);
  PackedQ32 p;
  size_t o = 2 * n;  // d
  if (t == DType::Q4_1 || t == DType::Q5_1) p.m = o, o += 2 * n;
  if (t == DType::Q5_0 || t == DType::Q5_1) p.qh = o, o += 4 * n;
  p.codes = o;
  p.code_bytes = t == DType::Q8_0 ? 32 : 16;
  return p;
}

// The packed fifth-bit word of a pair of blocks from their file words: 16-bit parts A 0-15,
// B 0-15, A 16-31, B 16-31.
static inline uint64_t pair_qh_word(uint32_t qa, uint32_t qb) {
  const uint64_t a = qa, b = qb;
  return (a & 0xffff) | (b & 0xffff) << 16 | (a >> 16) << 32 | (b >> 16) << 48;
}

// One row of `cols` elements (a multiple of 32) between the file's layout and the packed
// one; src and dst do not overlap. pack_q32.cpp; throws std::invalid_argument for a type
// q32_packs refuses.
void pack_q32_row(DType t, const uint8_t* src, uint8_t* dst, int64_t cols);
void unpack_q32_row(DType t, const uint8_t* src, uint8_t* dst, int64_t cols);

}  // namespace tandem::kernels::cpu::mm
