// Interleaving 16 rows of a matrix into the CPU matmul's tiles and back (pack_tiles.hpp).
// Plain byte and bit moves. Packing runs once per weight at load, a loop per 16 codes;
// unpacking, which serves the scalar fallback kernel and the tests, goes element by element
// through the layout's definition, so the round-trip tests check one against the other.
#include "kernels/cpu/pack_tiles.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/quant_blocks.hpp"

namespace tandem::kernels::cpu::mm {
namespace {

constexpr int G = kTileRows;

// Where element e (0-255) of a file block keeps its code bits.
// Q4_K: 64-element chunk c uses qs bytes 32c..32c+31, low nibbles first, then high.
struct Nibble {
  int byte, shift;
};
Nibble q4k_code(int e) { return {blk::q4_k::qs + 32 * (e / 64) + e % 32, 4 * ((e % 64) / 32)}; }
// Q6_K: half h = e / 128; within it element 32k + l has its low 4 bits in ql byte
// 64h + l + 32(k & 1) (low nibble for k < 2) and its top 2 bits at bits 2k of qh[32h + l].
Nibble q6k_low(int e) {
  const int h = e / 128, k = (e % 128) / 32, l = e % 32;
  return {blk::q6_k::ql + 64 * h + l + 32 * (k & 1), 4 * (k >> 1)};
}
Nibble q6k_high(int e) {
  const int h = e / 128, k = (e % 128) / 32, l = e % 32;
  return {blk::q6_k::qh + 32 * h + l, 2 * k};
}

void put_bits(uint8_t* b, Nibble n, int width, int v) {
  const int m = ((1 << width) - 1) << n.shift;
  b[n.byte] = static_cast<uint8_t>((b[n.byte] & ~m) | ((v << n.shift) & m));
}

// One tile back to the 16 blocks it came from (blocks[r] is row r's), element by element
// from the layout's definition (pack_tiles.hpp).
void unpack_q4k(const uint8_t* tile, uint8_t* const* blocks) {
  for (int r = 0; r < G; ++r) {
    uint8_t* b = blocks[r];
    std::memcpy(b + blk::q4_k::d, tile + tile_q4k::d + 2 * r, 2);
    std::memcpy(b + blk::q4_k::dmin, tile + tile_q4k::dmin + 2 * r, 2);
    for (int k = 0; k < 12; ++k) b[blk::q4_k::scales + k] = tile[tile_q4k::scales + 16 * k + r];
    for (int j = 0; j < 8; ++j)
      for (int v = 0; v < 4; ++v)
        for (int i = 0; i < 4; ++i) {
          const uint8_t t = tile[tile_q4k::codes + 256 * j + 64 * v + 4 * r + i];
          const int lo = 32 * j + 4 * v + i;  // low nibble; the high one is element lo + 16
          put_bits(b, q4k_code(lo), 4, t & 15);
          put_bits(b, q4k_code(lo + 16), 4, t >> 4);
        }
  }
}

void unpack_q6k(const uint8_t* tile, uint8_t* const* blocks) {
  for (int r = 0; r < G; ++r) {
    uint8_t* b = blocks[r];
    std::memcpy(b + blk::q6_k::d, tile + tile_q6k::d + 2 * r, 2);
    for (int s = 0; s < 16; ++s) b[blk::q6_k::scales + s] = tile[tile_q6k::scales + 32 * (s / 2) + 2 * r + s % 2];
    for (int j = 0; j < 16; ++j) {
      const uint8_t* g = tile + tile_q6k::codes + tile_q6k::group_bytes * j;
      for (int u = 0; u < 4; ++u)
        for (int i = 0; i < 4; ++i) {
          const int e = 16 * j + 4 * u + i;
          const uint8_t n = g[(u < 2 ? 0 : 64) + 4 * r + i], h = g[128 + 4 * r + i];
          put_bits(b, q6k_low(e), 4, (n >> (4 * (u % 2))) & 15);
          put_bits(b, q6k_high(e), 2, (h >> (2 * u)) & 3);
        }
    }
  }
}

// The packers: the inverse of unpack_q4k / unpack_q6k, 16 codes a loop.
// Q4_K group j (32 elements) is nibble j % 2 of qs bytes 32(j / 2) .. +31: its first 16
// elements go to the low nibbles of the tile's 4 vectors, the next 16 to the high ones.
void pack_q4k(const uint8_t* const* blocks, uint8_t* tile) {
  for (int r = 0; r < G; ++r) {
    const uint8_t* b = blocks[r];
    std::memcpy(tile + tile_q4k::d + 2 * r, b + blk::q4_k::d, 2);
    std::memcpy(tile + tile_q4k::dmin + 2 * r, b + blk::q4_k::dmin, 2);
    for (int k = 0; k < 12; ++k) tile[tile_q4k::scales + 16 * k + r] = b[blk::q4_k::scales + k];
    for (int j = 0; j < 8; ++j) {
      const uint8_t* q = b + blk::q4_k::qs + 32 * (j / 2);
      const int sh = 4 * (j % 2);
      uint8_t* t = tile + tile_q4k::codes + 256 * j + 4 * r;
      for (int m = 0; m < 16; ++m)  // m = 4v + i
        t[64 * (m / 4) + m % 4] = static_cast<uint8_t>(((q[m] >> sh) & 15) | ((q[16 + m] >> sh) & 15) << 4);
    }
  }
}
// Q6_K group j (16 elements) lies in half h = j / 8, quarter k = (j % 8) / 2 of the block:
// low 4 bits at nibble k >> 1 of ql[64h + 32(k & 1) + l], top 2 at bits 2k of qh[32h + l],
// l = 16(j % 2) + m for its element m.
void pack_q6k(const uint8_t* const* blocks, uint8_t* tile) {
  for (int r = 0; r < G; ++r) {
    const uint8_t* b = blocks[r];
    std::memcpy(tile + tile_q6k::d + 2 * r, b + blk::q6_k::d, 2);
    for (int s = 0; s < 16; ++s) tile[tile_q6k::scales + 32 * (s / 2) + 2 * r + s % 2] = b[blk::q6_k::scales + s];
    for (int j = 0; j < 16; ++j) {
      const int h = j / 8, k = (j % 8) / 2, l0 = 16 * (j % 2);
      const uint8_t* ql = b + blk::q6_k::ql + 64 * h + 32 * (k & 1) + l0;
      const uint8_t* qh = b + blk::q6_k::qh + 32 * h + l0;
      const int lsh = 4 * (k >> 1), hsh = 2 * k;
      uint8_t* g = tile + tile_q6k::codes + tile_q6k::group_bytes * j + 4 * r;
      for (int i = 0; i < 4; ++i) {
        int low[4], high[4];
        for (int u = 0; u < 4; ++u) {
          low[u] = (ql[4 * u + i] >> lsh) & 15;
          high[u] = (qh[4 * u + i] >> hsh) & 3;
        }
        g[i] = static_cast<uint8_t>(low[0] | low[1] << 4);
        g[64 + i] = static_cast<uint8_t>(low[2] | low[3] << 4);
        g[128 + i] = static_cast<uint8_t>(high[0] | high[1] << 2 | high[2] << 4 | high[3] << 6);
      }
    }
  }
}

// 32-element types (blk::q32_fields: where a file block keeps its fields).
// Codes: 4 bytes of each row per vector, as the file stores them (a 4-bit type's qs byte j
// holds elements j and 16 + j); fifth bits: file bit e of row r to bit 4r + e % 4 of mask
// e / 4.
template <DType T>
void pack_q32t(const uint8_t* const* blocks, uint8_t* tile) {
  const blk::Q32Fields f = blk::q32_fields(T);
  const Q32Tile p = q32_tile(T);
  const int vectors = T == DType::Q8_0 ? 8 : 4;
  uint64_t masks[8] = {};
  for (int r = 0; r < G; ++r) {
    const uint8_t* b = blocks[r];
    std::memcpy(tile + p.d + 2 * r, b + f.d, 2);
    if (p.m >= 0) std::memcpy(tile + p.m + 2 * r, b + f.m, 2);
    for (int v = 0; v < vectors; ++v) std::memcpy(tile + p.codes + 64 * v + 4 * r, b + f.qs + 4 * v, 4);
    if (p.qh >= 0) {
      const uint32_t qh = blk::u32_at(b + f.qh);
      for (int g = 0; g < 8; ++g) masks[g] |= static_cast<uint64_t>((qh >> (4 * g)) & 15) << (4 * r);
    }
  }
  if (p.qh >= 0) std::memcpy(tile + p.qh, masks, sizeof masks);
}

template <DType T>
void unpack_q32t(const uint8_t* tile, uint8_t* const* blocks) {
  const blk::Q32Fields f = blk::q32_fields(T);
  const Q32Tile p = q32_tile(T);
  const int vectors = T == DType::Q8_0 ? 8 : 4;
  uint64_t masks[8] = {};
  if (p.qh >= 0) std::memcpy(masks, tile + p.qh, sizeof masks);
  for (int r = 0; r < G; ++r) {
    uint8_t* b = blocks[r];
    std::memcpy(b + f.d, tile + p.d + 2 * r, 2);
    if (p.m >= 0) std::memcpy(b + f.m, tile + p.m + 2 * r, 2);
    for (int v = 0; v < vectors; ++v) std::memcpy(b + f.qs + 4 * v, tile + p.codes + 64 * v + 4 * r, 4);
    if (p.qh >= 0) {
      uint32_t qh = 0;
      for (int e = 0; e < 32; ++e) qh |= static_cast<uint32_t>((masks[e / 4] >> (4 * r + e % 4)) & 1) << e;
      std::memcpy(b + f.qh, &qh, 4);
    }
  }
}

// A type's tile movers, and its block's elements and bytes.
struct TileKind {
  void (*pack)(const uint8_t* const*, uint8_t*);
  void (*unpack)(const uint8_t*, uint8_t* const*);
  int64_t elements = 0;
  size_t block_bytes = 0;
};
TileKind kind(DType t, int64_t cols) {
  TileKind k;
  switch (t) {
    case DType::Q4_K: k = {pack_q4k, unpack_q4k}; break;
    case DType::Q6_K: k = {pack_q6k, unpack_q6k}; break;
    case DType::Q4_0: k = {pack_q32t<DType::Q4_0>, unpack_q32t<DType::Q4_0>}; break;
    case DType::Q4_1: k = {pack_q32t<DType::Q4_1>, unpack_q32t<DType::Q4_1>}; break;
    case DType::Q5_0: k = {pack_q32t<DType::Q5_0>, unpack_q32t<DType::Q5_0>}; break;
    case DType::Q5_1: k = {pack_q32t<DType::Q5_1>, unpack_q32t<DType::Q5_1>}; break;
    case DType::Q8_0: k = {pack_q32t<DType::Q8_0>, unpack_q32t<DType::Q8_0>}; break;
    default: throw std::invalid_argument(std::string("no tiled layout for ") + dtype_name(t));
  }
  k.elements = dtype_info(t).block_size;
  k.block_bytes = dtype_info(t).type_size;
  if (cols % k.elements != 0) throw std::invalid_argument("tiled rows need whole blocks");
  return k;
}

}  // namespace

void tile_group(DType t, const uint8_t* src, size_t src_stride, uint8_t* dst, int64_t cols) {
  const TileKind k = kind(t, cols);
  const size_t tile = G * k.block_bytes;
  const uint8_t* rows[G];
  for (int64_t b = 0; b < cols / k.elements; ++b) {
    const size_t at = static_cast<size_t>(b) * k.block_bytes;
    for (int r = 0; r < G; ++r) rows[r] = src + static_cast<size_t>(r) * src_stride + at;
    k.pack(rows, dst + tile * static_cast<size_t>(b));
  }
}

void untile_row(DType t, const uint8_t* group, int i, uint8_t* dst, int64_t cols) {
  const TileKind k = kind(t, cols);
  if (i < 0 || i >= G) throw std::invalid_argument("row outside its group");
  const size_t tile = G * k.block_bytes;
  // All 16 blocks of a tile are rebuilt (the moves are per tile); row i's is kept.
  std::vector<uint8_t> blocks(tile);
  uint8_t* rows[G];
  for (int r = 0; r < G; ++r) rows[r] = blocks.data() + static_cast<size_t>(r) * k.block_bytes;
  for (int64_t b = 0; b < cols / k.elements; ++b) {
    k.unpack(group + tile * static_cast<size_t>(b), rows);
    std::memcpy(dst + static_cast<size_t>(b) * k.block_bytes, rows[i], k.block_bytes);
  }
}

}  // namespace tandem::kernels::cpu::mm
