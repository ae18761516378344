// AVX-512 VNNI kernels for Q4_K and Q6_K weights interleaved 16 rows to a tile
// (pack_tiles.hpp): lane r of every vector belongs to row r of the group.
//
// Per group of 4 codes: one vpdpbusd multiplies the 4 codes of all 16 rows by the same 4
// activations (a broadcast 32-bit word) and adds them into each row's lane. A scale group's
// codes are summed in two chains (halves) whose sums fit int16; one masked vpshufb packs the
// two halves into one int16 pair per lane and one vpdpwssd multiplies both by the rows' group
// scale (an int16 pair) and adds them to the token's sum. On Intel cores with two 512-bit
// ports, where vpdpbusd issues twice per cycle, every other µop competes with the
// multiply-adds: this costs 2 µops per scale group and token where vpmulld + vpaddd cost 3.
// Q6_K's codes (stored +32) start their chains at -32 * the activations' 8-element sums, so
// each half sums (code - 32) * q and fits int16; Q4_K's mins meet the activations'
// 32-element sums, two groups to a vpdpwssd. The activations are read by the multiply-adds
// themselves (dpbusd_bcast: an embedded broadcast, no separate vpbroadcastd). Everything
// stays in exact int32 until the block's float fold, so a token's result is the same bits
// whatever tokens, rows or chains compute alongside it (integer sums do not depend on their
// order). Bounds, activations |q| <= 127: Q4_K half sum <= 16*15*127 = 30480, block sum
// <= 8 * 63 * 60960 = 3.1e7; Q6_K half sum <= 8*32*127 = 32512, block sum <= 16 * 128 *
// 65024 = 1.3e8.
//
// Rows outside whole groups (the last R % 16) are stored as in the file and go to the file
// kernels of matmul_qk_avx512.cpp, whose activations these kernels share: Q4_K reads its
// 32-element chunks in that kernel's nibble order.
#include <cstring>
#include <utility>

#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/pack_tiles.hpp"
#include "kernels/cpu/quant_blocks.hpp"
#include "kernels/cpu/simd_avx512.hpp"
#include "kernels/cpu/tiles_kquant_avx512.hpp"
#include "kernels/cpu/matmul_qk_common.hpp"
#include "kernels/cpu/tile_groups.hpp"

// Float rounding exactly as written (-ffp-contract=off, kernels/CMakeLists.txt).

namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS {
RowsFn rows_qk(DType t);  // matmul_qk_avx512.cpp: rows in the file's layout

namespace {

using namespace avx512;
using qk::Toks;
using u8 = uint8_t;

// Lane by lane, the low 16 bits of a and, above them, the low 16 bits of b: one masked
// vpshufb (bytes 2-3 of each 32-bit lane taken from bytes 0-1 of b's lane).
static inline __m512i pack_high16(__m512i a, __m512i b) {
  const __m512i from = _mm512_set4_epi32(0x0d0c0000, 0x09080000, 0x05040000, 0x01000000);
  return _mm512_mask_shuffle_epi8(a, 0xCCCCCCCCCCCCCCCCull, b, from);
}

struct TileQ4K {
  static constexpr int kBytes = tile_q4k::size;
  template <int TN>
  static inline void tile(const u8* w, const Toks<TN>& x, int64_t bi, __m512* acc) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const Q4kScales sc8 = q4k_scales(w);
    __m512i iacc[TN], imin[TN];
    #pragma GCC unroll 8
    for (int t = 0; t < TN; ++t) iacc[t] = imin[t] = _mm512_setzero_si512();
    // Codes against activations, group by group; the mins after, in a pass of their own
    // (together the two sets of accumulators do not fit in the registers).
    each(std::make_integer_sequence<int, 8>{}, [&](auto jc) {
      constexpr int j = decltype(jc)::value;
      const __m512i sc = q4k_scale<j>(sc8);
      const u8* c = w + tile_q4k::codes + 256 * j;
      __m512i lo[4], hi[4];
      for (int v = 0; v < 4; ++v) {
        const __m512i z = loadu512(c + 64 * v);
        lo[v] = _mm512_and_si512(z, m4);
        hi[v] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
      }
      // The scale as an int16 pair in each row's lane, for the vpdpwssd below.
      const __m512i sc2 = _mm512_or_si512(sc, _mm512_slli_epi32(sc, 16));
      #pragma GCC unroll 8
      for (int t = 0; t < TN; ++t) {
        const int8_t* q = x.q[t] + 256 * bi + 32 * kQ4kPos.v[j];
        // Codes 0-15 (low nibbles) and 16-31 (high) in a chain each; each sum fits int16
        // (|s| <= 16*15*127 = 30480), so one masked vpshufb puts s1 into s0's high halves and
        // one vpdpwssd adds sc*s0 + sc*s1 to the token's sum: 2 µops where a vpmulld and a
        // vpaddd took 3, and two chains of 4 dependent multiply-adds instead of one of 8.
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        for (int v = 0; v < 4; ++v) {
          s0 = dpbusd_bcast(s0, lo[v], q + 4 * v);
          s1 = dpbusd_bcast(s1, hi[v], q + 16 + 4 * v);
        }
        iacc[t] = _mm512_dpwssd_epi32(iacc[t], pack_high16(s0, s1), sc2);
      }
    });
    // The mins, two groups to a vpdpwssd against the activations' 32-element sums.
    __m512i mp[4];
    q4k_min_pairs(sc8, mp);
    #pragma GCC unroll 8
    for (int t = 0; t < TN; ++t) {
      const int16_t* s = x.bs32[t] + 8 * bi;
      imin[t] = dpwssd_bcast(dpwssd_bcast(imin[t], mp[0], s), mp[1], s + 2);
      imin[t] = dpwssd_bcast(dpwssd_bcast(imin[t], mp[2], s + 4), mp[3], s + 6);
    }
    const __m512 d = f16x16(w + tile_q4k::d), dmin = f16x16(w + tile_q4k::dmin);
    #pragma GCC unroll 8
    for (int t = 0; t < TN; ++t) {
      const __m512 dx = _mm512_set1_ps(x.d[t][bi]);
      const __m512 a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[t]), _mm512_mul_ps(d, dx), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin[t]), _mm512_mul_ps(dmin, dx), a);
    }
  }
};

