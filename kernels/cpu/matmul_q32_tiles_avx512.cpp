// AVX-512 VNNI kernels for the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) in
// 16-row tiles (pack_tiles.hpp): lane r of every vector belongs to row r of the group.
//
// A tile is one block of 16 rows: 8 vpdpbusd per token, each multiplying 4 codes of all 16
// rows by the same 4 activations (a broadcast 32-bit word), give the 16 rows' integer block
// sums; one conversion and two FMAs apply the rows' scales (a vector, one per lane) and the
// offset or min. The row kernels (matmul_q32_avx512.cpp) pay a permute, a conversion and an
// FMA per block pair and token on top of each vpdpbusd: prefill and verification passes,
// which are bound by this arithmetic, run several times fewer instructions.
//
// Codes are unsigned for vpdpbusd: 4- and 5-bit codes are stored 0..15 / 0..31 for values
// code - 8 / - 16 (Q4_1, Q5_1: d*code + m), and Q8_0's signed codes are flipped to
// code + 128. The offset meets the activations' block sums s = d_x * sum(q_x):
//   y += d_w * (d_x * isum - offset * s)        (Q4_0, Q5_0, Q8_0)
//   y += d_w * (d_x * isum) + m_w * s           (Q4_1, Q5_1)
// The integer sums are exact, so a token's result is the same bits whatever tokens or rows
// are computed alongside it.
//
// Rows after the last whole group are stored as in the file and go to the row kernels
// (tile_groups.hpp), whose activations these kernels share (pair order for the 4- and 5-bit
// types).
#include <cstring>

#include "kernels/cpu/act_order.hpp"
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/pack_tiles.hpp"
#include "kernels/cpu/quant_blocks.hpp"
#include "kernels/cpu/simd_avx512.hpp"
#include "kernels/cpu/tile_groups.hpp"

// Float rounding exactly as written (-ffp-contract=off, kernels/CMakeLists.txt).

namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS {
RowsFn rows_q32(DType t);  // matmul_q32_avx512.cpp: rows in the file's layout

namespace {

using namespace avx512;
using u8 = uint8_t;


template <DType T>
struct Q32T {
  static constexpr bool kSigned = T == DType::Q8_0;
  static constexpr bool kMin = T == DType::Q4_1 || T == DType::Q5_1;
  static constexpr bool kFifth = T == DType::Q5_0 || T == DType::Q5_1;
  // The value of code 0 is -kOffset * d (types without a min).
  static constexpr float kOffset = kSigned ? 128.0f : kFifth ? 16.0f : 8.0f;
};

// One group of 16 rows (its tiles from gw on) against tokens t0..t0+TN-1; lanes outside
// `keep` are not stored.
template <DType T>
struct TileGroups {
  static constexpr int kGroup = 8;
  template <int TN>
  static void run(const Args& a, const u8* gw, int64_t g, __mmask16 keep, int64_t t0) {
    using K = Q32T<T>;
    const Q32Tile p = q32_tile(T);
    const ActLayout& l = a.xl;
    const int8_t* xq[TN];
    const float* xd[TN];
    const float* xs[TN];
    #pragma GCC unroll 8
    for (int t = 0; t < TN; ++t) {
      const u8* row = a.xq + static_cast<size_t>(t0 + t) * l.row_bytes;
      xq[t] = act_q(row);
      xd[t] = act_d(row, l);
      xs[t] = act_s(row, l);
    }
    __m512 acc[TN];
    #pragma GCC unroll 8
    for (int t = 0; t < TN; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0f), x80 = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int64_t b = 0; b < l.nb; ++b) {
      const u8* w = gw + static_cast<size_t>(b) * static_cast<size_t>(p.size);
      avx2::prefetch_ahead(w + 2048, p.size);
      // Code vector k: elements 4k..4k+3 of the 16 rows (k = 0..7).
      __m512i c[8];
      if constexpr (K::kSigned) {
        for (int k = 0; k < 8; ++k) c[k] = _mm512_xor_si512(loadu512(w + p.codes + 64 * k), x80);
      } else {
        for (int v = 0; v < 4; ++v) {
          const __m512i z = loadu512(w + p.codes + 64 * v);
          c[v] = _mm512_and_si512(z, m4);
          c[4 + v] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
        }
        if constexpr (K::kFifth) {
          uint64_t masks[8];
          std::memcpy(masks, w + p.qh, sizeof masks);
          for (int k = 0; k < 8; ++k)
            c[k] = _mm512_mask_add_epi8(c[k], static_cast<__mmask64>(masks[k]), c[k], _mm512_set1_epi8(0x10));
        }
      }
      const __m512 dw = f16x16(w + p.d);
      __m512 mw = _mm512_setzero_ps();
      if constexpr (K::kMin) mw = f16x16(w + p.m);
      int64_t pos[8];  // where each code vector's 4 activations are, the same for every token
      for (int k = 0; k < 8; ++k) pos[k] = act_order::q32(T, b, 4 * k, l.nb);
      #pragma GCC unroll 8
      for (int t = 0; t < TN; ++t) {
        const int8_t* q = xq[t];
        // Two chains (integer sums: the order does not change the result).
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        for (int k = 0; k < 8; k += 2) {
          s0 = dpbusd_bcast(s0, c[k], q + pos[k]);
          s1 = dpbusd_bcast(s1, c[k + 1], q + pos[k + 1]);
        }
        const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
        const float dx = xd[t][b], s = xs[t][b];
        if constexpr (K::kMin) {
          acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(f, _mm512_set1_ps(dx)), dw, acc[t]);
          acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(s), acc[t]);
        } else {
          const __m512 v = _mm512_fmadd_ps(f, _mm512_set1_ps(dx), _mm512_set1_ps(-K::kOffset * s));
          acc[t] = _mm512_fmadd_ps(v, dw, acc[t]);
        }
      }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < TN; ++t) _mm512_mask_storeu_ps(a.y + (t0 + t) * a.ldy + g, keep, acc[t]);
  }
};

// A RowsFn (tile_groups.hpp): whole groups here, the rows after them by the row kernel.
template <DType T>
void rows_tiles(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  rows_by_tiles<TileGroups<T>>(a, r0, r1, t0, t1, rows_q32(a.wt));
}

}  // namespace

RowsFn rows_q32_tiles(DType t) {
  switch (t) {
    case DType::Q4_0: return rows_tiles<DType::Q4_0>;
    case DType::Q4_1: return rows_tiles<DType::Q4_1>;
    case DType::Q5_0: return rows_tiles<DType::Q5_0>;
    case DType::Q5_1: return rows_tiles<DType::Q5_1>;
    case DType::Q8_0: return rows_tiles<DType::Q8_0>;
    default: return nullptr;
  }
}

}  // namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS
