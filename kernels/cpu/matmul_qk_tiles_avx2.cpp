// AVX2 kernel for Q4_K weights interleaved 16 rows to a tile (pack_tiles.hpp), taken as
// two halves of 8 rows (tiles_avx2.hpp): lane r of every vector is row 8h + r.
//
// Per scale group and token: vpmaddubsw multiplies 4 codes of the 8 rows by 4 broadcast
// activations, giving each row two int16 pair sums; the 8 vectors of a group of 32 add up
// in int16 (each lane <= 8*2*15*127 = 30480), and one vpmaddwd with the rows' (scale,
// scale) pairs turns them into int32: 9 multiplies per 256 products, against 10 for the
// row kernel, which also folds and reduces every row on its own. The mins meet the
// activations' 32-element sums, two groups to a vpmaddwd. Everything stays in exact int32 until the
// block's float fold, so a token's result is the same bits whatever tokens or rows are
// computed alongside it.
//
// Q6_K keeps the file layout on AVX2: its tiles decode no cheaper than its rows (2 vectors
// per vpmaddwd either way), and they measured 3-7% slower at 1 and 4 tokens and 9% faster
// at 8 (bench_matmul, 8960x1536, Zen 4 run at the AVX2 level).
//
// Activations are the AVX2 row kernels' (act_order.hpp): the last R % 16 rows, stored as in
// the file, go to them (matmul_qk_avx2.cpp).
#include "kernels/cpu/act_order.hpp"
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/matmul_qk_common.hpp"
#include "kernels/cpu/pack_tiles.hpp"
#include "kernels/cpu/simd_avx2.hpp"
#include "kernels/cpu/tile_groups.hpp"
#include "kernels/cpu/tiles_avx2.hpp"

// Float rounding exactly as written (-ffp-contract=off, kernels/CMakeLists.txt).

namespace tandem::kernels::cpu::mm {
namespace {

using namespace avx2;
using namespace tiles2;
using qk::Toks;
using u8 = uint8_t;

// Where, in a block's stored activations, the 4 elements each code word multiplies start.
struct Q4kPos {  // group j: low nibbles of word v are elements 32j + 4v.., high 32j + 16 + 4v..
  int lo[8][4], hi[8][4];
  constexpr Q4kPos() : lo(), hi() {
    for (int j = 0; j < 8; ++j)
      for (int v = 0; v < 4; ++v) {
        lo[j][v] = static_cast<int>(act_order::x4(32 * j + 4 * v));
        hi[j][v] = static_cast<int>(act_order::x4(32 * j + 16 + 4 * v));
      }
  }
};
constexpr Q4kPos kQ4k;
struct TileQ4K {
  static constexpr int kBytes = tile_q4k::size;
  template <int TN>
  static Toks<TN> toks(const Args& a, int64_t t0) { return qk::toks_at<TN>(a, t0); }

  template <int TN>
  static inline void tile(const u8* w, const Toks<TN>& x, int64_t bi, __m256 (*acc)[TN]) {
    // The 16 rows' 6-bit scales and mins, byte r = row r (blk::unpack_k4_scales, 16 rows
    // at a time): byte k of the rows' packed scales is the 16 bytes at 16k.
    const __m128i m4 = _mm_set1_epi8(0x0f), m6 = _mm_set1_epi8(0x3f), m30 = _mm_set1_epi8(0x30);
    __m128i sc[8], mn[8];
    for (int j = 0; j < 4; ++j) {
      const __m128i b0 = loadu128(w + tile_q4k::scales + 16 * j), b1 = loadu128(w + tile_q4k::scales + 16 * (4 + j)),
                    b2 = loadu128(w + tile_q4k::scales + 16 * (8 + j));
      sc[j] = _mm_and_si128(b0, m6);
      mn[j] = _mm_and_si128(b1, m6);
      sc[4 + j] = _mm_or_si128(_mm_and_si128(b2, m4), _mm_and_si128(_mm_srli_epi16(b0, 2), m30));
      mn[4 + j] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(b2, 4), m4), _mm_and_si128(_mm_srli_epi16(b1, 2), m30));
    }
    const __m256i m4y = _mm256_set1_epi8(0x0f);
    for (int h = 0; h < 2; ++h) {
      __m256i iacc[TN], imin[TN];
      #pragma GCC unroll 8
      for (int t = 0; t < TN; ++t) iacc[t] = imin[t] = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        const __m256i sp = u8_pairs(h ? _mm_unpackhi_epi64(sc[j], sc[j]) : sc[j]);
        const u8* c = w + tile_q4k::codes + 256 * j + 32 * h;
        __m256i lo[4], hi[4];
        for (int v = 0; v < 4; ++v) {
          const __m256i z = loadu(c + 64 * v);
          lo[v] = _mm256_and_si256(z, m4y);
          hi[v] = _mm256_and_si256(_mm256_srli_epi16(z, 4), m4y);
        }
        #pragma GCC unroll 8
        for (int t = 0; t < TN; ++t) {
          const int8_t* q = x.q[t] + 256 * bi;
          __m256i s0 = _mm256_maddubs_epi16(lo[0], bcast32(q + kQ4k.lo[j][0]));
          __m256i s1 = _mm256_maddubs_epi16(hi[0], bcast32(q + kQ4k.hi[j][0]));
          for (int v = 1; v < 4; ++v) {
            s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(lo[v], bcast32(q + kQ4k.lo[j][v])));
            s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(hi[v], bcast32(q + kQ4k.hi[j][v])));
          }
          iacc[t] = _mm256_add_epi32(iacc[t], _mm256_madd_epi16(_mm256_add_epi16(s0, s1), sp));
        }
      }
      for (int k = 0; k < 4; ++k) {  // mins: row r's (min 2k, min 2k+1) against groups 2k, 2k+1's 32-sums
        const __m256i mp = _mm256_cvtepu8_epi16(h ? _mm_unpackhi_epi8(mn[2 * k], mn[2 * k + 1])
                                                  : _mm_unpacklo_epi8(mn[2 * k], mn[2 * k + 1]));
        #pragma GCC unroll 8
        for (int t = 0; t < TN; ++t)
          imin[t] = _mm256_add_epi32(imin[t], _mm256_madd_epi16(mp, bcast32(x.bs32[t] + 8 * bi + 2 * k)));
      }
      const __m256 d = f16x8(w + tile_q4k::d + 16 * h), dmin = f16x8(w + tile_q4k::dmin + 16 * h);
      #pragma GCC unroll 8
      for (int t = 0; t < TN; ++t) {
        const __m256 dx = _mm256_set1_ps(x.d[t][bi]);
        const __m256 s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[t]), _mm256_mul_ps(d, dx), acc[h][t]);
        acc[h][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin[t]), _mm256_mul_ps(dmin, dx), s);
      }
    }
  }
};

// A RowsFn (tile_groups.hpp): whole groups here, the rows after them by the row kernel.
template <class K>
void rows_tiles(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  rows_by_tiles<TileGroups<K>>(a, r0, r1, t0, t1, avx2_rows_qk(a.wt));
}

}  // namespace

RowsFn avx2_rows_qk_tiles(DType t) {
  switch (t) {
    case DType::Q4_K: return rows_tiles<TileQ4K>;
    default: return nullptr;
  }
}

}  // namespace tandem::kernels::cpu::mm