struct TileQ6K {
  static constexpr int kBytes = tile_q6k::size;
  template <int TN>
  static inline void tile(const u8* w, const Toks<TN>& x, int64_t bi, __m512* acc) {
    // vpshufb controls copying the low (high) int16 of each 32-bit lane into both halves.
    const __m512i dup_lo = _mm512_set4_epi32(0x0d0c0d0c, 0x09080908, 0x05040504, 0x01000100),
                  dup_hi = _mm512_set4_epi32(0x0f0e0f0e, 0x0b0a0b0a, 0x07060706, 0x03020302);
    __m512i iacc[TN];
    #pragma GCC unroll 8
    for (int t = 0; t < TN; ++t) iacc[t] = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p) {
      // Scales 2p, 2p+1 of the 16 rows, int16 pairs in each row's lane; each group's
      // scale then doubled into both halves of the lane for the vpdpwssd below.
      const __m512i pair =
          _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + tile_q6k::scales + 32 * p)));
      const __m512i sc2[2] = {_mm512_shuffle_epi8(pair, dup_lo), _mm512_shuffle_epi8(pair, dup_hi)};
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * p + h;
        __m512i c[4];
        q6k_codes(w + tile_q6k::codes + tile_q6k::group_bytes * j, c);
        #pragma GCC unroll 8
        for (int t = 0; t < TN; ++t) {
          const int8_t* q = x.q[t] + 256 * bi + 16 * j;
          const int32_t* o = x.off8[t] + 32 * bi + 2 * j;
          // Codes 0-7 and 8-15 in a chain each, started at -32 * (their activations' sum):
          // each ends as the sum over (code - 32) * q, |s| <= 8*32*127 = 32512, an int16, so
          // one masked vpshufb and one vpdpwssd apply the group scale to both and add them
          // to the token's sum, which is then exact with no offset term left to subtract.
          __m512i s0 = dpbusd_bcast(_mm512_set1_epi32(o[0]), c[0], q);
          __m512i s1 = dpbusd_bcast(_mm512_set1_epi32(o[1]), c[2], q + 8);
          s0 = dpbusd_bcast(s0, c[1], q + 4);
          s1 = dpbusd_bcast(s1, c[3], q + 12);
          iacc[t] = _mm512_dpwssd_epi32(iacc[t], pack_high16(s0, s1), sc2[h]);
        }
      }
    }
    const __m512 d = f16x16(w + tile_q6k::d);
    #pragma GCC unroll 8
    for (int t = 0; t < TN; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[t]), _mm512_mul_ps(d, _mm512_set1_ps(x.d[t][bi])), acc[t]);
  }
};

// One group of 16 rows (its tiles from gw on) against tokens t0..t0+TN-1; lanes outside
// `keep` are not stored. Weights are prefetched 4 KB ahead, as in the row kernels.
template <class K>
struct TileGroups {
  static constexpr int kGroup = 8;
  template <int TN>
  static void run(const Args& a, const u8* gw, int64_t g, __mmask16 keep, int64_t t0) {
    const Toks<TN> x = qk::toks_at<TN>(a, t0);
    __m512 acc[TN];
    #pragma GCC unroll 8
    for (int t = 0; t < TN; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t bi = 0; bi < a.xl.nb; ++bi) {
      const u8* tw = gw + static_cast<size_t>(bi) * K::kBytes;
      avx2::prefetch_ahead(tw + 2048, K::kBytes);
      K::template tile<TN>(tw, x, bi, acc);
    }
    #pragma GCC unroll 8
    for (int t = 0; t < TN; ++t) _mm512_mask_storeu_ps(a.y + (t0 + t) * a.ldy + g, keep, acc[t]);
  }
};

// A RowsFn (tile_groups.hpp): whole groups here, the rows after them by the file kernel.
template <class K>
void rows_tiles(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  rows_by_tiles<TileGroups<K>>(a, r0, r1, t0, t1, rows_qk(a.wt));
}

}  // namespace

RowsFn rows_qk_tiles(DType t) {
  switch (t) {
    case DType::Q4_K: return rows_tiles<TileQ4K>;
    case DType::Q6_K: return rows_tiles<TileQ6K>;
    default: return nullptr;
  }
}

}  // namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS
