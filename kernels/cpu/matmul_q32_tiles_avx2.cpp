// AVX2 kernels for Q4_0 and Q4_1 in 16-row tiles (pack_tiles.hpp), taken as two halves of
// 8 rows (tiles_avx2.hpp): lane r of every vector is row 8h + r.
//
// A tile is one block of the 16 rows. Per half and token, 8 vpmaddubsw multiply 4 codes of
// the 8 rows by 4 broadcast activations; their int16 pair sums all add up (each lane <=
// 8*2*15*127 = 30480) before one vpmaddwd with ones makes them the rows' int32 block sums.
// One conversion and two FMAs then apply the rows' scales (a vector, one per lane) and the
// offset or min, as in the AVX-512 tiled kernels (matmul_q32_tiles_avx512.cpp):
//   y += d_w * (d_x * isum - 8 * s)             (Q4_0)
//   y += d_w * (d_x * isum) + m_w * s           (Q4_1)
// The packed row kernels (matmul_q32_avx2.cpp) pay a conversion and an FMA per row, block
// and token, and a reduction per row and token.
//
// The other 32-element types keep their packed rows on AVX2. Q8_0's signed codes need
// vpsignb and a vpmaddwd per vector, no better than its rows. Q5_0 and Q5_1 expand their
// fifth bits (one 64-bit mask per 4 elements of the 16 rows) with 5 instructions per
// vector, which only pays from about 4 tokens on: tiles measured 9% slower than packed rows
// for one token, the draft's usual pass, and 15% faster at 8 (bench_matmul, 8960x1536,
// Zen 4 run at the AVX2 level).
//
// Rows after the last whole group are stored as in the file and go to the row kernels,
// whose activations (pair order, act_order.hpp) these kernels share.
#include "kernels/cpu/act_order.hpp"
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/pack_tiles.hpp"
#include "kernels/cpu/simd_avx2.hpp"
#include "kernels/cpu/tile_groups.hpp"
#include "kernels/cpu/tiles_avx2.hpp"

// Float rounding exactly as written (-ffp-contract=off, kernels/CMakeLists.txt).

namespace tandem::kernels::cpu::mm {
namespace {

using namespace avx2;
using namespace tiles2;
using u8 = uint8_t;

template <DType T>
struct TileQ32 {
  static constexpr Q32Tile kTile = q32_tile(T);
  static constexpr int kBytes = kTile.size;
  static constexpr bool kMin = T == DType::Q4_1;
  static constexpr float kOffset = 8.0f;  // Q4_0: code 0's value is -8 d

  template <int TN>
  struct Toks {
    const int8_t* q[TN];
    const float* d[TN];
    const float* s[TN];
    int64_t nb;
  };
  template <int TN>
  static Toks<TN> toks(const Args& a, int64_t t0) {
    Toks<TN> x;
    #pragma GCC unroll 8
    for (int t = 0; t < TN; ++t) {
      const u8* row = a.xq + static_cast<size_t>(t0 + t) * a.xl.row_bytes;
      x.q[t] = act_q(row);
      x.d[t] = act_d(row, a.xl);
      x.s[t] = act_s(row, a.xl);
    }
    x.nb = a.xl.nb;
    return x;
  }

  // Where code vector k's 4 activations are, from the block's first: in a pair of blocks,
  // or natural (an odd last block). Constants, so the loads take immediate offsets.
  template <bool Natural>
  static constexpr int kOff[8] = {
      static_cast<int>(act_order::q32(T, 0, 0, Natural ? 1 : 2)),  static_cast<int>(act_order::q32(T, 0, 4, Natural ? 1 : 2)),
      static_cast<int>(act_order::q32(T, 0, 8, Natural ? 1 : 2)),  static_cast<int>(act_order::q32(T, 0, 12, Natural ? 1 : 2)),
      static_cast<int>(act_order::q32(T, 0, 16, Natural ? 1 : 2)), static_cast<int>(act_order::q32(T, 0, 20, Natural ? 1 : 2)),
      static_cast<int>(act_order::q32(T, 0, 24, Natural ? 1 : 2)), static_cast<int>(act_order::q32(T, 0, 28, Natural ? 1 : 2))};

  template <int TN>
  static inline void tile(const u8* w, const Toks<TN>& x, int64_t b, __m256 (*acc)[TN]) {
    const int64_t base = act_order::q32(T, b, 0, x.nb);
    if (b == x.nb - 1 && x.nb % 2 == 1) tile_at<TN, true>(w, x, b, base, acc);
    else tile_at<TN, false>(w, x, b, base, acc);
  }

  template <int TN, bool Natural>
  static inline void tile_at(const u8* w, const Toks<TN>& x, int64_t b, int64_t base, __m256 (*acc)[TN]) {
    constexpr const int* off = kOff<Natural>;
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; ++h) {
      // Code vector k: elements 4k..4k+3 of the 8 rows.
      __m256i c[8];
      for (int v = 0; v < 4; ++v) {
        const __m256i z = loadu(w + kTile.codes + 64 * v + 32 * h);
        c[v] = _mm256_and_si256(z, m4);
        c[4 + v] = _mm256_and_si256(_mm256_srli_epi16(z, 4), m4);
      }
      const __m256 dw = f16x8(w + kTile.d + 16 * h);
      __m256 mw = _mm256_setzero_ps();
      if constexpr (kMin) mw = f16x8(w + kTile.m + 16 * h);
      #pragma GCC unroll 8
      for (int t = 0; t < TN; ++t) {
        const int8_t* q = x.q[t] + base;
        __m256i s0 = _mm256_maddubs_epi16(c[0], bcast32(q + off[0]));
        __m256i s1 = _mm256_maddubs_epi16(c[4], bcast32(q + off[4]));
        #pragma GCC unroll 4
        for (int k = 1; k < 4; ++k) {
          s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(c[k], bcast32(q + off[k])));
          s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(c[4 + k], bcast32(q + off[4 + k])));
        }
        const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones));
        const float dx = x.d[t][b], s = x.s[t][b];
        if constexpr (kMin) {
          acc[h][t] = _mm256_fmadd_ps(_mm256_mul_ps(f, _mm256_set1_ps(dx)), dw, acc[h][t]);
          acc[h][t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(s), acc[h][t]);
        } else {
          const __m256 v = _mm256_fmadd_ps(f, _mm256_set1_ps(dx), _mm256_set1_ps(-kOffset * s));
          acc[h][t] = _mm256_fmadd_ps(v, dw, acc[h][t]);
        }
      }
    }
  }
};

// A RowsFn (tile_groups.hpp): whole groups here, the rows after them by the row kernel.
template <DType T>
void rows_tiles(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  rows_by_tiles<TileGroups<TileQ32<T>>>(a, r0, r1, t0, t1, avx2_rows_q32(a.wt));
}

}  // namespace

RowsFn avx2_rows_q32_tiles(DType t) {
  switch (t) {
    case DType::Q4_0: return rows_tiles<DType::Q4_0>;
    case DType::Q4_1: return rows_tiles<DType::Q4_1>;
    default: return nullptr;
  }
}

}  // namespace tandem::kernels::cpu::mm
