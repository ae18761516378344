// Interleaving 16 rows of Q4_K or Q6_K into the CPU matmul's tiles and back (pack_qk.hpp).
// Plain byte and bit moves, run once per weight at load; unpacking serves the scalar
// fallback kernel and the tests.
#include "kernels/cpu/pack_qk.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/quant_blocks.hpp"

namespace tandem::kernels::cpu::mm {
namespace {

constexpr int G = kQkGroupRows;

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

int bits_at(const uint8_t* b, Nibble n, int width) { return (b[n.byte] >> n.shift) & ((1 << width) - 1); }
void put_bits(uint8_t* b, Nibble n, int width, int v) {
  const int m = ((1 << width) - 1) << n.shift;
  b[n.byte] = static_cast<uint8_t>((b[n.byte] & ~m) | ((v << n.shift) & m));
}

// One tile <-> the 16 blocks it comes from (blocks[r] is row r's block). `pack` says which
// way; every field is moved either way by the same loops.
void q4k_tile(uint8_t* const* blocks, uint8_t* tile, bool pack) {
  auto move = [&](uint8_t* file, uint8_t* t, int n) {
    if (pack) std::memcpy(t, file, static_cast<size_t>(n));
    else std::memcpy(file, t, static_cast<size_t>(n));
  };
  for (int r = 0; r < G; ++r) {
    uint8_t* b = blocks[r];
    move(b + blk::q4_k::d, tile + tile_q4k::d + 2 * r, 2);
    move(b + blk::q4_k::dmin, tile + tile_q4k::dmin + 2 * r, 2);
    for (int k = 0; k < 12; ++k) move(b + blk::q4_k::scales + k, tile + tile_q4k::scales + 16 * k + r, 1);
    for (int j = 0; j < 8; ++j)
      for (int v = 0; v < 4; ++v)
        for (int i = 0; i < 4; ++i) {
          uint8_t& t = tile[tile_q4k::codes + 256 * j + 64 * v + 4 * r + i];
          const int lo = 32 * j + 4 * v + i, hi = lo + 16;
          if (pack) {
            t = static_cast<uint8_t>(bits_at(b, q4k_code(lo), 4) | bits_at(b, q4k_code(hi), 4) << 4);
          } else {
            put_bits(b, q4k_code(lo), 4, t & 15);
            put_bits(b, q4k_code(hi), 4, t >> 4);
          }
        }
  }
}

void q6k_tile(uint8_t* const* blocks, uint8_t* tile, bool pack) {
  for (int r = 0; r < G; ++r) {
    uint8_t* b = blocks[r];
    uint8_t* d = tile + tile_q6k::d + 2 * r;
    if (pack) std::memcpy(d, b + blk::q6_k::d, 2);
    else std::memcpy(b + blk::q6_k::d, d, 2);
    for (int s = 0; s < 16; ++s) {
      uint8_t& t = tile[tile_q6k::scales + 32 * (s / 2) + 2 * r + s % 2];
      if (pack) t = b[blk::q6_k::scales + s];
      else b[blk::q6_k::scales + s] = t;
    }
    for (int j = 0; j < 16; ++j) {
      uint8_t* g = tile + tile_q6k::codes + tile_q6k::group_bytes * j;
      for (int i = 0; i < 4; ++i) {
        uint8_t& n0 = g[4 * r + i];
        uint8_t& n1 = g[64 + 4 * r + i];
        uint8_t& h = g[128 + 4 * r + i];
        if (pack) h = 0;
        for (int u = 0; u < 4; ++u) {
          const int e = 16 * j + 4 * u + i;
          uint8_t& n = u < 2 ? n0 : n1;
          const Nibble at{0, 4 * (u % 2)};
          if (pack) {
            put_bits(&n, at, 4, bits_at(b, q6k_low(e), 4));
            h = static_cast<uint8_t>(h | bits_at(b, q6k_high(e), 2) << (2 * u));
          } else {
            put_bits(b, q6k_low(e), 4, bits_at(&n, at, 4));
            put_bits(b, q6k_high(e), 2, (h >> (2 * u)) & 3);
          }
        }
      }
    }
  }
}

struct TileKind {
  int block_bytes;
  void (*tile)(uint8_t* const*, uint8_t*, bool);
};
TileKind kind(DType t) {
  switch (t) {
    case DType::Q4_K: return {blk::q4_k::size, q4k_tile};
    case DType::Q6_K: return {blk::q6_k::size, q6k_tile};
    default: throw std::invalid_argument(std::string("no interleaved layout for ") + dtype_name(t));
  }
}

}  // namespace

void pack_qk_group(DType t, const uint8_t* src, size_t src_stride, uint8_t* dst, int64_t cols) {
  const TileKind k = kind(t);
  if (cols % 256 != 0) throw std::invalid_argument("interleaved rows need a multiple of 256 elements");
  const size_t tile = static_cast<size_t>(G * k.block_bytes);
  uint8_t* rows[G];
  for (int64_t b = 0; b < cols / 256; ++b) {
    // The tile functions move both ways, so they take writable block pointers; packing
    // only reads them.
    for (int r = 0; r < G; ++r)
      rows[r] = const_cast<uint8_t*>(src + static_cast<size_t>(r) * src_stride + static_cast<size_t>(b * k.block_bytes));
    k.tile(rows, dst + tile * static_cast<size_t>(b), true);
  }
}

void unpack_qk_row(DType t, const uint8_t* group, int i, uint8_t* dst, int64_t cols) {
  const TileKind k = kind(t);
  if (cols % 256 != 0) throw std::invalid_argument("interleaved rows need a multiple of 256 elements");
  if (i < 0 || i >= G) throw std::invalid_argument("row outside its group");
  const size_t tile = static_cast<size_t>(G * k.block_bytes);
  // All 16 blocks of a tile are rebuilt (the moves are per tile); row i's is kept. The
  // tile is copied because the tile functions take it writable (packing writes it).
  std::vector<uint8_t> blocks(tile), copy(tile);
  uint8_t* rows[G];
  for (int r = 0; r < G; ++r) rows[r] = blocks.data() + static_cast<size_t>(r * k.block_bytes);
  for (int64_t b = 0; b < cols / 256; ++b) {
    std::memcpy(copy.data(), group + tile * static_cast<size_t>(b), tile);
    k.tile(rows, copy.data(), false);
    std::memcpy(dst + static_cast<size_t>(b * k.block_bytes), rows[i], static_cast<size_t>(k.block_bytes));
  }
}

}  // namespace tandem::kernels::cpu::mm
