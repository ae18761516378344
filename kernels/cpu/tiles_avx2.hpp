// What the AVX2 tiled kernels share (matmul_qk_tiles_avx2.cpp, matmul_q32_tiles_avx2.cpp):
// the walk over one 16-row group's tiles for a group of tokens, and small helpers.
//
// AVX2 has 8 int32 lanes, so a 16-row tile (pack_tiles.hpp) is two halves: bytes 32h..32h+31
// of every 64-byte code vector are rows 8h..8h+7, lane r of a 256-bit vector row 8h + r.
// Without vpdpbusd, 4 codes of 8 rows meet 4 broadcast activations in vpmaddubsw (pairs of
// products as int16); the int16 results of all the code vectors of a scale group (8 for
// 4-bit codes) add up before one vpmaddwd applies the rows' scales, which on a tile vary by
// lane. Row kernels apply a scale per 4 vectors (Q4_K) and fold and reduce every row and
// token on their own; a tile folds 8 rows at once and never reduces across lanes.
// Everything is `static` or instantiated with the kernel files' own types (see
// row_groups.hpp).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/pack_tiles.hpp"
#include "kernels/cpu/simd_avx2.hpp"

namespace tandem::kernels::cpu::mm::tiles2 {

// 4 int8 activations (or 2 int16 sums) as every lane's word.
static inline __m256i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// 8 bytes (unsigned) -> 8 int32 lanes holding the int16 pair (b, b), for vpmaddwd.
static inline __m256i u8_pairs(__m128i bytes8) {
  const __m256i v = _mm256_cvtepu8_epi32(bytes8);
  return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

// 8 f16 values to floats.
static inline __m256 f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Stores the lanes of v whose bit is set in `keep` (bit r: y[r]).
static inline void store_rows(float* y, __m256 v, unsigned keep) {
  if ((keep & 0xffu) == 0xffu) return _mm256_storeu_ps(y, v);
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  for (int r = 0; r < 8; ++r)
    if (keep >> r & 1u) y[r] = tmp[r];
}

// One group of 16 rows (its tiles from gw on) against tokens t0..t0+TN-1 (tile_groups.hpp):
// K::tile<TN> adds one block's tile to acc[h][t], the floats of half h for token t; lanes
// outside `keep` are not stored. K::Toks<TN> are the tokens' activations, from K::toks.
// Weights are prefetched 4 KB ahead, as in the AVX-512 tiled kernels.
template <class K>
struct TileGroups {
  static constexpr int kGroup = 8;
  template <int TN>
  static void run(const Args& a, const uint8_t* gw, int64_t g, uint16_t keep, int64_t t0) {
    const auto x = K::template toks<TN>(a, t0);
    __m256 acc[2][TN];
    #pragma GCC unroll 8
    for (int t = 0; t < TN; ++t) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int64_t bi = 0; bi < a.xl.nb; ++bi) {
      const uint8_t* tw = gw + static_cast<size_t>(bi) * K::kBytes;
      avx2::prefetch_ahead(tw + 2048, K::kBytes);
      K::template tile<TN>(tw, x, bi, acc);
    }
    #pragma GCC unroll 8
    for (int t = 0; t < TN; ++t) {
      float* y = a.y + (t0 + t) * a.ldy + g;
      store_rows(y, acc[0][t], keep);
      store_rows(y + 8, acc[1][t], keep >> 8);
    }
  }
};

}  // namespace tandem::kernels::cpu::mm::tiles2
