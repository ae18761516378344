// Packing rows of the 32-element block types into the CPU matmul's layout and back
// (pack_q32.hpp). Plain byte moves: run once per weight at load; unpacking serves the
// scalar fallback kernel and the tests.
#include "kernels/cpu/pack_q32.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/quant_blocks.hpp"

namespace tandem::kernels::cpu::mm {
namespace {

blk::Q32Fields file_block(DType t) {
  if (!q32_packs(t)) throw std::invalid_argument(std::string("no packed row layout for ") + dtype_name(t));
  return blk::q32_fields(t);
}

// Moves every field between a file row (blocks) and a packed row (arrays); `pack` says
// which way. Only the fifth bits of block pairs are re-ordered; the rest is copied.
void convert(DType t, const uint8_t* src, uint8_t* dst, int64_t cols, bool pack) {
  const blk::Q32Fields f = file_block(t);
  if (cols % 32 != 0) throw std::invalid_argument("packed rows need a multiple of 32 elements");
  const int64_t nb = cols / 32;
  const PackedQ32 p = packed_q32(t, nb);
  // One field of block b: n bytes at file offset `at`, packed offset `to`.
  auto move = [&](int64_t b, int at, size_t to, int n) {
    const size_t fo = static_cast<size_t>(b * f.bytes + at);
    if (pack) std::memcpy(dst + to, src + fo, static_cast<size_t>(n));
    else std::memcpy(dst + fo, src + to, static_cast<size_t>(n));
  };
  for (int64_t b = 0; b < nb; ++b) {
    const size_t u = static_cast<size_t>(b);
    move(b, f.d, p.d + 2 * u, 2);
    if (f.m >= 0) move(b, f.m, p.m + 2 * u, 2);
    move(b, f.qs, p.codes + static_cast<size_t>(p.code_bytes) * u, p.code_bytes);
  }
  if (f.qh < 0) return;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {  // a pair's word: 16-bit parts A lo, B lo, A hi, B hi
    const size_t fa = static_cast<size_t>(b * f.bytes + f.qh), fb = fa + static_cast<size_t>(f.bytes);
    const size_t to = p.qh + 4 * static_cast<size_t>(b);
    if (pack) {
      const uint64_t w = pair_qh_word(blk::u32_at(src + fa), blk::u32_at(src + fb));
      std::memcpy(dst + to, &w, 8);
    } else {
      uint64_t w;
      std::memcpy(&w, src + to, 8);
      const auto qa = static_cast<uint32_t>((w & 0xffff) | ((w >> 32) & 0xffff) << 16);
      const auto qb = static_cast<uint32_t>(((w >> 16) & 0xffff) | (w >> 48) << 16);
      std::memcpy(dst + fa, &qa, 4);
      std::memcpy(dst + fb, &qb, 4);
    }
  }
  if (b < nb) move(b, f.qh, p.qh + 4 * static_cast<size_t>(b), 4);  // the odd last block's word as stored
}

}  // namespace

void pack_q32_row(DType t, const uint8_t* src, uint8_t* dst, int64_t cols) { convert(t, src, dst, cols, true); }
void unpack_q32_row(DType t, const uint8_t* src, uint8_t* dst, int64_t cols) { convert(t, src, dst, cols, false); }

}  // namespace tandem::kernels::cpu::mm
